#!/usr/bin/env bash
# Stop 48's GPU job after the trials: ../auto-gpu-native/job.sh (the same
# arguments) with 12 warm-up steps, so that every bucket's trials end before
# the timed steps. Run from the repository root.
WARMUP=${WARMUP:-12} exec bash docs/bench/auto-gpu-native/job.sh "$@"
