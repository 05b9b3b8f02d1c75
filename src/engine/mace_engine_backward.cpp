// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The backward pass of the MACE host engine, written by hand, layer by layer in reverse (no
// autodiff): the node part of a layer for all atoms (readouts, product linear, the symmetric
// contraction, skip, normalisation, linear) down to the gradients of the raw messages; then the
// edges sender by sender, recomputing their radial MLPs, so that each sender's gradient row has
// one owner; then the ghost rows back to their owners and the step to the previous layer's
// features. The last layer instead runs forward and backward in one pass per centre task
// (fused_last_layer), computing its radial MLPs once.
#include <algorithm>
#include <cmath>

#include "clebsch/engine/mace_engine_impl.h"

namespace clebsch::mace_detail {

// gh_ rows [r0, r1) += dE/dh^t through the readouts of layer t (dE/de^(r) = scale).
template <class T, class G>
void MaceImpl<T, G>::readouts_backward(int t, std::size_t r0, std::size_t r1) {
  const T s = static_cast<T>(scale_);
  const std::size_t n = r1 - r0, dh = layers_[t].dim_hidden;
  T* gh = gh_.data() + r0 * dh;
  for (std::size_t r = 0; r < readouts_.size(); ++r) {
    const ReadoutPlan<T>& R = readouts_[r];
    if (R.layer != t) continue;
    const NodeLinear<T>& last = R.nonlinear ? R.linear_2 : R.linear;
    const std::size_t dout = last.dim_out();
    std::vector<T> gy(n * dout, T(0));
    for (std::size_t i = 0; i < n; ++i) gy[i * dout] = s;
    if (!R.nonlinear) {
      R.linear.backward(n, gy.data(), dout, gh, dh, true, false);
      continue;
    }
    const std::size_t dz = R.linear.dim_out();
    std::vector<T> gz(n * dz);
    R.linear_2.backward(n, gy.data(), dout, gz.data(), dz, false, false);
    // gz *= act'(z) on the activated blocks, for the pre-activations z of either gate.
    auto times_act_derivative = [&](const T* z) {
      for (std::size_t b = 0; b < R.acts.size(); ++b) {
        if (!R.acts[b]) continue;
        const int o0 = R.act_offsets[b], o1 = R.act_offsets[b + 1];
        for (std::size_t i = 0; i < n; ++i)
          for (int k = o0; k < o1; ++k) {
            T d;
            R.acts[b]->value_and_derivative(z[i * dz + k], &d);
            gz[i * dz + k] *= d;
          }
      }
    };
    if (R.has_mid) {
      times_act_derivative(readout_z2_[r].data() + r0 * dz);
      std::vector<T> ga(n * dz);
      R.linear_mid.backward(n, gz.data(), dz, ga.data(), dz, false, false);
      gz.swap(ga);
    }
    times_act_derivative(readout_z_[r].data() + r0 * dz);
    R.linear.backward(n, gz.data(), dz, gh, dh, true, false);
  }
}

// Node part of layer t's backward for rows [r0, r1) on the calling thread: gh_ (dE/dh^t from
// later layers) plus the readouts, down to gMraw (dE/dMraw, row r0 first) and gdens_ (dE/dD).
template <class T, class G>
void MaceImpl<T, G>::node_backward(int t, std::size_t r0, std::size_t r1, T* gMraw, NodeWork& w) {
  const LayerPlan<T>& Lp = layers_[t];
  const std::size_t n = r1 - r0, dt = Lp.dim_target, db = Lp.dim_b, dh = Lp.dim_hidden;
  const int* sp = species_ + r0;
  readouts_backward(t, r0, r1);
  // h^t = product_linear(B) [+ sc].
  Lp.product_linear.backward(n, gh_.data() + r0 * dh, dh, w.Bir.data(), db, false, false);
  convert_rows(Lp.b_irreps, n, w.Bir.data(), w.B.data(), false);
  maybe_serial(false, [&] {
    Lp.contraction->backward(n, sp, A_[t].data() + r0 * dt, w.B.data(), w.gA.data());
  });
  T* gMl = w.gMl.data();
  to_contraction_layout(Lp.target, Lp.C, Lp.D, n, w.gA.data(), gMl, true);
  if (Lp.nonlinear) return node_backward_nonlinear(t, r0, r1, gMl, gMraw);
  if (!Lp.sc_on_nodes) {
    // A = skip(Ml): dE/dMl = skip^T(dE/dA).
    std::copy_n(gMl, n * dt, w.Air.data());
    Lp.skip.backward(n, sp, w.Air.data(), dt, gMl, dt, false, false);
  }
  if (Lp.density) {
    // Ml = Mlin / (1 + D): dE/dD = -<dE/dMl, Ml> / (1 + D), dE/dMlin = dE/dMl / (1 + D).
    const T* ml;
    if (Lp.sc_on_nodes) {
      to_contraction_layout(Lp.target, Lp.C, Lp.D, n, A_[t].data() + r0 * dt, w.Ml.data(), true);
      ml = w.Ml.data();
    } else {
      ml = Ml_[t].data() + r0 * dt;
    }
    const T* d = dens_[t].data() + r0;
    for (std::size_t i = 0; i < n; ++i) {
      const T inv = T(1) / (T(1) + d[i]);
      T acc = T(0);
      for (std::size_t k = 0; k < dt; ++k) acc += gMl[i * dt + k] * ml[i * dt + k];
      gdens_[r0 + i] = -acc * inv;
      for (std::size_t k = 0; k < dt; ++k) gMl[i * dt + k] *= inv;
    }
  } else {
    const T s = Lp.inv_avg;
    for (std::size_t k = 0; k < n * dt; ++k) gMl[k] *= s;
  }
  Lp.linear.backward(n, gMl, dt, gMraw, Lp.dim_mid, false, false);
}

// Node part of layer t's backward for all local rows into gMraw_ (the sender-ordered edge pass
// reads any centre's row).
template <class T, class G>
void MaceImpl<T, G>::layer_node_backward(int t) {
  const LayerPlan<T>& Lp = layers_[t];
  gMraw_.resize(L_ * Lp.dim_mid);
  gdens_.resize(Lp.density ? L_ : 0);
  const long long n_blocks = static_cast<long long>((L_ + kTaskRows - 1) / kTaskRows);
  const bool par = n_blocks > 1 && 2 * L_ * Lp.node_flops > kParallelWork;
#pragma omp parallel if (par)
  {
    NodeWork nw;
    size_node_work(Lp, kTaskRows, false, nw);
#pragma omp for schedule(dynamic, 1)
    for (long long b = 0; b < n_blocks; ++b) {
      const std::size_t r0 = b * kTaskRows, r1 = std::min(L_, r0 + kTaskRows);
      node_backward(t, r0, r1, gMraw_.data() + r0 * Lp.dim_mid, nw);
    }
  }
}

// Edge part of layer t's backward, sender by sender (each sender's row of ghu has one owner),
// recomputing the radial MLP of every edge.
template <class T, class G>
void MaceImpl<T, G>::edge_backward(int t, T* ghu) {
  const LayerPlan<T>& Lp = layers_[t];
  const std::size_t de = Lp.dim_edge;
  const long long n_tasks = static_cast<long long>(sender_tasks_.size());
  const bool par = n_tasks > 1 && 3 * E_ * Lp.edge_flops > kParallelWork;
#pragma omp parallel if (par)
  {
    EdgeWork w;
    size_edge_work(Lp, kEdgeChunk, w);
#pragma omp for schedule(dynamic, 1)
    for (long long task = 0; task < n_tasks; ++task) {
      const auto [s0, s1] = sender_tasks_[task];
      if (ghu)
        std::fill(ghu + static_cast<std::size_t>(s0) * de, ghu + static_cast<std::size_t>(s1) * de,
                  T(0));
      const std::size_t b0 = sender_ptr_[s0], b1 = sender_ptr_[s1];
      for (std::size_t p0 = b0; p0 < b1; p0 += kEdgeChunk) {
        const std::size_t n = std::min(kEdgeChunk, b1 - p0);
        for (std::size_t p = 0; p < n; ++p) w.q_of[p] = by_sender_[p0 + p];
        if (Lp.radial_spline) {
          spline_rows(Lp, w.q_of.data(), 0, n, w.W.data(), w.rho.data());
        } else {
          const T* x = mlp_input(Lp, w.q_of.data(), 0, n, w.efc.data());
          Lp.radial_mlp.forward(n, x, w.W.data(), w.mlp.data());
          if (Lp.density) Lp.density_mlp.forward(n, x, w.rho.data(), w.dmlp.data());
        }
        edges_backward_chunk(Lp, t, w.q_of.data(), n, w.W.data(), w.mlp.data(), w.rho.data(),
                             w.dmlp.data(), gMraw_.data(), 0, w, ghu);
      }
    }
  }
}

// The last layer in one pass per centre task: its edges' MLP outputs are computed once, the
// centres' node forward and backward run on the task's rows, and the same outputs serve the
// edge backward. dE/dhu of the senders (any node) goes to per-thread buffers summed afterwards
// in thread order; tasks are scheduled statically, so the sum is reproducible for a given
// thread count.
template <class T, class G>
void MaceImpl<T, G>::fused_last_layer(bool need_hu_gradient) {
  const int t = T_ - 1;
  const LayerPlan<T>& Lp = layers_[t];
  const std::size_t numel = Lp.conv.weight_numel();
  const std::size_t dm = Lp.dim_mid, de = Lp.dim_edge, dh = Lp.dim_hidden;
  const long long n_tasks = static_cast<long long>(centre_tasks_.size());
  std::size_t max_task = 0;
  for (const auto& [c0, c1] : centre_tasks_)
    max_task = std::max<std::size_t>(max_task, centre_ptr_[c1] - centre_ptr_[c0]);
  const bool par = n_tasks > 1 && 3 * (E_ * Lp.edge_flops + L_ * Lp.node_flops) > kParallelWork;
  const int n_threads = par ? omp_get_max_threads() : 1;
  if (need_hu_gradient) {
    ghu_private_.resize(n_threads);
    for (auto& b : ghu_private_) b.assign(N_ * de, T(0));
  }
  gdens_.resize(Lp.density ? L_ : 0);
  const std::size_t mlp_row = Lp.radial_mlp.scratch_size(1);
  const std::size_t dmlp_row = Lp.density ? Lp.density_mlp.scratch_size(1) : 0;
#pragma omp parallel num_threads(n_threads) if (par)
  {
    T* ghu = need_hu_gradient ? ghu_private_[omp_get_thread_num()].data() : nullptr;
    EdgeWork ew;
    NodeWork nw;
    size_edge_work(Lp, std::max(max_task, kEdgeChunk), ew);
    size_node_work(Lp, kTaskRows, true, nw);
#pragma omp for schedule(static)
    for (long long task = 0; task < n_tasks; ++task) {
      const auto [c0, c1] = centre_tasks_[task];
      const std::size_t e0 = centre_ptr_[c0], e1 = centre_ptr_[c1];
      // Forward over the task's edges, keeping every MLP output and scratch row.
      std::fill(nw.Mraw.begin(), nw.Mraw.begin() + (c1 - c0) * dm, T(0));
      if (Lp.density) std::fill(dens_[t].data() + c0, dens_[t].data() + c1, T(0));
      for (std::size_t q0 = e0; q0 < e1; q0 += kEdgeChunk) {
        const std::size_t n = std::min(kEdgeChunk, e1 - q0), o = q0 - e0;
        edges_forward_chunk(Lp, q0, n, ew.W.data() + o * numel, ew.mlp.data() + o * mlp_row,
                            ew.rho.data() + o, ew.dmlp.data() + o * dmlp_row);
      }
      edges_messages(Lp, t, e0, e1, ew.W.data(), ew.rho.data(), c0, nw.Mraw.data(), dens_[t].data(),
                     ew);
      // The task's centres: forward to the energy, then back to dE/dMraw.
      node_forward(t, c0, c1, nw.Mraw.data(), nw);
      std::fill(gh_.data() + c0 * dh, gh_.data() + c1 * dh, T(0));
      node_backward(t, c0, c1, nw.gMraw.data(), nw);
      // Backward over the same edges.
      for (std::size_t q0 = e0; q0 < e1; q0 += kEdgeChunk) {
        const std::size_t n = std::min(kEdgeChunk, e1 - q0), o = q0 - e0;
        for (std::size_t p = 0; p < n; ++p) ew.q_of[p] = static_cast<int>(q0 + p);
        edges_backward_chunk(Lp, t, ew.q_of.data(), n, ew.W.data() + o * numel,
                             ew.mlp.data() + o * mlp_row, ew.rho.data() + o,
                             ew.dmlp.data() + o * dmlp_row, nw.gMraw.data(), c0, ew, ghu);
      }
    }
  }
  if (need_hu_gradient) {
    ghu_.resize(N_ * de);
    const std::size_t total = N_ * de;
#pragma omp parallel for schedule(static) if (total > 100000)
    for (std::size_t k = 0; k < total; ++k) {
      T acc = T(0);
      for (const auto& b : ghu_private_) acc += b[k];
      ghu_[k] = acc;
    }
  }
}

// After layer t's edge backward left dE/dhu in ghu_ (t > 0): return the ghost rows to their
// owners, then dE/dh^{t-1} = linear_up^T(dE/dhu) [+ skip^T(dE/dh^t)] into gh_.
template <class T, class G>
void MaceImpl<T, G>::backward_tail(int t, GhostExchange* exchange) {
  const LayerPlan<T>& Lp = layers_[t];
  const std::size_t L = L_;
  if (exchange) exchange->reverse(ghu_.data(), Lp.dim_edge);
  if (Lp.nonlinear)  // the residual linear_res(hu) of the local rows
    for (std::size_t k = 0; k < L * Lp.dim_edge; ++k) ghu_[k] += ghu_res_[k];
  gh_prev_.resize(L * Lp.dim_in);
  Lp.linear_up.backward(L, ghu_.data(), Lp.dim_edge, gh_prev_.data(), Lp.dim_in, false);
  if (Lp.nonlinear)
    Lp.skip_linear.backward(L, gh_.data(), Lp.dim_hidden, gh_prev_.data(), Lp.dim_in, true);
  else if (Lp.sc_on_nodes)
    Lp.skip.backward(L, species_, gh_.data(), Lp.dim_hidden, gh_prev_.data(), Lp.dim_in, true);
  std::swap(gh_, gh_prev_);
}

#define CLEBSCH_INSTANTIATE(T, G)                                                            \
  template void MaceImpl<T, G>::readouts_backward(int, std::size_t, std::size_t);            \
  template void MaceImpl<T, G>::node_backward(int, std::size_t, std::size_t, T*, NodeWork&); \
  template void MaceImpl<T, G>::layer_node_backward(int);                                    \
  template void MaceImpl<T, G>::edge_backward(int, T*);                                      \
  template void MaceImpl<T, G>::fused_last_layer(bool);                                      \
  template void MaceImpl<T, G>::backward_tail(int, GhostExchange*);
CLEBSCH_MACE_PRECISIONS(CLEBSCH_INSTANTIATE)
#undef CLEBSCH_INSTANTIATE

}  // namespace clebsch::mace_detail
