#!/usr/bin/env bash
# The main job on a fresh Debian/Ubuntu machine: install everything
# (python/install.sh: system packages, torch if missing, tqdm, scikit-learn,
# then the package itself), then train on scikit-learn's digits with 4
# processes, Ok-Topk at density 0.01 next to dense allreduce.
# Extra arguments go to train_digits.py, e.g. --algo topka --density 0.05.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}

PYTHON="$python" bash "$root/python/install.sh"

# 4 ranks share the cores: one thread each. Start in examples/, never the
# repository root: if "" or "." is on PYTHONPATH there, the C core's folder
# pg_sparse/ is imported as a namespace package instead of the Python one.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
cd "$root/examples"
exec "$python" -m torch.distributed.run --standalone --nproc_per_node=4 \
  "$root/examples/train_digits.py" "$@"
