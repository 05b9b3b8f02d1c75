// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The per-structure embedding of MACE models with mace-torch embedding_specs (FORMAT.md §5,
// model::MaceEmbedding; e.g. OMOL's total charge and spin): from the structure's inputs, the row
// act(concat_f emb_f(input_f)) P that every atom's h0 gains. It depends on no position, so each
// engine evaluates it once, at construction, in float64, and adds it to its per-species h0 table
// (the host engine in mace_engine_nonlinear.cpp, the CUDA engine on the device); one function so
// that both refuse a missing or out-of-range input with the same message.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "clebsch/model/model.h"

namespace clebsch {

/// The embedding row (E.dim_out values, after E.project_activation) for @p inputs (name, value;
/// names the model does not use are ignored). A categorical feature takes the row
/// trunc(value + offset) of its table (torch's .long()), a continuous one its MLP of the value.
/// @throws Error naming the input and the pair style keyword that gives it when one is missing,
///   not finite, or outside a categorical feature's classes.
std::vector<double> mace_embedding_row(const model::MaceEmbedding& E,
                                       const std::vector<std::pair<std::string, double>>& inputs);

}  // namespace clebsch
