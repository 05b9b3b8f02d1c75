// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The device source of one MACE model's own kernels (templates/mace_kernels.cuh.in): a prelude
// generated from the model (precisions, sizes, radial and ZBL parameters printed as exact
// float64 literals, the harmonics recursion table), after the generic kernels and the argument
// headers. Deterministic text for a given model and precision, so the module cache hits on every
// later start.
#pragma once

#include <string>
#include <vector>

#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/engine/engine.h"
#include "clebsch/model/model.h"

namespace clebsch::cuda {

/// The full module source: device_args.h, generic_kernels.cuh.in, mace_device_args.h, the
/// model's prelude and mace_kernels.cuh.in. @p max_d bounds the contraction's D (the per-thread
/// gradient array of the backward). @throws ModelFormatError for a model without MACE data.
std::string mace_kernels_source(const model::Model& model, Precision precision, int max_d);
/// The generic kernels' specs and the MACE kernels' specs of that module.
std::vector<KernelSpec> mace_kernel_specs();

}  // namespace clebsch::cuda
