#!/usr/bin/env bash
# Stop 48's GPU job, after the trials (WARMUP steps, default 12): SparseState(algo="auto") in the
# C++ hook, beside the methods it chooses from, on the device tool's
# nvidia-h200-x2 kind (2 emulated nodes of 2 ranks, a node's ranks on both
# GPUs, the link between the nodes shaped with tc). Run from the repository
# root with iproute2's Debian packages in .debs/ (carry).
#   job.sh 1: the one-GPU tests of the new path, then 100 Mbit/s and 1 Gbit/s
#   job.sh 2: unshaped and 10 Gbit/s (with pg_sparse's dense path)
export OUT_REAL=$OUT OUT=/tmp/logs NCCL_NVLS_ENABLE=0
mkdir -p $OUT
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; uname -r; } > $OUT/machine.txt 2>&1
source cuda/bench/device_netns.sh
if ! netns_tools; then tar czf $OUT_REAL/logs.tgz -C /tmp logs; exit 3; fi
if ls python/pg_sparse/*.so > /dev/null 2>&1; then echo "ext kept" >> $OUT/steps.txt; else
  bash tests/run_gpu_tests.sh ext > $OUT/ext.txt 2>&1; echo "ext rc=$? $(el)s" >> $OUT/steps.txt; fi
sweep() { # limit, steps, rate, methods...
  local limit=$1 steps=$2 rate=$3; shift 3
  local d=$OUT/$rate; mkdir -p $d
  PYTHONPATH=$PWD/python timeout $limit python3 -m pg_sparse.bench net run --hosts 2 --nproc-per-host 2 \
    --rate $rate --out $d -- ddp --device cuda --out $d --model mlp25m --methods "$@" \
    --steps $steps --warmup ${WARMUP:-12} > $d/log.txt 2>&1
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
