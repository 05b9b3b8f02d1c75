#!/usr/bin/env bash
# Run 28 call 3: the final code. GPU tests (device ops, 3xTF32, the MACE and NequIP engines), the
# MP-0-sized model against mace-torch and the host at 2k atoms, the step at 10k before and after,
# and 100k atoms.
set -u
cd .device && for v in base new; do tar xJf $v-bin.tar.xz; done && cd ..
mkdir -p build/unittest/models && cp .device/models/* build/unittest/models/
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt; cat $OUT/gpu.txt
source bench/device_env.sh .device/new > /dev/null 2>&1
mkdir -p $OUT/tests
run_test() {  # run_test BINARY TIMEOUT FILTER
  local s=$(date +%s); CLEBSCH_TEST_BACKENDS=cuda timeout $2 .device/new/tests/$1 --gtest_filter="$3" > $OUT/tests/$1.log 2>&1
  echo "$1 rc=$? $(( $(date +%s) - s )) s"; grep -E '^\[  (PASSED|FAILED) ' $OUT/tests/$1.log | head -6
}
run_test test_kernels_device_ops 40 '-*emulated*'
run_test test_kernels_tf32x3_gemm 25 '*RadialShapes*'
run_test test_kernels_nequip_cuda_engine 30 '-*emulated*'
run_test test_exported_mace_cuda_engine 100 '-*emulated*:*GaussianAndChebyshev*'
set +e; source bench/setup_wheels.sh .whl > /dev/null 2>&1; set +e
PYTHONUNBUFFERED=1 PYTHONPATH=$MACE_PYTHONPATH:. timeout 90 python3 bench/bench_mace_model.py --binary .device/new/bench/bench_mace_model --atoms 2000 --engines cuda,host --precisions fp32,fp64 --out $OUT/check2k --json $OUT/check2k/model.json > $OUT/check2k.log 2>&1; echo "check2k rc=$?"
grep -A5 '| engine | prec' $OUT/check2k.log | head -6; rm -f $OUT/check2k/*.safetensors $OUT/check2k/*.bin
for v in new base; do
  CLEBSCH_REPEAT=10 CLEBSCH_TORCH_PRECISIONS=fp32 timeout 90 bash bench/run_step_profile.sh .device/$v $OUT/p-$v 10000 > $OUT/p-$v.log 2>&1
  echo "profile $v rc=$?"; grep -E "untimed|^### " $OUT/p-$v/profile.md | head -8; grep 'graph on the device' $OUT/p-$v.log
  rm -f $OUT/p-$v/*/kernel_profile*.json $OUT/p-$v/*/*.bin $OUT/p-$v/*/*.safetensors
done
CLEBSCH_REPEAT=3 CLEBSCH_TORCH_PRECISIONS=none timeout 100 bash bench/run_step_profile.sh .device/new $OUT/p-new100k 100000 > $OUT/p-new100k.log 2>&1
echo "profile new 100k rc=$?"; grep -E "untimed|^### " $OUT/p-new100k/profile.md | head -8; grep 'graph on the device' $OUT/p-new100k.log
rm -f $OUT/p-new100k/*/kernel_profile*.json $OUT/p-new100k/*/*.bin $OUT/p-new100k/*/*.safetensors
cd $OUT && tar cJf results.tar.xz p-base p-new p-new100k p-base.log p-new.log p-new100k.log tests gpu.txt check2k check2k.log && rm -rf p-base p-new p-new100k tests check2k
