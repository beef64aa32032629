#!/usr/bin/env bash
# Stop 49's job 4: the add writes a key byte per element and the
# compaction's first pass reads the keys; CUDA tests, memcheck of the new
# tests, the parts (bench c) and the estimators suite against 4669710
# (ab_old/, carried) alternating, and a profile of sidco_exp's call.
export OUT_REAL=$OUT OUT=/tmp/logs NCCL_NVLS_ENABLE=0
mkdir -p $OUT
(cd ab_old && cmake -S . -B build-gpu -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $OUT/old_cmake.log 2>&1 &&
  cmake --build build-gpu -j 6 --target pgs_cuda_bench > $OUT/old_build.log 2>&1 &&
  PGS_PY_BUILD_DIR=$PWD/build-py python3 setup.py build_ext --inplace > $OUT/old_ext.log 2>&1; echo old rc=$? >> $OUT/old_ext.log) &
bash tests/run_gpu_tests.sh build
timeout 240 build-gpu/tests/cuda/pgs_cuda_tests > $OUT/cuda_tests.log 2>&1
echo "cuda tests rc=$?"; grep -E "FAILED|Failure|Expected|Which is|PASSED|tests ran" $OUT/cuda_tests.log | head -30
PGS_CUDA_TEST_MAX_N=1048576 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 1 \
  build-gpu/tests/cuda/pgs_cuda_tests --gtest_filter='CudaSelect.Compact*:CudaAlgoEstimators.*:CudaBasic.Accumulate*' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head
bash tests/run_gpu_tests.sh ext
wait
tail -1 $OUT/old_ext.log
for t in new old; do
  b=build-gpu; [ $t = old ] && b=ab_old/build-gpu
  timeout 100 $b/cuda/pgs_cuda_bench 30 c > $OUT/bench_c_$t.txt 2>&1
  echo "== bench $t rc=$?"; grep -E "reads" $OUT/bench_c_$t.txt | tail -12
done
for r in 1 2; do
  for t in new old; do
    root=$PWD; [ $t = old ] && root=$PWD/ab_old
    PYTHONPATH=$root/python timeout 150 python3 -m pg_sparse.bench estimators --device cuda --sizes 25M,100M --repeats 5 --out $OUT/est_${t}$r > $OUT/est_${t}$r.txt 2>&1
    echo "== est $t $r rc=$?"; grep -E "^  n=104" $OUT/est_${t}$r.txt | grep -E "sidco_(exp|gp|gamma):|gaussian:|dgc|exact" | sed -E 's/ +/ /g' | cut -c1-140
  done
done
PYTHONPATH=$PWD/python timeout 120 python3 cuda/bench/trace_estimator.py --n 100M --estimators sidco_exp --out $OUT/trace > $OUT/trace.txt 2>&1
echo "trace rc=$?"; grep -E "sidco_exp:|mask|add_stats|guess|Scan|write" $OUT/trace/trace_sidco_exp.txt | head -12
tar czf $OUT_REAL/logs.tgz -C /tmp logs
