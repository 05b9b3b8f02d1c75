#!/usr/bin/env bash
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# Stages what a GPU host needs to run the benchmarks without building (a build here runs there:
# bench/README.md) into one folder to name in the device call's carry:
#   CARRY/bench/bench_conv, bench_mace_model, bench_ir_linear   (those built in BUILD_DIR)
#   CARRY/lib/libclebsch_cuda.so
#   CARRY/kcache.tar.xz   the kernel cache (CLEBSCH_KERNEL_CACHE, default ~/.cache/clebsch/kernels,
#                         filled by bench_conv --precompile), so that no module compiles there
#   CARRY/tests/<name>    with CLEBSCH_CARRY_TESTS="name ...": those test binaries of BUILD_DIR/unittest,
#                         for bench/run_gpu_tests.sh
# On the host: source bench/device_env.sh CARRY.
#
#   bench/make_carry.sh BUILD_DIR CARRY_DIR
set -euo pipefail
build=${1:?usage: make_carry.sh BUILD_DIR CARRY_DIR}
carry=${2:?usage: make_carry.sh BUILD_DIR CARRY_DIR}
cache=${CLEBSCH_KERNEL_CACHE:-$HOME/.cache/clebsch/kernels}
mkdir -p "$carry/bench" "$carry/lib"
for exe in bench_conv bench_mace_model bench_ir_linear; do
  if [[ -x $build/bench/$exe ]]; then cp "$build/bench/$exe" "$carry/bench/"; fi
done
cp "$build/kernels/libclebsch_cuda.so" "$carry/lib/"
for t in ${CLEBSCH_CARRY_TESTS:-}; do
  mkdir -p "$carry/tests"
  cp "$build/unittest/$t" "$carry/tests/"
done
if compgen -G "$cache/*" >/dev/null; then
  tar cJf "$carry/kcache.tar.xz" -C "$(dirname "$cache")" \
    --transform "s,^$(basename "$cache"),kcache," "$(basename "$cache")"
fi
du -ah "$carry" | sort -h | tail -8
