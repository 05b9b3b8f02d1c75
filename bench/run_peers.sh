#!/usr/bin/env bash
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# The model-step peers on a GPU host, in one command: mace-torch + cuEquivariance and
# Symmetrix-XL in their best GPU configurations, fp32 and fp64, on the model and structure of
# bench_mace_model.py (bench/peers_model_step.py), optionally after Clebsch's CUDA engine on the
# same model and structure (its forces are then a reference of the peers' check), then
# bench/report_peers.py: OUT/peers.md and OUT/latest.json (bench/results/latest.json with the
# peers' records, and Clebsch's where it ran, replaced by this run's).
#   bench/run_peers.sh CARRY OUT [ATOMS]      (default ATOMS 10000)
# CARRY: a folder staged by bench/make_carry.sh (Clebsch runs first), or '-' (peers only; then
# CLEBSCH_JSON=DIR/model.json, a bench_mace_model.py result of the same size carried with its
# forces files, is the Clebsch reference). The wheels (bench/WHEELS.md): .whl/peers, .whl/mace,
# .whl/symmetrix. CLEBSCH_RESULTS_RUN names the results folder in the records
# (default bench/results/h200-peers). CLEBSCH_BENCH_ENGINES: Clebsch's engines (default cuda;
# e.g. cuda,cuda-unfused for both radial forms).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
carry=${1:?usage: run_peers.sh CARRY|- OUT [ATOMS]}
out=${2:?usage: run_peers.sh CARRY|- OUT [ATOMS]}
atoms=${3:-10000}
run=${CLEBSCH_RESULTS_RUN:-bench/results/h200-peers}
mkdir -p "$out"
set +e +o pipefail  # the set-up scripts are written for interactive shells
[[ $carry != - ]] && source "$root/bench/device_env.sh" "$carry"
source "$root/bench/setup_wheels.sh" "$root/.whl"
set -eo pipefail
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" || true
clebsch_json=${CLEBSCH_JSON:-}
if [[ $carry != - && -x $carry/bench/bench_mace_model ]]; then
  # The model is built without cuEquivariance on the path, as in every bench_mace_model run.
  PYTHONUNBUFFERED=1 PYTHONPATH=${MACE_PYTHONPATH:+$MACE_PYTHONPATH:}$root \
    python3 "$root/bench/bench_mace_model.py" --binary "$carry/bench/bench_mace_model" \
    --atoms "$atoms" --engines "${CLEBSCH_BENCH_ENGINES:-cuda}" --precisions fp32,fp64 \
    --out "$out/clebsch" \
    --json "$out/clebsch/model.json" 2>&1 | tee "$out/clebsch.log" || true
  clebsch_json=$out/clebsch/model.json
fi
export SYMMETRIX_BACKEND=${SYMMETRIX_BACKEND:-cuda13-sm90} SYMMETRIX_JIT_CACHE=/tmp/symmetrix-jit
mkdir -p -m 700 "$SYMMETRIX_JIT_CACHE"
pp=$root
for p in "$SYMMETRIX_PYTHONPATH" "$CUEQ_PYTHONPATH" "$MACE_PYTHONPATH"; do
  [[ -n $p ]] && pp=$p:$pp
done
PYTHONUNBUFFERED=1 PYTHONPATH=$pp \
  LD_LIBRARY_PATH=${SYMMETRIX_LD_LIBRARY_PATH:+$SYMMETRIX_LD_LIBRARY_PATH:}${LD_LIBRARY_PATH:-} \
  python3 "$root/bench/peers_model_step.py" --atoms "$atoms" --out "$out/peers" \
  --json "$out/peers.json" --run "$run" ${clebsch_json:+--clebsch-json "$clebsch_json"} \
  2>&1 | tee "$out/peers.log" || true
python3 "$root/bench/report_peers.py" "$out/peers.json" ${clebsch_json:+--clebsch-json \
  "$clebsch_json"} --latest "$root/bench/results/latest.json" --run "$run" \
  --out-latest "$out/latest.json" >"$out/peers.md"
cat "$out/peers.md"
