#!/usr/bin/env bash
# Installs everything pg_sparse needs on a fresh Debian/Ubuntu machine and
# builds the package in place (editable). Safe to run again: it skips what is
# already there. Used by tests/run_tests.sh and examples/run_main.sh.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}

sudo_if_needed() { if [ "$(id -u)" -ne 0 ]; then sudo "$@"; else "$@"; fi; }

install_system_packages() {
  # fortunes: the English text corpus of the convergence examples'
  # language models (/usr/share/games/fortunes); valgrind and clang (with
  # libFuzzer): the test command's memcheck and fuzzing steps; slurm-wlm
  # and munge: tests/python/test_slurm.py starts a one-node cluster.
  local pkgs=(cmake make g++ libopenmpi-dev openmpi-bin libgtest-dev fortunes valgrind
              clang libclang-rt-14-dev slurm-wlm munge)
  local missing=()
  for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "pg_sparse: installing ${missing[*]}"
  sudo_if_needed apt-get update -qq
  DEBIAN_FRONTEND=noninteractive sudo_if_needed apt-get install -y -qq \
    --no-install-recommends "${missing[@]}"
}

install_python_packages() {
  # A bare `torch` requirement would pull a multi-GB CUDA build: install the
  # pinned CPU build only when no torch imports.
  if ! "$python" -c "import torch" >/dev/null 2>&1; then
    "$python" -m pip install -q "torch==2.13.0"
  fi
  # transformers (the DDP benchmark's ResNet-50, BERT and GPT-2, built from
  # their configurations) does not depend on torch, so pip keeps the torch
  # above; matplotlib draws the benchmarks' plots; mnist1d generates the
  # MNIST-1D data set locally (make_dataset, no download); expecttest is
  # what torch's own distributed test suite imports (tests/torch_suite).
  local want=()
  for mod in pytest tqdm sklearn transformers matplotlib mnist1d expecttest; do
    "$python" -c "import $mod" >/dev/null 2>&1 || want+=("$mod")
  done
  want=("${want[@]/sklearn/scikit-learn}")
  [ ${#want[@]} -gt 0 ] && "$python" -m pip install -q "${want[@]}"
  return 0
}

build_package() {
  # No build isolation: build against the torch installed above. An
  # editable install of the repository root puts python/ on sys.path (a
  # .pth file), so the package wins over the C-core folder pg_sparse/ (a
  # namespace portion) when Python runs from the repository root.
  "$python" -m pip install -q --no-build-isolation --no-deps -e "$root"
}

install_system_packages
install_python_packages
build_package
