// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The edge chunks of the MACE host engine, shared by the forward, the backward and the fused
// last-layer passes: the radial (and density) MLPs of a chunk of edges, the messages of a run
// of edges into their centres' rows, and the backward of a chunk down to the gradients of the
// harmonics, the radial basis, the cutoff and the senders' features. Also the sizing of the
// per-thread scratch those passes use, so that a chunk never allocates.
#include <algorithm>
#include <cmath>

#include "clebsch/engine/mace_engine_impl.h"

namespace clebsch::mace_detail {

template <class T, class G>
void MaceImpl<T, G>::size_edge_work(const LayerPlan<T>& Lp, std::size_t rows, EdgeWork& w) const {
  const std::size_t numel = Lp.conv.weight_numel();
  const std::size_t width =
      std::max(Lp.radial_mlp.max_width(), Lp.density ? Lp.density_mlp.max_width() : 1);
  w.mlp.resize(Lp.radial_mlp.scratch_size(rows));
  w.dmlp.resize(Lp.density ? Lp.density_mlp.scratch_size(rows) : 0);
  w.W.resize(rows * numel);
  w.Wf.resize(radial_.apply_cutoff() ? 0 : numel);
  w.gW.resize(kEdgeChunk * numel);
  w.efc.resize(kEdgeChunk * Lp.mlp_in);
  w.gef.resize(kEdgeChunk * Lp.mlp_in);
  w.work.resize(2 * kEdgeChunk * width);
  w.rho.resize(rows);
  w.grho.resize(kEdgeChunk);
  w.gy.resize(nsh_);
  w.q_of.resize(kEdgeChunk);
}

template <class T, class G>
void MaceImpl<T, G>::size_node_work(const LayerPlan<T>& Lp, std::size_t rows, bool messages,
                                    NodeWork& w) const {
  const std::size_t dt = Lp.dim_target, db = Lp.dim_b;
  w.Mraw.resize(messages ? rows * Lp.dim_mid : 0);
  w.gMraw.resize(messages ? rows * Lp.dim_mid : 0);
  w.Ml.resize(rows * dt);
  w.Air.resize(rows * dt);
  w.gMl.resize(rows * dt);
  w.B.resize(rows * db);
  w.Bir.resize(rows * db);
  w.gA.resize(rows * dt);
}

// Radial-MLP outputs W (rows of weight_numel, before any cutoff factor) and density values rho
// of the n internal edges q0..q0+n-1, keeping the MLPs' scratch for a later backward.
template <class T, class G>
void MaceImpl<T, G>::edges_forward_chunk(const LayerPlan<T>& Lp, std::size_t q0, std::size_t n,
                                         T* W, T* mlp, T* rho, T* dmlp) const {
  if (Lp.radial_spline) return spline_rows(Lp, nullptr, q0, n, W, rho);
  thread_local std::vector<T> buf;
  if (Lp.nonlinear) buf.resize(n * Lp.mlp_in);
  const T* x = mlp_input(Lp, nullptr, q0, n, buf.data());
  Lp.radial_mlp.forward(n, x, W, mlp);
  if (Lp.density) Lp.density_mlp.forward(n, x, rho, dmlp);
}

template <class T, class G>
void MaceImpl<T, G>::spline_rows(const LayerPlan<T>& Lp, const int* q_of, std::size_t q0,
                                 std::size_t n, T* W, T* rho) const {
  const std::size_t numel = Lp.conv.weight_numel();
  for (std::size_t p = 0; p < n; ++p) {
    const G r = rl_[q_of ? static_cast<std::size_t>(q_of[p]) : q0 + p];
    Lp.radial_spline->value(r, W + p * numel);
    if (Lp.density) Lp.density_spline->value(r, rho + p);
  }
}

// Messages of the internal edges [e0, e1) (all of them with centres in [c0, ...)) added to the
// rows Mraw[centre - c0], densities to dens[centre]; W, rho hold the chunk's MLP outputs from
// offset `o`.
template <class T, class G>
void MaceImpl<T, G>::edges_messages(const LayerPlan<T>& Lp, int t, std::size_t e0, std::size_t e1,
                                    const T* W, const T* rho, int c0, T* Mraw, T* dens,
                                    EdgeWork& w) const {
  const std::size_t numel = Lp.conv.weight_numel();
  const std::size_t dm = Lp.dim_mid, de = Lp.dim_edge;
  const T* hu = t == 0 ? hu0_table_.data() : hu_[t].data();
  const int* hu_row = t == 0 ? species_ : nullptr;  // layer 0: one row per species
  const bool cut = !radial_.apply_cutoff();
  for (std::size_t q = e0; q < e1; ++q) {
    const int s = sender_[q];
    const std::size_t row = hu_row ? hu_row[s] : s;
    const T* wq = W + (q - e0) * numel;
    if (cut) {
      const T f = fc_[q];
      for (std::size_t k = 0; k < numel; ++k) w.Wf[k] = wq[k] * f;
      wq = w.Wf.data();
    }
    Lp.conv.forward(hu + row * de, Y_.data() + q * nsh_, wq,
                    Mraw + static_cast<std::size_t>(centre_[q] - c0) * dm);
    if (Lp.density) {
      const T r = rho[q - e0];
      T d = std::tanh(r * r);
      if (cut) d *= fc_[q];
      dens[centre_[q]] += d;
    }
  }
}

// The backward of n edges (internal ids q_of[0..n)) whose MLP outputs W and scratch (mlp, dmlp,
// rho) are given: accumulates dE/dY, dE/d(radial basis), dE/dcutoff per edge, and dE/dhu of the
// senders into ghu (when not null). gMraw[centre - c0] and gdens_[centre] hold the centres'
// cotangents.
template <class T, class G>
void MaceImpl<T, G>::edges_backward_chunk(const LayerPlan<T>& Lp, int t, const int* q_of,
                                          std::size_t n, const T* W, T* mlp, const T* rho, T* dmlp,
                                          const T* gMraw, int c0, EdgeWork& w, T* ghu) {
  const int nb = radial_.num_basis();
  const std::size_t numel = Lp.conv.weight_numel();
  const std::size_t dm = Lp.dim_mid, de = Lp.dim_edge;
  const T* hu = t == 0 ? hu0_table_.data() : hu_[t].data();
  const int* hu_row = t == 0 ? species_ : nullptr;
  const bool cut = !radial_.apply_cutoff();
  for (std::size_t p = 0; p < n; ++p) {
    const int q = q_of[p];
    const int s = sender_[q];
    const std::size_t row = hu_row ? hu_row[s] : s;
    const T* wq = W + p * numel;
    if (cut) {
      const T f = fc_[q];
      for (std::size_t k = 0; k < numel; ++k) w.Wf[k] = wq[k] * f;
      wq = w.Wf.data();
    }
    std::fill(w.gy.begin(), w.gy.end(), T(0));
    T* gw = w.gW.data() + p * numel;
    Lp.conv.backward(hu + row * de, Y_.data() + static_cast<std::size_t>(q) * nsh_, wq,
                     gMraw + static_cast<std::size_t>(centre_[q] - c0) * dm,
                     ghu ? ghu + static_cast<std::size_t>(s) * de : nullptr, w.gy.data(), gw);
    G* gYq = gY_.data() + static_cast<std::size_t>(q) * nsh_;
    for (int k = 0; k < nsh_; ++k) gYq[k] += static_cast<G>(w.gy[k]);
    if (cut) {
      // w = mlp * f: dE/df = <dE/dw, mlp>, dE/dmlp = f dE/dw.
      const T* wraw = W + p * numel;
      T acc = T(0);
      for (std::size_t k = 0; k < numel; ++k) acc += gw[k] * wraw[k];
      gF_[q] += static_cast<G>(acc);
      const T f = fc_[q];
      for (std::size_t k = 0; k < numel; ++k) gw[k] *= f;
    }
  }
  if (Lp.radial_spline) {
    // dE/dr straight from the tables' slopes: dE/dW . W'(r) (+ dE/drho rho'(r)).
    for (std::size_t p = 0; p < n; ++p) {
      const int q = q_of[p];
      gR_[q] += Lp.radial_spline->derivative_dot(rl_[q], w.gW.data() + p * numel);
    }
    if (Lp.density)
      for (std::size_t p = 0; p < n; ++p) {
        const int q = q_of[p];
        T gd = gdens_[centre_[q]];
        const T th = std::tanh(rho[p] * rho[p]);
        if (cut) {
          gF_[q] += static_cast<G>(gd * th);
          gd *= fc_[q];
        }
        const T grho = gd * (T(1) - th * th) * T(2) * rho[p];
        gR_[q] += static_cast<G>(grho) * Lp.density_spline->slope(rl_[q], 0);
      }
    return;
  }
  // Only the first nb MLP inputs (the radial basis) depend on positions.
  const std::size_t in = Lp.mlp_in;
  Lp.radial_mlp.backward(n, mlp, w.gW.data(), w.gef.data(), w.work.data());
  for (std::size_t p = 0; p < n; ++p) {
    G* gEq = gE_.data() + static_cast<std::size_t>(q_of[p]) * nb;
    for (int k = 0; k < nb; ++k) gEq[k] += static_cast<G>(w.gef[p * in + k]);
  }
  if (Lp.density) {
    // d_e = tanh(rho^2) [* f]: dE/drho = dE/dD_i [* f] * (1 - tanh^2) * 2 rho.
    for (std::size_t p = 0; p < n; ++p) {
      const int q = q_of[p];
      T gd = gdens_[centre_[q]];
      const T th = std::tanh(rho[p] * rho[p]);
      if (cut) {
        gF_[q] += static_cast<G>(gd * th);
        gd *= fc_[q];
      }
      w.grho[p] = gd * (T(1) - th * th) * T(2) * rho[p];
    }
    Lp.density_mlp.backward(n, dmlp, w.grho.data(), w.gef.data(), w.work.data());
    for (std::size_t p = 0; p < n; ++p) {
      G* gEq = gE_.data() + static_cast<std::size_t>(q_of[p]) * nb;
      for (int k = 0; k < nb; ++k) gEq[k] += static_cast<G>(w.gef[p * in + k]);
    }
  }
}

#define CLEBSCH_INSTANTIATE(T, G)                                                                  \
  template void MaceImpl<T, G>::size_edge_work(const LayerPlan<T>&, std::size_t, EdgeWork&) const; \
  template void MaceImpl<T, G>::size_node_work(const LayerPlan<T>&, std::size_t, bool, NodeWork&)  \
      const;                                                                                       \
  template void MaceImpl<T, G>::edges_forward_chunk(const LayerPlan<T>&, std::size_t, std::size_t, \
                                                    T*, T*, T*, T*) const;                         \
  template void MaceImpl<T, G>::spline_rows(const LayerPlan<T>&, const int*, std::size_t,          \
                                            std::size_t, T*, T*) const;                            \
  template void MaceImpl<T, G>::edges_messages(const LayerPlan<T>&, int, std::size_t, std::size_t, \
                                               const T*, const T*, int, T*, T*, EdgeWork&) const;  \
  template void MaceImpl<T, G>::edges_backward_chunk(const LayerPlan<T>&, int, const int*,         \
                                                     std::size_t, const T*, T*, const T*, T*,      \
                                                     const T*, int, EdgeWork&, T*);
CLEBSCH_MACE_PRECISIONS(CLEBSCH_INSTANTIATE)
#undef CLEBSCH_INSTANTIATE

}  // namespace clebsch::mace_detail
