#!/usr/bin/env bash
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# LAMMPS-level check and MD throughput of pair_style clebsch on a GPU host: for each system size
# runs in.cuau-md with device gpu, with clebsch/kk on Kokkos' GPU (--styles ...,kk: LMP must be
# a LAMMPS built with KOKKOS for CUDA, run with --kk-args) and, up to --cpu-max atoms, device
# cpu, all in the same session; compares the step-0 forces and per-atom energies, and prints
# timesteps/s, ns/day and LAMMPS's timing breakdown (the share of the step outside the model)
# into OUT/md.md (and OUT/md.json). A size that does not fit on the GPU is reported as failed
# (its log says why), which is how the largest system is found.
#
#   bench/md/run_md_bench.sh LMP PLUGIN MODEL OUT [--elements "Cu Au"] [--sizes 5,14,30]
#       [--precisions fp64,fp32] [--steps 200] [--cpu-max 12000] [--threads 16]
#       [--styles gpu,kk] [--kk-args "-k on g 1 -sf kk"]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lmp=${1:?usage: run_md_bench.sh LMP PLUGIN MODEL OUT [options]}
# The runs happen inside OUT: make a relative LMP absolute (a bare name is looked up on PATH).
[[ $lmp == */* ]] && lmp=$(realpath "$lmp")
plugin=$(realpath "${2:?}")
model=$(realpath "${3:?}")
out=${4:?}
shift 4
elements="Cu Au" sizes="5,14,30" precisions="fp64,fp32" steps=200 cpu_max=12000 styles=gpu
kk_args="-k on g 1 -sf kk"
threads=${OMP_NUM_THREADS:-$(nproc)}
while [[ $# -gt 0 ]]; do
  case $1 in
    --elements) elements=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --precisions) precisions=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --cpu-max) cpu_max=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --styles) styles=$2; shift 2 ;;
    --kk-args) kk_args=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(realpath "$out")
export OMP_NUM_THREADS=$threads
status=0
for n in ${sizes//,/ }; do
  atoms=$((4 * n * n * n))
  for prec in ${precisions//,/ }; do
    devices=${styles//,/ }
    [[ $atoms -le $cpu_max ]] && devices+=" cpu"
    for dev in $devices; do
      tag=n$n-$prec-$dev
      # kk: the same input under the Kokkos suffix (clebsch -> clebsch/kk, nvt -> nvt/kk).
      extra=() device=$dev
      if [[ $dev == kk ]]; then read -r -a extra <<<"$kk_args"; device=gpu; fi
      (cd "$out" && "$lmp" "${extra[@]}" -nocite -log "$tag.log" -screen none -var plugin "$plugin" \
         -var model "$model" -var elements "$elements" -var device "$device" \
         -var precision "$prec" -var n "$n" -var steps "$steps" -var dump "$tag.forces" \
         -in "$here/in.cuau-md") || { echo "lmp failed: $tag (see $out/$tag.log)" >&2; status=1; }
    done
  done
done
${PYTHON:-python3} "$here/md_report.py" "$out" --threads "$threads" || status=1
exit $status
