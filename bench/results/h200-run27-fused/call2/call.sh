#!/usr/bin/env bash
# Run 27 call 2: the fused radial form on the float64 tensor cores (bench_conv A/B), the
# device-backend and MACE-engine fused tests, the 10k step profile with cuda-fused.
set -u
C=.device/c2
mkdir -p build/unittest/models && cp .device/models/* build/unittest/models/
source bench/device_env.sh $C >/dev/null 2>&1
B=$C/bench/bench_conv
bw="--copy-bandwidth 4.26e12"
run() { local tag=$1; shift; timeout 120 $B --problems mace-medium --dtypes f32,f64 --modes det,atomic --group-times $bw --variant $tag --json $OUT/conv_$tag.json "$@" > $OUT/conv_$tag.txt 2>&1; echo "$tag rc=$?"; }
run unfused
run fused --fused-hidden 64
run fused_simt --fused-hidden 64 --fused-mma 0
run fused_mma_noslice --fused-hidden 64 --fused-w4-slice-bytes 0
for f in $OUT/conv_*.txt; do echo "== $f"; tail -n +2 $f; done
timeout 200 bash bench/run_gpu_tests.sh $C $OUT/tests '*FusedRadial*:*/cuda:*Fused*' > /dev/null 2>&1; echo "tests rc=$?"
cat $OUT/tests/gpu-tests.txt; rm -f $OUT/tests/gpu-tests-full.txt
CLEBSCH_REPEAT=5 CLEBSCH_BENCH_ENGINES=cuda,cuda-fused timeout 230 bash bench/run_step_profile.sh $C $OUT/profile 10000 > $OUT/profile.log 2>&1; echo "profile rc=$?"
rm -f $OUT/profile/*/kernel_profile*.json
grep -E "untimed|^### " $OUT/profile/profile.md | head -20
tail -5 $OUT/profile.log
