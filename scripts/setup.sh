#!/usr/bin/env bash
# Clebsch: README command 1: set everything up on a fresh machine and run the main example.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CLEBSCH_BUILD_DIR:-$root/build}
bash "$root/scripts/bootstrap.sh"
lmp=$(grep -E '^LAMMPS_EXECUTABLE:' "$build/CMakeCache.txt" | cut -d= -f2-)
plugin="$build/pair_style/libclebschplugin.so"
example="$root/examples/mace"
printf '\n== Main example: %s\n' "$example" >&2
cd "$example"
"$lmp" -in in.cuau-nvt -var plugin "$plugin" -log none -nocite
