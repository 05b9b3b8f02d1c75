#!/usr/bin/env bash
# Run 28 call 1: the step at 10k atoms before (758cbdd) and after (MLP chain, 3xTF32, ir_linear)
# in the same call, then the GPU tests of the new kernels and the engines, then bench_ir_linear.
set -u
cd .device && for v in base new; do tar xJf $v-bin.tar.xz; done && cd ..
mkdir -p build/unittest/models && cp .device/models/* build/unittest/models/
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
for v in new base; do
  CLEBSCH_REPEAT=10 timeout 150 bash bench/run_step_profile.sh .device/$v $OUT/p-$v 10000 > $OUT/p-$v.log 2>&1
  echo "profile $v rc=$?"
  grep -E "untimed|^### " $OUT/p-$v/profile.md | head -8
  rm -f $OUT/p-$v/*/kernel_profile*.json $OUT/p-$v/*/*.bin $OUT/p-$v/*/*.safetensors
done
timeout 180 bash bench/run_gpu_tests.sh .device/new $OUT/tests > /dev/null 2>&1; echo "tests rc=$?"
rm -f $OUT/tests/gpu-tests-full.txt; grep -E '^==|PASSED|FAILED|Failure' $OUT/tests/gpu-tests.txt | head -40
source bench/device_env.sh .device/new > /dev/null 2>&1
timeout 50 .device/new/bench/bench_ir_linear > $OUT/ir_linear.txt 2>&1; echo "ir_linear rc=$?"; tail -24 $OUT/ir_linear.txt
tar cJf $OUT/kcache.tar.xz -C /tmp/clebsch-kcache kcache
cd $OUT && tar cJf results.tar.xz p-base p-new p-base.log p-new.log tests ir_linear.txt gpu.txt && rm -rf p-base p-new tests
