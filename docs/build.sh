#!/usr/bin/env bash
# Builds the documentation site (Sphinx + MyST) into docs/_build/html with
# warnings as errors: a broken link between pages, a page in no table of
# contents or a docstring that does not parse fails it. Then checks that
# every relative link of the top-level pages (README, CONTRIBUTING,
# CHANGELOG), which are not part of the site, names a file that exists.
# Needs the package importable (the API reference reads its docstrings).
#   bash docs/build.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
"$python" -m pip install -q --disable-pip-version-check \
  "sphinx==9.0.4" "myst-parser==5.2.0" "furo==2025.12.19"
rm -rf "$root/docs/_build"
"$python" -m sphinx -W --keep-going -q -b html "$root/docs" "$root/docs/_build/html"
"$python" - "$root" <<'PY'
import re, sys
from pathlib import Path
root = Path(sys.argv[1])
bad = []
for page in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md"):
    for target in re.findall(r"\]\(([^)\s]+)\)", (root / page).read_text()):
        path = target.partition("#")[0]
        if path and not re.match(r"^[a-z]+:", path) and not (root / path).exists():
            bad.append(f"{page}: {target}")
if bad:
    sys.exit("broken links:\n  " + "\n  ".join(bad))
print(f"docs: site built in {root / 'docs/_build/html'}; top-level links resolve")
PY
