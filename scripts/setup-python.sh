#!/usr/bin/env bash
# Clebsch: create the Python virtual environments used by the exporter and the reference tests,
# under $CLEBSCH_CACHE (default ~/.cache/clebsch). mace-torch pins e3nn 0.4.4 while nequip needs
# e3nn 0.6, so each package gets its own venv:
#   venv-e3nn    e3nn 0.6 (+ torch): math references for the C++ core
#   venv-mace    mace-torch (+ e3nn 0.4.4, ase, safetensors): MACE export and references
#   venv-nequip  nequip (+ e3nn 0.6, ase, safetensors): NequIP export and references
#   site-cueq    cuequivariance(-torch) 0.13 for venv-mace, on PYTHONPATH of the torch extension's
#                cuEquivariance-model test only: importable, it changes the models mace-torch
#                builds (its symmetric-contraction basis), which the exported fixtures must not see
# Usage: setup-python.sh [e3nn|mace|nequip ...]   (default: all). Idempotent: a venv whose
# requirement list has not changed is reused. Prints nothing but progress on stderr.
set -euo pipefail

cache=${CLEBSCH_CACHE:-$HOME/.cache/clebsch}
python=${CLEBSCH_PYTHON_BASE:-python3}
mkdir -p "$cache"

declare -A requirements=(
  [e3nn]="e3nn==0.6.0 numpy pytest"
  [mace]="mace-torch==0.3.16 safetensors numpy ase pytest"
  [nequip]="nequip==0.19.1 safetensors numpy ase pytest"
)

wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(e3nn mace nequip)

for name in "${wanted[@]}"; do
  reqs=${requirements[$name]:?unknown venv $name}
  venv="$cache/venv-$name"
  stamp="$venv/.clebsch-requirements"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$reqs" ]; then
    continue
  fi
  echo "clebsch: creating $venv ($reqs)" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --upgrade pip >&2
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q --disable-pip-version-check $reqs >&2
  echo "$reqs" >"$stamp"
done

# cuEquivariance beside venv-mace (with mace): pure-Python packages whose dependencies
# (numpy, scipy, sympy, networkx, opt-einsum) venv-mace has through torch, e3nn and mace-torch.
cueq_reqs="cuequivariance==0.13.0 cuequivariance-torch==0.13.0"
for name in "${wanted[@]}"; do
  [ "$name" = mace ] || continue
  site="$cache/site-cueq"
  if [ "$(cat "$site/.clebsch-requirements" 2>/dev/null)" != "$cueq_reqs" ]; then
    echo "clebsch: creating $site ($cueq_reqs)" >&2
    rm -rf "$site"
    # shellcheck disable=SC2086
    "$cache/venv-mace/bin/pip" install -q --disable-pip-version-check --no-deps --target "$site" \
      $cueq_reqs >&2
    echo "$cueq_reqs" >"$site/.clebsch-requirements"
  fi
done
