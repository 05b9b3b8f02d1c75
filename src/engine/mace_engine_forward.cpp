// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The forward pass of the MACE host engine, layer by layer: what a layer reads before its edges
// (linear_up of the local rows, ghost rows through the GhostExchange, the residual
// self-connection), then centre task by centre task the task's messages into a per-thread
// buffer and at once the node part of its centres (linear, normalisation, skip, the symmetric
// contraction, product linear) and the readouts of h^t with their energies. What the backward
// pass needs is kept per node as it goes.
#include <algorithm>
#include <cmath>

#include "clebsch/engine/mace_engine_impl.h"

namespace clebsch::mace_detail {

// What layer t reads before its edges: hu (the rows neighbours read; layer 0 uses the
// per-species table, later layers compute the local rows and receive the ghost rows) and the
// residual self-connection sc. Both read h_ = h^{t-1}. Then sizes layer t's stored arrays.
template <class T, class G>
void MaceImpl<T, G>::prepare_layer(int t, GhostExchange* exchange) {
  const LayerPlan<T>& Lp = layers_[t];
  const std::size_t L = L_;
  if (t > 0) {
    hu_[t].resize(N_ * Lp.dim_edge);
    Lp.linear_up.forward(L, h_.data(), Lp.dim_in, hu_[t].data(), Lp.dim_edge, false);
    if (exchange) exchange->forward(hu_[t].data(), Lp.dim_edge);
  }
  if (Lp.sc_on_nodes) {
    sc_.resize(L * Lp.dim_hidden);
    if (t == 0) {
      for (std::size_t i = 0; i < L; ++i)
        std::copy_n(sc0_table_.data() + static_cast<std::size_t>(species_[i]) * Lp.dim_hidden,
                    Lp.dim_hidden, sc_.data() + i * Lp.dim_hidden);
    } else if (Lp.nonlinear) {
      Lp.skip_linear.forward(L, h_.data(), Lp.dim_in, sc_.data(), Lp.dim_hidden, false);
    } else {
      Lp.skip.forward(L, species_, h_.data(), Lp.dim_in, sc_.data(), Lp.dim_hidden, false);
    }
  }
  // h_ now changes from h^{t-1} to h^t.
  const std::size_t dt = Lp.dim_target;
  h_.resize(L * Lp.dim_hidden);
  A_[t].resize(L * dt);
  dens_[t].resize(Lp.density ? L : 0);
  Ml_[t].resize(Lp.nonlinear ? L * Lp.dim_nonlin : (Lp.density && !Lp.sc_on_nodes ? L * dt : 0));
  Xg_[t].resize(Lp.nonlinear ? L * Lp.dim_nonlin : 0);
  for (std::size_t r = 0; r < readouts_.size(); ++r)
    if (readouts_[r].layer == t && readouts_[r].nonlinear) {
      readout_z_[r].resize(L * readouts_[r].linear.dim_out());
      readout_z2_[r].resize(readouts_[r].has_mid ? L * readouts_[r].linear.dim_out() : 0);
    }
}

// Layer t's forward, centre task by centre task: the task's messages into a per-thread buffer,
// then the node part of its centres.
template <class T, class G>
void MaceImpl<T, G>::layer_forward(int t) {
  const LayerPlan<T>& Lp = layers_[t];
  const std::size_t dm = Lp.dim_mid;
  const long long n_tasks = static_cast<long long>(centre_tasks_.size());
  const bool par = n_tasks > 1 && E_ * Lp.edge_flops + L_ * Lp.node_flops > kParallelWork;
#pragma omp parallel if (par)
  {
    EdgeWork ew;
    NodeWork nw;
    size_edge_work(Lp, kEdgeChunk, ew);
    size_node_work(Lp, kTaskRows, true, nw);
#pragma omp for schedule(dynamic, 1)
    for (long long task = 0; task < n_tasks; ++task) {
      const auto [c0, c1] = centre_tasks_[task];
      std::fill(nw.Mraw.begin(), nw.Mraw.begin() + (c1 - c0) * dm, T(0));
      if (Lp.density) std::fill(dens_[t].data() + c0, dens_[t].data() + c1, T(0));
      const std::size_t e0 = centre_ptr_[c0], e1 = centre_ptr_[c1];
      for (std::size_t q0 = e0; q0 < e1; q0 += kEdgeChunk) {
        const std::size_t n = std::min(kEdgeChunk, e1 - q0);
        edges_forward_chunk(Lp, q0, n, ew.W.data(), ew.mlp.data(), ew.rho.data(), ew.dmlp.data());
        edges_messages(Lp, t, q0, q0 + n, ew.W.data(), ew.rho.data(), c0, nw.Mraw.data(),
                       dens_[t].data(), ew);
      }
      node_forward(t, c0, c1, nw.Mraw.data(), nw);
    }
  }
}

// Node part of layer t's forward for local rows [r0, r1) on the calling thread: from the rows'
// raw messages Mraw (row r0 first) and dens_[t] to A_[t], h_, the readouts of h^t and their
// energies.
template <class T, class G>
void MaceImpl<T, G>::node_forward(int t, std::size_t r0, std::size_t r1, const T* Mraw,
                                  NodeWork& w) {
  const LayerPlan<T>& Lp = layers_[t];
  if (Lp.nonlinear) return node_forward_nonlinear(t, r0, r1, Mraw, w);
  const std::size_t n = r1 - r0, dt = Lp.dim_target, db = Lp.dim_b, dh = Lp.dim_hidden;
  const int* sp = species_ + r0;
  T* Ml = w.Ml.data();
  Lp.linear.forward(n, Mraw, Lp.dim_mid, Ml, dt, false, false);
  if (Lp.density) {
    const T* d = dens_[t].data() + r0;
    for (std::size_t i = 0; i < n; ++i) {
      const T inv = T(1) / (T(1) + d[i]);
      for (std::size_t k = 0; k < dt; ++k) Ml[i * dt + k] *= inv;
    }
  } else {
    const T s = Lp.inv_avg;
    for (std::size_t k = 0; k < n * dt; ++k) Ml[k] *= s;
  }
  const T* Air = Ml;
  if (!Lp.sc_on_nodes) {
    Lp.skip.forward(n, sp, Ml, dt, w.Air.data(), dt, false, false);
    Air = w.Air.data();
    if (Lp.density) std::copy_n(Ml, n * dt, Ml_[t].data() + r0 * dt);  // for the backward
  }
  T* A = A_[t].data() + r0 * dt;
  to_contraction_layout(Lp.target, Lp.C, Lp.D, n, Air, A, false);
  maybe_serial(false, [&] { Lp.contraction->forward(n, sp, A, w.B.data()); });
  convert_rows(Lp.b_irreps, n, w.B.data(), w.Bir.data(), true);
  T* h = h_.data() + r0 * dh;
  Lp.product_linear.forward(n, w.Bir.data(), db, h, dh, false, false);
  if (Lp.sc_on_nodes) {
    const T* sc = sc_.data() + r0 * dh;
    for (std::size_t k = 0; k < n * dh; ++k) h[k] += sc[k];
  }
  readouts_forward(t, r0, r1);
}

template <class T, class G>
void MaceImpl<T, G>::readouts_forward(int t, std::size_t r0, std::size_t r1) {
  const std::size_t n = r1 - r0, dh = layers_[t].dim_hidden;
  const T* h = h_.data() + r0 * dh;
  for (std::size_t r = 0; r < readouts_.size(); ++r) {
    const ReadoutPlan<T>& R = readouts_[r];
    if (R.layer != t) continue;
    std::vector<T> y;
    if (!R.nonlinear) {
      const std::size_t dout = R.linear.dim_out();
      y.resize(n * dout);
      R.linear.forward(n, h, dh, y.data(), dout, false, false);
      for (std::size_t i = 0; i < n; ++i) energy_acc_[r0 + i] += static_cast<double>(y[i * dout]);
      continue;
    }
    const std::size_t dz = R.linear.dim_out();
    T* z = readout_z_[r].data() + r0 * dz;
    R.linear.forward(n, h, dh, z, dz, false, false);
    std::vector<T> a(z, z + n * dz);
    for (std::size_t b = 0; b < R.acts.size(); ++b) {
      if (!R.acts[b]) continue;
      const int o0 = R.act_offsets[b], o1 = R.act_offsets[b + 1];
      for (std::size_t i = 0; i < n; ++i)
        for (int k = o0; k < o1; ++k) a[i * dz + k] = R.acts[b]->value(z[i * dz + k]);
    }
    if (R.has_mid) {
      // Bias readout: z2 = linear_mid(a) + bias (kept), a = act(z2).
      T* z2 = readout_z2_[r].data() + r0 * dz;
      R.linear_mid.forward(n, a.data(), dz, z2, dz, false, false);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t k = 0; k < dz; ++k) z2[i * dz + k] += R.bias_mid[k];
      std::copy_n(z2, n * dz, a.data());
      for (std::size_t b = 0; b < R.acts.size(); ++b) {
        if (!R.acts[b]) continue;
        const int o0 = R.act_offsets[b], o1 = R.act_offsets[b + 1];
        for (std::size_t i = 0; i < n; ++i)
          for (int k = o0; k < o1; ++k) a[i * dz + k] = R.acts[b]->value(z2[i * dz + k]);
      }
    }
    const std::size_t dout = R.linear_2.dim_out();
    y.resize(n * dout);
    R.linear_2.forward(n, a.data(), dz, y.data(), dout, false, false);
    const double b2 = R.has_mid ? static_cast<double>(R.bias_2[0]) : 0.0;
    for (std::size_t i = 0; i < n; ++i)
      energy_acc_[r0 + i] += static_cast<double>(y[i * dout]) + b2;
  }
}

#define CLEBSCH_INSTANTIATE(T, G)                                                                 \
  template void MaceImpl<T, G>::prepare_layer(int, GhostExchange*);                               \
  template void MaceImpl<T, G>::layer_forward(int);                                               \
  template void MaceImpl<T, G>::node_forward(int, std::size_t, std::size_t, const T*, NodeWork&); \
  template void MaceImpl<T, G>::readouts_forward(int, std::size_t, std::size_t);
CLEBSCH_MACE_PRECISIONS(CLEBSCH_INSTANTIATE)
#undef CLEBSCH_INSTANTIATE

}  // namespace clebsch::mace_detail
