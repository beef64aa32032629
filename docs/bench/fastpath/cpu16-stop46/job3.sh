#!/usr/bin/env bash
export OUT_REAL=$OUT OUT=/tmp/logs
mkdir -p $OUT
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
{ nproc; uname -r; which ip tc; lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket"; free -g | head -2; } > $OUT/machine.txt 2>&1
mkdir -p /tmp/ipr /tmp/iprbin
for f in .debs/*.deb; do dpkg -x $f /tmp/ipr; done
L=/tmp/ipr/lib/x86_64-linux-gnu:/tmp/ipr/usr/lib/x86_64-linux-gnu
for t in ip tc; do
  src=$(ls /tmp/ipr/bin/$t /tmp/ipr/sbin/$t /tmp/ipr/usr/bin/$t /tmp/ipr/usr/sbin/$t 2>/dev/null | head -1)
  cat > /tmp/iprbin/$t <<W
#!/bin/bash
orig="\${LD_LIBRARY_PATH-}"
if [ "\$1" = netns ] && [ "\$2" = exec ]; then ns=\$3; shift 3; exec env LD_LIBRARY_PATH=$L $src netns exec "\$ns" env LD_LIBRARY_PATH="\$orig" "\$@"; fi
exec env LD_LIBRARY_PATH=$L $src "\$@"
W
  chmod +x /tmp/iprbin/$t
done
export PATH=/tmp/iprbin:$PATH
cat /tmp/iprbin/ip >> $OUT/machine.txt
ip -V >> $OUT/machine.txt 2>&1
ok=0
ip netns add pgsbprobe && ip -n pgsbprobe link set lo up && tc -n pgsbprobe qdisc add dev lo root tbf rate 1gbit burst 32kb latency 50ms && ok=1
ip netns del pgsbprobe 2>/dev/null
echo "netns ok=$ok $(el)s" >> $OUT/steps.txt
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
[ $(el) -lt 999 ] && bench flat-1gbit-b100v-r2 --hosts 4 --rate 1gbit --out $OUT/flat-1gbit-b100v-r2 -- ddp --out $OUT/flat-1gbit-b100v-r2 --model mlp25m --methods nocomm gloo oktopk --steps 10 --warmup 3 --threads 1 --bucket-cap-mb 100 --bucket-view
[ $(el) -lt 380 ] && bench flat-1gbit-b25-r2 --hosts 4 --rate 1gbit --out $OUT/flat-1gbit-b25-r2 -- ddp --out $OUT/flat-1gbit-b25-r2 --model mlp25m --methods nocomm gloo oktopk --steps 10 --warmup 3 --threads 1 
[ $(el) -lt 380 ] && bench flat-1gbit-b100v-r3 --hosts 4 --rate 1gbit --out $OUT/flat-1gbit-b100v-r3 -- ddp --out $OUT/flat-1gbit-b100v-r3 --model mlp25m --methods nocomm gloo oktopk --steps 10 --warmup 3 --threads 1 --bucket-cap-mb 100 --bucket-view
[ $(el) -lt 380 ] && bench flat-1gbit-b25-r3 --hosts 4 --rate 1gbit --out $OUT/flat-1gbit-b25-r3 -- ddp --out $OUT/flat-1gbit-b25-r3 --model mlp25m --methods nocomm gloo oktopk --steps 10 --warmup 3 --threads 1 
[ $(el) -lt 380 ] && bench flat-1gbit-b100v-r4 --hosts 4 --rate 1gbit --out $OUT/flat-1gbit-b100v-r4 -- ddp --out $OUT/flat-1gbit-b100v-r4 --model mlp25m --methods nocomm gloo oktopk --steps 10 --warmup 3 --threads 1 --bucket-cap-mb 100 --bucket-view
ip netns list >> $OUT/steps.txt 2>&1
tar czf $OUT_REAL/logs.tgz -C /tmp logs
cat $OUT/steps.txt $OUT/summary.txt
