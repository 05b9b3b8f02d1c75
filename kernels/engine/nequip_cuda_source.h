// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The device source of one NequIP model's own kernels (templates/nequip_kernels.cuh.in): a
// prelude generated from the model (precisions, sizes, the harmonics recursion table, radial and
// ZBL parameters printed as exact float64 literals) after the argument headers. Deterministic
// text for a given model and precision, so the module cache hits on every later start.
#pragma once

#include <string>
#include <vector>

#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/engine/engine.h"
#include "clebsch/model/model.h"

namespace clebsch::cuda {

/// The full module source: device_args.h, nequip_device_args.h, the model's prelude and
/// nequip_kernels.cuh.in. @throws ModelFormatError for a model without NequIP data.
std::string nequip_kernels_source(const model::Model& model, Precision precision);
/// The KernelSpecs of that module.
std::vector<KernelSpec> nequip_kernel_specs();

}  // namespace clebsch::cuda
