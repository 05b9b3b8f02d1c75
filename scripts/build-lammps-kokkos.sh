#!/usr/bin/env bash
# Clebsch: LAMMPS with KOKKOS (OpenMP backend) + PLUGIN + MPI, and Clebsch's plugin with the
# clebsch/kk style built against it, for the /kk tests on a CPU-only Debian 12 machine.
#
# Debian 12 has no Kokkos; Debian sid's libkokkos-dev (5.2.2, OpenMP only) needs glibc >= 2.38.
# So this script makes a Debian sid chroot (debootstrap; Debian's archive only) under the cache,
# builds LAMMPS from Debian's source tarball inside it (the tarball scripts/build-lammps.sh
# downloads and verifies), and then builds the plugin from this source tree inside it.
# scripts/kokkos-chroot.sh enters the chroot; the wrappers written to <prefix>/bin (lmp, mpirun)
# run the chroot's programs from the host with host paths unchanged.
#
# Usage: build-lammps-kokkos.sh [PLUGIN_BUILD_DIR]
#   Prints the LAMMPS prefix on its last line; with PLUGIN_BUILD_DIR also builds the plugin there
#   (libclebschplugin.so in PLUGIN_BUILD_DIR/pair_style). Everything is cached under
#   $CLEBSCH_CACHE (default ~/.cache/clebsch) and reused when present, rebuilt when not;
#   ccache (inside the chroot) keeps its objects in $CLEBSCH_CACHE/ccache-kokkos.
#   Phase times go to stderr and to <prefix>/timings.txt.
set -euo pipefail
# The whole script is one compound command, parsed before it runs: editing this file while a
# build is under way cannot change what the running copy does.
{
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${CLEBSCH_CACHE:-$HOME/.cache/clebsch}
jobs=${CLEBSCH_JOBS:-$(nproc)}
plugin_build=${1:-}
mirror=${CLEBSCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
enter=("$repo/scripts/kokkos-chroot.sh")
export CLEBSCH_CHROOT_BINDS=$repo${CLEBSCH_CHROOT_BINDS:+:$CLEBSCH_CHROOT_BINDS}
mkdir -p "$cache"

phase_start=0
phase() { phase_name=$1; phase_start=$(date +%s); echo "clebsch-kokkos: $1 ..." >&2; }
phase_end() {
  local t=$(( $(date +%s) - phase_start ))
  echo "clebsch-kokkos: $phase_name: ${t} s" >&2
  [ -n "${timings:-}" ] && echo "$(date -u +%FT%TZ) $phase_name ${t}s" >>"$timings"
  return 0
}
timings=""

if [ "$(id -u)" -ne 0 ]; then
  echo "clebsch-kokkos: needs root (debootstrap, chroot, bind mounts)" >&2
  exit 1
fi

# ------------------------------------------------------------------------------------------------
# 1. The chroot: Debian sid with the toolchain, OpenMPI and Debian's Kokkos.
# ------------------------------------------------------------------------------------------------
packages="libkokkos-dev libopenmpi-dev openmpi-bin cmake ninja-build g++ python3 ccache
nlohmann-json3-dev pkg-config zlib1g-dev gzip"
chroot_recipe=1
chroot_key=$(printf '%s %s' "$chroot_recipe" "$packages" | sha256sum | cut -c1-12)
root="$cache/kokkos-sid-$chroot_key/root"
mkdir -p "$cache/kokkos-sid-$chroot_key"
timings_chroot="$cache/kokkos-sid-$chroot_key/timings.txt"
if [ ! -f "$root/.clebsch-kokkos-chroot" ]; then
  timings=$timings_chroot
  if ! command -v debootstrap >/dev/null; then
    phase "installing debootstrap (host)"
    apt-get -o Acquire::Check-Valid-Until=false update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >&2
    phase_end
  fi
  rm -rf "$root"
  phase "debootstrap sid (minbase)"
  nice -n 5 debootstrap --variant=minbase sid "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
    { tail -30 "$root.debootstrap.log" >&2; exit 1; }
  phase_end
  phase "apt-get install in the chroot ($(echo $packages | wc -w) packages + dependencies)"
  echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/99clebsch"
  echo 'APT::Install-Recommends "false";' >>"$root/etc/apt/apt.conf.d/99clebsch"
  # shellcheck disable=SC2086
  "${enter[@]}" "$root" /tmp bash -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    nice -n 5 apt-get install -y -qq $(echo $packages) && apt-get clean" \
    >"$root.apt.log" 2>&1 || { tail -30 "$root.apt.log" >&2; exit 1; }
  phase_end
  touch "$root/.clebsch-kokkos-chroot"
fi
# Debian's KokkosTargets.cmake names static archives it does not ship (build-notes.md): empty ones
# satisfy CMake, and nothing links symbols from them. Idempotent, so checked on every call.
for lib in $(grep -oh '_IMPORT_PREFIX}/lib/[^" ]*\.a' "$root"/usr/lib/*/cmake/Kokkos/*.cmake | sort -u); do
  lib="$root/usr/${lib#_IMPORT_PREFIX\}/}"
  [ -e "$lib" ] || ar rc "$lib"
done

# ------------------------------------------------------------------------------------------------
# 2. LAMMPS + KOKKOS (OpenMP) + PLUGIN + MPI, shared, built in the chroot.
# ------------------------------------------------------------------------------------------------
# The source tarball: the same verified download scripts/build-lammps.sh makes (and caches).
tarball=""
for f in lammps_20260704+dfsg.orig.tar.gz; do
  [ -f "$cache/downloads/$f" ] && tarball="$cache/downloads/$f"
done
if [ -z "$tarball" ]; then
  CLEBSCH_LAMMPS_DOWNLOAD_ONLY=1 bash "$repo/scripts/build-lammps.sh" >/dev/null
  tarball="$cache/downloads/lammps_20260704+dfsg.orig.tar.gz"
fi
[ -f "$tarball" ] || { echo "clebsch-kokkos: no LAMMPS 20260704 tarball" >&2; exit 1; }
sha=cddbc45a047416bd48a4a0b87f24a5b61b3446982b74d18cafe619c22b17eb62
echo "$sha  $tarball" | sha256sum --check --status ||
  { echo "clebsch-kokkos: checksum mismatch for $tarball" >&2; exit 1; }

# Only what the tests and a user of clebsch/kk need: KOKKOS, PLUGIN, MPI (OPENMP for /omp
# comparisons is not needed). Kokkos comes from the chroot (Debian's libkokkos-dev).
options="-DBUILD_SHARED_LIBS=ON -DPKG_PLUGIN=ON -DBUILD_MPI=ON -DBUILD_OMP=ON -DPKG_KOKKOS=ON
-DEXTERNAL_KOKKOS=ON -DCMAKE_BUILD_TYPE=Release -DWITH_JPEG=OFF -DWITH_PNG=OFF -DWITH_FFMPEG=OFF
-DWITH_GZIP=ON -DBUILD_TOOLS=OFF"
options=$(echo $options)
# The tests need Kokkos's infrastructure, atom styles, verlet/kk and fix nve/kk, but none of the
# ~70 Kokkos variants of core pair, fix, compute, region and bond styles LAMMPS would compile
# (about half of the KOKKOS package's compile time). Their sources are removed before CMake
# registers styles; CLEBSCH_KOKKOS_ALL_STYLES=1 keeps them (a LAMMPS for production runs).
all_styles=${CLEBSCH_KOKKOS_ALL_STYLES:-0}
lammps_recipe=2
lammps_key=$(printf '%s %s %s %s' "$lammps_recipe" "$chroot_key" "$options" "$all_styles" |
  sha256sum | cut -c1-12)
prefix="$cache/lammps-kokkos-20260704-$lammps_key"
timings="$prefix/timings.txt"
export CCACHE_DIR=$cache/ccache-kokkos CCACHE_MAXSIZE=${CLEBSCH_KOKKOS_CCACHE_SIZE:-3G}
if [ ! -x "$prefix/install/bin/lmp" ] || [ ! -f "$prefix/src/src/lammpsplugin.h" ]; then
  rm -rf "$prefix"; mkdir -p "$prefix/src"
  [ -f "$timings_chroot" ] && cat "$timings_chroot" >"$timings"
  phase "unpacking LAMMPS 20260704"
  tar -xf "$tarball" -C "$prefix/src"
  top=$(dirname "$(dirname "$(find "$prefix/src" -maxdepth 3 -path '*/cmake/CMakeLists.txt' | head -1)")")
  if [ "$top" != "$prefix/src" ]; then
    shopt -s dotglob; mv "$top"/* "$prefix/src/"; rmdir "$top" 2>/dev/null || true
  fi
  if [ "$all_styles" = 0 ]; then
    # Nothing kept includes these (checked for LAMMPS 20260704); pair_kokkos.h and the fixes
    # that Kokkos's own classes use stay.
    find "$prefix/src/src/KOKKOS" -regextype posix-extended \
      -regex '.*/(pair|fix|compute|region|bond|angle|dihedral|improper)_.+_kokkos\.(cpp|h)' \
      ! -name 'fix_nve_kokkos.*' ! -name 'fix_nh_kokkos.*' ! -name 'fix_nh_sphere_kokkos.*' \
      ! -name 'fix_minimize_kokkos.*' ! -name 'fix_property_atom_kokkos.*' -delete
  fi
  phase_end
  phase "configuring LAMMPS (KOKKOS OpenMP) in the chroot"
  # shellcheck disable=SC2086
  CCACHE_BASEDIR=$prefix "${enter[@]}" "$root" "$prefix" cmake -S src/cmake -B build -G Ninja \
    $options -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache \
    -DCMAKE_INSTALL_PREFIX="$prefix/install" -DCMAKE_INSTALL_LIBDIR=lib \
    -DCMAKE_INSTALL_RPATH="$prefix/install/lib" >"$prefix/configure.log" 2>&1 ||
    { tail -40 "$prefix/configure.log" >&2; exit 1; }
  phase_end
  phase "building LAMMPS (KOKKOS OpenMP) with $jobs jobs (about 15 min on 2 cores cold)"
  CCACHE_BASEDIR=$prefix "${enter[@]}" "$root" "$prefix" nice -n 5 cmake --build build \
    -j "$jobs" >"$prefix/build.log" 2>&1 || { tail -40 "$prefix/build.log" >&2; exit 1; }
  "${enter[@]}" "$root" "$prefix" cmake --install build >/dev/null
  phase_end
fi

# Host-side wrappers, rewritten on every call: the chroot's lmp and mpirun with host paths. They
# bind /tmp, the cache, the working directory and CLEBSCH_CHROOT_BINDS (the tests set it to the
# source and build trees). Inside the chroot (mpirun starting ranks) lmp runs the real binary.
mkdir -p "$prefix/bin"
cp -f "$repo/scripts/kokkos-chroot.sh" "$prefix/bin/kokkos-chroot.sh"
cat >"$prefix/bin/lmp" <<EOF
#!/bin/sh
# lmp of LAMMPS+KOKKOS in the Debian sid chroot $root (scripts/build-lammps-kokkos.sh).
if [ -e /.clebsch-kokkos-chroot ]; then exec "$prefix/install/bin/lmp" "\$@"; fi
exec "$prefix/bin/kokkos-chroot.sh" "$root" "\$PWD" "$prefix/install/bin/lmp" "\$@"
EOF
cat >"$prefix/bin/mpirun" <<EOF
#!/bin/sh
# OpenMPI's mpirun of the Debian sid chroot $root (scripts/build-lammps-kokkos.sh).
if [ -e /.clebsch-kokkos-chroot ]; then exec /usr/bin/mpirun --allow-run-as-root "\$@"; fi
exec "$prefix/bin/kokkos-chroot.sh" "$root" "\$PWD" /usr/bin/mpirun --allow-run-as-root "\$@"
EOF
chmod +x "$prefix/bin/lmp" "$prefix/bin/mpirun" "$prefix/bin/kokkos-chroot.sh"

# ------------------------------------------------------------------------------------------------
# 3. The plugin (with clebsch/kk) from this source tree, built in the chroot against that LAMMPS.
# ------------------------------------------------------------------------------------------------
if [ -n "$plugin_build" ]; then
  mkdir -p "$plugin_build"
  plugin_build=$(cd "$plugin_build" && pwd)
  phase "building the Clebsch plugin (clebsch, clebsch/kk) in the chroot"
  # LAMMPS's paths are passed, not found: a build folder configured against an earlier LAMMPS
  # prefix (another build key) must not keep that one's cached library.
  export CLEBSCH_CHROOT_BINDS=$CLEBSCH_CHROOT_BINDS:$plugin_build
  CCACHE_BASEDIR=$repo "${enter[@]}" "$root" "$plugin_build" cmake -S "$repo" -B "$plugin_build" \
    -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DCLEBSCH_BUILD_TESTS=OFF -DCLEBSCH_ENABLE_CUDA=OFF -DCLEBSCH_BUILD_LAMMPS=OFF \
    -DLAMMPS_SOURCE_DIR="$prefix/src/src" -DLAMMPS_ROOT="$prefix/install" \
    -DLAMMPS_LIBRARY="$prefix/install/lib/liblammps.so" \
    -DLAMMPS_EXECUTABLE="$prefix/install/bin/lmp" \
    -DCLEBSCH_LAMMPS_KOKKOS=ON >"$plugin_build/configure-kokkos.log" 2>&1 ||
    { tail -40 "$plugin_build/configure-kokkos.log" >&2; exit 1; }
  CCACHE_BASEDIR=$repo "${enter[@]}" "$root" "$plugin_build" nice -n 5 cmake --build \
    "$plugin_build" -j "$jobs" --target clebschplugin >"$plugin_build/build-kokkos.log" 2>&1 ||
    { tail -60 "$plugin_build/build-kokkos.log" >&2; exit 1; }
  phase_end
fi
echo "$prefix"
exit 0
}
