#!/usr/bin/env bash
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# On the GPU host, every test binary staged in CARRY/tests (bench/make_carry.sh with
# CLEBSCH_CARRY_TESTS) against the real device: the CUDA cases that CI (no GPU) skips. The
# binaries were built in the checkout's build/ and keep its paths (the bundled models, the
# exported fixture models in build/unittest/models when carried, libclebsch_cuda.so in
# build/kernels through their RUNPATH), so the checkout must sit where it was built, or the
# fixtures be named by CLEBSCH_MODELS_DIR (a carried copy of build/unittest/models: the binaries
# of another build folder look for them under that folder's absolute path). Writes
# OUT/gpu-tests.txt (each binary's summary lines and failures) and OUT/gpu-tests-full.txt.
# CLEBSCH_TEST_TIMEOUT: seconds per binary (default 300; the engines' fixtures compile their
# modules with NVRTC on first use: ~130 s for the MACE engine's on an H100 host, run 29).
#   bench/run_gpu_tests.sh CARRY OUT [GTEST_FILTER]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
carry=$(cd "${1:?usage: run_gpu_tests.sh CARRY OUT [FILTER]}" && pwd)
out=${2:?usage: run_gpu_tests.sh CARRY OUT [FILTER]}
filter=${3:--*emulated*}  # the emulated cases are CI's
mkdir -p "$out" "$root/build/kernels"
[[ -f $root/build/kernels/libclebsch_cuda.so ]] || cp "$carry/lib/libclebsch_cuda.so" "$root/build/kernels/"
source "$root/bench/device_env.sh" "$carry"
status=0
: >"$out/gpu-tests.txt"
for t in "$carry"/tests/*; do
  name=$(basename "$t")
  start=$(date +%s)
  CLEBSCH_TEST_BACKENDS=${CLEBSCH_TEST_BACKENDS:-cuda} timeout "${CLEBSCH_TEST_TIMEOUT:-300}" \
    "$t" --gtest_filter="$filter" >"$out/$name.log" 2>&1
  rc=$?
  [[ $rc -eq 0 ]] || status=1
  {
    echo "== $name: exit $rc, $(( $(date +%s) - start )) s"
    grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|^\[==========\]|Failure|Expected|actual' "$out/$name.log" |
      head -40
  } >>"$out/gpu-tests.txt"
  cat "$out/$name.log" >>"$out/gpu-tests-full.txt"
  rm -f "$out/$name.log"
done
cat "$out/gpu-tests.txt"
exit $status
