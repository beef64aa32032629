#!/usr/bin/env bash
# Time-to-accuracy on an emulated 1 Gbit/s network (docs/convergence/tta/):
# the 25.3M-parameter GPT-2 task gpt25m, 4 ranks, one in each of 4 network
# namespaces on a bridge whose links tc shapes to 1 Gbit/s
# (pg_sparse.bench's harness; needs root), the user's AdamW unchanged in
# every run: dense fp32 DDP, torch's bf16 hook, torch's PowerSGD hook, and
# Ok-Topk, TopkA and auto with optimizer= at density 0.01; then the report
# (results.md with the seconds to reach dense's final perplexity and to
# within 1% of it, gpt25m.png: perplexity against steps, bytes and
# wall-clock).
#   bash examples/convergence/run_tta.sh
# About 30 minutes a seed on a 2-core machine. SEEDS (default 0,1,2) and
# METHODS (default: all six) choose the runs; extra arguments go to train.py.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3}
data=${DATA:-$root/docs/convergence/tta/data}
seeds=${SEEDS:-0,1,2}
methods=${METHODS:-dense,oktopk+opt@0.01,topka+opt@0.01,auto+opt@0.01,bf16,powersgd}
PYTHON="$python" bash "$root/python/install.sh"
export OMP_NUM_THREADS=1
cd "$here"  # never the repository root (see examples/run_main.sh)
"$python" train.py --task gpt25m --net 1gbit --seeds "$seeds" --methods "$methods" \
  --out "$data" --tag "${TAG:-tta}" "$@"
"$python" report.py --data "$data" --out "$root/docs/convergence/tta"
