// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The parts of the MACE host engine for the blocks of mace-torch's newer foundation models
// (MH-0/MH-1, OMOL; potentials/FORMAT.md section 5): the plan and node passes of
// RealAgnosticResidualNonLinearInteractionBlock, the input rows of its radial and density MLPs
// ([e_e | source_embedding(o_sender) | target_embedding(o_centre)]; the species parts carry no
// position dependence, so their gradient is dropped), and the per-structure embedding (its row
// from mace_embedding.h), which
// adds one row to every species' h0 and whose readout energy (outside the scale, as in
// ScaleShiftMACE) is folded into E0. The gate runs on e3nn (mul_ir) rows, converted from the
// engine's ir_mul rows.
#include <algorithm>
#include <cmath>

#include "clebsch/engine/mace_embedding.h"
#include "clebsch/engine/mace_engine_impl.h"
#include "clebsch/support/error.h"

namespace clebsch::mace_detail {

template <class T, class G>
void MaceImpl<T, G>::plan_nonlinear(const model::MaceInteraction& in, const Irreps& h_irreps,
                                    const std::string& w, LayerPlan<T>& L) const {
  const model::MaceInteraction::NonLinear& N = *in.nonlinear;
  auto check = [&](const Irreps& a, const Irreps& b, const std::string& what) {
    if (a != b) throw ModelFormatError(w + "." + what + ": " + a.str() + " vs " + b.str());
  };
  check(in.linear_up.irreps_in, h_irreps, "linear_up input vs node features");
  check(N.skip.irreps_in, h_irreps, "skip input vs node features");
  L.nonlinear = true;
  L.sc_on_nodes = true;
  L.density = true;
  L.linear_up = NodeLinear<T>(in.linear_up);
  L.conv = ConvTp<T>(in.conv_tp, w + ".conv_tp");
  if (L.conv.dim_in2() > nsh_)
    throw ModelFormatError(w + ".conv_tp: edge attributes exceed lmax " + std::to_string(lmax_));
  L.C0 = N.source_embedding.irreps_out.dim();
  L.mlp_in = radial_.num_basis() + 2 * L.C0;
  L.radial_mlp = Mlp<T>(in.radial_mlp, w + ".radial_mlp");
  L.density_mlp = Mlp<T>(*in.density_mlp, w + ".density_mlp");
  if (L.radial_mlp.dim_in() != L.mlp_in || L.radial_mlp.dim_out() != L.conv.weight_numel() ||
      L.density_mlp.dim_in() != L.mlp_in || L.density_mlp.dim_out() != 1)
    throw ModelFormatError(w + ": radial/density MLPs do not map " + std::to_string(L.mlp_in) +
                           " -> " + std::to_string(L.conv.weight_numel()) + " / 1");
  // Species embeddings of both edge ends, tabulated per species (scalars: ir_mul = mul_ir).
  std::vector<T> onehot(static_cast<std::size_t>(S_) * S_, T(0));
  for (int s = 0; s < S_; ++s) onehot[static_cast<std::size_t>(s) * S_ + s] = T(1);
  L.src_tab.resize(static_cast<std::size_t>(S_) * L.C0);
  L.tgt_tab.resize(static_cast<std::size_t>(S_) * L.C0);
  NodeLinear<T>(N.source_embedding)
      .forward(S_, onehot.data(), S_, L.src_tab.data(), L.C0, false, false);
  NodeLinear<T>(N.target_embedding)
      .forward(S_, onehot.data(), S_, L.tgt_tab.data(), L.C0, false, false);
  L.linear = NodeLinear<T>(N.linear_1);
  L.linear_res = NodeLinear<T>(N.linear_res);
  L.linear_2 = NodeLinear<T>(N.linear_2);
  L.skip_linear = NodeLinear<T>(N.skip);
  L.gate = nequip_ops::GateOp<T>(N.gate, w + ".gate");
  L.nonlin_irreps = N.linear_1.irreps_out;
  L.gate_out_irreps = N.gate.irreps_out;
  L.dim_nonlin = N.linear_1.irreps_out.dim();
  check(N.linear_res.irreps_out, L.nonlin_irreps, "linear_res output vs linear_1 output");
  check(N.linear_res.irreps_in, in.linear_up.irreps_out, "linear_res input vs linear_up output");
  if (L.gate.dim_in() != L.dim_nonlin || L.gate.dim_out() != N.linear_2.irreps_in.dim())
    throw ModelFormatError(w + ".gate: maps " + std::to_string(L.gate.dim_in()) + " -> " +
                           std::to_string(L.gate.dim_out()) + ", expected " +
                           std::to_string(L.dim_nonlin) + " -> " +
                           std::to_string(N.linear_2.irreps_in.dim()));
  L.alpha = static_cast<T>(N.alpha);
  L.beta = static_cast<T>(N.beta);
}

template <class T, class G>
void MaceImpl<T, G>::plan_embedding(const model::Mace& m, const MaceEngineOptions& options,
                                    T* h0_table) {
  const model::MaceEmbedding& E = *m.embedding;
  const std::vector<double> row = mace_embedding_row(E, options.structure_inputs);
  const int C = E.dim_out;
  for (int s = 0; s < S_; ++s)
    for (int c = 0; c < C; ++c) h0_table[static_cast<std::size_t>(s) * C + c] += T(row[c]);
  if (E.readout) {
    // Position-independent and outside the scale: an addition to E0.
    NodeLinear<T> ro(*E.readout);
    std::vector<T> y(static_cast<std::size_t>(S_) * ro.dim_out());
    ro.forward(S_, h0_table, C, y.data(), ro.dim_out(), false, false);
    for (int s = 0; s < S_; ++s)
      e0_[s] += static_cast<double>(y[static_cast<std::size_t>(s) * ro.dim_out()]);
  }
}

template <class T, class G>
const T* MaceImpl<T, G>::mlp_input(const LayerPlan<T>& Lp, const int* q_of, std::size_t q0,
                                   std::size_t n, T* buf) const {
  const std::size_t nb = radial_.num_basis(), w = Lp.mlp_in;
  if (!Lp.nonlinear && !q_of) return ef_.data() + q0 * nb;
  for (std::size_t p = 0; p < n; ++p) {
    const std::size_t q = q_of ? static_cast<std::size_t>(q_of[p]) : q0 + p;
    T* row = buf + p * w;
    std::copy_n(ef_.data() + q * nb, nb, row);
    if (!Lp.nonlinear) continue;
    const std::size_t C0 = Lp.C0;
    std::copy_n(Lp.src_tab.data() + species_[sender_[q]] * C0, C0, row + nb);
    std::copy_n(Lp.tgt_tab.data() + species_[centre_[q]] * C0, C0, row + nb + C0);
  }
  return buf;
}

// Rows [r0, r1) of layer t: Mraw -> A_[t] (and the product, h_, readouts, like node_forward).
template <class T, class G>
void MaceImpl<T, G>::node_forward_nonlinear(int t, std::size_t r0, std::size_t r1, const T* Mraw,
                                            NodeWork& w) {
  const LayerPlan<T>& Lp = layers_[t];
  const std::size_t n = r1 - r0, dn = Lp.dim_nonlin, dt = Lp.dim_target, de = Lp.dim_edge;
  const std::size_t dg = Lp.gate.dim_out();
  std::vector<T> q(n * dn), hu(n * de), a(std::max(dn, dg)), b(std::max(dn, dg)), y(n * dg);
  Lp.linear.forward(n, Mraw, Lp.dim_mid, q.data(), dn, false, false);
  const T* d = dens_[t].data() + r0;
  for (std::size_t i = 0; i < n; ++i) {
    const T inv = T(1) / (Lp.beta * d[i] + Lp.alpha);
    for (std::size_t k = 0; k < dn; ++k) q[i * dn + k] *= inv;
  }
  std::copy_n(q.data(), n * dn, Ml_[t].data() + r0 * dn);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t row = t == 0 ? species_[r0 + i] : r0 + i;
    std::copy_n((t == 0 ? hu0_table_.data() : hu_[t].data()) + row * de, de, hu.data() + i * de);
  }
  T* x = Xg_[t].data() + r0 * dn;
  std::copy_n(q.data(), n * dn, x);
  Lp.linear_res.forward(n, hu.data(), de, x, dn, true, false);
  for (std::size_t i = 0; i < n; ++i) {
    ir_mul_to_mul_ir(Lp.nonlin_irreps, x + i * dn, a.data());
    Lp.gate.forward_row(a.data(), b.data());
    mul_ir_to_ir_mul(Lp.gate_out_irreps, b.data(), y.data() + i * dg);
  }
  Lp.linear_2.forward(n, y.data(), dg, w.Air.data(), dt, false, false);
  const int* sp = species_ + r0;
  T* A = A_[t].data() + r0 * dt;
  to_contraction_layout(Lp.target, Lp.C, Lp.D, n, w.Air.data(), A, false);
  maybe_serial(false, [&] { Lp.contraction->forward(n, sp, A, w.B.data()); });
  convert_rows(Lp.b_irreps, n, w.B.data(), w.Bir.data(), true);
  const std::size_t dh = Lp.dim_hidden;
  T* h = h_.data() + r0 * dh;
  Lp.product_linear.forward(n, w.Bir.data(), Lp.dim_b, h, dh, false, false);
  const T* sc = sc_.data() + r0 * dh;
  for (std::size_t k = 0; k < n * dh; ++k) h[k] += sc[k];
  readouts_forward(t, r0, r1);
}

