// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Layout bookkeeping (e3nn's _Sortcut, nn.Activation parities, ElementwiseTensorProduct splits)
// and host forward/backward of the gate nonlinearity (see gate.h).
#include "clebsch/nn/gate.h"

#include <algorithm>

#include "clebsch/support/error.h"

namespace clebsch {
namespace {

std::string show(const Irreps& irreps) { return irreps.empty() ? "(empty)" : irreps.str(); }

// nn.Activation's output irreps: an odd scalar takes the activation's parity, an even one stays
// even.
Irreps activation_irreps_out(const Irreps& in, const std::vector<ScaledActivation>& acts,
                             const std::string& role) {
  std::vector<MulIrrep> out;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const int p = in[i].ir.p() == -1 ? acts[i].parity() : in[i].ir.p();
    if (p == 0)
      throw Error("Gate: act_" + role + "[" + std::to_string(i) +
                  "] = " + activation_name(acts[i].kind()) +
                  " is neither even nor odd, so it cannot act on " + std::to_string(in[i].mul) +
                  "x" + in[i].ir.str() + " (entry " + std::to_string(i) + " of irreps_" + role +
                  " " + show(in) + ")");
    out.push_back({in[i].mul, Irrep(0, p)});
  }
  return Irreps(std::move(out));
}

// Per-channel activations: entry i's act repeated mul_i times (simplify() keeps this order).
std::vector<ScaledActivation> per_channel(const Irreps& in,
                                          const std::vector<ScaledActivation>& acts) {
  std::vector<ScaledActivation> out;
  for (std::size_t i = 0; i < in.size(); ++i) out.insert(out.end(), in[i].mul, acts[i]);
  return out;
}

// e3nn's ElementwiseTensorProduct(gated, gates) output irreps: both sides simplified, then blocks
// split so that they pair up copy by copy; each pair gives mul x (l_gated, p_gated*p_gate).
Irreps elementwise_irreps_out(const Irreps& gated, const Irreps& gates) {
  const Irreps gated_s = gated.simplify(), gates_s = gates.simplify();
  std::vector<MulIrrep> a(gated_s.begin(), gated_s.end());
  std::vector<MulIrrep> b(gates_s.begin(), gates_s.end());
  std::vector<MulIrrep> out;
  std::size_t i = 0, j = 0;
  int used_a = 0, used_b = 0;  // copies of a[i], b[j] already paired
  while (i < a.size() && j < b.size()) {
    const int mul = std::min(a[i].mul - used_a, b[j].mul - used_b);
    out.push_back({mul, Irrep(a[i].ir.l(), a[i].ir.p() * b[j].ir.p())});
    used_a += mul;
    used_b += mul;
    if (used_a == a[i].mul) ++i, used_a = 0;
    if (used_b == b[j].mul) ++j, used_b = 0;
  }
  return Irreps(std::move(out));
}

}  // namespace

Gate::Gate(Irreps irreps_scalars, std::vector<ScaledActivation> act_scalars, Irreps irreps_gates,
           std::vector<ScaledActivation> act_gates, Irreps irreps_gated) {
  if (irreps_gates.dim() > 0 && irreps_gates.lmax() > 0)
    throw Error("Gate: irreps_gates must be scalars (l = 0), got " + irreps_gates.str());
  if (irreps_scalars.dim() > 0 && irreps_scalars.lmax() > 0)
    throw Error("Gate: irreps_scalars must be scalars (l = 0), got " + irreps_scalars.str());
  if (irreps_gates.num_irreps() != irreps_gated.num_irreps())
    throw Error("Gate: irreps_gated " + show(irreps_gated) + " has " +
                std::to_string(irreps_gated.num_irreps()) + " irreps but irreps_gates " +
                show(irreps_gates) + " has " + std::to_string(irreps_gates.num_irreps()) +
                " gate scalars; they must be equal");
  if (act_scalars.size() != irreps_scalars.size())
    throw Error("Gate: " + std::to_string(act_scalars.size()) + " act_scalars for the " +
                std::to_string(irreps_scalars.size()) + " entries of irreps_scalars " +
                show(irreps_scalars) + "; need one per entry");
  if (act_gates.size() != irreps_gates.size())
    throw Error("Gate: " + std::to_string(act_gates.size()) + " act_gates for the " +
                std::to_string(irreps_gates.size()) + " entries of irreps_gates " +
                show(irreps_gates) + "; need one per entry");

  const Irreps scalars_out = activation_irreps_out(irreps_scalars, act_scalars, "scalars");
  const Irreps gates_out = activation_irreps_out(irreps_gates, act_gates, "gates");
  irreps_out_ = scalars_out + elementwise_irreps_out(irreps_gated, gates_out);

  // _Sortcut: the three simplified parts, concatenated, sorted; entry e of the concatenation
  // sits at sorted position p[e] of the input.
  irreps_scalars_ = irreps_scalars.simplify();
  irreps_gates_ = irreps_gates.simplify();
  irreps_gated_ = irreps_gated.simplify();
  const Irreps concat = irreps_scalars_ + irreps_gates_ + irreps_gated_;
  const Irreps::Sorted sorted = concat.sort();
  irreps_in_ = sorted.irreps.simplify();
  const std::vector<int> sorted_offsets = sorted.irreps.offsets();
  for (std::size_t e = 0; e < concat.size(); ++e)
    for (int k = 0; k < concat[e].dim(); ++k) gather_.push_back(sorted_offsets[sorted.p[e]] + k);

  num_scalars_ = irreps_scalars_.dim();
  num_gates_ = irreps_gates_.dim();
  gated_dim_ = irreps_gated_.dim();
  scalar_acts_ = per_channel(irreps_scalars, act_scalars);
  gate_acts_ = per_channel(irreps_gates, act_gates);
  int copy = 0;
  for (const auto& mi : irreps_gated_)
    for (int u = 0; u < mi.mul; ++u, ++copy)
      gate_of_gated_.insert(gate_of_gated_.end(), mi.ir.dim(), copy);
}

