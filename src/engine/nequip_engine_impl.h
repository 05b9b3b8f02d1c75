// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The internals of the NequIP host engine (nequip_engine.h), shared by the files of its stages:
// nequip_engine.cpp (model conversion and checks, the compute() sequence, the public class),
// nequip_engine_forward.cpp (edge geometry, the layers with their ghost exchanges, readout and
// energies), nequip_engine_backward.cpp (the hand-written backward pass to dE/dvector) and
// nequip_engine_kernels.cpp (the MLP products and per-edge convolution, compiled once per
// instruction set). NequipEngine::Impl holds what does not depend on the precision (species,
// cutoffs, graph validation); NequipImpl<S, G> runs the network in S and the geometry in G, and
// each stage's file instantiates it for the three precisions. Private to src/engine/.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "clebsch/engine/nequip_engine.h"
#include "clebsch/engine/nequip_engine_ops.h"
#include "clebsch/engine/nequip_graph_check.h"
#include "clebsch/nn/radial.h"
#include "clebsch/support/error.h"

namespace clebsch {

/// The precision-independent part: species, cutoffs, graph validation.
class NequipEngine::Impl {
 public:
  /// @throws Error when the model is not a NequIP model or its species and cutoffs do not fit.
  Impl(const model::Model& model, Precision precision);
  virtual ~Impl() = default;

  virtual void compute(const AtomGraph& graph, EngineResult& result, GhostExchange* exchange) = 0;
  /// Bytes of the buffers kept between calls (workspaces included).
  virtual std::size_t buffer_bytes() const = 0;

  /// Checks everything compute() relies on, before any arithmetic (nequip_graph_check.h: the
  /// CUDA engine runs the same checks, so both fail with the same message).
  void validate(const AtomGraph& g, GhostExchange* exchange) const {
    check_nequip_graph(g, exchange != nullptr, {num_species_, r_max_pairs_, species_names_});
  }

  Precision precision_;
  int num_species_ = 0;
  int num_layers_ = 0;
  int exchange_width_ = 0;
  double r_max_ = 0;
  std::vector<std::string> species_names_;
  std::vector<double> r_max_pairs_;
  std::size_t model_bytes_ = 0;  // the model's values in the network type
};

namespace nequip_detail {

using nequip_ops::ConvTp;
using nequip_ops::GateOp;
using nequip_ops::LinearOp;
using nequip_ops::MlpOp;
using nequip_ops::SelfConnection;

/// Edges of one node are handed to the MLP kernels in chunks of at most this many rows: large
/// enough to reuse each weight row many times, small enough that a chunk's activations stay in
/// cache.
constexpr int kEdgeChunk = 32;
/// Rows per chunk of the node-level readout MLP.
constexpr int kNodeChunk = 32;

/// Compressed rows of an edge list keyed by one endpoint; within a row, edges keep ascending
/// edge ids so every sum has a fixed order.
struct Csr {
  std::vector<int> ptr, idx;
  void build(std::size_t num_rows, std::size_t num_edges, const int* key) {
    ptr.assign(num_rows + 1, 0);
    for (std::size_t e = 0; e < num_edges; ++e) ++ptr[key[e] + 1];
    for (std::size_t r = 0; r < num_rows; ++r) ptr[r + 1] += ptr[r];
    idx.resize(num_edges);
    std::vector<int> fill(ptr.begin(), ptr.end() - 1);
    for (std::size_t e = 0; e < num_edges; ++e) idx[fill[key[e]]++] = static_cast<int>(e);
  }
};

/// ZBL of NequIP with the file's constants (FORMAT.md §6):
/// V = qqr2exesquare Z_i Z_j / r * sum_k c_k exp(d_k X) * f_p(x), X = (Z_i^pzbl + Z_j^pzbl) r / a0.
struct Zbl {
  int num_species = 0;
  double qq = 0;
  std::array<double, 4> c{}, d{};
  std::vector<double> screening, zz;  // [centre][neighbour]
  PolynomialCutoff cutoff{1.0, 6.0};

