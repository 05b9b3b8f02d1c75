#!/usr/bin/env bash
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# Stages a LAMMPS built here (lmp, liblammps and the shared libraries it needs beyond glibc and
# libstdc++, with Open MPI's components, orted and help files for a one-rank "singleton" start)
# and the plugin into CARRY_DIR, for a GPU host that has no LAMMPS (bench/md/soak there). On the
# host: source bench/md/lmp_carry_env.sh CARRY_DIR, then run "$CARRY/bin/lmp" (one rank).
#
#   bench/md/make_lmp_carry.sh LMP PLUGIN CARRY_DIR
set -euo pipefail
lmp=$(realpath "${1:?usage: make_lmp_carry.sh LMP PLUGIN CARRY_DIR}")
plugin=$(realpath "${2:?}")
carry=${3:?}
mkdir -p "$carry/bin" "$carry/lib"
cp "$lmp" "$carry/bin/lmp"
cp "$plugin" "$carry/lib/"
# Every library ldd resolves outside the C/C++ runtime, which the host's image has.
for f in "$lmp" "$plugin"; do
  ldd "$f" | awk '/=> \//{print $3}' | while read -r so; do
    case $(basename "$so") in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++.so*|libgcc_s.so*|ld-linux*) ;;
      *) cp -L "$so" "$carry/lib/" ;;
    esac
  done
done
# Open MPI (Debian's layout): components, orted and help texts for the singleton start.
ompi=/usr/lib/x86_64-linux-gnu/openmpi
if [[ -d $ompi/lib/openmpi3 ]]; then
  mkdir -p "$carry/openmpi"
  cp -r "$ompi/lib/openmpi3" "$carry/openmpi/components"
  [[ -x /usr/bin/orted ]] && cp -L /usr/bin/orted "$carry/bin/"
  [[ -d /usr/share/openmpi ]] && cp -r /usr/share/openmpi "$carry/openmpi/share"
fi
strip --strip-unneeded "$carry/bin/lmp" "$carry"/lib/*.so* 2>/dev/null || true
du -sh "$carry"
