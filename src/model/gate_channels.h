// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// A model::Gate (FORMAT.md §4.5) checked and laid out by channel, for the engines that evaluate
// it one channel at a time (the NequIP host engine's GateOp and the CUDA engine's
// DeviceGate): both call check_gate, so a gate either engine cannot evaluate fails with the
// same message in the same order of checks, and both read the same layout. The reader
// (model_reader.h) has checked the gate against e3nn's irreps; these are the checks the
// evaluation itself relies on (index ranges, one activation per scalar block, one gate per gated
// irrep copy, the output dimension), so that an engine built from a hand-made model cannot index
// outside its rows.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "clebsch/model/model.h"
#include "clebsch/support/error.h"

namespace clebsch::model {

/// A Gate by channel, each activation in the engine's own form @p Act.
template <class Act>
struct GateChannels {
  std::vector<Act> scalar_acts;  ///< one per scalar channel (index_scalars)
  std::vector<Act> gate_acts;    ///< one per gate channel (index_gates)
  /// Gate k multiplies the gated components [copy_begin[k], copy_begin[k] + copy_dim[k]): the
  /// k-th irrep copy of irreps_gated, blocks in order and copies in order within a block.
  std::vector<int> copy_begin, copy_dim;
};

/// Checks @p gate and returns it by channel. @p convert(activation) turns one block's
/// std::optional<Activation> into an Act and may throw; it is called once per block, scalars
/// then gates, each block after the check that it is a scalar.
/// @param context the start of every message (e.g. "NequipEngine: layer 0 gate")
/// @throws Error when an index list does not have one entry per component of its irreps or
///   leaves the input, an activation list does not have one entry per block or meets a
///   non-scalar block, the gates are not as many as the gated irrep copies, or irreps_out does
///   not have the scalars' plus the gated part's dimension.
template <class Act, class Convert>
GateChannels<Act> check_gate(const Gate& gate, const std::string& context, Convert convert) {
  const int dim_in = gate.irreps_in.dim();
  const auto check_indices = [&](const std::vector<int>& idx, const Irreps& irreps,
                                 const char* what) {
    if (static_cast<int>(idx.size()) != irreps.dim())
      throw Error(context + " has " + std::to_string(idx.size()) + " " + what +
                  " indices for irreps " + irreps.str());
    for (int i : idx)
      if (i < 0 || i >= dim_in)
        throw Error(context + " " + what + " index " + std::to_string(i) +
                    " is outside the input of dimension " + std::to_string(dim_in));
  };
  check_indices(gate.index_scalars, gate.irreps_scalars, "scalar");
  check_indices(gate.index_gates, gate.irreps_gates, "gate");
  check_indices(gate.index_gated, gate.irreps_gated, "gated");
  const auto per_channel = [&](const Irreps& irreps,
                               const std::vector<std::optional<Activation>>& acts,
                               const char* what) {
    if (acts.size() != irreps.size())
      throw Error(context + " has " + std::to_string(acts.size()) + " " + what +
                  " activations for irreps " + irreps.str());
    std::vector<Act> out;
    for (std::size_t b = 0; b < irreps.size(); ++b) {
      if (irreps[b].ir.l() != 0)
        throw Error(context + " " + what + " irreps " + irreps.str() + " are not all scalars");
      const Act a = convert(acts[b]);
      for (int u = 0; u < irreps[b].mul; ++u) out.push_back(a);
    }
    return out;
  };
  GateChannels<Act> c;
  c.scalar_acts = per_channel(gate.irreps_scalars, gate.act_scalars, "scalar");
  c.gate_acts = per_channel(gate.irreps_gates, gate.act_gates, "gate");
  int pos = 0;
  for (const MulIrrep& mi : gate.irreps_gated)
    for (int u = 0; u < mi.mul; ++u) {
      c.copy_begin.push_back(pos);
      c.copy_dim.push_back(mi.ir.dim());
      pos += mi.ir.dim();
    }
  if (c.copy_begin.size() != gate.index_gates.size())
    throw Error(context + " has " + std::to_string(gate.index_gates.size()) + " gates for " +
                std::to_string(c.copy_begin.size()) + " gated irreps (" + gate.irreps_gated.str() +
                ")");
  const int num_scalars = static_cast<int>(gate.index_scalars.size());
  const int dim_out = gate.irreps_out.dim();
  if (dim_out != num_scalars + pos)
    throw Error(context + " irreps_out " + gate.irreps_out.str() + " has " + "dimension " +
                std::to_string(dim_out) + ", expected " + std::to_string(num_scalars + pos));
  return c;
}

}  // namespace clebsch::model
