#!/usr/bin/env bash
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# Fetches, on a machine with network, the Python packages the benchmarks need on a GPU host that
# has none (Python 3.12, manylinux x86_64, PyTorch 2.11 + CUDA 13 and e3nn 0.6 already there),
# into WHEELS (default <repo>/.whl, git-ignored; bench/WHEELS.md says what and why):
#   WHEELS/peers  cuEquivariance 0.13 (+ ops for CUDA 13, + platformdirs), OpenEquivariance 0.7
#                 (a source distribution only); the cuEquivariance wheels are re-compressed
#                 (zip LZMA instead of deflate, same files, RECORD hashes still match: 74 MB ->
#                 29 MB) so that the peers fit the 64 MiB that travels with one device command;
#   WHEELS/mace   mace-torch 0.3.16, the e3nn 0.4.4 it pins, and its dependencies the host lacks;
#   WHEELS/symmetrix  Symmetrix-XL 0.1.1: the frontend with its CPU backend (symmetrix-xl) and
#                 its CUDA 13 sm_90 backend (symmetrix-xl-cuda13-sm90), re-compressed the same
#                 way (37 MB -> 19 MB). The CUDA runtime, cuBLAS and NVRTC wheels the backend
#                 declares are the host's own (PyTorch's); Kokkos is compiled into the backend.
# The originals stay in WHEELS/peers-src and WHEELS/symmetrix-src (not to be carried).
#
#   bench/fetch_wheels.sh [WHEELS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
whl=${1:-$root/.whl}
python=${PYTHON:-python3}
mkdir -p "$whl/peers" "$whl/peers-src" "$whl/mace" "$whl/symmetrix" "$whl/symmetrix-src"
platforms=()
for p in manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 \
         manylinux_2_17 manylinux2014; do
  platforms+=(--platform "${p}_x86_64")
done
get() {  # get DIR PACKAGE==VERSION...
  local dir=$1
  shift
  "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platforms[@]}" -d "$dir" "$@"
}
recompress() {  # recompress SRC_DIR DST_DIR GLOB: each wheel with LZMA (same members and modes)
  "$python" - "$@" <<'EOF'
import pathlib
import sys
import zipfile

src, dst, pattern = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
for wheel in sorted(src.glob(pattern)):
    out = dst / wheel.name
    with zipfile.ZipFile(wheel) as zi, zipfile.ZipFile(out, "w", zipfile.ZIP_LZMA) as zo:
        for info in zi.infolist():
            member = zipfile.ZipInfo(info.filename, info.date_time)
            member.external_attr = info.external_attr
            zo.writestr(member, zi.read(info), compress_type=zipfile.ZIP_LZMA)
    print(f"{wheel.name}: {wheel.stat().st_size / 1e6:.1f} MB -> {out.stat().st_size / 1e6:.1f} MB")
EOF
}

get "$whl/peers-src" cuequivariance==0.13.0 cuequivariance-torch==0.13.0 \
  cuequivariance-ops-torch-cu13==0.13.0 cuequivariance-ops-cu13==0.13.0
get "$whl/peers" platformdirs==4.14.8  # cuequivariance_ops imports it; the host image lacks it
"$python" -m pip download -q --no-deps --no-binary=:all: -d "$whl/peers" openequivariance==0.7.0
recompress "$whl/peers-src" "$whl/peers" "cuequivariance*.whl"

get "$whl/mace" mace-torch==0.3.16 e3nn==0.4.4 ase==3.29.0 torch-ema==0.3 prettytable==3.18.0 \
  wcwidth==0.9.4 matscipy==1.3.1 configargparse==1.9.0 gitpython==3.2.1 gitdb==4.0.12 \
  smmap==5.0.3 lmdb==3.0.0 orjson==3.13.0
# python-hostlist is published as a source distribution only: build its (pure-Python) wheel.
"$python" -m pip wheel -q --no-deps -w "$whl/mace" python-hostlist==2.3.0

# Symmetrix-XL: the CUDA backend pins the frontend of the same version (both manylinux_2_28).
get "$whl/symmetrix-src" symmetrix-xl==0.1.1 symmetrix-xl-cuda13-sm90==0.1.1
recompress "$whl/symmetrix-src" "$whl/symmetrix" "symmetrix*.whl"
du -sh "$whl/peers" "$whl/mace" "$whl/symmetrix"
