# The job of stop 47's jobs 1-3 (ROUNDS=1 for jobs 2 and 3): the change built in
# the tree, c28afb6 as an untracked archive in ab_old/ (carried).
#!/usr/bin/env bash
# Device job: build, plan tests, parts bench, estimators A/B (ab_old = c28afb6).
export OUT_REAL=$OUT OUT=/tmp/logs NCCL_NVLS_ENABLE=0
mkdir -p $OUT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $OUT/gpu.txt
(cd ab_old && PGS_PY_BUILD_DIR=$PWD/build-py python3 setup.py build_ext --inplace > $OUT/old_ext.log 2>&1; echo old_ext rc=$? >> $OUT/old_ext.log) &
bash tests/run_gpu_tests.sh build
timeout 200 build-gpu/tests/cuda/pgs_cuda_tests --gtest_filter='CudaPlan.*:CudaAlgoEstimators.*:CudaSelect.Compact*' > $OUT/plan_tests.log 2>&1
grep -E "FAILED|Failure|Expected|Which is|PASSED|tests ran" $OUT/plan_tests.log | head -30
timeout 120 build-gpu/cuda/pgs_cuda_bench 30 c > $OUT/bench_c.txt 2>&1; cat $OUT/bench_c.txt
bash tests/run_gpu_tests.sh ext
wait
tail -2 $OUT/old_ext.log
for r in ${ROUNDS:-1 2}; do
  for t in new old; do
    root=$PWD; [ $t = old ] && root=$PWD/ab_old
    PYTHONPATH=$root/python timeout 150 python3 -m pg_sparse.bench estimators --device cuda --sizes 25M,100M --repeats 5 --out $OUT/est_${t}$r > $OUT/est_${t}$r.txt 2>&1
    echo "== $t $r rc=$?"; grep -E "^  n=" $OUT/est_${t}$r.txt | grep "104,857,600"
  done
done
tar czf $OUT_REAL/logs.tgz -C /tmp logs
