#!/usr/bin/env bash
# The whole test suite on a fresh Debian/Ubuntu machine: installs what it
# needs (python/install.sh), checks the style (tests/lint.sh: clang-format,
# ruff), builds, then runs the C-core GoogleTest suite
# under mpirun (P = 1, 2, 3, 4, 5, 8), the same suite under sanitizers
# (tests/sanitizers/run.sh; and a part of the pytest suite against the
# extension built with ASan + UBSan) and the pytest end-to-end suite, which
# launches real torchrun and mpirun jobs.
# Usage: bash tests/run_tests.sh [extra pytest arguments]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${PGS_BUILD_DIR:-"$root/build/core"}

# Open MPI refuses to start as root unless told twice.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

bash "$root/python/install.sh"
bash "$root/tests/lint.sh"
# The documentation site, warnings as errors (broken links, pages outside
# every table of contents, docstrings that do not parse).
bash "$root/docs/build.sh"

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j "$(nproc)"
(cd "$build" && ctest --output-on-failure)

# The same C core suite built with AddressSanitizer and UndefinedBehavior-
# Sanitizer (every finding fatal), ThreadSanitizer on ranks as threads, and
# valgrind memcheck on the ops suites. Leaks are checked at P = 1 to 3 (Open
# MPI's own allocations suppressed); at more ranks LeakSanitizer's exit-time
# tracer itself crashes now and then under 2 oversubscribed cores.
bash "$root/tests/sanitizers/run.sh" asan tsan valgrind
# The torch extension (shim and C core) built with ASan + UBSan, and a part
# of the pytest suite against it: every c10d op under torchrun and mpirun,
# every collective, the shared memory, the hierarchical reduction, a fault.
bash "$root/tests/sanitizers/run.sh" python
# The same extension built with TSan: the shim's queue, completion,
# progress and watchdog threads through every collective and the timeouts
# (torchrun and mpirun) and every c10d op (torchrun).
bash "$root/tests/sanitizers/run.sh" python_tsan
# libFuzzer on what peers send (malformed counts, indices, regions): the
# committed corpus replayed, then a minute of new inputs.
bash "$root/tests/fuzz/run.sh" 60

cd "$root" && python3 -m pytest tests/python -q "$@"
