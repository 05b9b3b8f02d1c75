// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The MACE engine on the device layer (cuda_engine.h): the host engine's sequence
// (src/engine/mace_engine.cpp) with every step on the device. Reached through make_cuda_engine;
// declared here for the factory.
#pragma once

#include <memory>

#include "clebsch/cuda/engine/cuda_engine.h"

namespace clebsch::cuda {

/// The CUDA engine of a MACE model (model::Arch::kMace).
/// @throws Error as MaceEngine's constructor for an unsupported model; CudaError.
std::unique_ptr<CudaEngine> make_mace_cuda_engine(const model::Model& model, Precision precision,
                                                  const CudaEngineOptions& options);

}  // namespace clebsch::cuda
