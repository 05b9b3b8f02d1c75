#!/usr/bin/env bash
# Run 29 call 3 (H100, warm after call 2): the engines' GPU tests with the time their fixtures'
# NVRTC compiles need (call 2 stopped them at 60 / 150 s).
set -u
export CLEBSCH_MODELS_DIR=$PWD/.device/models
source bench/device_env.sh .device/new > /dev/null 2>&1
mkdir -p $OUT/tests
run_test() {  # run_test BINARY TIMEOUT FILTER
  local s=$(date +%s); CLEBSCH_TEST_BACKENDS=cuda timeout $2 .device/new/tests/$1 --gtest_filter="$3" > $OUT/tests/$1.log 2>&1
  echo "$1 rc=$? $(( $(date +%s) - s )) s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED' $OUT/tests/$1.log | head -8
}
[ -d .device/new/tests ] || (cd .device && tar xJf new-bin.tar.xz)
run_test test_kernels_nequip_cuda_engine 200 '-*emulated*'
run_test test_exported_mace_cuda_engine 380 '-*emulated*:*GaussianAndChebyshev*'
