#!/usr/bin/env bash
# Run 30 call 3: the final code (float64 chains with the phi-epilogue; the narrow transposed
# 3xTF32 tile of K slices of 16 taking the radial backward GEMMs beside cuBLAS): the step at
# 10k atoms, the tf32x3 and device-ops GPU tests, the MACE engine tests call 2's timeout cut.
set -u
cd .device && tar xJf final-bin.tar.xz && cd ..
export CLEBSCH_MODELS_DIR=$PWD/.device/models
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt; cat $OUT/gpu.txt
.device/mma_peak > $OUT/mma_peak.txt; grep f64 $OUT/mma_peak.txt
# The MACE engine's Gaussian/Chebyshev and spline cases passed in call 2.
CLEBSCH_TEST_TIMEOUT=75 bash bench/run_gpu_tests.sh .device/new $OUT/tests \
  '-*emulated*:*GaussianAndChebyshev*:*RadialSpline*' | grep -E "^==|PASSED|FAILED"
CLEBSCH_REPEAT=5 timeout 90 bash bench/run_step_ab.sh $OUT/ab10k 10000 final=.device/new > $OUT/ab10k.log 2>&1
echo "ab10k rc=$?"; cat $OUT/ab10k/summary.txt
grep -E "gemm|mlp_mma" $OUT/ab10k/final/profile.md | head -14 | cut -c1-120
rm -f $OUT/ab10k/model/*.safetensors
