#!/usr/bin/env bash
# Stop 47's GPU job: SparseState(algo="auto") beside pg_sparse's dense path
# and the sparse methods it chooses from, on the device tool's
# nvidia-h200-x2 kind: 2 emulated nodes (network namespaces) of 2 ranks, a
# node's ranks on both GPUs, the link between the nodes shaped with tc at
# four rates. Run from the repository root with iproute2's Debian packages
# in .debs/ (carry).
source cuda/bench/device_netns.sh
device_job_start || exit 3
sweep() { # rate, methods...
  local rate=$1; shift
  local d=$OUT/$rate; mkdir -p $d
  [ $(el) -lt 480 ] || return 0
  PYTHONPATH=$PWD/python timeout 150 python3 -m pg_sparse.bench net run --hosts 2 --nproc-per-host 2 \
    --rate $rate --out $d -- ddp --device cuda --out $d --model mlp25m --methods "$@" \
    --steps 5 --warmup 3 > $d/log.txt 2>&1
  echo "$rate rc=$? $(el)s" >> $OUT/steps.txt
  grep -E "^\| (dense|oktopk|topka|gtopk|auto) " $d/ddp_mlp25m.md | cut -d'|' -f2-3,7 >> $OUT/summary.txt
  echo "-- $rate" >> $OUT/summary.txt
}
sweep unshaped dense oktopk topka gtopk auto
sweep 10gbit dense oktopk topka gtopk auto
sweep 1gbit dense oktopk topka gtopk auto
sweep 100mbit oktopk topka gtopk auto
tar czf $OUT_REAL/logs.tgz -C /tmp logs
cat $OUT/steps.txt $OUT/summary.txt
