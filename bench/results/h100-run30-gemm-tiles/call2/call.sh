#!/usr/bin/env bash
# Run 30 call 2 (combined, after the starts refused): the mma.sync ceilings and store patterns
# (bench/probes/mma_peak.cu); the 3xTF32 staged epilogue for the wide radial GEMMs, the narrow
# backward GEMMs on 3xTF32 (K slices of 16) beside cuBLAS, float64 plain GEMMs on the ir_linear
# DMMA kernel (d = 1); float64 chains with the phi-epilogue (the default of this build).
# MP-0-sized model at 10k atoms; then the GPU tests of the engines with this build's defaults.
set -u
cd .device && tar xJf ab2-bin.tar.xz && cd ..
export CLEBSCH_MODELS_DIR=$PWD/.device/models
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt; cat $OUT/gpu.txt
.device/mma_peak | tee $OUT/mma_peak.txt
t=clebsch_gemm_tf32x3
CLEBSCH_REPEAT=5 timeout 220 bash bench/run_step_ab.sh $OUT/ab10k 10000 new=.device/new \
  se=.device/new:CLEBSCH_TF32X3_TILES=${t}_128x128_nn_se \
  se-k16=.device/new:CLEBSCH_TF32X3_MIN_COLUMNS=1,CLEBSCH_TF32X3_TILES=${t}_128x128_nn_se,${t}_128x64_nt_k16 \
  f64ir=.device/new:CLEBSCH_F64_DENSE_IR=1 \
  new-again=.device/new > $OUT/ab10k.log 2>&1
echo "ab10k rc=$?"; cat $OUT/ab10k/summary.txt
for v in new se se-k16 f64ir; do echo "== $v"; grep -E "gemm|mlp_mma" $OUT/ab10k/$v/profile.md | head -8 | cut -c1-120; done
mkdir -p $OUT/tests
source bench/device_env.sh .device/new > /dev/null 2>&1
run_test() {  # run_test BINARY TIMEOUT FILTER
  local s=$(date +%s); CLEBSCH_TEST_BACKENDS=cuda timeout $2 .device/new/tests/$1 --gtest_filter="$3" > $OUT/tests/$1.log 2>&1
  echo "$1 rc=$? $(( $(date +%s) - s )) s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED|worst error' $OUT/tests/$1.log | head -10
}
run_test test_kernels_tf32x3_gemm 60 '-*emulated*'
run_test test_kernels_device_ops 30 '-*emulated*'
run_test test_exported_mace_cuda_engine 100 '-*emulated*'
run_test test_kernels_nequip_cuda_engine 50 '-*emulated*'
cd $OUT && tar cJf results.tar.xz ab10k ab10k.log tests gpu.txt mma_peak.txt && rm -rf ab10k tests