  template <class G>
  G energy(G r, G x, G dx_dr, int si, int sj, G* dE_dr) const {
    G df_dx;
    const G f = cutoff(x, &df_dx);
    if (f == G(0)) {
      *dE_dr = G(0);
      return G(0);
    }
    const std::size_t ij = static_cast<std::size_t>(si) * num_species + sj;
    const G k = static_cast<G>(screening[ij]);
    const G X = k * r;
    G psi = 0, dpsi = 0;
    for (int n = 0; n < 4; ++n) {
      const G term = static_cast<G>(c[n]) * std::exp(static_cast<G>(d[n]) * X);
      psi += term;
      dpsi += static_cast<G>(d[n]) * term;
    }
    const G q = static_cast<G>(qq) * static_cast<G>(zz[ij]) / r;
    const G e = q * psi;
    *dE_dr = q * (dpsi * k - psi / r) * f + e * df_dx * dx_dr;
    return e * f;
  }
};

/// One edge as the geometry sees it: its vector and length in G, and the species of its centre
/// (si) and neighbour (sj).
template <class G>
struct EdgeFrame {
  G v[3];
  G r;
  int si, sj;

  EdgeFrame(const AtomGraph& g, std::int64_t e) {
    const double* vd = g.vector + 3 * e;
    v[0] = static_cast<G>(vd[0]), v[1] = static_cast<G>(vd[1]), v[2] = static_cast<G>(vd[2]);
    r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    si = g.species[g.center[e]], sj = g.species[g.neighbor[e]];
  }
};

/// One convolution layer, its ops converted to the network scalar S.
template <class S>
struct Layer {
  bool resnet = false;
  int dim_in = 0, dim_x = 0, dim_mid = 0, dim_y = 0, dim_out = 0;
  std::optional<SelfConnection<S>> sc;
  LinearOp<S> linear_1;
  std::vector<S> norm_const;  // [num_species]
  MlpOp<S> edge_mlp;
  ConvTp<S> tp;
  LinearOp<S> linear_2;
  GateOp<S> gate;
};

/// Per-thread scratch, sized once from the model.
template <class S>
struct Workspace {
  std::vector<S> rows_in;   // [chunk][max MLP input]
  std::vector<S> mlp;       // MLP activations of a chunk
  std::vector<S> grad_w;    // [chunk][max MLP output]
  std::vector<S> grad_in;   // [chunk][max MLP input]
  std::vector<S> mlp_grad;  // MLP backward buffers
  std::vector<S> grad_x;    // [max dim_x] component-major dE/dx of one node
  std::vector<S> grad_y;    // [num SH]
  std::vector<S> row;       // [max(dim_x, dim_mid)] one row in e3nn's layout
  std::vector<S> message;   // [max dim_mid] component-major message of one centre
  std::vector<S> tp;        // ConvTp scratch
};

/// The engine in the network scalar S (float64 or float32) and the geometry scalar G (float64
/// in fp64 and mixed, float32 in fp32).
template <class S, class G>
class NequipImpl final : public NequipEngine::Impl {
 public:
  /// Converts and checks every op of the model (nequip_engine.cpp).
  NequipImpl(const model::Model& model, Precision precision);

  void compute(const AtomGraph& graph, EngineResult& result, GhostExchange* exchange) override;
  std::size_t buffer_bytes() const override;

 private:
  // Set-up (nequip_engine.cpp).
  static NequipRadialEmbedding make_radial(const model::Model& model);
  std::vector<S> per_species(const std::vector<double>& v, const std::string& what) const;
  Layer<S> make_layer(const model::NequipLayer& m, int k, int& dim_prev,
                      const model::Model& model) const;
  void ensure_workspaces();

