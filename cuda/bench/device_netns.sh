# Sourced by the device jobs that emulate nodes in network namespaces
# (docs/bench/fastpath/cpu16-stop46/job.sh, docs/bench/hierarchy-gpu/job.sh,
# docs/bench/auto-gpu*/job.sh).
# The device machines have no iproute2: the job carries its Debian packages
# in .debs/ (`apt-get download iproute2` and its libraries; carry .debs).
# netns_tools unpacks them, puts ip and tc wrappers first on PATH (the
# packages' libraries for the tools only, the caller's LD_LIBRARY_PATH for
# what `ip netns exec` runs), probes a namespace with a tbf qdisc, and
# appends what it found to $OUT/machine.txt and $OUT/steps.txt. Returns 1
# where namespaces or tc do not work here.
netns_tools() {
  mkdir -p /tmp/ipr /tmp/iprbin
  local f t src L=/tmp/ipr/lib/x86_64-linux-gnu:/tmp/ipr/usr/lib/x86_64-linux-gnu
  for f in .debs/*.deb; do dpkg -x "$f" /tmp/ipr; done
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
  cat /tmp/iprbin/ip >> "$OUT/machine.txt"
  ip -V >> "$OUT/machine.txt" 2>&1
  local ok=0
  ip netns add pgsbprobe && ip -n pgsbprobe link set lo up &&
    tc -n pgsbprobe qdisc add dev lo root tbf rate 1gbit burst 32kb latency 50ms && ok=1
  ip netns del pgsbprobe 2>/dev/null
  echo "netns ok=$ok" >> "$OUT/steps.txt"
  [ $ok = 1 ]
}

# The start the GPU network jobs share (docs/bench/auto-gpu*/job.sh): logs
# under /tmp/logs (the caller's $OUT kept as OUT_REAL for the archive), the
# elapsed-seconds helper el, the machine's description, the namespace tools,
# and the extension, built once per warm machine. Returns 3 (logs archived)
# where namespaces do not work.
device_job_start() {
  export OUT_REAL=$OUT OUT=/tmp/logs NCCL_NVLS_ENABLE=0
  mkdir -p "$OUT"
  start=$(date +%s)
  { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; uname -r; } \
    > "$OUT/machine.txt" 2>&1
  if ! netns_tools; then tar czf "$OUT_REAL/logs.tgz" -C /tmp logs; return 3; fi
  if ls python/pg_sparse/*.so > /dev/null 2>&1; then echo "ext kept" >> "$OUT/steps.txt"; else
    bash tests/run_gpu_tests.sh ext > "$OUT/ext.txt" 2>&1
    echo "ext rc=$? $(el)s" >> "$OUT/steps.txt"
  fi
}
el() { echo $(( $(date +%s) - start )); }
