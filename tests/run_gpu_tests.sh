#!/usr/bin/env bash
# GPU checks, for a machine with NVIDIA GPUs (sm_90 by default), CUDA, NCCL,
# Open MPI and GoogleTest installed (the project's device machines have them).
#   bash tests/run_gpu_tests.sh build     configure and build with CUDA
#   bash tests/run_gpu_tests.sh kernels   CUDA ops vs CPU ops (GoogleTest)
#   bash tests/run_gpu_tests.sh algos     every algorithm on GPUs over NCCL and
#                                         staged MPI vs the host (mpirun -np 2)
#   bash tests/run_gpu_tests.sh memcheck  compute-sanitizer memcheck on kernels
#   bash tests/run_gpu_tests.sh bench     kernel benchmarks vs torch.topk
#   bash tests/run_gpu_tests.sh allreduce Ok-Topk etc. vs NCCL dense, 2 GPUs
#   bash tests/run_gpu_tests.sh allreduce_sweep  the same at n 27.5M/110M,
#                                         density 0.01/0.001, 2..NGPU GPUs
#   bash tests/run_gpu_tests.sh ddp       the DDP step suite (ResNet-50, BERT-base)
#                                         on NGPU GPUs vs NCCL, bf16, PowerSGD
#   bash tests/run_gpu_tests.sh python    the backend on CUDA: pytest, torchrun, 2 GPUs
#                                         (every c10d op too; and the one-GPU checks)
#   bash tests/run_gpu_tests.sh one       only the one-GPU checks (any GPU)
#   bash tests/run_gpu_tests.sh hook      what each hook adds to a DDP step, 1 GPU
#   bash tests/run_gpu_tests.sh ext       build the extension in place (python does)
#   bash tests/run_gpu_tests.sh p2p       send/recv of CUDA tensors vs NCCL, 2 GPUs
#   bash tests/run_gpu_tests.sh faults    a rank killed mid-job on the GPU path, 2 GPUs
#   bash tests/run_gpu_tests.sh estimators  GaussianK's selection with every threshold
#                                         estimator vs exact and torch.topk, 1 GPU
#   bash tests/run_gpu_tests.sh ncu_compact  ncu on the one-pass compaction at 100M
# With no argument: build kernels algos python. Logs go to $OUT (or build-gpu/logs).
# NGPU (default 2) sets the GPUs of the multi-GPU steps: algos, python,
# allreduce, allreduce_sweep, ddp, p2p.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${PGS_GPU_BUILD_DIR:-"$root/build-gpu"}
logs=${OUT:-"$build/logs"}
mkdir -p "$logs"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared machines
arch=${CUDA_ARCH:-90}
# A CXX whose libstdc++ is only an archive (the device image's /opt/gcc) links
# a second C++ runtime into the extension, and CMake refuses it (see
# CMakeLists.txt): build with the system compilers then.
if [[ "$("${CXX:-c++}" -print-file-name=libstdc++.so)" != /* ]]; then
  echo "note: ${CXX:-c++} has no libstdc++.so; building with /usr/bin/gcc and g++"
  export CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++
fi

step_build() {
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    >"$logs/cmake.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" >"$logs/build.log" 2>&1 ||
    { tail -40 "$logs/cmake.log" "$logs/build.log"; return 1; }
  grep -i "nccl" "$logs/cmake.log"
}

step_kernels() {
  "$build/tests/cuda/pgs_cuda_tests" "$@" >"$logs/cuda_tests.log" 2>&1
  local rc=$?
  grep -E "FAILED|Failure|Expected|Which is|PASSED|SKIPPED \]|tests ran" \
    "$logs/cuda_tests.log" | tail -40
  return $rc
}

step_algos() {
  mpirun --oversubscribe -np "${NGPU:-2}" -x NCCL_NVLS_ENABLE \
    "$build/tests/cuda_mpi/pgs_gpu_mpi_tests" >"$logs/gpu_algos.log" 2>&1
  local rc=$?
  grep -E "FAILED|Failure|rank|PASSED|SKIPPED \]|tests ran" \
    "$logs/gpu_algos.log" | tail -40
  return $rc
}

# The out-of-memory test is left out: the sanitizer reports its (expected)
# failed cudaMalloc as an API error.
step_memcheck() {
  PGS_CUDA_TEST_MAX_N=${PGS_CUDA_TEST_MAX_N:-1048576} compute-sanitizer \
    --tool memcheck --error-exitcode 1 "$build/tests/cuda/pgs_cuda_tests" \
    --gtest_filter='-*Huge*:*MemoryEdgeCases*' >"$logs/memcheck.log" 2>&1
  local rc=$?
  grep -E "ERROR SUMMARY|Invalid|FAILED|PASSED" "$logs/memcheck.log" | head -20
  return $rc
}

step_bench() {
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  "$build/cuda/pgs_cuda_bench" 50 2>&1 | tee "$logs/bench.txt"
  python3 "$root/cuda/bench/bench_topk.py" 2>&1 | tee -a "$logs/bench.txt"
}

# The backend on CUDA tensors: build the extension in place, then pytest
# with torchrun on 2 GPUs (collectives vs NCCL, DDP with every hook, Ok-Topk).
step_ext() {
  (cd "$root" && PGS_PY_BUILD_DIR="$root/build-py" \
    python3 setup.py build_ext --inplace >"$logs/ext_build.log" 2>&1) ||
    { tail -40 "$logs/ext_build.log"; return 1; }
  grep -E "shim" "$logs/ext_build.log"
}

step_python() {
  step_ext || return 1
  PGS_CUDA_NPROC="${NGPU:-2}" PYTHONPATH="$root/python" \
    python3 -m pytest "$root/tests/python/test_cuda.py" \
    "$root/tests/python/test_cuda_one.py" "$root/tests/python/test_every_op.py" \
    -k "not test_op or cuda-" -q 2>&1 | tee "$logs/pytest_cuda.log" | tail -15
  return "${PIPESTATUS[0]}"
}

# The hook path on one GPU: CUDA buckets vs CPU buckets at world size 1 and
# with 2-3 ranks sharing the GPU over staged Open MPI (any GPU).
step_one() {
  step_ext || return 1
  PYTHONPATH="$root/python" python3 -m pytest "$root/tests/python/test_cuda_one.py" \
    "$root/tests/python/test_every_op.py" -k "not test_op or cuda-shared" \
    -q 2>&1 | tee "$logs/pytest_cuda_one.log" | tail -15
  return "${PIPESTATUS[0]}"
}

# What each hook adds to a DDP step of the 25.2M model on one GPU, against
# NCCL DDP and torch's hooks in the same run (after `ext`).
step_hook() {
  PYTHONPATH="$root/python" timeout 300 torchrun --nproc_per_node=1 \
    "$root/cuda/bench/bench_hook.py" --out "$logs" ${HOOK_ARGS:-} 2>&1 | tee "$logs/hook_bench.txt"
  return "${PIPESTATUS[0]}"
}

# One sparse allreduce of 27.5M fp32 on 2 GPUs vs NCCL dense allreduce.
step_allreduce() {
  mpirun --oversubscribe -np "${NGPU:-2}" -x NCCL_NVLS_ENABLE \
    "$build/cuda/pgs_allreduce_bench" "${BENCH_N:-27500000}" \
    "${BENCH_DENSITY:-0.01}" 20 2>&1 | tee "$logs/allreduce_bench.txt"
}

# The allreduce benchmark at every size, density and GPU count up to NGPU
# (2, 4, 8): n = 27.5M and 110M fp32, density 0.01 and 0.001.
step_allreduce_sweep() {
  local p n d rc=0 log="$logs/allreduce_sweep.txt"
  : >"$log"
  for p in 2 4 8; do
    [ "$p" -le "${NGPU:-2}" ] || continue
    for n in 27500000 110000000; do
      for d in 0.01 0.001; do
        echo "-- P=$p n=$n density=$d" | tee -a "$log"
        mpirun --oversubscribe -np "$p" -x NCCL_NVLS_ENABLE \
          "$build/cuda/pgs_allreduce_bench" "$n" "$d" 20 >>"$log" 2>&1 || rc=1
        grep -E "^(dense|oktopk|topka|topkdsa|gtopk|gaussiank)" "$log" | tail -9
      done
    done
  done
  return $rc
}

# The DDP step suite on NGPU GPUs (after `ext`): ResNet-50 and BERT-base,
# NCCL dense, bf16 compression and PowerSGD beside every pg_sparse hook, and
# Ok-Topk reduced hierarchically over "nodes" of NGPU/2 GPUs.
step_ddp() {
  local g=${NGPU:-2} rc=0 model
  for model in ${DDP_MODELS:-resnet50 bert-base}; do
    local shape=(--batch 32 --seq 224)
    [ "$model" = "resnet50" ] || shape=(--batch 16 --seq 128)
    PYTHONPATH="$root/python" timeout "${DDP_LIMIT:-240}" torchrun \
      --nproc_per_node="$g" -m pg_sparse.bench ddp --device cuda --model "$model" \
      "${shape[@]}" --steps 10 --warmup 3 --out "$logs/ddp-P$g" \
      --local-size $((g > 2 ? g / 2 : 1)) --methods nocomm nccl bf16 powersgd dense \
      oktopk oktopk+bf16 topka topkdsa gtopk gaussiank acpsgd oktopk@node 2>&1 |
      tee "$logs/ddp-$model-P$g.log" | grep -v "^\[rank\|Warning\|warn" | tail -25
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  done
  return $rc
}

# A rank SIGKILLed in a hook step, a send/recv or an all_reduce on CUDA
# tensors: the survivor raises, nothing is left (after `ext`; 2 GPUs).
step_faults() {
  PYTHONPATH="$root/python" python3 -m pytest "$root/tests/python/test_faults.py" \
    -k cuda -q 2>&1 | tee "$logs/pytest_faults.log" | tail -5
  return "${PIPESTATUS[0]}"
}

# GaussianK's selection per estimator at 25M and 100M on one GPU, with
# torch.topk in the same run (after `ext`): select phase and whole call.
step_estimators() {
  PYTHONPATH="$root/python" timeout 300 python3 -m pg_sparse.bench estimators \
    --device cuda --sizes "${EST_SIZES:-25M,100M}" --repeats 5 \
    --out "$logs/estimators" 2>&1 | tee "$logs/estimators.txt" | grep "^  n="
  return "${PIPESTATUS[0]}"
}

# Nsight Compute on the one-pass compaction (n = 100M, after `build`).
step_ncu_compact() {
  PGS_BENCH_N=104857600 timeout 200 ncu -k regex:tile_once_kernel -c 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section LaunchStats \
    "$build/cuda/pgs_cuda_bench" 3 c >"$logs/ncu_compact.txt" 2>&1
  local rc=$?
  grep -E "Duration|Throughput|Occupancy|Registers" "$logs/ncu_compact.txt"
  return $rc
}

# Point-to-point of CUDA tensors vs an NCCL group (after `ext`).
step_p2p() {
  PYTHONPATH="$root/python" timeout 300 torchrun --nproc_per_node="${NGPU:-2}" \
    "$root/cuda/bench/bench_p2p.py" 2>&1 | tee "$logs/p2p_bench.txt"
  return "${PIPESTATUS[0]}"
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(build kernels algos python)
status=0
for s in "${steps[@]}"; do
  echo "== $s"
  "step_$s" || { echo "== $s FAILED"; status=1; }
done
exit $status
