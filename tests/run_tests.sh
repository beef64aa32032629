#!/usr/bin/env bash
# Installs what the test suite needs, builds everything and runs every test.
# Usage: bash tests/run_tests.sh      (works on a fresh Debian/Ubuntu machine)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${PGS_BUILD_DIR:-"$root/build"}

# Open MPI refuses to start as root unless told twice.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

install_system_packages() {
  local pkgs=(cmake make g++ libopenmpi-dev openmpi-bin libgtest-dev)
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

install_system_packages
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j "$(nproc)"
# The C core: GoogleTest under mpirun at P = 1, 2, 3, 4, 5, 8.
cd "$build" && ctest --output-on-failure
