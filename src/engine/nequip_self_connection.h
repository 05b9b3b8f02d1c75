// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// NequIP's self-connection (FORMAT.md §6) as the NequIP engines take it, written once for the
// host engine (nequip_engine_ops.h, SelfConnection) and the CUDA engine
// (kernels/engine/nequip_device_ops.h, NequipDeviceSelfConnection): a uvw
// FullyConnectedTensorProduct of the features with the type embedding. The embedding takes one
// of num_species values, so its sum over the embedding's channels is done at load time into one
// matrix per species and path. Both engines check the product with these messages and contract
// it here in float64, in one order, before rounding to their own type, so they start from the
// same matrices.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "clebsch/model/model.h"
#include "clebsch/support/error.h"

namespace clebsch::nequip_ops {

/// @throws Error naming @p where unless @p m has its own weights and a second input of the type
///   embedding's dimension @p embedding_dim.
inline void check_self_connection(const model::TensorProduct& m, int embedding_dim,
                                  const std::string& where) {
  const TensorProduct& tp = m.descriptor;
  if (m.external_weights || m.weight.size() != static_cast<std::size_t>(tp.weight_numel()))
    throw Error(
        "NequipEngine: " + where + " must have its own " + std::to_string(tp.weight_numel()) +
        " weights, has " +
        (m.external_weights ? std::string("external weights") : std::to_string(m.weight.size())));
  if (tp.dim_in2() != embedding_dim)
    throw Error("NequipEngine: " + where + " second input " + tp.irreps_in2().str() +
                " does not match the type embedding of dimension " + std::to_string(embedding_dim));
}

/// @throws Error naming @p where unless path @p p is weighted uvw with a scalar second input.
inline void check_self_connection_path(const TensorProductPath& p, const std::string& where) {
  if (p.ins.mode() != ConnectionMode::kUvw || !p.ins.has_weight() || p.ir2.l() != 0)
    throw Error("NequipEngine: " + where + " instruction " + p.ins.str() +
                " is not a weighted uvw path with a scalar second input");
}

/// K_s[u][w] = sum_v W[u, v, w] a_s[v] of path @p p of @p m, summed over v in order: the
/// [num_species][mul1][mul_out] matrices of the path, with a_s row s of @p type_embedding
/// ([num_species][embedding_dim]).
inline std::vector<double> contract_type_embedding(const model::TensorProduct& m,
                                                   const TensorProductPath& p,
                                                   const std::vector<double>& type_embedding,
                                                   int num_species, int embedding_dim) {
  std::vector<double> K;
  K.reserve(static_cast<std::size_t>(num_species) * p.mul1 * p.mul_out);
  for (int s = 0; s < num_species; ++s)
    for (int u = 0; u < p.mul1; ++u)
      for (int w = 0; w < p.mul_out; ++w) {
        double acc = 0;
        for (int v = 0; v < p.mul2; ++v)
          acc += m.weight[p.weight_offset + (static_cast<std::size_t>(u) * p.mul2 + v) * p.mul_out +
                          w] *
                 type_embedding[static_cast<std::size_t>(s) * embedding_dim + p.offset2 + v];
        K.push_back(acc);
      }
  return K;
}

}  // namespace clebsch::nequip_ops
