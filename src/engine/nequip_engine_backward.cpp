// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The backward pass of the NequIP host engine (nequip_engine_impl.h), written by hand: from the
// energies through the readout, then layer by layer in reverse (gate, linear_2, self-connection
// and resnet on the local atoms; the convolution's sender pass with the edge MLP recomputed per
// chunk; linear_1 and the normalisation), with the ghost rows of the feature gradients added to
// their owners through the exchange; last dE/dvector from dE/dY, dE/d(embedding) and the pair
// term in the geometry scalar. Every row has one owner (senders here, not centres), so the sums
// have a fixed order whatever the number of threads.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "clebsch/engine/nequip_engine_impl.h"
#include "clebsch/o3/spherical_harmonics.h"

namespace clebsch::nequip_detail {

template <class S, class G>
void NequipImpl<S, G>::backward_layer(const AtomGraph& g, int k, GhostExchange* exchange) {
  // The first layer's input is the type embedding, a constant: no gradient to propagate.
  const bool need_grad_h = k > 0;
  const Layer<S>& L = layers_[k];
  const std::int64_t nl = static_cast<std::int64_t>(g.num_local);
  const std::int64_t nn = static_cast<std::int64_t>(g.num_nodes);
  const int dim_in = L.dim_in, dim_x = L.dim_x, dim_mid = L.dim_mid, dim_y = L.dim_y;
  const int dim_out = L.dim_out;

  // grad_h_ holds dE/dh' on the local rows.
  grad_y_.resize(static_cast<std::size_t>(nl) * dim_y);
  grad_message_.resize(static_cast<std::size_t>(nl) * dim_mid);
  if (need_grad_h) grad_h_in_.assign(static_cast<std::size_t>(nn) * dim_in, S(0));
#pragma omp parallel
  {
    S* gm = ws_[omp_get_thread_num()].row.data();
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < nl; ++i) {
      const S* gh = grad_h_.data() + i * dim_out;
      S* gy = grad_y_.data() + i * dim_y;
      L.gate.backward_row(y_[k].data() + i * dim_y, gh, gy);
      std::fill(gm, gm + dim_mid, S(0));
      L.linear_2.backward_row(gy, gm);
      L.tp.out_to_cm(gm, grad_message_.data() + i * dim_mid);
      if (need_grad_h) {
        S* gin = grad_h_in_.data() + i * dim_in;
        if (L.resnet)
          for (int q = 0; q < dim_in; ++q) gin[q] += gh[q];
        if (L.sc) L.sc->backward_row(g.species[i], gy, gin);
      }
    }
  }

  // One pass over the edges grouped by sender: each edge owns its dE/dY and dE/demb rows, each
  // sender its dE/dx row, so nothing is shared between threads. The edge MLP is recomputed
  // (cheaper in memory than storing its output for every layer).
  const std::vector<S>& x = x_[k];
  const int nb = num_basis_, nsh = num_sh_, numel = L.tp.weight_numel();
#pragma omp parallel
  {
    Workspace<S>& ws = ws_[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 4)
    for (std::int64_t j = 0; j < nn; ++j) {
      if (by_neighbor_.ptr[j] == by_neighbor_.ptr[j + 1]) continue;
      S* gx = ws.grad_x.data();
      std::fill(gx, gx + dim_x, S(0));
      const S* xj = x.data() + j * dim_x;
      for_edge_chunks(L, by_neighbor_, j, ws, [&](int n, const int* edges, const S* w) {
        for (int q = 0; q < n; ++q) {
          const int e = edges[q];
          S* gsh = ws.grad_y.data();
          std::fill(gsh, gsh + nsh, S(0));
          L.tp.backward_edge(xj, sh_.data() + static_cast<std::size_t>(e) * nsh, w + q * numel,
                             grad_message_.data() + static_cast<std::size_t>(g.center[e]) * dim_mid,
                             need_grad_h ? gx : nullptr, gsh, ws.grad_w.data() + q * numel,
                             ws.tp.data());
          G* acc = grad_sh_.data() + static_cast<std::size_t>(e) * nsh;
          for (int t = 0; t < nsh; ++t) acc[t] += static_cast<G>(gsh[t]);
        }
        L.edge_mlp.backward(n, ws.mlp.data(), ws.grad_w.data(), ws.grad_in.data(),
                            ws.mlp_grad.data());
        for (int q = 0; q < n; ++q) {
          const int e = edges[q];
          G* acc = grad_emb_.data() + static_cast<std::size_t>(e) * nb;
          const S* gi = ws.grad_in.data() + q * nb;
          for (int t = 0; t < nb; ++t) acc[t] += static_cast<G>(gi[t]);
        }
      });
      if (need_grad_h) {
        S* row = ws.row.data();
        L.tp.in1_from_cm(gx, row);
        const S c = L.norm_const[g.species[j]];
        for (int q = 0; q < dim_x; ++q) row[q] *= c;
        L.linear_1.backward_row(row, grad_h_in_.data() + j * dim_in);
      }
    }
  }
  if (need_grad_h) {
    // Ghost rows hold gradients that belong to their owners' features.
    if (exchange) exchange->reverse(grad_h_in_.data(), dim_in);
    grad_h_.swap(grad_h_in_);
  }
}

