// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The forward pass of the NequIP host engine (nequip_engine_impl.h): per edge the network inputs
// (Bessel embedding, spherical harmonics) and the ZBL pair energy in the geometry scalar, then
// layer by layer linear_1 and the normalisation on every node, the messages of the uvu
// convolution summed per centre in the edges' fixed order, linear_2, the self-connection, the
// gate and the resnet on the local atoms, with the ghost rows filled through the exchange before
// the next layer reads them; last the readout, scale/shift and pair sum into the energies. What
// the backward pass reads (x and y of every layer, the edge inputs) stays in the engine.
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "clebsch/engine/nequip_engine_impl.h"
#include "clebsch/o3/spherical_harmonics.h"

namespace clebsch::nequip_detail {

template <class S, class G>
void NequipImpl<S, G>::edge_geometry(const AtomGraph& g) {
  const std::size_t ne = g.num_edges;
  sh_.resize(ne * num_sh_);
  emb_.resize(ne * num_basis_);
  zbl_edge_.assign(ne, G(0));
  const int nb = num_basis_, nsh = num_sh_, lmax = sh_lmax_;
  const std::int64_t ne64 = static_cast<std::int64_t>(ne);
#pragma omp parallel
  {
    std::vector<G> feats(nb), y(nsh);
#pragma omp for schedule(static)
    for (std::int64_t e = 0; e < ne64; ++e) {
      const EdgeFrame<G> ed(g, e);
      radial_.evaluate<G>(ed.r, ed.si, ed.sj, feats.data());
      for (int n = 0; n < nb; ++n) emb_[e * nb + n] = static_cast<S>(feats[n]);
      spherical_harmonics<G>(lmax, ed.v, y.data());
      for (int i = 0; i < nsh; ++i) sh_[e * nsh + i] = static_cast<S>(y[i]);
      if (zbl_) {
        G de;
        zbl_edge_[e] = zbl_energy(ed, &de);
      }
    }
  }
}

template <class S, class G>
void NequipImpl<S, G>::forward_layer(const AtomGraph& g, int k, GhostExchange* exchange) {
  const Layer<S>& L = layers_[k];
  const std::int64_t nl = static_cast<std::int64_t>(g.num_local);
  const std::int64_t nn = static_cast<std::int64_t>(g.num_nodes);
  const int dim_in = L.dim_in, dim_x = L.dim_x, dim_mid = L.dim_mid, dim_y = L.dim_y;

  // x = linear_1(h) * norm_const[species], on every node: ghosts are read as neighbours.
  std::vector<S>& x = x_[k];
  x.resize(static_cast<std::size_t>(nn) * dim_x);
#pragma omp parallel
  {
    S* row = ws_[omp_get_thread_num()].row.data();
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < nn; ++n) {
      L.linear_1.forward_row(h_.data() + n * dim_in, row);
      const S c = L.norm_const[g.species[n]];
      for (int q = 0; q < dim_x; ++q) row[q] *= c;
      L.tp.in1_to_cm(row, x.data() + n * dim_x);
    }
  }

  // message[i] = sum over the edges into centre i of tp(x[neighbour], Y_e, edge_mlp(emb_e)).
  message_.resize(static_cast<std::size_t>(nl) * dim_mid);
  const int nsh = num_sh_, numel = L.tp.weight_numel();
#pragma omp parallel
  {
    Workspace<S>& ws = ws_[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 4)
    for (std::int64_t i = 0; i < nl; ++i) {
      S* out = ws.message.data();
      std::fill(out, out + dim_mid, S(0));
      for_edge_chunks(L, by_center_, i, ws, [&](int n, const int* edges, const S* w) {
        for (int q = 0; q < n; ++q) {
          const int e = edges[q];
          L.tp.forward_edge(x.data() + static_cast<std::size_t>(g.neighbor[e]) * dim_x,
                            sh_.data() + static_cast<std::size_t>(e) * nsh, w + q * numel, out,
                            ws.tp.data());
        }
      });
      L.tp.out_from_cm(out, message_.data() + i * dim_mid);
    }
  }

