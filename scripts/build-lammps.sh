#!/usr/bin/env bash
# Clebsch: get LAMMPS from Debian's source package (checksum verified) and build it as a shared
# library with PLUGIN and MPI, cached under $CLEBSCH_CACHE (default ~/.cache/clebsch).
# Prints the install prefix on its last line. Reuses a finished build when one is present.
# Used only when the user does not point the build at a LAMMPS of their own (see README).
set -euo pipefail

cache=${CLEBSCH_CACHE:-$HOME/.cache/clebsch}
jobs=${CLEBSCH_JOBS:-$(nproc)}
mkdir -p "$cache/downloads"

# version | orig tarball | sha256 (from Debian's .dsc for these uploads)
candidates=(
  "20260704+dfsg|lammps_20260704+dfsg.orig.tar.gz|cddbc45a047416bd48a4a0b87f24a5b61b3446982b74d18cafe619c22b17eb62"
  "20250204+dfsg.1|lammps_20250204+dfsg.1.orig.tar.xz|3671165bd52fad36734e0a9136c5bc5ecb225e03988f8c89aa13366a8b53b1c7"
)

verify() { echo "$2  $1" | sha256sum --check --status; }

tarball="" version=""
for c in "${candidates[@]}"; do
  IFS='|' read -r ver file sum <<<"$c"
  path="$cache/downloads/$file"
  if [ -f "$path" ] && verify "$path" "$sum"; then tarball=$path; version=$ver; break; fi
  rm -f "$path"
  echo "clebsch: downloading LAMMPS $ver source from Debian's archive" >&2
  tmp=$(mktemp -d)
  # Only the orig tarball matters; the .dsc/.debian.tar.xz may be missing from the mirror.
  full=$(apt-cache showsrc lammps 2>/dev/null | awk '/^Version:/{print $2}' | grep -F "$ver-" | head -1 || true)
  [ -n "$full" ] && (cd "$tmp" && apt-get source --download-only "lammps=$full" >/dev/null 2>&1 || true)
  if [ -f "$tmp/$file" ] && verify "$tmp/$file" "$sum"; then
    mv "$tmp/$file" "$path"; rm -rf "$tmp"; tarball=$path; version=$ver; break
  fi
  rm -rf "$tmp"
  echo "clebsch: LAMMPS $ver not available or checksum mismatch; trying the next version" >&2
done
[ -n "$tarball" ] || { echo "clebsch: could not obtain a verified LAMMPS source tarball" >&2; exit 1; }
# scripts/build-lammps-kokkos.sh needs only the verified tarball.
if [ -n "${CLEBSCH_LAMMPS_DOWNLOAD_ONLY:-}" ]; then echo "$tarball"; exit 0; fi

# The build key changes when the source or the options below change.
options="-DBUILD_SHARED_LIBS=ON -DPKG_PLUGIN=ON -DBUILD_MPI=ON -DBUILD_OMP=ON -DLAMMPS_EXCEPTIONS=ON -DCMAKE_BUILD_TYPE=Release -DWITH_JPEG=OFF -DWITH_PNG=OFF -DWITH_FFMPEG=OFF -DWITH_GZIP=ON -DPKG_MOLECULE=ON -DPKG_EXTRA-COMPUTE=ON"
# recipe: bump when this script's build steps change in a way the options do not show.
recipe=2
key=$(printf '%s %s %s %s' "$recipe" "$version" "$options" "$(g++ -dumpfullversion)" | sha256sum | cut -c1-12)
prefix="$cache/lammps-$version-$key"
if [ -x "$prefix/install/bin/lmp" ] && [ -f "$prefix/src/src/lammpsplugin.h" ]; then
  echo "$prefix"; exit 0
fi

rm -rf "$prefix"; mkdir -p "$prefix/src"
echo "clebsch: unpacking $tarball" >&2
tar -xf "$tarball" -C "$prefix/src"
# The 20260704 tarball has no top-level folder, 20250204's has one: find the tree either way.
top=$(dirname "$(find "$prefix/src" -maxdepth 3 -path '*/cmake/CMakeLists.txt' | head -1)")
top=$(dirname "$top")
if [ "$top" != "$prefix/src" ]; then
  shopt -s dotglob; mv "$top"/* "$prefix/src/"; rmdir "$top" 2>/dev/null || true
fi

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
export CCACHE_DIR=${CCACHE_DIR:-$cache/ccache} CCACHE_BASEDIR=$prefix
echo "clebsch: building LAMMPS $version with $jobs jobs (about 6 minutes on 2 cores cold)" >&2
# shellcheck disable=SC2086
cmake -S "$prefix/src/cmake" -B "$prefix/build" -G Ninja $options "${launcher[@]}" \
      -DCMAKE_INSTALL_PREFIX="$prefix/install" -DCMAKE_INSTALL_LIBDIR=lib \
      -DCMAKE_INSTALL_RPATH="$prefix/install/lib" >"$prefix/configure.log" 2>&1 ||
  { tail -40 "$prefix/configure.log" >&2; exit 1; }
cmake --build "$prefix/build" -j "$jobs" >"$prefix/build.log" 2>&1 || { tail -40 "$prefix/build.log" >&2; exit 1; }
cmake --install "$prefix/build" >/dev/null
echo "$prefix"
