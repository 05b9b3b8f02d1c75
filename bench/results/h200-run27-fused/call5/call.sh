#!/usr/bin/env bash
# Run 27 call 5: the fused form's sub-tile (per-warp shared memory, hence resident blocks)
# against the W4 reads it shares, float32.
set -u
C=.device/c5
source bench/device_env.sh $C >/dev/null 2>&1
B=$C/bench/bench_conv
run() { local tag=$1; shift; timeout 60 $B --problems mace-medium --dtypes f32 --modes det,atomic --group-times --copy-bandwidth 4.26e12 --variant $tag --json $OUT/conv_$tag.json --fused-hidden 64 "$@" > $OUT/conv_$tag.txt 2>&1; echo "$tag rc=$?"; }
run sub8
run sub4 --fused-sub-tile 4
run sub4_slice --fused-sub-tile 4 --fused-w4-slice-any-occupancy 1
run sub16 --fused-sub-tile 16
run sub2_slice --fused-sub-tile 2 --fused-w4-slice-any-occupancy 1
for f in $OUT/conv_*.txt; do echo "== $f"; tail -n +3 $f; done