  // Forward (nequip_engine_forward.cpp): the per-edge network inputs, layer k, then the
  // readout, scale/shift and pair term into @p result.
  void edge_geometry(const AtomGraph& g);
  void forward_layer(const AtomGraph& g, int k, GhostExchange* exchange);
  void forward(const AtomGraph& g, EngineResult& result, GhostExchange* exchange);

  // Backward (nequip_engine_backward.cpp): from the energies down to dE/dvector in @p result.
  void backward_layer(const AtomGraph& g, int k, GhostExchange* exchange);
  void backward(const AtomGraph& g, EngineResult& result, GhostExchange* exchange);

  /// Calls @p f(n, edges, w) for the edges of row @p row of @p by (one node's edges, ascending)
  /// in chunks of at most kEdgeChunk: edges[0, n) their ids, w their edge-MLP outputs
  /// (weight_numel each), computed here from their embeddings (gathered into ws.rows_in), with
  /// the activations L.edge_mlp.backward reads left in ws.mlp. Both passes take the weights this
  /// way: recomputing them costs less memory than keeping every layer's.
  template <class F>
  void for_edge_chunks(const Layer<S>& L, const Csr& by, std::int64_t row, Workspace<S>& ws,
                       F&& f) const {
    const int begin = by.ptr[row], end = by.ptr[row + 1], nb = num_basis_;
    for (int c0 = begin; c0 < end; c0 += kEdgeChunk) {
      const int n = std::min(kEdgeChunk, end - c0);
      const int* edges = by.idx.data() + c0;
      for (int q = 0; q < n; ++q)
        std::copy_n(emb_.data() + static_cast<std::size_t>(edges[q]) * nb, nb,
                    ws.rows_in.data() + q * nb);
      f(n, edges, L.edge_mlp.forward(n, ws.rows_in.data(), ws.mlp.data()));
    }
  }

  /// The ZBL pair energy of an edge, and its d/dr in @p dE_dr.
  G zbl_energy(const EdgeFrame<G>& ed, G* dE_dr) const {
    const G recip = static_cast<G>(radial_.length().rmax_recip(ed.si, ed.sj));
    return zbl_->energy<G>(ed.r, ed.r * recip, recip, ed.si, ed.sj, dE_dr);
  }

  NequipRadialEmbedding radial_;
  std::optional<Zbl> zbl_;
  int sh_lmax_ = 0, num_sh_ = 0, num_basis_ = 0, embedding_dim_ = 0;
  std::vector<S> type_embedding_;
  std::vector<Layer<S>> layers_;
  MlpOp<S> readout_;
  std::vector<S> scales_, shifts_;
  int max_mlp_in_ = 0, max_mlp_out_ = 0, max_mlp_scratch_ = 0, max_mlp_width_ = 0;
  int max_dim_x_ = 0, max_dim_mid_ = 0, max_tp_scratch_ = 0;

  // Buffers reused between calls (sizes follow the graph).
  std::vector<Workspace<S>> ws_;
  Csr by_center_, by_neighbor_;
  std::vector<S> sh_, emb_;            // [E][num_sh], [E][num_basis] in the network scalar
  std::vector<G> zbl_edge_;            // [E] pair energy of each edge
  std::vector<G> grad_sh_, grad_emb_;  // [E][num_sh], [E][num_basis]: dE/d(network inputs)
  std::vector<std::vector<S>> x_;      // per layer [num_nodes][dim_x]: linear_1(h) * norm_const,
                                       // component-major (ConvTp)
  std::vector<std::vector<S>> y_;      // per layer [num_local][dim_y]: the gate input
  std::vector<S> h_, h_next_;          // [num_nodes][dim]: layer input / output
  std::vector<S> message_;             // [num_local][dim_mid]
  std::vector<S> grad_h_, grad_h_in_;  // [num_nodes][dim]
  std::vector<S> grad_y_;
  std::vector<S> grad_message_;  // [num_local][dim_mid] component-major
};

}  // namespace nequip_detail
}  // namespace clebsch
