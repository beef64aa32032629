#!/usr/bin/env bash
# The main job on a fresh Debian/Ubuntu machine: install everything
# (python/install.sh: system packages, torch if missing, tqdm, scikit-learn,
# then the package itself), then train one model with dense DDP, torch's bf16
# and PowerSGD hooks and pg_sparse's Ok-Topk, 4 ranks under torchrun: as root
# on 4 network namespaces whose links are shaped to 1 Gbit/s, else on
# loopback (it says so). Ends with the time each took to reach dense's
# accuracy, their accuracy, time and bytes. About 4 minutes on 2 cores.
# Extra arguments go to train_digits.py, e.g. --net 100mbit or --net none.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}

PYTHON="$python" bash "$root/python/install.sh"

# 4 ranks share the cores: one thread each. Start in examples/, never the
# repository root: if "" or "." is on PYTHONPATH there, the C core's folder
# pg_sparse/ is imported as a namespace package instead of the Python one.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
cd "$root/examples"
exec "$python" "$root/examples/train_digits.py" "$@"
