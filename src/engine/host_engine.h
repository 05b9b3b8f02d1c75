// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The host (C++/OpenMP) engine for any exported model: picks the MACE or NequIP implementation
// by the model's architecture. Callers hold only the Engine interface.
#pragma once

#include <memory>
#include <string>

#include "clebsch/engine/engine.h"
#include "clebsch/model/model.h"

namespace clebsch {

/// An engine for @p model on the host. @throws Error if the model cannot run at @p precision.
std::unique_ptr<Engine> make_host_engine(const model::Model& model, Precision precision);

}  // namespace clebsch
