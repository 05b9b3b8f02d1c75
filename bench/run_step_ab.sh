#!/usr/bin/env bash
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# A/B of builds and engine switches on the whole MACE step, on a GPU host: the MACE-MP-0-medium-
# sized model (89 species, random weights) and fcc Cu of ATOMS atoms are exported once
# (bench_mace_model.py --export-only, with the mace-torch wheels of bench/WHEELS.md), then each
# variant runs bench_mace_model of its carry (bench/make_carry.sh) with its environment: fp32 and
# fp64, deterministic, the graph on the host and on the device, kernel profile on; per variant
# OUT/LABEL/{result.json, log.txt, profile.md} (report_step_profile.py) and one line of
# OUT/summary.txt. Variants run in the order given; name a baseline first and again last to see
# the machine's drift.
#   bench/run_step_ab.sh OUT ATOMS LABEL=CARRY[:VAR=VALUE[,VAR=VALUE...]] ...
# (a VALUE may hold commas: a comma starts a new assignment only where NAME= follows it)
# e.g. base=.device/base new=.device/new new-chain=.device/new:CLEBSCH_MLP_CHAIN=1
# CLEBSCH_REPEAT: timed calls per precision (default 10); CLEBSCH_PROFILE_TOP: kernels listed per
# profile (default 30); CLEBSCH_AB_ARGS: more bench_mace_model
# arguments for every variant (e.g. --atomic).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:?usage: run_step_ab.sh OUT ATOMS LABEL=CARRY[:VAR=VALUE,...] ...}
atoms=${2:?usage: run_step_ab.sh OUT ATOMS LABEL=CARRY[:VAR=VALUE,...] ...}
shift 2
mkdir -p "$out/model"
set +e +o pipefail
source "$root/bench/setup_wheels.sh" "$root/.whl"
set -eo pipefail
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" || true
PYTHONUNBUFFERED=1 PYTHONPATH=${MACE_PYTHONPATH:+$MACE_PYTHONPATH:}$root \
  python3 "$root/bench/bench_mace_model.py" --atoms "$atoms" --export-only --out "$out/model" \
  >"$out/model/export.log" 2>&1
for spec in "$@"; do
  label=${spec%%=*}
  rest=${spec#*=}
  carry=${rest%%:*}
  vars=""
  [[ $rest == *:* ]] && vars=${rest#*:}
  mkdir -p "$out/$label"
  (
    source "$root/bench/device_env.sh" "$carry" 2>/dev/null
    # Split on the commas that start a new VAR=: a value may hold commas (a list of names).
    IFS=, read -ra parts <<<"$vars"
    assignments=()
    for a in "${parts[@]}"; do
      if [[ $a == *=* || ${#assignments[@]} -eq 0 ]]; then
        assignments+=("$a")
      else
        assignments[-1]+=",$a"
      fi
    done
    for a in "${assignments[@]}"; do export "${a?}"; done
    "$carry/bench/bench_mace_model" --model "$out/model/model.safetensors" \
      --structure "$out/model/structure.safetensors" --engine cuda --precision fp32,fp64 \
      --repeat "${CLEBSCH_REPEAT:-10}" --kernel-profile "$out/$label/kernel_profile.json" \
      ${CLEBSCH_AB_ARGS:-} \
      >"$out/$label/result.json" 2>"$out/$label/log.txt"
  ) || echo "$label: bench_mace_model failed (rc $?), see $out/$label/log.txt" >>"$out/summary.txt"
  python3 "$root/bench/report_step_profile.py" --top "${CLEBSCH_PROFILE_TOP:-30}" \
    "$out/$label/kernel_profile.json" >"$out/$label/profile.md" 2>/dev/null || true
  python3 - "$label" "$vars" "$out/$label/result.json" >>"$out/summary.txt" <<'EOF' || true
import json, sys
label, env, path = sys.argv[1:4]
res = json.load(open(path))
atoms = res.get("atoms") or 1
for r in res.get("results", []):
    dg = (r.get("device_graph") or {}).get("median_s")
    peak = r.get("peak_device_extra_bytes", 0) / atoms / 1024
    print(f"{label:<14} {r['precision']:<5} host graph {1e3 * r['median_s']:8.2f} ms"
          f"  device graph {1e3 * dg if dg else float('nan'):8.2f} ms  {peak:8.1f} KB/atom"
          f"  E {r.get('energy', float('nan')):.12e}  {env}")
EOF
  rm -f "$out/$label/kernel_profile.json"
done
rm -f "$out/model/"*.safetensors
cat "$out/summary.txt"
