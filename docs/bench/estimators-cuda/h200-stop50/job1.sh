#!/usr/bin/env bash
# Stop 50's job 1: where the host-timed select phase of a statistics
# estimator's GaussianK call spends its time beyond its kernels (a timeline
# of host API calls and device operations of one call), and the estimators
# suite at 100M for this machine's baseline.
export OUT_REAL=$OUT OUT=/tmp/logs NCCL_NVLS_ENABLE=0
mkdir -p $OUT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $OUT/gpu.txt
bash tests/run_gpu_tests.sh ext
echo "ext rc=$?"
PYTHONPATH=$PWD/python timeout 150 python3 cuda/bench/trace_estimator.py --n 100M \
  --estimators sidco_exp sidco_gamma --warmup 1 --calls 3 --timeline --out $OUT/trace > $OUT/trace.txt 2>&1
echo "trace rc=$?"; grep -E "select" $OUT/trace.txt | head; head -80 $OUT/trace/timeline_sidco_exp.txt
for r in 1 2; do
  PYTHONPATH=$PWD/python timeout 150 python3 -m pg_sparse.bench estimators --device cuda --sizes 100M --repeats 5 --out $OUT/est$r > $OUT/est$r.txt 2>&1
  echo "== est $r rc=$?"; grep -E "^  n=" $OUT/est$r.txt | grep -E "sidco_(exp|gp|gamma):|dgc"
done
rm -f $OUT/trace/chrome_*.json.gz; gzip $OUT/trace/chrome_*.json
tar czf $OUT_REAL/logs.tgz -C /tmp logs
