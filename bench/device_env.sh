#!/usr/bin/env bash
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# On the GPU host, makes a folder staged by bench/make_carry.sh usable: the library on
# LD_LIBRARY_PATH, the kernel cache unpacked into /tmp/clebsch-kcache and named by
# CLEBSCH_KERNEL_CACHE (kernels not in it are compiled there and added).
#   source bench/device_env.sh CARRY_DIR
_carry=$(cd "${1:?usage: source bench/device_env.sh CARRY_DIR}" && pwd)
export LD_LIBRARY_PATH=$_carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p /tmp/clebsch-kcache
if [[ -f $_carry/kcache.tar.xz ]]; then
  tar xJf "$_carry/kcache.tar.xz" -C /tmp/clebsch-kcache
fi
mkdir -p /tmp/clebsch-kcache/kcache
export CLEBSCH_KERNEL_CACHE=/tmp/clebsch-kcache/kcache
echo "device_env: $(find "$CLEBSCH_KERNEL_CACHE" -type f | wc -l) cached kernel modules," \
     "library from $_carry/lib" >&2
unset _carry
