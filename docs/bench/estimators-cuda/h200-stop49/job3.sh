#!/usr/bin/env bash
# Stop 49's job 3: the device's first guess on every GaussianK call (not only
# after one landed); CUDA estimator tests, the estimators suite against
# 4669710 (ab_old/, carried) alternating, and a profile of sidco_exp's call.
export OUT_REAL=$OUT OUT=/tmp/logs NCCL_NVLS_ENABLE=0
mkdir -p $OUT
(cd ab_old && PGS_PY_BUILD_DIR=$PWD/build-py python3 setup.py build_ext --inplace > $OUT/old_ext.log 2>&1; echo old rc=$? >> $OUT/old_ext.log) &
bash tests/run_gpu_tests.sh build
timeout 200 build-gpu/tests/cuda/pgs_cuda_tests --gtest_filter='CudaAlgo*:CudaBasic.Accumulate*:CudaSelect.Compact*' > $OUT/cuda_tests.log 2>&1
echo "cuda tests rc=$?"; grep -E "FAILED|Failure|Expected|Which is|PASSED|tests ran" $OUT/cuda_tests.log | head -30
bash tests/run_gpu_tests.sh ext
wait
tail -1 $OUT/old_ext.log
for r in 1 2; do
  for t in new old; do
    root=$PWD; [ $t = old ] && root=$PWD/ab_old
    PYTHONPATH=$root/python timeout 150 python3 -m pg_sparse.bench estimators --device cuda --sizes 25M,100M --repeats 5 --out $OUT/est_${t}$r > $OUT/est_${t}$r.txt 2>&1
    echo "== est $t $r rc=$?"; grep -E "^  n=" $OUT/est_${t}$r.txt | grep -E "sidco_(exp|gp|gamma):|gaussian:|dgc|exact|default"
  done
done
PYTHONPATH=$PWD/python timeout 120 python3 cuda/bench/trace_estimator.py --n 100M --estimators sidco_exp sidco_gp --out $OUT/trace > $OUT/trace.txt 2>&1
echo "trace rc=$?"; cat $OUT/trace.txt | tail -5; head -60 $OUT/trace/trace_sidco_exp.txt
tar czf $OUT_REAL/logs.tgz -C /tmp logs
