#!/usr/bin/env bash
# Run 27 call 4: the NequIP CUDA engine tests (its fused radial form on the new tiles), with the
# golden files call 2 lacked.
set -u
mkdir -p build/unittest/models && cp .device/models/* build/unittest/models/
timeout 300 bash bench/run_gpu_tests.sh .device/c4 $OUT/tests > /dev/null 2>&1; echo "tests rc=$?"
rm -f $OUT/tests/gpu-tests-full.txt; cat $OUT/tests/gpu-tests.txt
