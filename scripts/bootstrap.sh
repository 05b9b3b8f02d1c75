#!/usr/bin/env bash
# Clebsch: everything both README commands need first, on a fresh Debian 12 machine or a warm one:
# Debian packages, the Python venvs, LAMMPS (built once from Debian's source package and cached,
# unless LAMMPS_SOURCE_DIR and LAMMPS_ROOT point to yours), then Clebsch itself in ./build.
# Caches live under $CLEBSCH_CACHE (default ~/.cache/clebsch), never in the work tree.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${CLEBSCH_CACHE:-$HOME/.cache/clebsch}
build=${CLEBSCH_BUILD_DIR:-$root/build}
mkdir -p "$cache"

step() { printf '\n== %s\n' "$*" >&2; }

step "Debian packages"
bash "$root/scripts/install-system-packages.sh"

# LAMMPS with KOKKOS (OpenMP) in a Debian sid chroot and the plugin with clebsch/kk built there,
# for the /kk tests (scripts/build-lammps-kokkos.sh; needs root, as CI has). It runs in the
# background while the Python environments download (network-bound), and is waited for before
# Clebsch is configured. CLEBSCH_KOKKOS=0 skips it; so does a non-root user, with a warning.
kokkos_args=() kokkos_pid=""
if [ "${CLEBSCH_KOKKOS:-1}" != 0 ] && [ "$(id -u)" -ne 0 ]; then
  echo "clebsch: WARNING: not root: no Debian sid chroot, so the clebsch/kk tests are not set up" >&2
elif [ "${CLEBSCH_KOKKOS:-1}" != 0 ]; then
  step "LAMMPS+KOKKOS (OpenMP, Debian sid chroot) and the clebsch/kk plugin, in the background"
  CLEBSCH_LAMMPS_DOWNLOAD_ONLY=1 bash "$root/scripts/build-lammps.sh" >/dev/null
  mkdir -p "$build"
  bash "$root/scripts/build-lammps-kokkos.sh" "$build/kokkos-plugin" \
    >"$build/kokkos-build.out" 2>"$build/kokkos-build.err" &
  kokkos_pid=$!
  # Should a later step fail, do not leave the background build behind.
  trap '[ -n "$kokkos_pid" ] && kill "$kokkos_pid" 2>/dev/null || true' EXIT
fi

step "Python environments (e3nn, mace-torch, nequip)"
bash "$root/scripts/setup-python.sh"

if [ -z "${LAMMPS_SOURCE_DIR:-}" ] || [ -z "${LAMMPS_ROOT:-}" ]; then
  step "LAMMPS (Debian source package, PLUGIN + MPI, cached)"
  prefix=$(bash "$root/scripts/build-lammps.sh" | tail -n 1)
  LAMMPS_SOURCE_DIR=$prefix/src/src
  LAMMPS_ROOT=$prefix/install
fi

if [ -n "$kokkos_pid" ]; then
  step "LAMMPS+KOKKOS (OpenMP, Debian sid chroot) and the clebsch/kk plugin: waiting for it"
  if ! wait "$kokkos_pid"; then
    cat "$build/kokkos-build.err" >&2
    echo "clebsch: scripts/build-lammps-kokkos.sh failed (log above)" >&2
    exit 1
  fi
  kokkos_pid=""
  grep 'clebsch-kokkos: .*: [0-9]* s$' "$build/kokkos-build.err" >&2 || true
  kprefix=$(tail -n 1 "$build/kokkos-build.out")
  kokkos_args=(-DCLEBSCH_KOKKOS_LMP="$kprefix/bin/lmp" -DCLEBSCH_KOKKOS_MPIEXEC="$kprefix/bin/mpirun"
               -DCLEBSCH_KOKKOS_PLUGIN="$build/kokkos-plugin/pair_style/libclebschplugin.so")
fi

step "Clebsch"
export CCACHE_DIR=${CCACHE_DIR:-$cache/ccache} CCACHE_BASEDIR=$root
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# CLEBSCH_REQUIRE_ALL=1 (CI): a test suite whose dependency is missing fails the configure instead
# of being skipped. Passed on every call, so that an earlier value does not stick in the cache.
require_all=OFF
[ "${CLEBSCH_REQUIRE_ALL:-0}" != 0 ] && require_all=ON
# CLEBSCH_CMAKE_ARGS: more configure options, e.g. -DCLEBSCH_ENABLE_CUDA=OFF.
read -r -a extra_args <<<"${CLEBSCH_CMAKE_ARGS:-}"
# CLEBSCH_TARGETS: what to build (default: everything, tests included); setup.sh asks for the
# plugin only (with the CUDA engine it opens, when there is one).
read -r -a targets <<<"${CLEBSCH_TARGETS:-all}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
      -DCLEBSCH_PYTHON="$cache/venv-e3nn/bin/python" \
      -DCLEBSCH_PYTHON_MACE="$cache/venv-mace/bin/python" \
      -DCLEBSCH_PYTHON_NEQUIP="$cache/venv-nequip/bin/python" \
      -DCLEBSCH_REQUIRE_ALL=$require_all \
      -DLAMMPS_SOURCE_DIR="$LAMMPS_SOURCE_DIR" -DLAMMPS_ROOT="$LAMMPS_ROOT" "${kokkos_args[@]}" \
      "${extra_args[@]}" >&2
cmake --build "$build" -j "${CLEBSCH_JOBS:-$(nproc)}" --target "${targets[@]}" >&2

# build/bin/lmp: the LAMMPS this build uses, so that `lmp -in ...` works as the README and
# examples/ write it once build/bin is on PATH (setup.sh prints the line that does it).
lmp_exe=$(grep -E '^LAMMPS_EXECUTABLE:' "$build/CMakeCache.txt" | cut -d= -f2-)
if [ -n "$lmp_exe" ]; then
  mkdir -p "$build/bin"
  {
    echo '#!/bin/sh'
    echo "# lmp of the LAMMPS that $build was configured against (scripts/bootstrap.sh)."
    echo "exec \"$lmp_exe\" \"\$@\""
  } >"$build/bin/lmp"
  chmod +x "$build/bin/lmp"
fi
