// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The `clebsch_info` command: prints what this plugin build contains (version, largest supported
// l, the Wigner-3j convention). It gives users a one-line check that `plugin load` worked, and
// gives the tests a real command whose output depends on the core library.

#ifdef COMMAND_CLASS
// clang-format off
CommandStyle(clebsch_info,ClebschInfo);
// clang-format on
#else

#ifndef LMP_CLEBSCH_INFO_COMMAND_H
#define LMP_CLEBSCH_INFO_COMMAND_H

#include "command.h"

namespace LAMMPS_NS {

class ClebschInfo : public Command {
 public:
  ClebschInfo(class LAMMPS *lmp) : Command(lmp) {}
  void command(int narg, char **arg) override;
};

}    // namespace LAMMPS_NS

#endif
#endif
