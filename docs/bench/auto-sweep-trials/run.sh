#!/usr/bin/env bash
# Stop 48: algo="auto" (trials of the close methods, steady calls in C++)
# on the CPU harness: 4 emulated hosts (network namespaces, 4 ranks on this
# VM's 2 cores) at four links, with the methods it chooses from in the same
# job; 12 warm-up steps so every bucket's trials end before the timed ones.
# Usage: bash docs/bench/auto-sweep-trials/run.sh OUT_DIR
set -u
out=${1:?output folder}
here=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$out"
sweep() { # rate, methods...
  local rate=$1; shift
  local d=$out/$rate; mkdir -p "$d"
  (cd /tmp && PYTHONPATH=$here/python timeout 900 python3 -m pg_sparse.bench net run --hosts 4 \
    --rate "$rate" --out "$d" -- ddp --out "$d" --model mlp25m --methods "$@" \
    --steps 6 --warmup 12 --threads 1 > "$d/log.txt" 2>&1)
  echo "$rate rc=$?" >> "$out/steps.txt"
}
sweep unshaped gloo oktopk topka gtopk auto
sweep 10gbit gloo oktopk topka gtopk auto
sweep 1gbit gloo oktopk topka gtopk auto
sweep 100mbit oktopk topka gtopk auto
