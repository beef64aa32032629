#!/usr/bin/env bash
# Stop 47's GPU jobs: hierarchical Ok-Topk against flat on emulated nodes of
# 2 ranks, the ranks of a node on the machine's 2 GPUs (nvidia-h200-x2), the
# link between the nodes shaped with tc: `bash job.sh job1|job2|job3`, run
# from the repository root with iproute2 and its libraries carried as Debian
# packages in .debs/ (carry). On a machine kept warm between jobs the
# extension and /tmp/logs stay, so steps.txt and summary.txt add up.
export OUT_REAL=$OUT OUT=/tmp/logs NCCL_NVLS_ENABLE=0
mkdir -p $OUT
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nvidia-smi topo -m; nproc; uname -r; which ip tc; lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket"; free -g | head -2; } > $OUT/machine.txt 2>&1
source cuda/bench/device_netns.sh  # iproute2 from .debs (the jobs ran these lines inline)
ok=0
netns_tools && ok=1
cat $OUT/machine.txt $OUT/steps.txt
if [ $ok != 1 ]; then tar czf $OUT_REAL/logs.tgz -C /tmp logs; exit 3; fi
if ls python/pg_sparse/*.so > /dev/null 2>&1; then echo "ext kept" >> $OUT/steps.txt; else
  bash tests/run_gpu_tests.sh ext > $OUT/ext.txt 2>&1; echo "ext rc=$? $(el)s" >> $OUT/steps.txt; fi
bench() { # name, net args..., -- ddp args
  local name=$1; shift
  local d=$OUT/$name; mkdir -p $d
  PYTHONPATH=$PWD/python timeout 200 python3 -m pg_sparse.bench net run "$@" > $d/log.txt 2>&1
  echo "$name rc=$? $(el)s" >> $OUT/steps.txt
  grep -E "^\| (nocomm|oktopk|oktopk@node) " $d/ddp_*.md | cut -d'|' -f2-7 >> $OUT/summary.txt 2>/dev/null
  echo "-- $name" >> $OUT/summary.txt
}
run2x2() { # name rate [ddp args]
  local name=$1 rate=$2; shift 2
  [ $(el) -lt 420 ] && bench $name --hosts 2 --nproc-per-host 2 --rate $rate --out $OUT/$name -- ddp --device cuda --out $OUT/$name --model mlp25m --methods nocomm oktopk oktopk@node --steps 10 --warmup 3 "$@"
}
b100v=(--bucket-cap-mb 100 --bucket-view)  # one DDP bucket
case "${1:-}" in
  job1)
    run2x2 gpu-2x2-1gbit 1gbit
    run2x2 gpu-2x2-1gbit-r2 1gbit
    run2x2 gpu-2x2-10gbit 10gbit
    run2x2 gpu-2x2-1gbit-r3 1gbit
    ;;
  job2)
    run2x2 gpu-2x2-1gbit-b100v 1gbit "${b100v[@]}"
    run2x2 gpu-2x2-1gbit-b100v-r2 1gbit "${b100v[@]}"
    run2x2 gpu-2x2-1gbit-b100v-r3 1gbit "${b100v[@]}"
    run2x2 gpu-2x2-100mbit 100mbit
    ;;
  job3)
    run2x2 gpu-2x2-1gbit-b100v-r4 1gbit "${b100v[@]}"
    run2x2 gpu-2x2-1gbit-r4 1gbit
    run2x2 gpu-2x2-10gbit-b100v 10gbit "${b100v[@]}"
    [ $(el) -lt 420 ] && bench gpu-4x2-1gbit-b100v --hosts 4 --nproc-per-host 2 --rate 1gbit --out $OUT/gpu-4x2-1gbit-b100v -- ddp --device cuda --out $OUT/gpu-4x2-1gbit-b100v --model mlp25m --methods nocomm oktopk oktopk@node --steps 10 --warmup 3 "${b100v[@]}"
    ;;
  *) echo "usage: bash job.sh job1|job2|job3"; exit 2 ;;
esac
ip netns list >> $OUT/steps.txt 2>&1
tar czf $OUT_REAL/logs.tgz -C /tmp logs
cat $OUT/steps.txt $OUT/summary.txt
