// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// e3nn's nn.Gate(irreps_scalars, act_scalars, irreps_gates, act_gates, irreps_gated) (nn/_gate.py),
// the equivariant nonlinearity of NequIP and of MACE's readout. Its input is not the plain
// concatenation scalars+gates+gated: e3nn simplifies each of the three, concatenates them, sorts
// the result stably by irrep (0o < 0e < 1o < ...) and simplifies again, so that the input is
// sort(...).simplify() and a gather (e3nn's _Sortcut/Extract, pure slicing) pulls the three parts
// back out. The output is the concatenation
//   [ phi~_s(scalars) , phi~_g(gate_k) * gated_k ],
// where gate channel k multiplies the k-th gated irrep copy (all m components) in the gated
// irreps' own order. Each act applies to one entry of its (unsimplified) irreps, as in
// nn.Activation, and an odd scalar (0o) keeps its parity through an odd activation, becomes even
// through an even one and is rejected by one that is neither. The gated outputs have irreps
// l_gated with parity p_gated * p_gate_out, split where the gate blocks split the gated blocks
// (e3nn's ElementwiseTensorProduct), so irreps_out() matches e3nn's string exactly.
#pragma once

#include <cstddef>
#include <vector>

#include "clebsch/nn/activation.h"
#include "clebsch/o3/irreps.h"

namespace clebsch {

/// Descriptor and host evaluation of an e3nn Gate. Immutable.
///
/// The evaluation functions take a batch of @p n_rows rows, row-major (row r of x starts at
/// x + r*irreps_in().dim()), and are parallel over rows with OpenMP. Instantiated for float and
/// double.
class Gate {
 public:
  /// @param act_scalars one activation per entry of @p irreps_scalars (as given, unsimplified);
  ///   ScaledActivation::none() stands for e3nn's None.
  /// @param act_gates one activation per entry of @p irreps_gates.
  /// @throws Error if scalars or gates are not all l = 0, the number of gate channels differs
  ///   from the number of gated irrep copies, an act list has the wrong length, or an odd scalar
  ///   meets an activation that is neither even nor odd.
  Gate(Irreps irreps_scalars, std::vector<ScaledActivation> act_scalars, Irreps irreps_gates,
       std::vector<ScaledActivation> act_gates, Irreps irreps_gated);

  /// e3nn's gate.irreps_in: sort(scalars.simplify() + gates.simplify() + gated.simplify())
  /// .simplify().
  const Irreps& irreps_in() const { return irreps_in_; }
  /// e3nn's gate.irreps_out: act_scalars' output irreps + the gated products' irreps.
  const Irreps& irreps_out() const { return irreps_out_; }
  /// The simplified scalars, gates and gated irreps (e3nn's gate.irreps_scalars etc.).
  const Irreps& irreps_scalars() const { return irreps_scalars_; }
  const Irreps& irreps_gates() const { return irreps_gates_; }
  const Irreps& irreps_gated() const { return irreps_gated_; }

  /// Number of scalar channels (irreps_scalars().dim()); they are the first outputs.
  int num_scalars() const { return num_scalars_; }
  /// Number of gate channels = number of gated irrep copies.
  int num_gates() const { return num_gates_; }
  /// irreps_gated().dim(); the gated outputs follow the scalars.
  int gated_dim() const { return gated_dim_; }

  /// For each position q of the concatenation [scalars | gates | gated] (irreps_in().dim()
  /// entries, each part in its own irreps' layout), the input index it is read from. This is
  /// what pushing arange(dim) through e3nn's gate.sc gives; it is a permutation.
  const std::vector<int>& gather() const { return gather_; }
  /// The activation of each scalar channel (num_scalars() entries).
  const std::vector<ScaledActivation>& scalar_activations() const { return scalar_acts_; }
  /// The activation of each gate channel (num_gates() entries).
  const std::vector<ScaledActivation>& gate_activations() const { return gate_acts_; }
  /// For each gated component j (gated_dim() entries), the gate channel that multiplies it.
  const std::vector<int>& gate_of_gated() const { return gate_of_gated_; }

  /// y = Gate(x); @p y (n_rows x irreps_out().dim()) is overwritten.
  template <class T>
  void forward(std::size_t n_rows, const T* x, T* y) const;

  /// Reverse mode: given grad_y = dL/dy, writes grad_x = dL/dx (overwritten).
  template <class T>
  void backward(std::size_t n_rows, const T* x, const T* grad_y, T* grad_x) const;

 private:
  Irreps irreps_in_, irreps_out_;
  Irreps irreps_scalars_, irreps_gates_, irreps_gated_;
  int num_scalars_ = 0, num_gates_ = 0, gated_dim_ = 0;
  std::vector<int> gather_;
  std::vector<ScaledActivation> scalar_acts_, gate_acts_;
  std::vector<int> gate_of_gated_;
};

}  // namespace clebsch
