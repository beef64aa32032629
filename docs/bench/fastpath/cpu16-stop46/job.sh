#!/usr/bin/env bash
# Stop 46's CPU jobs on the device tool's H200 machine (16 cores; the GPU is
# not used): `bash job.sh job1|job2|job3`, run from the repository root with
# iproute2 and its libraries carried as Debian packages in .debs/ (carry).
export OUT_REAL=$OUT OUT=/tmp/logs
mkdir -p $OUT
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
{ nproc; uname -r; which ip tc; lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket"; free -g | head -2; } > $OUT/machine.txt 2>&1
source cuda/bench/device_netns.sh  # iproute2 from .debs (the jobs ran these lines inline)
ok=0
netns_tools && ok=1
cat $OUT/machine.txt $OUT/steps.txt
if [ $ok != 1 ]; then tar czf $OUT_REAL/logs.tgz -C /tmp logs; exit 3; fi
bash tests/run_gpu_tests.sh ext > $OUT/ext.txt 2>&1; echo "ext rc=$? $(el)s" >> $OUT/steps.txt
bench() { # name, net args..., -- ddp args
  local name=$1; shift
  local d=$OUT/$name; mkdir -p $d
  PYTHONPATH=$PWD/python timeout 150 python3 -m pg_sparse.bench net run "$@" > $d/log.txt 2>&1
  echo "$name rc=$? $(el)s" >> $OUT/steps.txt
  grep -E "^\| (nocomm|gloo|oktopk|oktopk@node|powersgd) " $d/ddp_mlp25m.md | cut -d'|' -f2-7 >> $OUT/summary.txt 2>/dev/null
  echo "-- $name" >> $OUT/summary.txt
}
# Each run starts only while the call's time allows another (about 60 s each).
case "${1:-}" in
  job1)
    [ $(el) -lt 400 ] && bench flat-1gbit-b100v --hosts 4 --rate 1gbit --out $OUT/flat-1gbit-b100v -- ddp --out $OUT/flat-1gbit-b100v --model mlp25m --methods nocomm gloo oktopk powersgd --steps 10 --warmup 3 --threads 1 --bucket-cap-mb 100 --bucket-view
    [ $(el) -lt 400 ] && bench hier-2x2-1gbit --hosts 2 --nproc-per-host 2 --rate 1gbit --out $OUT/hier-2x2-1gbit -- ddp --out $OUT/hier-2x2-1gbit --model mlp25m --methods gloo oktopk oktopk@node --steps 10 --warmup 3 --threads 1
    [ $(el) -lt 400 ] && bench flat-1gbit-b25 --hosts 4 --rate 1gbit --out $OUT/flat-1gbit-b25 -- ddp --out $OUT/flat-1gbit-b25 --model mlp25m --methods nocomm gloo oktopk --steps 10 --warmup 3 --threads 1
    [ $(el) -lt 400 ] && bench hier-2x2-1gbit-r2 --hosts 2 --nproc-per-host 2 --rate 1gbit --out $OUT/hier-2x2-1gbit-r2 -- ddp --out $OUT/hier-2x2-1gbit-r2 --model mlp25m --methods gloo oktopk oktopk@node --steps 10 --warmup 3 --threads 1
    ;;
  job2)
    [ $(el) -lt 400 ] && bench hier-2x2-100mbit --hosts 2 --nproc-per-host 2 --rate 100mbit --out $OUT/hier-2x2-100mbit -- ddp --out $OUT/hier-2x2-100mbit --model mlp25m --methods nocomm oktopk oktopk@node --steps 8 --warmup 3 --threads 1
    [ $(el) -lt 400 ] && bench hier-2x2-1gbit-r3 --hosts 2 --nproc-per-host 2 --rate 1gbit --out $OUT/hier-2x2-1gbit-r3 -- ddp --out $OUT/hier-2x2-1gbit-r3 --model mlp25m --methods nocomm gloo oktopk oktopk@node --steps 10 --warmup 3 --threads 1
    [ $(el) -lt 400 ] && bench flat-10gbit-b25 --hosts 4 --rate 10gbit --out $OUT/flat-10gbit-b25 -- ddp --out $OUT/flat-10gbit-b25 --model mlp25m --methods nocomm gloo oktopk --steps 10 --warmup 3 --threads 1
    [ $(el) -lt 400 ] && bench hier-4x2-1gbit --hosts 4 --nproc-per-host 2 --rate 1gbit --out $OUT/hier-4x2-1gbit -- ddp --out $OUT/hier-4x2-1gbit --model mlp25m --methods nocomm oktopk oktopk@node --steps 8 --warmup 3 --threads 1
    ;;
  job3)
    [ $(el) -lt 400 ] && bench flat-1gbit-b100v-r2 --hosts 4 --rate 1gbit --out $OUT/flat-1gbit-b100v-r2 -- ddp --out $OUT/flat-1gbit-b100v-r2 --model mlp25m --methods nocomm gloo oktopk --steps 10 --warmup 3 --threads 1 --bucket-cap-mb 100 --bucket-view
    [ $(el) -lt 400 ] && bench flat-1gbit-b25-r2 --hosts 4 --rate 1gbit --out $OUT/flat-1gbit-b25-r2 -- ddp --out $OUT/flat-1gbit-b25-r2 --model mlp25m --methods nocomm gloo oktopk --steps 10 --warmup 3 --threads 1
    [ $(el) -lt 400 ] && bench flat-1gbit-b100v-r3 --hosts 4 --rate 1gbit --out $OUT/flat-1gbit-b100v-r3 -- ddp --out $OUT/flat-1gbit-b100v-r3 --model mlp25m --methods nocomm gloo oktopk --steps 10 --warmup 3 --threads 1 --bucket-cap-mb 100 --bucket-view
    [ $(el) -lt 400 ] && bench flat-1gbit-b25-r3 --hosts 4 --rate 1gbit --out $OUT/flat-1gbit-b25-r3 -- ddp --out $OUT/flat-1gbit-b25-r3 --model mlp25m --methods nocomm gloo oktopk --steps 10 --warmup 3 --threads 1
    [ $(el) -lt 400 ] && bench flat-1gbit-b100v-r4 --hosts 4 --rate 1gbit --out $OUT/flat-1gbit-b100v-r4 -- ddp --out $OUT/flat-1gbit-b100v-r4 --model mlp25m --methods nocomm gloo oktopk --steps 10 --warmup 3 --threads 1 --bucket-cap-mb 100 --bucket-view
    ;;
  *) echo "usage: bash job.sh job1|job2|job3"; exit 2 ;;
esac
ip netns list >> $OUT/steps.txt 2>&1
tar czf $OUT_REAL/logs.tgz -C /tmp logs
cat $OUT/steps.txt $OUT/summary.txt
