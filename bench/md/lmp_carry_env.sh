#!/usr/bin/env bash
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# On the GPU host, makes a folder staged by bench/md/make_lmp_carry.sh usable: its libraries on
# LD_LIBRARY_PATH, its orted on PATH and Open MPI pointed at its components and help files.
#   source bench/md/lmp_carry_env.sh CARRY_DIR
_c=$(cd "${1:?usage: source bench/md/lmp_carry_env.sh CARRY_DIR}" && pwd)
export LD_LIBRARY_PATH=$_c/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$_c/bin:$PATH
if [[ -d $_c/openmpi ]]; then
  export OMPI_MCA_mca_base_component_path=$_c/openmpi/components
  export OPAL_PKGDATADIR=$_c/openmpi/share
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # One rank, no network: keep Open MPI off the interfaces a sandbox may not have.
  export OMPI_MCA_btl=self,vader OMPI_MCA_plm=isolated OMPI_MCA_pml=ob1
fi
unset _c
