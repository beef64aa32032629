#!/usr/bin/env bash
# Stop 50's job 5: the final form (the largest |r| per group in a buffer of
# its own); all CUDA tests, the parts (pgs_cuda_bench 30 c), the estimators
# suite twice, the timeline of one sidco_exp call, and the one-GPU Python
# checks (the hook path on CUDA against the host).
export OUT_REAL=$OUT OUT=/tmp/logs_s50j5 NCCL_NVLS_ENABLE=0
rm -rf $OUT; mkdir -p $OUT
bash tests/run_gpu_tests.sh build
timeout 240 build-gpu/tests/cuda/pgs_cuda_tests > $OUT/cuda_tests.log 2>&1
echo "cuda tests rc=$?"; grep -E "FAILED|Failure|Expected|Which is|PASSED|tests ran" $OUT/cuda_tests.log | head -30
timeout 120 build-gpu/cuda/pgs_cuda_bench 30 c > $OUT/bench_c.txt 2>&1; echo "bench rc=$?"; sed -n 5,20p $OUT/bench_c.txt
bash tests/run_gpu_tests.sh ext
for r in 1 2; do
  PYTHONPATH=$PWD/python timeout 150 python3 -m pg_sparse.bench estimators --device cuda --sizes 25M,100M --repeats 5 --out $OUT/est_new$r > $OUT/est_new$r.txt 2>&1
  echo "== est new $r rc=$?"; grep -E "^  n=" $OUT/est_new$r.txt | grep -E "sidco_(exp|gp|gamma):|dgc"
done
PYTHONPATH=$PWD/python timeout 100 python3 cuda/bench/trace_estimator.py --n 100M \
  --estimators sidco_exp --warmup 1 --calls 3 --timeline --out $OUT/trace > $OUT/trace.txt 2>&1
echo "trace rc=$?"; sed -n 1,3p $OUT/trace/timeline_sidco_exp.txt; grep device $OUT/trace/timeline_sidco_exp.txt | head -9
timeout 230 bash tests/run_gpu_tests.sh one; echo "one rc=$?"
gzip $OUT/trace/chrome_*.json
tar czf $OUT_REAL/logs.tgz -C /tmp $(basename $OUT)
