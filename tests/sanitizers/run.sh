#!/usr/bin/env bash
# The C core's GoogleTest suite under sanitizers, each in its own build:
#   bash tests/sanitizers/run.sh asan       AddressSanitizer + UBSan, mpirun P = 1..8
#   bash tests/sanitizers/run.sh tsan       ThreadSanitizer, ranks as threads (P <= 16)
#   bash tests/sanitizers/run.sh valgrind   valgrind memcheck on the ops suites
# Every finding fails the step.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
supp="$root/tests/sanitizers"

build_with() {  # build_with DIR SANITIZERS "TARGET..."
  cmake -S "$root" -B "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPGS_WITH_CUDA=OFF -DPGS_SANITIZE="$2" >"$1.configure.log" 2>&1 ||
    { tail -30 "$1.configure.log"; return 1; }
  # shellcheck disable=SC2086 # the targets are a list
  cmake --build "$1" -j "$(nproc)" --target $3 >"$1.build.log" 2>&1 ||
    { tail -30 "$1.build.log"; return 1; }
}

step_asan() {
  local build="$root/build/asan"
  build_with "$build" address,undefined \
    "pgs_core_tests pgs_thread_tests pgs_core_thread_tests"
  # Full stacks on malloc, so the Open MPI suppressions match at any depth.
  export ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp"
  export UBSAN_OPTIONS=print_stacktrace=1
  (cd "$build" && ctest --output-on-failure -R 'core_np[123]$')
  # The thread harness's core suite up to P = 3 (the MPI runs' P; beyond,
  # the same code at more ranks costs minutes under ASan).
  ASAN_OPTIONS=detect_leaks=0 \
    bash -c "cd '$build' && ctest --output-on-failure \
      -E 'core_np[123]$|core_threads_p([4-9]|1[0-9])$'"
}

# Every algorithm with 2 to 16 ranks as threads of one process: a data race
# in the library's state (or the transport's) fails the run.
step_tsan() {
  local build="$root/build/tsan"
  build_with "$build" thread "pgs_thread_tests pgs_core_thread_tests"
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    "$build/tests/threads/pgs_thread_tests" --gtest_brief=1 || return 1
  # The C core's algorithm suite with 3 ranks as threads (the estimator
  # sweeps, minutes under TSan, run in the plain build).
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" PGS_TEST_RANKS=3 \
    "$build/tests/threads/pgs_core_thread_tests" --gtest_brief=1 \
    --gtest_filter='*AlgoTest*:*WireTest*:*TransportTest*-*Estimators*:*Sidco*'
}

# Memcheck on the ops suites: one process, no transport (MPI's own
# uninitialised reads would drown the report). Leaks are the asan step's:
# Open MPI's dlopened plugins leave unattributable blocks here.
step_valgrind() {
  local bin="$root/build/core/tests/pgs_core_tests"
  [ -x "$bin" ] || { echo "build build/core first"; return 1; }
  valgrind --error-exitcode=1 --leak-check=no \
    --suppressions="$supp/valgrind.supp" --gen-suppressions=no -q \
    "$bin" --gtest_filter='Ops*' --gtest_brief=1
}

for s in "$@"; do
  echo "== sanitizers: $s"
  "step_$s"
done
