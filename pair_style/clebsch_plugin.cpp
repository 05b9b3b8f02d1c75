// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Registers Clebsch's styles with LAMMPS when the plugin is loaded (`plugin load
// libclebschplugin.so`). Only registration lives here. clebsch/kk (and /kk/device, /kk/host) are
// registered only when the plugin was built against a LAMMPS with KOKKOS (CLEBSCH_WITH_KOKKOS).

#include "lammpsplugin.h"
#include "version.h"

#include "clebsch_info_command.h"
#include "pair_clebsch.h"
#ifdef CLEBSCH_WITH_KOKKOS
#include "pair_clebsch_kokkos.h"
#endif

using namespace LAMMPS_NS;

static Command *clebsch_info_creator(LAMMPS *lmp)
{
  return new ClebschInfo(lmp);
}

static Pair *pair_clebsch_creator(LAMMPS *lmp)
{
  return new PairClebsch(lmp);
}

#ifdef CLEBSCH_WITH_KOKKOS
static Pair *pair_clebsch_kokkos_device_creator(LAMMPS *lmp)
{
  return new PairClebschKokkos<LMPDeviceType>(lmp);
}

static Pair *pair_clebsch_kokkos_host_creator(LAMMPS *lmp)
{
  return new PairClebschKokkos<LMPHostType>(lmp);
}
#endif

extern "C" void lammpsplugin_init(void *lmp, void *handle, void *regfunc)
{
  auto register_plugin = (lammpsplugin_regfunc) regfunc;
  lammpsplugin_t plugin;

  plugin.version = LAMMPS_VERSION;
  plugin.style = "command";
  plugin.name = "clebsch_info";
  plugin.info = "Clebsch build information " CLEBSCH_VERSION;
  plugin.author = "Clebsch developers";
  plugin.creator.v1 = (lammpsplugin_factory1 *) &clebsch_info_creator;
  plugin.handle = handle;
  (*register_plugin)(&plugin, lmp);

  plugin.style = "pair";
  plugin.name = "clebsch";
  plugin.info = "Clebsch MACE/NequIP pair style " CLEBSCH_VERSION;
  plugin.creator.v1 = (lammpsplugin_factory1 *) &pair_clebsch_creator;
  (*register_plugin)(&plugin, lmp);

#ifdef CLEBSCH_WITH_KOKKOS
  plugin.name = "clebsch/kk";
  plugin.info = "Clebsch MACE/NequIP pair style for KOKKOS " CLEBSCH_VERSION;
  plugin.creator.v1 = (lammpsplugin_factory1 *) &pair_clebsch_kokkos_device_creator;
  (*register_plugin)(&plugin, lmp);
  plugin.name = "clebsch/kk/device";
  (*register_plugin)(&plugin, lmp);
  plugin.name = "clebsch/kk/host";
  plugin.creator.v1 = (lammpsplugin_factory1 *) &pair_clebsch_kokkos_host_creator;
  (*register_plugin)(&plugin, lmp);
#endif
}
