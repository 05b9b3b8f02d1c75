#!/usr/bin/env bash
# Run 28 call 2: the new kernels' GPU tests, the MP-0-sized model against mace-torch and the host
# engine at 2k atoms, the step at 10k before and after, bench_ir_linear, the engine tests.
set -u
cd .device && for v in base new; do tar xJf $v-bin.tar.xz; done && cd ..
mkdir -p build/unittest/models && cp .device/models/* build/unittest/models/
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt; cat $OUT/gpu.txt
source bench/device_env.sh .device/new > /dev/null 2>&1
mkdir -p $OUT/tests
for t in test_kernels_device_ops test_kernels_tf32x3_gemm test_kernels_dense_gemm; do
  s=$(date +%s); CLEBSCH_TEST_BACKENDS=cuda timeout 80 .device/new/tests/$t --gtest_filter='-*emulated*' > $OUT/tests/$t.log 2>&1
  echo "$t rc=$? $(( $(date +%s) - s )) s"; grep -E '^\[  (PASSED|FAILED) ' $OUT/tests/$t.log | head -5
done
set +e; source bench/setup_wheels.sh .whl > /dev/null 2>&1; set -e; set +e
PYTHONUNBUFFERED=1 PYTHONPATH=$MACE_PYTHONPATH:. timeout 120 python3 bench/bench_mace_model.py --binary .device/new/bench/bench_mace_model --atoms 2000 --engines cuda,host --precisions fp32,fp64 --out $OUT/check2k --json $OUT/check2k/model.json > $OUT/check2k.log 2>&1; echo "check2k rc=$?"
grep -A6 '| engine | prec' $OUT/check2k.log | head -9; rm -f $OUT/check2k/*.safetensors $OUT/check2k/*.bin
for v in new base; do
  CLEBSCH_REPEAT=10 CLEBSCH_TORCH_PRECISIONS=fp32 timeout 100 bash bench/run_step_profile.sh .device/$v $OUT/p-$v 10000 > $OUT/p-$v.log 2>&1
  echo "profile $v rc=$?"; grep -E "untimed|^### " $OUT/p-$v/profile.md | head -8
  rm -f $OUT/p-$v/*/kernel_profile*.json $OUT/p-$v/*/*.bin $OUT/p-$v/*/*.safetensors
done
source bench/device_env.sh .device/new > /dev/null 2>&1
timeout 40 .device/new/bench/bench_ir_linear --reps 10 > $OUT/ir_linear.txt 2>&1; echo "ir_linear rc=$?"; grep -E 'planned|cublas|pass|FAIL' $OUT/ir_linear.txt | head -30
for t in test_kernels_nequip_cuda_engine test_exported_mace_cuda_engine; do
  s=$(date +%s); CLEBSCH_TEST_BACKENDS=cuda timeout 100 .device/new/tests/$t --gtest_filter='-*emulated*' > $OUT/tests/$t.log 2>&1
  echo "$t rc=$? $(( $(date +%s) - s )) s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED' $OUT/tests/$t.log | head -8
done
tar cJf $OUT/kcache.tar.xz -C /tmp/clebsch-kcache kcache
cd $OUT && tar cJf results.tar.xz p-base p-new p-base.log p-new.log tests ir_linear.txt gpu.txt check2k check2k.log && rm -rf p-base p-new tests check2k