// From dE/dA (gMl, ir_mul rows of the target irreps, overwritten) to dE/dMraw, gdens_ and
// (t > 0) ghu_res_.
template <class T, class G>
void MaceImpl<T, G>::node_backward_nonlinear(int t, std::size_t r0, std::size_t r1, T* gMl,
                                             T* gMraw) {
  const LayerPlan<T>& Lp = layers_[t];
  const std::size_t n = r1 - r0, dn = Lp.dim_nonlin, dt = Lp.dim_target, de = Lp.dim_edge;
  const std::size_t dg = Lp.gate.dim_out();
  std::vector<T> gy(n * dg), gx(n * dn), a(std::max(dn, dg)), b(std::max(dn, dg)),
      c(std::max(dn, dg));
  Lp.linear_2.backward(n, gMl, dt, gy.data(), dg, false, false);
  const T* x = Xg_[t].data() + r0 * dn;
  for (std::size_t i = 0; i < n; ++i) {
    ir_mul_to_mul_ir(Lp.nonlin_irreps, x + i * dn, a.data());
    ir_mul_to_mul_ir(Lp.gate_out_irreps, gy.data() + i * dg, b.data());
    Lp.gate.backward_row(a.data(), b.data(), c.data());
    mul_ir_to_ir_mul(Lp.nonlin_irreps, c.data(), gx.data() + i * dn);
  }
  if (t > 0) Lp.linear_res.backward(n, gx.data(), dn, ghu_res_.data() + r0 * de, de, false, false);
  // q = lin1 / (beta D + alpha): dE/dD = -beta <dE/dq, q> / (beta D + alpha).
  const T* q = Ml_[t].data() + r0 * dn;
  const T* d = dens_[t].data() + r0;
  for (std::size_t i = 0; i < n; ++i) {
    const T inv = T(1) / (Lp.beta * d[i] + Lp.alpha);
    T acc = T(0);
    for (std::size_t k = 0; k < dn; ++k) acc += gx[i * dn + k] * q[i * dn + k];
    gdens_[r0 + i] = -Lp.beta * acc * inv;
    for (std::size_t k = 0; k < dn; ++k) gx[i * dn + k] *= inv;
  }
  Lp.linear.backward(n, gx.data(), dn, gMraw, Lp.dim_mid, false, false);
}

#define CLEBSCH_INSTANTIATE(T, G)                                                                 \
  template void MaceImpl<T, G>::plan_nonlinear(const model::MaceInteraction&, const Irreps&,      \
                                               const std::string&, LayerPlan<T>&) const;          \
  template void MaceImpl<T, G>::plan_embedding(const model::Mace&, const MaceEngineOptions&, T*); \
  template const T* MaceImpl<T, G>::mlp_input(const LayerPlan<T>&, const int*, std::size_t,       \
                                              std::size_t, T*) const;                             \
  template void MaceImpl<T, G>::node_forward_nonlinear(int, std::size_t, std::size_t, const T*,   \
                                                       NodeWork&);                                \
  template void MaceImpl<T, G>::node_backward_nonlinear(int, std::size_t, std::size_t, T*, T*);
CLEBSCH_MACE_PRECISIONS(CLEBSCH_INSTANTIATE)
#undef CLEBSCH_INSTANTIATE

}  // namespace clebsch::mace_detail
