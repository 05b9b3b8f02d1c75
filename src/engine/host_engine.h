// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The host (C++/OpenMP) engine for any exported model: picks the MACE or NequIP implementation
// by the model's architecture. Callers hold only the Engine interface.
#pragma once

#include <memory>
#include <string>

#include <string>
#include <utility>
#include <vector>

#include "clebsch/engine/engine.h"
#include "clebsch/model/model.h"

namespace clebsch {

/// An engine for @p model on the host. @throws Error if the model cannot run at @p precision, or
/// needs a per-structure input (MACE embedding_specs: total_charge, total_spin, ...) that
/// @p structure_inputs lacks.
std::unique_ptr<Engine> make_host_engine(
    const model::Model& model, Precision precision,
    const std::vector<std::pair<std::string, double>>& structure_inputs = {});

}  // namespace clebsch
