#!/usr/bin/env bash
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# The NequIP model step on a GPU host (issue 23's NequIP target): the nequip-benzene-sized model
# and fcc Cu structure of bench/export_nequip_model.py (exported in the nequip environment and
# carried, MODEL_DIR/{model,structure}.safetensors; --round-mantissa 8 keeps the 60 MB file to
# 11 MB xz) run by the bench_mace_model of CARRY (bench/make_carry.sh):
#   - the host engine in float64, one call: the force reference;
#   - the CUDA engines ENGINES (default "cuda,cuda-fused": per-edge weights stored for a batch,
#     or the radial MLP's last layer inside the convolution) in fp32 and fp64, deterministic,
#     median of CLEBSCH_REPEAT (default 5), the kernel profile of one more call each.
# Writes OUT/summary.txt (per engine and precision: ms with the graph copied from the host and
# with it on the device, us/atom-step, peak device memory per atom, max |F - F_host|),
# OUT/{host,cuda}.json (bench_mace_model's results), OUT/profile.md (report_step_profile.py).
# CLEBSCH_BENCH_ARGS: more arguments for the CUDA engines' run (e.g. "--backend emulated" to check
# the plumbing without a GPU, "--edge-batch N").
#   bench/run_nequip_step.sh CARRY MODEL_DIR OUT [ENGINES]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
carry=$(cd "${1:?usage: run_nequip_step.sh CARRY MODEL_DIR OUT [ENGINES]}" && pwd)
model=$(cd "${2:?usage: run_nequip_step.sh CARRY MODEL_DIR OUT [ENGINES]}" && pwd)
out=${3:?usage: run_nequip_step.sh CARRY MODEL_DIR OUT [ENGINES]}
engines=${4:-cuda,cuda-fused}
mkdir -p "$out"
source "$root/bench/device_env.sh" "$carry" 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" || true
bench=("$carry/bench/bench_mace_model" --model "$model/model.safetensors"
  --structure "$model/structure.safetensors")
"${bench[@]}" --engine host --precision fp64 --repeat 1 --warmup 0 \
  --forces-out "$out/forces" >"$out/host.json" 2>"$out/host.log"
"${bench[@]}" --engine "$engines" --precision fp32,fp64 --repeat "${CLEBSCH_REPEAT:-5}" \
  --forces-out "$out/forces" --kernel-profile "$out/kernel_profile.json" \
  ${CLEBSCH_BENCH_ARGS:-} >"$out/cuda.json" 2>"$out/cuda.log"
python3 "$root/bench/report_step_profile.py" "$out/kernel_profile.json" >"$out/profile.md" || true
rm -f "$out/kernel_profile.json"
python3 - "$out" >"$out/summary.txt" <<'EOF'
import json, pathlib, sys
import numpy as np

out = pathlib.Path(sys.argv[1])
host = json.loads((out / "host.json").read_text())
cuda = json.loads((out / "cuda.json").read_text())
atoms = cuda.get("atoms") or 1
ref = np.fromfile(host["results"][0]["forces"], dtype="<f8")
print(f"{atoms} atoms, {cuda.get('edges')} edges; host fp64 {1e3 * host['results'][0]['median_s']:.1f} ms")
for r in cuda["results"]:
    f = np.fromfile(r["forces"], dtype="<f8")
    dg = (r.get("device_graph") or {}).get("median_s")
    kb = r.get("peak_device_extra_bytes", 0) / atoms / 1024
    us = 1e6 * dg / atoms if dg else float("nan")
    print(f"{r['engine']:<11} {r['precision']:<5} host graph {1e3 * r['median_s']:8.2f} ms"
          f"  device graph {1e3 * dg if dg else float('nan'):8.2f} ms ({us:.2f} us/atom-step)"
          f"  {kb:8.1f} KB/atom  max|F - F_host| {np.abs(f - ref).max():.2e} eV/A"
          f"  E {r.get('energy', float('nan')):.12e}")
EOF
rm -f "$out"/forces.*.bin
cat "$out/summary.txt"
