#!/usr/bin/env bash
export OUT_REAL=$OUT OUT=/tmp/logs NCCL_NVLS_ENABLE=0
mkdir -p $OUT
bash tests/run_gpu_tests.sh build
PGS_BENCH_N=104857600 timeout 300 ncu -k regex:"plan_|Scan" -c 20 --section SpeedOfLight --section LaunchStats \
  build-gpu/cuda/pgs_cuda_bench 3 c > $OUT/ncu_plan.txt 2>&1
grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Compute \(SM\)|Grid Size|Registers" $OUT/ncu_plan.txt | head -120
tar czf $OUT_REAL/logs.tgz -C /tmp logs
