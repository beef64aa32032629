"""Sphinx configuration of pg_sparse's documentation site.

Built by ``bash docs/build.sh`` (a step of the test command): warnings are
errors, so a broken link between pages, a page outside every table of
contents or a public name without a docstring fails the build. The API
reference is read from the installed package's docstrings and the parameter
table from the C core's own table (``pg_sparse.params()``).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

import pg_sparse  # noqa: E402

project = "pg_sparse"
copyright = "2026, the pg_sparse authors"  # noqa: A001 - Sphinx's name
release = pg_sparse.__version__
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
root_doc = "index"
html_theme = "furo"
html_title = "pg_sparse"
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# The results.md tables report.py writes are fragments that start at ###.
suppress_warnings = ["myst.xref_ambiguous", "myst.header"]
exclude_patterns = ["_build"]


def _parameter_page() -> str:
    """The parameter table, one row per ``PG_SPARSE_*`` variable of the C
    core's table (its default, not the value in this process)."""
    rows = ["| variable | type | default | allowed | what it sets |",
            "|---|---|---|---|---|"]
    for p in pg_sparse.params():
        allowed = ", ".join(p.choices) if p.choices else (
            f"{p.min:g} to {p.max:g}" if p.type != "str" and p.max > p.min else "")
        doc = p.doc.replace("|", "\\|")
        rows.append(f"| `{p.name}` | {p.type} | `{p.default}` | {allowed} | {doc} |")
    return ("# Parameters\n\nEvery tunable is a `PG_SPARSE_*` environment variable, "
            "defined once in the C core (`pg_sparse/include/pg_sparse/param.h`); "
            "this table is generated from it when the site is built. "
            "`python -m pg_sparse params` prints the values in effect.\n\n"
            + "\n".join(rows) + "\n")


(HERE / "guide" / "parameters.md").write_text(_parameter_page())
