#!/usr/bin/env bash
# Stop 48's GPU job: SparseState(algo="auto") with its steady calls in the
# C++ hook, beside the methods it chooses from, on the device tool's
# nvidia-h200-x2 kind (2 emulated nodes of 2 ranks, a node's ranks on both
# GPUs, the link between the nodes shaped with tc). Run from the repository
# root with iproute2's Debian packages in .debs/ (carry).
#   job.sh 1: the one-GPU tests of the new path, then 100 Mbit/s and 1 Gbit/s
#   job.sh 2: unshaped and 10 Gbit/s (with pg_sparse's dense path)
# WARMUP: warm-up steps per method (default 3).
source cuda/bench/device_netns.sh
device_job_start || exit 3
sweep() { # limit, steps, rate, methods...
  local limit=$1 steps=$2 rate=$3; shift 3
  local d=$OUT/$rate; mkdir -p $d
  PYTHONPATH=$PWD/python timeout $limit python3 -m pg_sparse.bench net run --hosts 2 --nproc-per-host 2 \
    --rate $rate --out $d -- ddp --device cuda --out $d --model mlp25m --methods "$@" \
    --steps $steps --warmup ${WARMUP:-3} > $d/log.txt 2>&1
  echo "$rate rc=$? $(el)s" >> $OUT/steps.txt
  grep -E "^\| (dense|oktopk|topka|gtopk|auto) " $d/ddp_mlp25m.md | cut -d'|' -f2-3,7,15- >> $OUT/summary.txt
  echo "-- $rate" >> $OUT/summary.txt
}
case $1 in
1)
  PYTHONPATH=$PWD/python timeout 300 python3 -m pytest -q $PWD/tests/python/test_cuda_one.py \
    -k "auto_native or hierarchy_on_one_gpu" > $OUT/tests.txt 2>&1
  echo "tests rc=$? $(el)s" >> $OUT/steps.txt
  sweep 240 8 100mbit oktopk gtopk auto
  sweep 120 8 1gbit oktopk topka gtopk auto ;;
2)
  sweep 120 8 unshaped dense oktopk topka gtopk auto
  sweep 150 8 10gbit dense oktopk topka gtopk auto ;;
esac
tar czf $OUT_REAL/logs.tgz -C /tmp logs
cat $OUT/steps.txt $OUT/summary.txt; tail -3 $OUT/tests.txt 2>/dev/null
