// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Run-time head selection for multi-head MACE models (FORMAT.md §5 heads): a model file holds
// every head, and the reader leaves the default one in the fields the engines read
// (model::Mace::readouts, atomic_energies, scale, shift, embedding->readout). select_head() puts
// another head there, so that neither the host nor the CUDA engine knows about heads: an engine
// built from the model evaluates the chosen head. NequIP models have one output and no heads.
#pragma once

#include <string>
#include <vector>

#include "clebsch/model/model.h"

namespace clebsch::model {

/// Names of the model's heads in file order; empty for NequIP.
std::vector<std::string> head_names(const Model& model);

/// The head the engines evaluate now (the default head after read_model()); empty for NequIP.
std::string active_head(const Model& model);

/// The head names for a message: "pbe, r2scan (default r2scan)".
std::string describe_heads(const Model& model);

/// Makes head @p name the one the engines evaluate; an empty name is the model's default head.
/// @throws Error naming the model's heads when @p name is not one of them, or when the model is a
///   NequIP model and @p name is not empty.
void select_head(Model& model, const std::string& name);

}  // namespace clebsch::model