template <class S, class G>
void NequipImpl<S, G>::backward(const AtomGraph& g, EngineResult& result, GhostExchange* exchange) {
  const std::size_t nl = g.num_local, nn = g.num_nodes, ne = g.num_edges;
  const std::int64_t nl64 = static_cast<std::int64_t>(nl);
  const std::int64_t ne64 = static_cast<std::int64_t>(ne);
  const int dim_last = layers_.back().dim_out;
  grad_sh_.assign(ne * num_sh_, G(0));
  grad_emb_.assign(ne * num_basis_, G(0));
  grad_h_.assign(nn * dim_last, S(0));
#pragma omp parallel
  {
    Workspace<S>& ws = ws_[omp_get_thread_num()];
#pragma omp for schedule(static)
    for (std::int64_t c0 = 0; c0 < nl64; c0 += kNodeChunk) {
      const int n = static_cast<int>(std::min<std::int64_t>(kNodeChunk, nl64 - c0));
      readout_.forward(n, h_.data() + c0 * dim_last, ws.mlp.data());
      for (int q = 0; q < n; ++q) ws.grad_w[q] = scales_[g.species[c0 + q]];
      readout_.backward(n, ws.mlp.data(), ws.grad_w.data(), grad_h_.data() + c0 * dim_last,
                        ws.mlp_grad.data());
    }
  }
  for (int k = static_cast<int>(layers_.size()) - 1; k >= 0; --k) backward_layer(g, k, exchange);

  // dE/dvector = J_Y^T dE/dY + (dE/demb . demb/dr + dV/dr) v/r, in G.
  const int nb = num_basis_, nsh = num_sh_, lmax = sh_lmax_;
#pragma omp parallel
  {
    std::vector<G> feats(nb), dfeats(nb), y(nsh), dy(3 * nsh);
#pragma omp for schedule(static)
    for (std::int64_t e = 0; e < ne64; ++e) {
      const EdgeFrame<G> ed(g, e);
      const G* v = ed.v;
      const G r = ed.r;
      radial_.evaluate<G>(r, ed.si, ed.sj, feats.data(), dfeats.data());
      spherical_harmonics_with_gradient<G>(lmax, v, y.data(), dy.data());
      G de_dr = 0;
      const G* ge = grad_emb_.data() + e * nb;
      for (int n = 0; n < nb; ++n) de_dr += ge[n] * dfeats[n];
      if (zbl_) {
        G dz;
        zbl_energy(ed, &dz);
        de_dr += dz;
      }
      const G* gs = grad_sh_.data() + e * nsh;
      G grad[3] = {de_dr * v[0] / r, de_dr * v[1] / r, de_dr * v[2] / r};
      for (int t = 0; t < nsh; ++t)
        for (int a = 0; a < 3; ++a) grad[a] += gs[t] * dy[3 * t + a];
      for (int a = 0; a < 3; ++a) result.edge_gradient[3 * e + a] = static_cast<double>(grad[a]);
    }
  }
}

template void NequipImpl<double, double>::backward(const AtomGraph&, EngineResult&, GhostExchange*);
template void NequipImpl<float, double>::backward(const AtomGraph&, EngineResult&, GhostExchange*);
template void NequipImpl<float, float>::backward(const AtomGraph&, EngineResult&, GhostExchange*);

}  // namespace clebsch::nequip_detail
