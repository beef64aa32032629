#!/usr/bin/env bash
# Stop 49's device jobs: the change built in the tree (job 1: the two-pass
# compaction; job 2: also its write pass reworked and the device's first guess),
# HEAD before it (4669710) as an untracked archive in ab_old/ (carried).
# CUDA tests, memcheck of the compaction tests, the parts (bench c, e) and
# the estimators suite, the change and 4669710 alternating.
export OUT_REAL=$OUT OUT=/tmp/logs NCCL_NVLS_ENABLE=0
mkdir -p $OUT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $OUT/gpu.txt
(cd ab_old && cmake -S . -B build-gpu -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $OUT/old_cmake.log 2>&1 &&
  cmake --build build-gpu -j 8 --target pgs_cuda_bench > $OUT/old_build.log 2>&1 &&
  PGS_PY_BUILD_DIR=$PWD/build-py python3 setup.py build_ext --inplace > $OUT/old_ext.log 2>&1; echo old rc=$? >> $OUT/old_ext.log) &
bash tests/run_gpu_tests.sh build
timeout 300 build-gpu/tests/cuda/pgs_cuda_tests > $OUT/cuda_tests.log 2>&1
echo "cuda tests rc=$?"; grep -E "FAILED|Failure|Expected|Which is|PASSED|tests ran" $OUT/cuda_tests.log | head -30
PGS_CUDA_TEST_MAX_N=1048576 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 1 \
  build-gpu/tests/cuda/pgs_cuda_tests --gtest_filter='CudaSelect.Compact*:CudaSelect.Planned*:CudaAlgoEstimators.*:CudaBasic.Accumulate*' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head
bash tests/run_gpu_tests.sh ext
wait
[ -n "${ONE:-}" ] && { timeout 240 bash tests/run_gpu_tests.sh one; echo "one rc=$?"; }
tail -1 $OUT/old_ext.log
for r in 1 2; do
  for t in new old; do
    b=build-gpu; [ $t = old ] && b=ab_old/build-gpu
    timeout 120 $b/cuda/pgs_cuda_bench 30 ce > $OUT/bench_ce_${t}$r.txt 2>&1
    echo "== bench $t $r rc=$?"; grep -E "reads" $OUT/bench_ce_${t}$r.txt | head -30
  done
done
for r in 1 2; do
  for t in new old; do
    root=$PWD; [ $t = old ] && root=$PWD/ab_old
    PYTHONPATH=$root/python timeout 150 python3 -m pg_sparse.bench estimators --device cuda --sizes 25M,100M --repeats 5 --out $OUT/est_${t}$r > $OUT/est_${t}$r.txt 2>&1
    echo "== est $t $r rc=$?"; grep -E "^  n=" $OUT/est_${t}$r.txt | grep "104,857,600"
  done
done
tar czf $OUT_REAL/logs.tgz -C /tmp logs
