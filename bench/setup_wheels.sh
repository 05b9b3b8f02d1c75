#!/usr/bin/env bash
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# Installs the benchmark's Python packages on a GPU host without network, from the wheels that
# travel with the working tree (bench/WHEELS.md says what is where and why), each into its own
# --target directory so that none shadows the host's packages for the other benchmarks:
#   WHEELS/peers/*.whl                  -> /tmp/site-peers   (cuEquivariance 0.13 + its ops)
#   WHEELS/peers/openequivariance-*.tar.gz -> /tmp/site-oeq  (source tree; its PyTorch extension
#                                          is JIT-compiled at first import)
#   WHEELS/mace/*.whl                   -> /tmp/site-mace    (mace-torch 0.3.16, e3nn 0.4.4, deps)
#   WHEELS/symmetrix/*.whl              -> /tmp/site-symmetrix (Symmetrix-XL 0.1.1, CUDA backend)
# Source it; it exports PEERS_PYTHONPATH, CUEQ_PYTHONPATH (cuEquivariance alone, without
# OpenEquivariance, whose import compiles), MACE_PYTHONPATH, SYMMETRIX_PYTHONPATH,
# SYMMETRIX_LD_LIBRARY_PATH (the host's CUDA 13 libraries from its nvidia wheels: the Symmetrix
# backend's RUNPATH looks for them beside its own site directory) and OEQ_VERSION (empty when
# absent):
#   source bench/setup_wheels.sh [WHEELS]     (default: <repo>/.whl)
_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_whl=${1:-$_root/.whl}
_site=${CLEBSCH_SITE_DIR:-/tmp}
_pip() { ${PYTHON:-python3} -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
           --upgrade --disable-pip-version-check --target "$@"; }
export PEERS_PYTHONPATH="" CUEQ_PYTHONPATH="" MACE_PYTHONPATH="" OEQ_VERSION=""
export SYMMETRIX_PYTHONPATH="" SYMMETRIX_LD_LIBRARY_PATH=""
# A package set whose wheels did not travel this time but which an earlier call installed on
# this (still warm) host is used as it is: peers whose wheels do not fit one carry together
# (cuEquivariance's and Symmetrix-XL's) then run side by side in a second call.
if compgen -G "$_whl/peers/*.whl" >/dev/null; then
  _pip "$_site/site-peers" "$_whl"/peers/*.whl && PEERS_PYTHONPATH=$_site/site-peers
  CUEQ_PYTHONPATH=$PEERS_PYTHONPATH
elif [[ -d $_site/site-peers/cuequivariance_torch ]]; then
  PEERS_PYTHONPATH=$_site/site-peers CUEQ_PYTHONPATH=$_site/site-peers
fi
_oeq=$(compgen -G "$_whl/peers/openequivariance-*.tar.gz" | head -1)
if [[ -n $_oeq ]]; then
  mkdir -p "$_site/site-oeq"
  tar xzf "$_oeq" -C "$_site/site-oeq" --strip-components=1 &&
    PEERS_PYTHONPATH=${PEERS_PYTHONPATH:+$PEERS_PYTHONPATH:}$_site/site-oeq
  OEQ_VERSION=$(basename "$_oeq" .tar.gz); OEQ_VERSION=${OEQ_VERSION#openequivariance-}
  # The extension's build cache; a second run on the same host skips the compile.
  export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$_site/torch-extensions}
fi
if compgen -G "$_whl/mace/*.whl" >/dev/null; then
  _pip "$_site/site-mace" "$_whl"/mace/*.whl && MACE_PYTHONPATH=$_site/site-mace
elif [[ -d $_site/site-mace/mace ]]; then
  MACE_PYTHONPATH=$_site/site-mace
fi
if compgen -G "$_whl/symmetrix/*.whl" >/dev/null; then
  _pip "$_site/site-symmetrix" "$_whl"/symmetrix/*.whl && SYMMETRIX_PYTHONPATH=$_site/site-symmetrix
  SYMMETRIX_LD_LIBRARY_PATH=$(${PYTHON:-python3} -c '
import glob, os, nvidia
pat = os.path.join("**", "lib", "lib*.so.13*")
print(":".join(sorted({os.path.dirname(f) for p in nvidia.__path__
                       for f in glob.glob(os.path.join(p, pat), recursive=True)})))' 2>/dev/null)
fi
echo "setup_wheels: peers '${PEERS_PYTHONPATH}' (OpenEquivariance ${OEQ_VERSION:-absent}), mace" \
     "'${MACE_PYTHONPATH}', symmetrix '${SYMMETRIX_PYTHONPATH}' (CUDA libraries" \
     "'${SYMMETRIX_LD_LIBRARY_PATH}')" >&2
unset _root _whl _site _oeq
unset -f _pip