  // y = linear_2(message) + sc(h, a); h' = gate(y) (+ h).
  std::vector<S>& y = y_[k];
  y.resize(static_cast<std::size_t>(nl) * dim_y);
  h_next_.assign(static_cast<std::size_t>(nn) * L.dim_out, S(0));
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < nl; ++i) {
    S* yr = y.data() + i * dim_y;
    L.linear_2.forward_row(message_.data() + i * dim_mid, yr);
    if (L.sc) L.sc->forward_row(g.species[i], h_.data() + i * dim_in, yr);
    S* hr = h_next_.data() + i * L.dim_out;
    L.gate.forward_row(yr, hr);
    if (L.resnet) {
      const S* hin = h_.data() + i * dim_in;
      for (int q = 0; q < L.dim_out; ++q) hr[q] = hin[q] + hr[q];
    }
  }
  // The next layer reads the ghosts' new features; the readout after the last layer does not.
  // With an exchange the call is made whatever this rank's ghost count: under MPI every rank
  // must take part in each communication, and a rank without ghosts may still own atoms that
  // are ghosts elsewhere.
  if (exchange && k + 1 < static_cast<int>(layers_.size()))
    exchange->forward(h_next_.data(), L.dim_out);
  h_.swap(h_next_);
}

template <class S, class G>
void NequipImpl<S, G>::forward(const AtomGraph& g, EngineResult& result, GhostExchange* exchange) {
  const std::size_t nl = g.num_local, nn = g.num_nodes;
  const std::int64_t nl64 = static_cast<std::int64_t>(nl);
  edge_geometry(g);
  const int d0 = embedding_dim_;
  h_.resize(nn * d0);
  for (std::size_t n = 0; n < nn; ++n)
    std::copy_n(type_embedding_.data() + static_cast<std::size_t>(g.species[n]) * d0, d0,
                h_.data() + n * d0);
  x_.resize(layers_.size());
  y_.resize(layers_.size());
  for (int k = 0; k < static_cast<int>(layers_.size()); ++k) forward_layer(g, k, exchange);

  const int dim_last = layers_.back().dim_out;
  std::vector<S> e_net(nl);
#pragma omp parallel
  {
    Workspace<S>& ws = ws_[omp_get_thread_num()];
#pragma omp for schedule(static)
    for (std::int64_t c0 = 0; c0 < nl64; c0 += kNodeChunk) {
      const int n = static_cast<int>(std::min<std::int64_t>(kNodeChunk, nl64 - c0));
      const S* out = readout_.forward(n, h_.data() + c0 * dim_last, ws.mlp.data());
      for (int q = 0; q < n; ++q) e_net[c0 + q] = out[q];
    }
  }
  // Scale/shift and the pair term in G (float64 in NequIP, whatever the model dtype).
  for (std::size_t i = 0; i < nl; ++i) {
    const int s = g.species[i];
    G e = static_cast<G>(shifts_[s]) + static_cast<G>(scales_[s]) * static_cast<G>(e_net[i]);
    if (zbl_) {
      G pair = 0;
      for (int p = by_center_.ptr[i]; p < by_center_.ptr[i + 1]; ++p)
        pair += zbl_edge_[by_center_.idx[p]];
      e += pair;
    }
    result.atom_energy[i] = static_cast<double>(e);
    result.energy += static_cast<double>(e);
  }
}

template void NequipImpl<double, double>::forward(const AtomGraph&, EngineResult&, GhostExchange*);
template void NequipImpl<float, double>::forward(const AtomGraph&, EngineResult&, GhostExchange*);
template void NequipImpl<float, float>::forward(const AtomGraph&, EngineResult&, GhostExchange*);

}  // namespace clebsch::nequip_detail
