#!/usr/bin/env bash
# The C core's GoogleTest suite under sanitizers, each in its own build:
#   bash tests/sanitizers/run.sh asan       AddressSanitizer + UBSan, mpirun P = 1..8
#   bash tests/sanitizers/run.sh tsan       ThreadSanitizer, ranks as threads (P <= 16)
#   bash tests/sanitizers/run.sh valgrind   valgrind memcheck on the ops suites
#   bash tests/sanitizers/run.sh python     the torch extension (shim and C core)
#                                           built with ASan + UBSan, a part of the
#                                           pytest suite run against it
#   bash tests/sanitizers/run.sh python_loop  the worker jobs in a loop against it
#   bash tests/sanitizers/run.sh python_tsan  the extension under TSan: the shim's
#                                           threads through a part of the suite
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

# The extension built with a sanitizer (shim and C core, every finding
# fatal) and staged with the Python sources in build/KIND-py/pkg, which
# PYTHONPATH puts before the installed package; the runtime is preloaded
# into every Python process the tests start (torchrun, mpirun and their
# ranks inherit the environment). KIND: asan (ASan + UBSan; leaks are not
# checked: CPython and torch keep their allocations to exit) or tsan.
build_sanitized_extension() {  # build_sanitized_extension KIND SANITIZERS
  local kind=$1 build="$root/build/$1-py" pkg="$root/build/$1-py/pkg"
  local py=${PYTHON:-python3}
  mkdir -p "$pkg"
  rm -rf "$pkg/pg_sparse"
  cp -r "$root/python/pg_sparse" "$pkg/pg_sparse"
  find "$pkg/pg_sparse" -name '*.so*' -delete
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPGS_WITH_CUDA=OFF \
    -DPGS_SANITIZE="$2" -DPGS_BUILD_PYTHON=ON -DPGS_BUILD_TESTS=OFF \
    -DBUILD_SHARED_LIBS=ON -DPython3_EXECUTABLE="$(command -v "$py")" \
    -DPGS_PYTHON_OUTPUT_DIR="$pkg/pg_sparse" >"$build.configure.log" 2>&1 ||
    { tail -30 "$build.configure.log"; return 1; }
  cmake --build "$build" -j "$(nproc)" --target _C >"$build.build.log" 2>&1 ||
    { tail -30 "$build.build.log"; return 1; }
  local torch_dir
  torch_dir=$("$py" -c "import torch, os; print(os.path.dirname(torch.__file__))")
  export PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}" PGS_EXPECT_SANITIZER=$kind
  # libstdc++ beside the runtime: ASan's __cxa_throw interceptor needs the
  # real one resolved at start-up (else its first C++ throw, in torch,
  # fails a CHECK).
  LD_PRELOAD="$(gcc -print-file-name="lib$kind.so") $(gcc -print-file-name=libstdc++.so.6)"
  export LD_PRELOAD
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:print_summary=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 report_signal_unsafe=0 \
suppressions=$supp/tsan-py.supp"
  export LD_LIBRARY_PATH="$torch_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

build_asan_extension() { build_sanitized_extension asan address,undefined; }

# A part of the pytest suite against that build. PGS_ASAN_TESTS (pytest
# node ids) overrides the default: every collective under torchrun and
# mpirun, every hook through DDP, the shared-memory checks, a fault case.
step_python() {
  local tests=${PGS_ASAN_TESTS:-"tests/python/test_every_op.py
    tests/python/test_collectives.py tests/python/test_shm.py
    tests/python/test_hierarchy.py
    tests/python/test_faults.py::test_survivors_raise_clearly[torchrun-hook]"}
  (build_asan_extension &&
    # shellcheck disable=SC2086 # the tests are a list
    cd "$root" && "${PYTHON:-python3}" -m pytest -q -p no:cacheprovider $tests)
}

# The shim's threads under TSan (the queue and its worker, the progress
# thread, the watchdog, the logger): the extension built with
# -fsanitize=thread, a part of the suite that drives them (every collective
# and the timeouts under torchrun and mpirun, every c10d op and p2p under
# torchrun). Only our code is instrumented: torch and CPython synchronise
# through calls TSan intercepts (pthread mutexes and condition variables)
# and atomics it cannot see; OpenMP is kept to one thread,
# and tsan-py.supp leaves reports with a frame in torch, CPython or Open MPI
# to them. PGS_TSAN_TESTS and PGS_TSAN_K (pytest -k) override the selection.
step_python_tsan() {
  local tests=${PGS_TSAN_TESTS:-"tests/python/test_collectives.py
    tests/python/test_timeout.py tests/python/test_every_op.py"}
  (build_sanitized_extension tsan thread && export OMP_NUM_THREADS=1 &&
    # shellcheck disable=SC2086 # the tests are a list
    cd "$root" && "${PYTHON:-python3}" -m pytest -q -p no:cacheprovider $tests \
      -k "${PGS_TSAN_K:-not (test_every_op and (mpirun or detail))}")
}

# The worker jobs of every_op and ddp in a loop against that build, for
# PGS_LOOP_SECONDS (default 600), PGS_LOOP_LANES jobs at once (default 2),
# results in build/asan-py/loop (tests/sanitizers/loop.py).
step_python_loop() {
  (build_asan_extension &&
    "${PYTHON:-python3}" "$root/tests/sanitizers/loop.py" \
      --seconds "${PGS_LOOP_SECONDS:-600}" --lanes "${PGS_LOOP_LANES:-2}" \
      --max-failures "${PGS_LOOP_MAX_FAILURES:-0}" \
      --out "${PGS_LOOP_OUT:-$root/build/asan-py/loop}")
}

for s in "$@"; do
  echo "== sanitizers: $s"
  "step_$s"
done
