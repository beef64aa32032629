#!/usr/bin/env bash
# Every convergence task with every method and three seeds, 4 ranks, then the
# report (docs/convergence/results.md and one PNG per task).
#   bash examples/convergence/run_all.sh            # on loopback
#   NET=1gbit bash examples/convergence/run_all.sh  # 4 namespaces, tc-shaped (root)
# About 2 hours on a 2-core machine. Extra arguments go to train.py.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3}
data=${DATA:-$root/docs/convergence/data}
PYTHON="$python" bash "$root/python/install.sh"
export OMP_NUM_THREADS=1
cd "$here"  # never the repository root (see examples/run_main.sh)
for task in digits lstm mnist1d gpt; do
  "$python" train.py --task "$task" --out "$data" ${NET:+--net "$NET"} "$@"
done
"$python" report.py --data "$data" --out "$root/docs/convergence"
