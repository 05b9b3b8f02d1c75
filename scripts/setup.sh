#!/usr/bin/env bash
# Clebsch: README command 1: set everything up on a fresh machine and run the main example.
# Builds only what a LAMMPS user needs (LAMMPS, the plugin, the CUDA engine when a CUDA toolkit is
# there); the tests, the Kokkos LAMMPS they use and the test binaries are left to
# scripts/test.sh. CLEBSCH_KOKKOS=1 builds the Kokkos LAMMPS (and clebsch/kk) here as well.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CLEBSCH_BUILD_DIR:-$root/build}
CLEBSCH_KOKKOS=${CLEBSCH_KOKKOS:-0} CLEBSCH_TARGETS=${CLEBSCH_TARGETS:-clebschplugin} \
  bash "$root/scripts/bootstrap.sh"
plugin="$build/pair_style/libclebschplugin.so"
example="$root/examples/mace"
printf '\n== Main example: %s\n' "$example" >&2
cd "$example"
"$build/bin/lmp" -in in.cuau-nvt -var plugin "$plugin" -log none -nocite
cat >&2 <<MSG

== Done. To run LAMMPS with the plugin as README.md and examples/ write it:
   export PATH="$build/bin:\$PATH"
   cd $root/examples/mace && lmp -in in.cuau-nvt -var plugin $plugin
MSG
