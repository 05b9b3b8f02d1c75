#!/usr/bin/env bash
# Run 27 call 3: the float64 DMMA radial tiles with four (forward) and eight (dE/dh) MMAs in
# flight, against SIMT; the fused tests (NequIP with its golden files); the fused step at 10k.
set -u
C=.device/c2
mkdir -p build/unittest/models && cp .device/models/* build/unittest/models/
source bench/device_env.sh $C >/dev/null 2>&1
B=$C/bench/bench_conv
run() { local tag=$1; shift; timeout 100 $B --problems mace-medium --dtypes f64 --modes det,atomic --group-times --copy-bandwidth 4.26e12 --variant $tag --json $OUT/conv_$tag.json "$@" > $OUT/conv_$tag.txt 2>&1; echo "$tag rc=$?"; }
run fused_mma --fused-hidden 64
run fused_simt --fused-hidden 64 --fused-mma 0
for f in $OUT/conv_*.txt; do echo "== $f"; tail -n +2 $f; done
timeout 200 bash bench/run_gpu_tests.sh $C $OUT/tests '*Fused*:*/cuda' > /dev/null 2>&1; echo "tests rc=$?"
rm -f $OUT/tests/gpu-tests-full.txt; cat $OUT/tests/gpu-tests.txt
CLEBSCH_REPEAT=5 CLEBSCH_BENCH_ENGINES=cuda-fused timeout 200 bash bench/run_step_profile.sh $C $OUT/profile 10000 > $OUT/profile.log 2>&1; echo "profile rc=$?"
rm -f $OUT/profile/*/kernel_profile*.json $OUT/profile/*/*.bin $OUT/profile/*/*.safetensors
grep -E "untimed|^### " $OUT/profile/profile.md | head -20
