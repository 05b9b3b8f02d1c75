#!/usr/bin/env bash
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# The kernel-level profile of the whole MACE step on a GPU host: bench_mace_model.py with
# --kernel-profile (every kernel, copy and GEMM of one energy+forces call, by engine phase,
# timed with events on its stream) for the MACE-MP-0-medium-sized model (89 species, random
# weights) on fcc Cu of each size, CUDA engine, fp32 and fp64, then report_step_profile.py over
# the results. Runs from a folder staged by bench/make_carry.sh, with the mace-torch wheels of
# bench/WHEELS.md (mace-torch builds and checks the model):
#   bench/run_step_profile.sh CARRY OUT [ATOMS ...]     (default: 10000)
# CLEBSCH_BENCH_ENGINES=cuda,host adds the host engine (float64) as a reference for the forces;
# cuda-fused (the fused radial form) is profiled beside cuda when named. CLEBSCH_TORCH_PRECISIONS
# (e.g. none): mace-torch's precisions, for sizes beyond its memory. CLEBSCH_EDGE_BATCH: edges per
# batch of the CUDA engines' weight stage (default: the engine's choice); CLEBSCH_KEPT_ROWS
# (all, batch): what they keep from the forward to the backward. cuda-spline (the radial
# MLPs tabulated, pair_style ... radial spline N) on CLEBSCH_SPLINE_INTERVALS (default 1000).
# CLEBSCH_PROBLEM: the model (bench_mace_model.py --problem, e.g. mace-mh-1; default MP-0-medium).
# CLEBSCH_ATOMIC=1: the CUDA engines accumulate with atomics (the pair style's default, what MD
# runs) instead of the deterministic orderings (the benchmark's default). CLEBSCH_REPEAT: timed
# calls per engine and precision (default 10; fewer for the largest sizes).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
carry=${1:?usage: run_step_profile.sh CARRY OUT [ATOMS ...]}
out=${2:?usage: run_step_profile.sh CARRY OUT [ATOMS ...]}
shift 2
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10000)
source "$root/bench/device_env.sh" "$carry"
# setup_wheels.sh is written for interactive shells (its look-ups may return non-zero).
set +e +o pipefail
source "$root/bench/setup_wheels.sh" "$root/.whl"
set -eo pipefail
mkdir -p "$out"
atomic=()
[ "${CLEBSCH_ATOMIC:-0}" != 0 ] && atomic=(--atomic)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt"
for n in "${sizes[@]}"; do
  mkdir -p "$out/$n"
  PYTHONUNBUFFERED=1 PYTHONPATH=${MACE_PYTHONPATH:+$MACE_PYTHONPATH:}$root \
    python3 "$root/bench/bench_mace_model.py" --binary "$carry/bench/bench_mace_model" \
    --atoms "$n" --engines "${CLEBSCH_BENCH_ENGINES:-cuda}" --precisions fp32,fp64 --kernel-profile \
    ${CLEBSCH_TORCH_PRECISIONS:+--torch-precisions "$CLEBSCH_TORCH_PRECISIONS"} \
    ${CLEBSCH_EDGE_BATCH:+--edge-batch "$CLEBSCH_EDGE_BATCH"} \
    ${CLEBSCH_KEPT_ROWS:+--kept-rows "$CLEBSCH_KEPT_ROWS"} \
    "${atomic[@]}" ${CLEBSCH_PROBLEM:+--problem "$CLEBSCH_PROBLEM"} \
    ${CLEBSCH_SPLINE_INTERVALS:+--spline-intervals "$CLEBSCH_SPLINE_INTERVALS"} \
    ${CLEBSCH_REPEAT:+--repeat "$CLEBSCH_REPEAT"} \
    --out "$out/$n" --json "$out/$n/model.json" 2>&1 | tee "$out/$n/log.txt"
done
python3 "$root/bench/report_step_profile.py" "$out"/*/kernel_profile*.json >"$out/profile.md"
cat "$out/profile.md"
