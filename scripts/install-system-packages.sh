#!/usr/bin/env bash
# Clebsch: install the Debian packages the build and the tests need (idempotent).
# Also enables deb-src entries for Debian sid and trixie, from which LAMMPS's source comes.
set -euo pipefail

packages=(cmake ninja-build g++ gfortran ccache pkg-config git xz-utils ca-certificates
          libopenmpi-dev openmpi-bin nlohmann-json3-dev libgtest-dev libgmock-dev
          python3 python3-venv python3-dev zlib1g-dev)

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

src_list=/etc/apt/sources.list.d/clebsch-deb-src.sources
need_update=0
if [ ! -f "$src_list" ]; then
  # Same archive and keyring as the machine's Debian entries; only source packages.
  "${sudo_cmd[@]}" tee "$src_list" >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: sid trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  need_update=1
fi
if [ ${#missing[@]} -gt 0 ] || [ $need_update -eq 1 ]; then
  "${sudo_cmd[@]}" apt-get -o Acquire::Check-Valid-Until=false update -qq
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "clebsch: installing Debian packages: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
