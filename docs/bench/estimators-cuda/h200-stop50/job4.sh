#!/usr/bin/env bash
# Stop 50's job 4: the add writes each group of 32 sums' largest |r|, and the
# compaction's first pass reads r only in groups that can hold a pick; all CUDA tests,
# memcheck on the compaction, accumulate and estimator tests, the parts
# (pgs_cuda_bench 30 c), the estimators suite against 03495b1 (ab_old/,
# carried) alternating, and the timeline of one sidco_exp call.
export OUT_REAL=$OUT OUT=/tmp/logs NCCL_NVLS_ENABLE=0
mkdir -p $OUT
(cd ab_old && PGS_PY_BUILD_DIR=$PWD/build-py python3 setup.py build_ext --inplace > $OUT/old_ext.log 2>&1; echo old rc=$? >> $OUT/old_ext.log) &
bash tests/run_gpu_tests.sh build
timeout 240 build-gpu/tests/cuda/pgs_cuda_tests > $OUT/cuda_tests.log 2>&1
echo "cuda tests rc=$?"; grep -E "FAILED|Failure|Expected|Which is|PASSED|tests ran" $OUT/cuda_tests.log | head -30
PGS_CUDA_TEST_MAX_N=1048576 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 1 build-gpu/tests/cuda/pgs_cuda_tests \
  --gtest_filter='CudaBasic.Accumulate*:CudaSelect.Compact*:CudaAlgo*:*Estimat*' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head
timeout 120 build-gpu/cuda/pgs_cuda_bench 30 c > $OUT/bench_c.txt 2>&1; echo "bench rc=$?"; sed -n 1,20p $OUT/bench_c.txt
bash tests/run_gpu_tests.sh ext
wait
tail -1 $OUT/old_ext.log
for r in 1 2; do
  for t in new old; do
    root=$PWD; [ $t = old ] && root=$PWD/ab_old
    PYTHONPATH=$root/python timeout 150 python3 -m pg_sparse.bench estimators --device cuda --sizes 25M,100M --repeats 5 --out $OUT/est_${t}$r > $OUT/est_${t}$r.txt 2>&1
    echo "== est $t $r rc=$?"; grep -E "^  n=" $OUT/est_${t}$r.txt | grep -E "sidco_(exp|gp|gamma):|dgc|exact"
  done
done
PYTHONPATH=$PWD/python timeout 100 python3 cuda/bench/trace_estimator.py --n 100M \
  --estimators sidco_exp --warmup 1 --calls 3 --timeline --out $OUT/trace > $OUT/trace.txt 2>&1
echo "trace rc=$?"; head -32 $OUT/trace/timeline_sidco_exp.txt
gzip $OUT/trace/chrome_*.json
tar czf $OUT_REAL/logs.tgz -C /tmp logs
