#!/usr/bin/env bash
# Run 30 call 1: the 3xTF32 GEMM's alternative tiles (four blocks an SM), the narrow backward
# GEMMs on 3xTF32 beside cuBLAS, float64 plain GEMMs on the ir_linear DMMA kernel, and the
# phi-epilogue chains (branch phi-epilogue on 9f08a14 = "newer"), MP-0-sized model at 10k atoms.
set -u
cd .device && tar xJf ab-bin.tar.xz && cd ..
export CLEBSCH_MODELS_DIR=$PWD/.device/models
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt; cat $OUT/gpu.txt
mkdir -p $OUT/tests
run_test() {  # run_test CARRY BINARY TIMEOUT FILTER
  ( source bench/device_env.sh .device/$1 > /dev/null 2>&1
    s=$(date +%s); CLEBSCH_TEST_BACKENDS=cuda timeout $3 .device/$1/tests/$2 --gtest_filter="$4" > $OUT/tests/$1-$2.log 2>&1
    echo "$1 $2 rc=$? $(( $(date +%s) - s )) s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED|worst error' $OUT/tests/$1-$2.log | head -12 )
}
run_test new test_kernels_tf32x3_gemm 90 '-*emulated*'
run_test newer test_kernels_device_ops 40 '-*emulated*'
t=clebsch_gemm_tf32x3
CLEBSCH_REPEAT=5 timeout 420 bash bench/run_step_ab.sh $OUT/ab10k 10000 new=.device/new \
  w64=.device/new:CLEBSCH_TF32X3_TILES=${t}_64x128_nn_s2 \
  nt=.device/new:CLEBSCH_TF32X3_MIN_COLUMNS=1 \
  nts2=.device/new:CLEBSCH_TF32X3_MIN_COLUMNS=1,CLEBSCH_TF32X3_TILES=${t}_128x64_nt_s2 \
  ntk16=.device/new:CLEBSCH_TF32X3_MIN_COLUMNS=1,CLEBSCH_TF32X3_TILES=${t}_128x64_nt_k16 \
  f64ir=.device/new:CLEBSCH_F64_DENSE_IR=1 \
  phi=.device/newer new-again=.device/new > $OUT/ab10k.log 2>&1
echo "ab10k rc=$?"; cat $OUT/ab10k/summary.txt
for v in new w64 nt nts2 ntk16 f64ir phi; do echo "== $v"; grep -E "gemm|mlp_mma" $OUT/ab10k/$v/profile.md | head -12 | cut -c1-150; done
cd $OUT && tar cJf results.tar.xz ab10k ab10k.log tests gpu.txt && rm -rf ab10k tests