template <class T>
void Gate::forward(std::size_t n_rows, const T* x, T* y) const {
  CLEBSCH_EXPECTS(n_rows == 0 || (x != nullptr && y != nullptr));
  const std::size_t dim_in = gather_.size(), dim_out = num_scalars_ + gated_dim_;
  const int* gates_at = gather_.data() + num_scalars_;
  const int* gated_at = gates_at + num_gates_;

#pragma omp parallel
  {
    std::vector<T> gate(num_gates_);
#pragma omp for schedule(static)
    for (std::ptrdiff_t r = 0; r < static_cast<std::ptrdiff_t>(n_rows); ++r) {
      const T* xr = x + r * dim_in;
      T* yr = y + r * dim_out;
      for (int s = 0; s < num_scalars_; ++s) yr[s] = scalar_acts_[s](xr[gather_[s]]);
      for (int k = 0; k < num_gates_; ++k) gate[k] = gate_acts_[k](xr[gates_at[k]]);
      for (int j = 0; j < gated_dim_; ++j)
        yr[num_scalars_ + j] = gate[gate_of_gated_[j]] * xr[gated_at[j]];
    }
  }
}

template <class T>
void Gate::backward(std::size_t n_rows, const T* x, const T* grad_y, T* grad_x) const {
  CLEBSCH_EXPECTS(n_rows == 0 || (x != nullptr && grad_y != nullptr && grad_x != nullptr));
  const std::size_t dim_in = gather_.size(), dim_out = num_scalars_ + gated_dim_;
  const int* gates_at = gather_.data() + num_scalars_;
  const int* gated_at = gates_at + num_gates_;

#pragma omp parallel
  {
    std::vector<T> gate(num_gates_), dgate(num_gates_), dot(num_gates_);
#pragma omp for schedule(static)
    for (std::ptrdiff_t r = 0; r < static_cast<std::ptrdiff_t>(n_rows); ++r) {
      const T* xr = x + r * dim_in;
      const T* gy = grad_y + r * dim_out;
      T* gx = grad_x + r * dim_in;
      // gather_ is a permutation of the input, so every grad_x entry is written exactly once.
      for (int s = 0; s < num_scalars_; ++s)
        gx[gather_[s]] = scalar_acts_[s].derivative(xr[gather_[s]]) * gy[s];
      for (int k = 0; k < num_gates_; ++k) {
        gate_acts_[k].value_and_derivative(xr[gates_at[k]], &gate[k], &dgate[k]);
        dot[k] = 0;
      }
      for (int j = 0; j < gated_dim_; ++j) {
        const int k = gate_of_gated_[j];
        const T g = gy[num_scalars_ + j];
        gx[gated_at[j]] = gate[k] * g;
        dot[k] += xr[gated_at[j]] * g;
      }
      for (int k = 0; k < num_gates_; ++k) gx[gates_at[k]] = dgate[k] * dot[k];
    }
  }
}

template void Gate::forward<float>(std::size_t, const float*, float*) const;
template void Gate::forward<double>(std::size_t, const double*, double*) const;
template void Gate::backward<float>(std::size_t, const float*, const float*, float*) const;
template void Gate::backward<double>(std::size_t, const double*, const double*, double*) const;

}  // namespace clebsch
