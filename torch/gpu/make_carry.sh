#!/usr/bin/env bash
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# Stages what a GPU host needs to run the extension's CUDA path without building anything
# (torch/gpu/run_cuda_tests.sh) into one folder to name in the device call's carry (default
# .device/torch-carry, git-ignored):
#   CARRY/lib/libclebsch_torch_ops.so, CARRY/lib/libclebsch_cuda.so   (built in BUILD_DIR/clebsch_torch
#                          against the GPU host's torch version, 2.11)
#   CARRY/kcache.tar.xz    the NVRTC kernel cache for sm_90 (as bench/make_carry.sh), filled here
#                          without a GPU: the tests' modules by running them on the emulated backend
#                          with CLEBSCH_TORCH_PRECOMPILE_H200=1, the benchmark's by
#                          bench/train_step.py --precompile
#   CARRY/build.txt        what was built (commit, torch, sizes)
# PYTHON: the interpreter with that torch (default ~/.cache/clebsch/venv-torch211/bin/python).
# CLEBSCH_CARRY_PARTS: "tests bench" (default), one of them, or "none": which modules to add to the
# cache (BUILD_DIR/kcache, kept between calls).
#
#   torch/gpu/make_carry.sh BUILD_DIR [CARRY_DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:?usage: make_carry.sh BUILD_DIR [CARRY_DIR]}" && pwd)
carry=${2:-$root/.device/torch-carry}
python=${PYTHON:-$HOME/.cache/clebsch/venv-torch211/bin/python}
parts=${CLEBSCH_CARRY_PARTS:-tests bench}
kcache=$build/kcache
mkdir -p "$carry/lib" "$kcache"
cp "$build/clebsch_torch/libclebsch_torch_ops.so" "$build/clebsch_torch/libclebsch_cuda.so" \
   "$carry/lib/"
export CLEBSCH_TORCH_LIBRARY=$carry/lib/libclebsch_torch_ops.so PYTHONPATH=$root/torch
export CLEBSCH_KERNEL_CACHE=$kcache OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
if [[ " $parts " == *" tests "* ]]; then
  CLEBSCH_TORCH_PRECOMPILE_H200=1 "$python" -m pytest -q -p no:cacheprovider \
    "$root/torch/tests/test_conv_cuda.py" "$root/torch/tests/test_patch_mace_cuda.py" | tail -3
fi
if [[ " $parts " == *" bench "* ]]; then
  "$python" "$root/bench/train_step.py" --precompile
fi
tar cJf "$carry/kcache.tar.xz" -C "$build" kcache
{
  echo "commit $(git -C "$root" rev-parse HEAD)$(git -C "$root" diff --quiet || echo ' (+ uncommitted changes)')"
  "$python" -c 'import torch; print("torch", torch.__version__)'
  echo "kernel modules $(find "$kcache" -name '*.cubin' | wc -l) (sm_90; filled by this call: $parts)"
} >"$carry/build.txt"
cat "$carry/build.txt"
du -ah "$carry" | sort -h | tail -6
