// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Implementation of the `clebsch_info` command (see clebsch_info_command.h).

#include "clebsch_info_command.h"

#include "comm.h"
#include "error.h"

#include "clebsch/o3/irreps.h"

#include <exception>

using namespace LAMMPS_NS;

void ClebschInfo::command(int narg, char **arg)
{
  if (narg > 1) error->all(FLERR, "Illegal clebsch_info command: expected at most one argument");
  std::string line =
      fmt::format("Clebsch {}: native MACE/NequIP, l <= {}\n", CLEBSCH_VERSION, clebsch::kMaxL);
  if (narg == 1) {
    // Parsing an irreps string through the core library proves the plugin links it correctly,
    // and gives users a quick way to check an irreps specification.
    try {
      const clebsch::Irreps irreps(arg[0]);
      line += fmt::format("  irreps {}: dim {}, lmax {}\n", irreps.str(), irreps.dim(),
                          irreps.dim() == 0 ? 0 : irreps.lmax());
    } catch (std::exception &e) {
      error->all(FLERR, "clebsch_info: {}", e.what());
    }
  }
  if (comm->me == 0) utils::logmesg(lmp, line);
}
