#!/usr/bin/env bash
# Build the libFuzzer target with clang (ASan + UBSan, the whole core
# instrumented), replay the committed corpus, then fuzz for a bounded time
# on a copy of it. Any crash, sanitizer report or oversized allocation fails.
#   bash tests/fuzz/run.sh [seconds, default 60]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build="$root/build/fuzz"
seconds=${1:-60}
command -v clang >/dev/null || { echo "fuzz: clang not found (python/install.sh)"; exit 1; }

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPGS_BUILD_FUZZ=ON -DPGS_BUILD_TESTS=OFF -DPGS_WITH_CUDA=OFF \
  -DPGS_SANITIZE=address,undefined -DBUILD_SHARED_LIBS=OFF >"$build.configure.log" 2>&1 ||
  { tail -30 "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target pgs_fuzz_peers >"$build.build.log" 2>&1 ||
  { tail -30 "$build.build.log"; exit 1; }

fuzzer="$build/tests/fuzz/pgs_fuzz_peers"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root"/tests/fuzz/corpus/* "$work/"
opts=(-malloc_limit_mb=2048 -timeout=10 -artifact_prefix="$work/")
# Every committed input once (a regression run), then new ones.
"$fuzzer" "${opts[@]}" -runs=0 "$work" >"$work/replay" 2>&1 ||
  { tail -60 "$work/replay"; exit 1; }
grep -E "INITED" "$work/replay"
"$fuzzer" "${opts[@]}" -max_total_time="$seconds" -print_final_stats=1 "$work" \
  >"$work/log" 2>&1 || { tail -60 "$work/log"; exit 1; }
grep -E "DONE|stat::number_of_executed_units|stat::new_units_added" "$work/log"
