#!/usr/bin/env bash
# Run 29 call 2 (H100): the final code (fused chains wherever they run, fragment-ordered weights,
# one strip a warp). GPU tests (device ops, the MACE and NequIP engines on their fixtures), the
# MP-0-sized model against mace-torch and the host at 2k atoms, the step at 10k and 100k before
# (2ea7ed4) and after.
set -u
cd .device && for v in base new; do tar xJf $v-bin.tar.xz; done && cd ..
export CLEBSCH_MODELS_DIR=$PWD/.device/models
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt; cat $OUT/gpu.txt
source bench/device_env.sh .device/new > /dev/null 2>&1
mkdir -p $OUT/tests
run_test() {  # run_test BINARY TIMEOUT FILTER
  local s=$(date +%s); CLEBSCH_TEST_BACKENDS=cuda timeout $2 .device/new/tests/$1 --gtest_filter="$3" > $OUT/tests/$1.log 2>&1
  echo "$1 rc=$? $(( $(date +%s) - s )) s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED' $OUT/tests/$1.log | head -8
}
run_test test_kernels_device_ops 40 '-*emulated*'
run_test test_kernels_nequip_cuda_engine 60 '-*emulated*'
run_test test_exported_mace_cuda_engine 150 '-*emulated*:*GaussianAndChebyshev*'
set +e; source bench/setup_wheels.sh .whl > /dev/null 2>&1; set +e
PYTHONUNBUFFERED=1 PYTHONPATH=$MACE_PYTHONPATH:. timeout 90 python3 bench/bench_mace_model.py --binary .device/new/bench/bench_mace_model --atoms 2000 --engines cuda,host --precisions fp32,fp64 --out $OUT/check2k --json $OUT/check2k/model.json > $OUT/check2k.log 2>&1; echo "check2k rc=$?"
grep -A5 '| engine | prec' $OUT/check2k.log | head -6; rm -f $OUT/check2k/*.safetensors $OUT/check2k/*.bin
CLEBSCH_REPEAT=10 timeout 240 bash bench/run_step_ab.sh $OUT/ab10k 10000 base=.device/base new=.device/new new-f32mma=.device/new:CLEBSCH_MLP_F32_FORWARD=mma new-c50=.device/new:CLEBSCH_MLP_MMA_CARVEOUT=50 new-c25=.device/new:CLEBSCH_MLP_MMA_CARVEOUT=25 new-c75=.device/new:CLEBSCH_MLP_MMA_CARVEOUT=75 base-again=.device/base > $OUT/ab10k.log 2>&1
echo "ab10k rc=$?"; cat $OUT/ab10k/summary.txt
CLEBSCH_REPEAT=3 timeout 150 bash bench/run_step_ab.sh $OUT/ab100k 100000 base=.device/base new=.device/new > $OUT/ab100k.log 2>&1
echo "ab100k rc=$?"; cat $OUT/ab100k/summary.txt
for v in new new-c50 new-c25 new-c75; do echo "== $v"; grep -E "clebsch_mlp_mma" $OUT/ab10k/$v/profile.md | head -8; done
cd $OUT && tar cJf results.tar.xz ab10k ab100k ab10k.log ab100k.log tests gpu.txt check2k check2k.log && rm -rf ab10k ab100k tests check2k
