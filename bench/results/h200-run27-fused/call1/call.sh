#!/usr/bin/env bash
# Run 27 call 1: the fused radial form's W4 slice, bench_conv A/B and the device-backend tests.
set -u
source bench/device_env.sh .device/c1
B=.device/c1/bench/bench_conv
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt 2>&1
bw=""
run() { local tag=$1; shift; timeout 150 $B --problems mace-medium --dtypes f32,f64 --modes det,atomic --group-times $bw --variant $tag --json $OUT/conv_$tag.json "$@" > $OUT/conv_$tag.txt 2>&1; echo "$tag rc=$?"; }
run unfused
bw="--copy-bandwidth $(python3 -c "import json;print(json.loads(open('$OUT/conv_unfused.json').readline())['header']['copy_bandwidth_Bps'])" 2>/dev/null || echo 0)"
[ "$bw" = "--copy-bandwidth 0" ] && bw=""
run fused_slice0 --fused-hidden 64 --fused-w4-slice-bytes 0
run fused_slice --fused-hidden 64
timeout 170 .device/c1/tests/test_kernels_device_backend --gtest_filter='*/cuda' > $OUT/backend.txt 2>&1; echo "backend rc=$?"
tail -3 $OUT/backend.txt
for f in $OUT/conv_*.txt; do echo "== $f"; cat $f; done
tar cJf $OUT/kcache-after.tar.xz -C /tmp/clebsch-kcache kcache
ls -la $OUT
