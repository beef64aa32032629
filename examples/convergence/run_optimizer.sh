#!/usr/bin/env bash
# The runs of docs/convergence/optimizer/: the user's optimizer given to the
# hook (register_comm_hook(..., optimizer=opt), method flag +opt), Ok-Topk's
# global_factor (+gfF) against TopkA and the others at equal density and at
# equal bytes, on the GPT (AdamW), the LSTM (momentum SGD) and the held-out
# gptcode task (never used to choose a default), 3 seeds, 4 ranks on
# loopback; then the report (results.md and one PNG per task).
#   bash examples/convergence/run_optimizer.sh
# About 40 minutes on a 2-core machine. Extra arguments go to train.py.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3}
data=${DATA:-$root/docs/convergence/optimizer/data}
PYTHON="$python" bash "$root/python/install.sh"
export OMP_NUM_THREADS=1
cd "$here"  # never the repository root (see examples/run_main.sh)
run() { "$python" train.py --seeds 0,1,2 --out "$data" "$@"; }
run --task gpt --tag opt --methods dense,oktopk+gf1@0.01,oktopk+adam+norm+gf1@0.01,\
oktopk+opt+gf1@0.01,oktopk+opt+exact+gf1@0.01,oktopk+opt+gf1@0.02,oktopk+opt+gf1@0.04,\
oktopk+opt+gf2@0.005,oktopk+opt+gf2@0.01,oktopk+opt+gf4@0.01,topka+opt@0.005,\
topka+opt@0.01,gtopk+opt@0.01,gaussiank+opt@0.01,topkdsa+opt@0.01 "$@"
run --task lstm --tag opt --methods dense,oktopk+gf1@0.01,oktopk+gf1@0.015,\
oktopk+gf2@0.005,oktopk+gf2@0.01,oktopk+mc+gf1@0.01,oktopk+mc+gf2@0.01,topka@0.01 "$@"
run --task gptcode --tag opt --methods dense,oktopk+gf1@0.01,oktopk+opt+gf1@0.01,\
oktopk+opt+gf1@0.015,oktopk+opt+gf2@0.01,oktopk+opt+gf4@0.01,topka+opt@0.005,\
topka+opt@0.01 "$@"
# Warm-up length (+wN: N dense steps) and DGC's density warm-up (+dwN) at
# the defaults, 2 seeds (section 5 of the page).
"$python" train.py --seeds 0,1 --out "$data" --task gpt --tag dw --methods oktopk+opt@0.01,\
oktopk+opt+dw24@0.01,oktopk+opt+dw60@0.01,oktopk+opt+w24@0.01,oktopk+opt+w48@0.01 "$@"
"$python" train.py --seeds 0,1 --out "$data" --task lstm --tag dw --methods oktopk@0.01,\
oktopk+dw40@0.01,oktopk+dw100@0.01,oktopk+w40@0.01,oktopk+w80@0.01 "$@"
"$python" report.py --data "$data" --out "$root/docs/convergence/optimizer"
