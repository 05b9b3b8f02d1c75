// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Chooses the host engine implementation by the model's architecture.
#include "clebsch/engine/host_engine.h"

#include "clebsch/engine/mace_engine.h"
#include "clebsch/engine/nequip_engine.h"
#include "clebsch/support/error.h"

namespace clebsch {

std::unique_ptr<Engine> make_host_engine(
    const model::Model& model, Precision precision,
    const std::vector<std::pair<std::string, double>>& structure_inputs) {
  switch (model.arch) {
    case model::Arch::kMace: {
      MaceEngineOptions options;
      options.structure_inputs = structure_inputs;
      return std::make_unique<MaceEngine>(model, precision, options);
    }
    case model::Arch::kNequip:
      return std::make_unique<NequipEngine>(model, precision);
  }
  throw Error("make_host_engine: unknown model architecture");
}

}  // namespace clebsch
