#!/usr/bin/env bash
# Run 29 call 1 (H200): the MLP chains in fragment order and two strips a warp. GPU tests (device
# ops; the MACE engine's fixtures with the chains forced), then the step at 10k: base (2ea7ed4)
# and new, each on its default route and with the chains (one edge batch given: no layer by
# layer), new also at one strip and with the float32 forward on the tensor cores.
set -u
cd .device && for v in base new; do tar xJf $v-bin.tar.xz; done && cd ..
mkdir -p build/unittest/models && cp .device/models/* build/unittest/models/
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt; cat $OUT/gpu.txt
source bench/device_env.sh .device/new > /dev/null 2>&1
mkdir -p $OUT/tests
run_test() {  # run_test BINARY TIMEOUT FILTER
  local s=$(date +%s); CLEBSCH_TEST_BACKENDS=cuda timeout $2 .device/new/tests/$1 --gtest_filter="$3" > $OUT/tests/$1.log 2>&1
  echo "$1 rc=$? $(( $(date +%s) - s )) s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED' $OUT/tests/$1.log | head -8
}
run_test test_kernels_device_ops 60 '-*emulated*'
CLEBSCH_MLP_CHAIN=1 run_test test_exported_mace_cuda_engine 150 '-*emulated*:*GaussianAndChebyshev*'
E='CLEBSCH_AB_ARGS=--edge-batch 800000'
CLEBSCH_REPEAT=10 timeout 330 bash bench/run_step_ab.sh $OUT/ab10k 10000 base=.device/base new=.device/new \
  "base-chain=.device/base:$E" "new-chain=.device/new:$E" "new-chain-1strip=.device/new:$E,CLEBSCH_MLP_MMA_STRIPS=1" \
  "new-chain-f32mma=.device/new:$E,CLEBSCH_MLP_F32_FORWARD=mma" base-again=.device/base > $OUT/ab10k.log 2>&1
echo "ab10k rc=$?"; cat $OUT/ab10k/summary.txt
for v in new-chain base-chain; do grep -E "clebsch_mlp" $OUT/ab10k/$v/profile.md | head -8; done
cd $OUT && tar cJf results.tar.xz ab10k ab10k.log tests gpu.txt && rm -rf ab10k tests
