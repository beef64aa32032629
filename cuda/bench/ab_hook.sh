#!/usr/bin/env bash
# What a hook adds to a DDP step, for two trees alternating on one machine
# (the noise between machines is larger than most changes):
#   git archive OLD_REV | (mkdir -p ab_old && tar x -C ab_old)   # in the repo
#   OUT=/tmp/logs bash cuda/bench/ab_hook.sh ab_old [pairs] [methods...]
# Builds the extension of both trees, then runs cuda/bench/bench_hook.py
# (this tree's script) against each tree's package in turn, `pairs` times
# (default 4); $OUT/ab_summary.txt holds the rows of every run and
# $OUT/ab_pooled.txt the per-round differences pooled (ab_pool.py).
set -u
old=$(cd "${1:?usage: ab_hook.sh OLD_TREE [pairs] [methods...]}" && pwd)
pairs=${2:-4}
shift $(($# < 2 ? $# : 2))
methods=${*:-compute dense_native oktopk_native}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
logs=${OUT:-/tmp/logs}
mkdir -p "$logs"
export NCCL_NVLS_ENABLE=0
build() { # tree name
  (cd "$1" && PGS_PY_BUILD_DIR="$1/build-py" python3 setup.py build_ext \
    --inplace >"$logs/$2_build.log" 2>&1)
  echo "$2 build rc=$?" >>"$logs/steps.txt"
}
build "$old" old &
build "$root" new &
wait
run() { # name tree
  PYTHONPATH="$2/python" timeout 120 torchrun --nproc_per_node=1 \
    "$root/cuda/bench/bench_hook.py" --out "$logs/$1" --repeats 4 --no-profile \
    --methods $methods >"$logs/$1.txt" 2>&1
  echo "$1 rc=$?" >>"$logs/steps.txt"
  echo "== $1" >>"$logs/ab_summary.txt"
  grep -E "^\| ($(echo nccl $methods | tr ' ' '|')) " "$logs/$1.txt" \
    >>"$logs/ab_summary.txt"
}
for i in $(seq "$pairs"); do
  run "old$i" "$old"
  run "new$i" "$root"
done
python3 "$root/cuda/bench/ab_pool.py" "$logs" >"$logs/ab_pooled.txt" 2>&1
