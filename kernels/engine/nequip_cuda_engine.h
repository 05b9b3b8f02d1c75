// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The NequIP engine on the device layer (cuda_engine.h): the host engine's sequence
// (src/engine/nequip_engine.cpp) with every step on the device, the same results to rounding.
// Reached through make_cuda_engine; declared here for the factory.
#pragma once

#include <memory>

#include "clebsch/cuda/engine/cuda_engine.h"

namespace clebsch::cuda {

/// The CUDA engine of a NequIP model (model::Arch::kNequip).
/// @throws Error as NequipEngine's constructor for an unsupported model; CudaError.
std::unique_ptr<CudaEngine> make_nequip_cuda_engine(const model::Model& model, Precision precision,
                                                    const CudaEngineOptions& options);

}  // namespace clebsch::cuda
