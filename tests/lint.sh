#!/usr/bin/env bash
# Style checks, part of the test command: clang-format (the .clang-format
# files) on the C, C++ and CUDA sources and ruff (pyproject.toml) on
# the Python. Both are pinned and installed from PyPI when missing, so every
# machine formats alike.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

python=${PYTHON:-python3}
pinned() { "$python" -m pip show "$1" 2>/dev/null | grep -qx "Version: $2"; }
pinned clang-format 14.0.6 || "$python" -m pip install -q clang-format==14.0.6
pinned ruff 0.17.6 || "$python" -m pip install -q ruff==0.17.6
clang_format=$("$python" -c "import clang_format, os; \
print(os.path.join(os.path.dirname(clang_format.__file__), 'data', 'bin', 'clang-format'))")

find pg_sparse cuda python/csrc tests examples -type f \
  \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cpp' \
     -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \) -print0 |
  xargs -0 "$clang_format" --dry-run --Werror
"$python" -m ruff check --config pyproject.toml python tests examples cuda/bench docs
echo "lint: clang-format and ruff clean"
