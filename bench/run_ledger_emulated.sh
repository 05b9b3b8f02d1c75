#!/usr/bin/env bash
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# The CUDA MACE engine's device-memory ledger without a GPU: the MACE-MP-0-medium-sized model
# (bench_mace_model.py --export-only: mace-torch builds and exports it, random weights) on fcc
# Cu of about ATOMS atoms, one energy+forces call of bench_mace_model on the emulated backend
# (--ledger-only; the ledger counts every allocation exactly, times mean nothing), once per
# CudaEngineOptions::kept_rows mode, then a table of the buffers side by side:
#   bench/run_ledger_emulated.sh BUILD OUT [ATOMS [EDGE_BATCH [ENGINE [PRECISION]]]]
# defaults 256 atoms, batches of 5,000 edges (several batches, so that the modes differ),
# cuda-spline, fp32. PYTHON: an interpreter with mace-torch (default python3). MODEL_DIR: where
# the exported model goes (default OUT/model; 44 MB, not a result to keep). One call takes 3-4
# minutes at 256 atoms on one core. The table goes to stdout.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:?usage: run_ledger_emulated.sh BUILD OUT [ATOMS [EDGE_BATCH [ENGINE [PRECISION]]]]}
out=${2:?usage: run_ledger_emulated.sh BUILD OUT [ATOMS [EDGE_BATCH [ENGINE [PRECISION]]]]}
atoms=${3:-256}
edge_batch=${4:-5000}
engine=${5:-cuda-spline}
precision=${6:-fp32}
model=${MODEL_DIR:-$out/model}
mkdir -p "$out"
PYTHONPATH=$root "${PYTHON:-python3}" "$root/bench/bench_mace_model.py" --atoms "$atoms" \
  --export-only --device cpu --out "$model" >"$out/export.txt" 2>&1
for mode in all batch; do
  "$build/bench/bench_mace_model" --model "$model/model.safetensors" \
    --structure "$model/structure.safetensors" --engine "$engine" --precision "$precision" \
    --backend emulated --ledger-only --edge-batch "$edge_batch" --kept-rows "$mode" \
    >"$out/ledger_$mode.json"
done
python3 - "$out" <<'EOF'
import json
import sys

out = sys.argv[1]
runs = {}
for mode in ("all", "batch"):
    with open(f"{out}/ledger_{mode}.json") as f:
        data = json.load(f)
    runs[mode] = data["results"][0]
atoms, edges = data["atoms"], data["edges"]
buffers = {}
for mode, r in runs.items():
    for b in r["device_bytes_by_buffer"]:
        buffers.setdefault(b["name"], {"per": b["per"]})[mode] = b["bytes"]
print(f"{atoms} atoms, {edges} edges; bytes per atom (kept_rows all | batch)\n")
print("| buffer | per | all | batch |\n|---|---|---:|---:|")
rows = sorted(buffers.items(), key=lambda kv: -max(kv[1].get("all", 0), kv[1].get("batch", 0)))
for name, v in rows:
    a, b = v.get("all", 0) / atoms, v.get("batch", 0) / atoms
    if max(a, b) >= 50:
        print(f"| {name} | {v['per']} | {a:.0f} | {b:.0f} |")
for mode, r in runs.items():
    print(f"\n{mode}: allocated {r['device_allocated_bytes']} bytes, "
          f"peak {r['device_peak_allocated_bytes']}")
EOF
