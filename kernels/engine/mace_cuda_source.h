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
#include "clebsch/cuda/engine/mace_contraction_tables.h"
#include "clebsch/cuda/engine/mace_symcon_source.h"
#include "clebsch/engine/engine.h"
#include "clebsch/model/model.h"

namespace clebsch::cuda {

/// The full module source: device_args.h, generic_kernels.cuh.in, mace_device_args.h, the
/// model's prelude, mace_kernels.cuh.in and each layer's symmetric contraction
/// (mace_symcon_source.h). @throws ModelFormatError for a model without MACE data.
std::string mace_kernels_source(const model::Model& model, Precision precision);
/// The generic kernels' specs and the MACE kernels' specs of that module.
std::vector<KernelSpec> mace_kernel_specs(const model::Model& model);

/// Layer @p layer's contraction tables, as the module's kernels print them and the engine
/// uploads their weights.
ContractionTables mace_contraction_tables(const model::Model& model, int layer);
/// Where layer @p layer's contraction reads A: the interaction linear's output irreps.
SymconLayout mace_symcon_layout(const model::Model& model, int layer, const ContractionTables& t);

}  // namespace clebsch::cuda
