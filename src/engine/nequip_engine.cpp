// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The NequIP host engine (nequip_engine.h): model conversion and checks, graph validation, the
// layer-by-layer forward pass with ghost exchanges, and the hand-written backward pass to
// dE/dvector. The per-op kernels (MLP, linear, gate, self-connection, uvu convolution) live in
// nequip_engine_ops.h; the two that carry most of the arithmetic (the MLP products and the
// per-edge convolution) are defined at the top of this file, compiled once per instruction set.
// Spherical harmonics are e3nn's (component normalisation, y the polar axis, index m+l inside a
// degree-l block, blocks l = 0..lmax); the convolution couplings are the exported ones carried by
// the model's TensorProduct descriptors.
#include "clebsch/engine/nequip_engine.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <type_traits>
#include <utility>

#include "clebsch/support/error.h"
#include "clebsch/engine/nequip_engine_ops.h"
#include "clebsch/engine/nequip_graph_check.h"
#include "clebsch/nn/radial.h"
#include "clebsch/o3/spherical_harmonics.h"

namespace clebsch {

using nequip_ops::format_number;

// ---------------------------------------------------------------------------------------------
// The hot kernels (declared in nequip_engine_ops.h): MLP products and per-edge convolution.
// ---------------------------------------------------------------------------------------------

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
// Function multiversioning: the library stays portable (baseline x86-64) while the MLP products,
// most of the work, use the widest vectors the CPU has. The choice is made once per process, so
// results are reproducible on one machine; across machines they differ by rounding only.
// The helpers must be inlined into each clone to be compiled for its instruction set.
#define CLEBSCH_NEQUIP_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define CLEBSCH_NEQUIP_INLINE inline __attribute__((always_inline))
#else
#define CLEBSCH_NEQUIP_TARGET_CLONES
#define CLEBSCH_NEQUIP_INLINE inline
#endif

namespace nequip_ops {
namespace {

/// Rows [r, r+RB) of C = A B: a RB x JB block of C stays in registers over the whole k loop, so
/// each B row is loaded once per RB rows and C is written once.
template <class S, int RB, int JB>
CLEBSCH_NEQUIP_INLINE void gemm_rows(int r, int k, int m, const S* A, const S* B, S* C) {
  int j0 = 0;
  for (; j0 + JB <= m; j0 += JB) {
    S acc[RB][JB] = {};
    for (int q = 0; q < k; ++q) {
      const S* b = B + static_cast<std::size_t>(q) * m + j0;
      for (int rr = 0; rr < RB; ++rr) {
        const S a = A[static_cast<std::size_t>(r + rr) * k + q];
#pragma omp simd
        for (int jj = 0; jj < JB; ++jj) acc[rr][jj] += a * b[jj];
      }
    }
    for (int rr = 0; rr < RB; ++rr)
      std::copy_n(acc[rr], JB, C + static_cast<std::size_t>(r + rr) * m + j0);
  }
  const int rem = m - j0;
  if (rem > 0) {
    S acc[RB][JB] = {};
    for (int q = 0; q < k; ++q) {
      const S* b = B + static_cast<std::size_t>(q) * m + j0;
      for (int rr = 0; rr < RB; ++rr) {
        const S a = A[static_cast<std::size_t>(r + rr) * k + q];
        for (int jj = 0; jj < rem; ++jj) acc[rr][jj] += a * b[jj];
      }
    }
    for (int rr = 0; rr < RB; ++rr)
      std::copy_n(acc[rr], rem, C + static_cast<std::size_t>(r + rr) * m + j0);
  }
}

template <class S, int JB>
CLEBSCH_NEQUIP_INLINE void gemm_blocked(int n, int k, int m, const S* A, const S* B, S* C) {
  int r = 0;
  for (; r + 4 <= n; r += 4) gemm_rows<S, 4, JB>(r, k, m, A, B, C);
  for (; r < n; ++r) gemm_rows<S, 1, JB>(r, k, m, A, B, C);
}

// The bodies of the convolution kernels, for any scalar; x1t, outt, gt and gx1t are
// component-major (index m*mul+u inside a block), so every inner loop runs over channels.
template <class S>
CLEBSCH_NEQUIP_INLINE void conv_forward_edge_body(const ConvPath<S>* paths, int num_paths,
                                                  const S* x1t, const S* y, const S* w, S* outt,
                                                  S* scratch) {
  for (int pi = 0; pi < num_paths; ++pi) {
    const ConvPath<S>& p = paths[pi];
    const int U = p.mul1;
    const S* a = x1t + p.off1;
    S* o = outt + p.off_out;
    S* wa = scratch;  // [d1][U]: w[u] a[i][u]
    for (int v = 0; v < p.mul2; ++v) {
      const S* b = y + p.off2 + v * p.d2;
      for (int i = 0; i < p.d1; ++i) {
        const S* ai = a + i * U;
        S* wai = wa + i * U;
        if (p.weight_offset >= 0) {
          const S* wv = w + p.weight_offset + v;
          const int stride = p.mul2;
#pragma omp simd
          for (int u = 0; u < U; ++u) wai[u] = wv[u * stride] * ai[u];
        } else {
          std::copy_n(ai, U, wai);
        }
      }
      for (const Coupling<S>& e : p.cg) {
        const S cy = e.c * b[e.j];
        const S* wai = wa + e.i * U;
        S* ok = o + e.k * U;
#pragma omp simd
        for (int u = 0; u < U; ++u) ok[u] += cy * wai[u];
      }
    }
  }
}

template <class S>
CLEBSCH_NEQUIP_INLINE void conv_backward_edge_body(const ConvPath<S>* paths, int num_paths,
                                                   int weight_numel, const S* x1t, const S* y,
                                                   const S* w, const S* gt, S* gx1t, S* gy, S* gw,
                                                   S* scratch) {
  // Weights of paths without couplings are not visited below but must read as zero.
  std::fill(gw, gw + weight_numel, S(0));
  for (int pi = 0; pi < num_paths; ++pi) {
    const ConvPath<S>& p = paths[pi];
    const int U = p.mul1;
    const S* a = x1t + p.off1;
    const S* g = gt + p.off_out;
    S* t = scratch;                  // [d3][U]: sum_ij P_ijk Y_j a[i][u]
    S* wg = scratch + p.d3 * U;      // [d3][U]: w[u] g[k][u]
    S* wv = scratch + 2 * p.d3 * U;  // [U]
    const bool weighted = p.weight_offset >= 0;
    for (int v = 0; v < p.mul2; ++v) {
      const S* b = y + p.off2 + v * p.d2;
      S* gb = gy + p.off2 + v * p.d2;
      for (int u = 0; u < U; ++u) wv[u] = weighted ? w[p.weight_offset + u * p.mul2 + v] : S(1);
      for (int k = 0; k < p.d3; ++k) {
        const S* gk = g + k * U;
        S* wgk = wg + k * U;
#pragma omp simd
        for (int u = 0; u < U; ++u) wgk[u] = wv[u] * gk[u];
      }
      if (weighted) std::fill(t, t + p.d3 * U, S(0));
      for (const Coupling<S>& e : p.cg) {
        const S cy = e.c * b[e.j];
        const S* ai = a + e.i * U;
        const S* wgk = wg + e.k * U;
        if (weighted) {
          S* tk = t + e.k * U;
#pragma omp simd
          for (int u = 0; u < U; ++u) tk[u] += cy * ai[u];
        }
        S dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int u = 0; u < U; ++u) dot += ai[u] * wgk[u];
        gb[e.j] += e.c * dot;
        if (gx1t) {
          S* gxi = gx1t + p.off1 + e.i * U;
#pragma omp simd
          for (int u = 0; u < U; ++u) gxi[u] += cy * wgk[u];
        }
      }
      if (weighted) {
        // gw[u] = sum_k t[k][u] g[k][u], accumulated in wv (no longer needed) over k.
        std::fill(wv, wv + U, S(0));
        for (int k = 0; k < p.d3; ++k) {
          const S* tk = t + k * U;
          const S* gk = g + k * U;
#pragma omp simd
          for (int u = 0; u < U; ++u) wv[u] += tk[u] * gk[u];
        }
        S* gwp = gw + p.weight_offset + v;
        for (int u = 0; u < U; ++u) gwp[u * p.mul2] = wv[u];
      }
    }
  }
}

}  // namespace

CLEBSCH_NEQUIP_TARGET_CLONES
void gemm_nn(int n, int k, int m, const double* A, const double* B, double* C) {
  gemm_blocked<double, 8>(n, k, m, A, B, C);
}

CLEBSCH_NEQUIP_TARGET_CLONES
void gemm_nn(int n, int k, int m, const float* A, const float* B, float* C) {
  gemm_blocked<float, 16>(n, k, m, A, B, C);
}

// The convolution kernels vectorise over channels; they are the rest of the per-edge work.
CLEBSCH_NEQUIP_TARGET_CLONES
void conv_forward_edge(const ConvPath<double>* paths, int num_paths, const double* x1t,
                       const double* y, const double* w, double* outt, double* scratch) {
  conv_forward_edge_body(paths, num_paths, x1t, y, w, outt, scratch);
}

CLEBSCH_NEQUIP_TARGET_CLONES
void conv_forward_edge(const ConvPath<float>* paths, int num_paths, const float* x1t,
                       const float* y, const float* w, float* outt, float* scratch) {
  conv_forward_edge_body(paths, num_paths, x1t, y, w, outt, scratch);
}

CLEBSCH_NEQUIP_TARGET_CLONES
void conv_backward_edge(const ConvPath<double>* paths, int num_paths, int weight_numel,
                        const double* x1t, const double* y, const double* w, const double* gt,
                        double* gx1t, double* gy, double* gw, double* scratch) {
  conv_backward_edge_body(paths, num_paths, weight_numel, x1t, y, w, gt, gx1t, gy, gw, scratch);
}

CLEBSCH_NEQUIP_TARGET_CLONES
void conv_backward_edge(const ConvPath<float>* paths, int num_paths, int weight_numel,
                        const float* x1t, const float* y, const float* w, const float* gt,
                        float* gx1t, float* gy, float* gw, float* scratch) {
  conv_backward_edge_body(paths, num_paths, weight_numel, x1t, y, w, gt, gx1t, gy, gw, scratch);
}

}  // namespace nequip_ops

// ---------------------------------------------------------------------------------------------
// The precision-independent part: species, cutoffs, graph validation.
// ---------------------------------------------------------------------------------------------

class NequipEngine::Impl {
 public:
  Impl(const model::Model& model, Precision precision) : precision_(precision) {
    if (model.arch != model::Arch::kNequip || !model.nequip)
      throw Error("NequipEngine: the model's arch is " +
                  std::string(model.arch == model::Arch::kMace ? "mace" : "unknown") +
                  ", expected nequip");
    if (model.edge_vector != model::EdgeVector::kNeighbourMinusCentre)
      throw Error(
          "NequipEngine: the model's graph.edge_vector is centre_minus_neighbour; NequIP "
          "models use neighbour_minus_centre");
    num_species_ = model.num_species();
    if (num_species_ < 1) throw Error("NequipEngine: the model has no species");
    for (const auto& s : model.species) species_names_.push_back(s.symbol);
    const std::size_t s2 = static_cast<std::size_t>(num_species_) * num_species_;
    if (model.r_max_pairs.size() != s2)
      throw Error("NequipEngine: r_max_pairs has " + std::to_string(model.r_max_pairs.size()) +
                  " entries, expected " + std::to_string(s2));
    r_max_pairs_ = model.r_max_pairs;
    r_max_ = 0;
    for (double r : r_max_pairs_) {
      if (!(std::isfinite(r) && r > 0))
        throw Error("NequipEngine: r_max_pairs holds " + format_number(r) +
                    ", expected finite positive cutoffs");
      r_max_ = std::max(r_max_, r);
    }
    num_layers_ = static_cast<int>(model.nequip->layers.size());
  }
  virtual ~Impl() = default;

  virtual void compute(const AtomGraph& graph, EngineResult& result, GhostExchange* exchange) = 0;

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
};

namespace {

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

template <class S, class G>
class NequipImpl final : public NequipEngine::Impl {
 public:
  NequipImpl(const model::Model& model, Precision precision)
      : Impl(model, precision), radial_(make_radial(model)) {
    const model::Nequip& nq = *model.nequip;
    const int ns = num_species_;
    sh_lmax_ = model.sh_lmax;
    num_sh_ = (sh_lmax_ + 1) * (sh_lmax_ + 1);
    if (model.sh_irreps.dim() != num_sh_)
      throw Error("NequipEngine: spherical_harmonics.irreps " + model.sh_irreps.str() +
                  " has dimension " + std::to_string(model.sh_irreps.dim()) + ", lmax " +
                  std::to_string(sh_lmax_) + " needs " + std::to_string(num_sh_));
    num_basis_ = radial_.num_basis();

    // Type embedding: the initial features and the second input of the self-connections.
    embedding_dim_ = nq.embedding_dim;
    if (embedding_dim_ < 1 ||
        nq.type_embedding.size() != static_cast<std::size_t>(ns) * embedding_dim_)
      throw Error("NequipEngine: type_embedding has " + std::to_string(nq.type_embedding.size()) +
                  " values, expected " + std::to_string(ns) + " x " +
                  std::to_string(embedding_dim_));
    type_embedding_.assign(nq.type_embedding.begin(), nq.type_embedding.end());

    if (nq.layers.empty()) throw Error("NequipEngine: the model has no convolution layers");
    int dim_prev = embedding_dim_;
    for (std::size_t k = 0; k < nq.layers.size(); ++k) {
      layers_.push_back(make_layer(nq.layers[k], static_cast<int>(k), dim_prev, model));
      if (k + 1 < nq.layers.size()) exchange_width_ = std::max(exchange_width_, dim_prev);
    }

    readout_ = MlpOp<S>(nq.readout, "readout");
    if (readout_.dim_in() != dim_prev || readout_.dim_out() != 1)
      throw Error("NequipEngine: the readout maps " + std::to_string(readout_.dim_in()) + " -> " +
                  std::to_string(readout_.dim_out()) + " values, expected " +
                  std::to_string(dim_prev) + " -> 1");
    scales_ = per_species(nq.scales, "scale_shift.scales");
    shifts_ = per_species(nq.shifts, "scale_shift.shifts");

    if (nq.pair_potential) {
      const model::NequipZbl& z = *nq.pair_potential;
      if (z.atomic_numbers.size() != static_cast<std::size_t>(ns))
        throw Error("NequipEngine: pair_potential.atomic_numbers has " +
                    std::to_string(z.atomic_numbers.size()) + " entries, expected " +
                    std::to_string(ns));
      Zbl zbl;
      zbl.num_species = ns;
      zbl.qq = z.qqr2exesquare;
      zbl.c = z.c;
      zbl.d = z.d;
      zbl.cutoff = PolynomialCutoff(1.0, z.cutoff_p);
      for (int a = 0; a < ns; ++a)
        for (int b = 0; b < ns; ++b) {
          const double za = z.atomic_numbers[a], zb = z.atomic_numbers[b];
          zbl.screening.push_back((std::pow(za, z.pzbl) + std::pow(zb, z.pzbl)) / z.a0);
          zbl.zz.push_back(za * zb);
        }
      zbl_ = std::move(zbl);
    }

    // Scratch sizes.
    for (const Layer<S>& L : layers_) {
      max_mlp_in_ = std::max(max_mlp_in_, L.edge_mlp.dim_in());
      max_mlp_out_ = std::max(max_mlp_out_, L.edge_mlp.dim_out());
      max_mlp_scratch_ = std::max(max_mlp_scratch_, L.edge_mlp.scratch_per_row());
      max_mlp_width_ = std::max(max_mlp_width_, L.edge_mlp.max_width());
      max_dim_x_ = std::max(max_dim_x_, L.dim_x);
      max_dim_mid_ = std::max(max_dim_mid_, L.dim_mid);
      max_tp_scratch_ = std::max(max_tp_scratch_, L.tp.scratch_size());
    }
    max_mlp_in_ = std::max(max_mlp_in_, readout_.dim_in());
    max_mlp_out_ = std::max(max_mlp_out_, readout_.dim_out());
    max_mlp_scratch_ = std::max(max_mlp_scratch_, readout_.scratch_per_row());
    max_mlp_width_ = std::max(max_mlp_width_, readout_.max_width());
  }

  void compute(const AtomGraph& graph, EngineResult& result, GhostExchange* exchange) override;

 private:
  static NequipRadialEmbedding make_radial(const model::Model& model) {
    const model::NequipRadial& r = model.nequip->radial;
    const int ns = model.num_species();
    if (r.rmax_recip.size() != static_cast<std::size_t>(ns) * ns)
      throw Error("NequipEngine: radial.rmax_recip has " + std::to_string(r.rmax_recip.size()) +
                  " entries, expected " + std::to_string(ns) + " x " + std::to_string(ns));
    if (static_cast<int>(r.bessel_weights.size()) != r.num_basis)
      throw Error("NequipEngine: radial.num_basis is " + std::to_string(r.num_basis) +
                  " but bessel_weights has " + std::to_string(r.bessel_weights.size()) +
                  " entries");
    return NequipRadialEmbedding(NequipEdgeLength(ns, r.rmax_recip),
                                 NequipBessel(r.bessel_weights, r.factor), r.cutoff_p);
  }

  std::vector<S> per_species(const std::vector<double>& v, const std::string& what) const {
    const std::size_t ns = static_cast<std::size_t>(num_species_);
    if (v.size() != ns && v.size() != 1)
      throw Error("NequipEngine: " + what + " has " + std::to_string(v.size()) +
                  " entries, expected 1 or " + std::to_string(ns));
    std::vector<S> out(ns);
    for (std::size_t s = 0; s < ns; ++s) out[s] = static_cast<S>(v[v.size() == 1 ? 0 : s]);
    return out;
  }

  Layer<S> make_layer(const model::NequipLayer& m, int k, int& dim_prev,
                      const model::Model& model) const {
    const std::string where = "layer " + std::to_string(k);
    Layer<S> L;
    L.resnet = m.resnet;
    L.dim_in = m.irreps_in.dim();
    if (L.dim_in != dim_prev)
      throw Error("NequipEngine: " + where + " expects irreps_in " + m.irreps_in.str() +
                  " (dimension " + std::to_string(L.dim_in) + "), the previous stage gives " +
                  std::to_string(dim_prev) + " values");
    L.linear_1 = LinearOp<S>(m.linear_1, where + " linear_1");
    if (L.linear_1.dim_in() != L.dim_in)
      throw Error("NequipEngine: " + where + " linear_1 takes " + m.linear_1.irreps_in.str() +
                  ", the layer input is " + m.irreps_in.str());
    L.dim_x = L.linear_1.dim_out();
    L.norm_const = per_species(m.norm_const, where + " norm_const");
    L.edge_mlp = MlpOp<S>(m.edge_mlp, where + " edge_mlp");
    if (L.edge_mlp.dim_in() != num_basis_)
      throw Error("NequipEngine: " + where + " edge_mlp takes " +
                  std::to_string(L.edge_mlp.dim_in()) + " inputs, the radial basis has " +
                  std::to_string(num_basis_));
    L.tp = ConvTp<S>(m.tp, where + " tp");
    if (L.tp.dim_in1() != L.dim_x || L.tp.dim_in2() != num_sh_)
      throw Error("NequipEngine: " + where + " tp takes " + m.tp.descriptor.irreps_in1().str() +
                  " x " + m.tp.descriptor.irreps_in2().str() + ", the features are " +
                  m.linear_1.irreps_out.str() + " and the spherical harmonics " +
                  model.sh_irreps.str());
    if (L.tp.weight_numel() != L.edge_mlp.dim_out())
      throw Error("NequipEngine: " + where + " tp needs " + std::to_string(L.tp.weight_numel()) +
                  " weights per edge, edge_mlp gives " + std::to_string(L.edge_mlp.dim_out()));
    L.dim_mid = L.tp.dim_out();
    L.linear_2 = LinearOp<S>(m.linear_2, where + " linear_2");
    if (L.linear_2.dim_in() != L.dim_mid)
      throw Error("NequipEngine: " + where + " linear_2 takes " + m.linear_2.irreps_in.str() +
                  ", tp gives " + m.tp.descriptor.irreps_out().str());
    L.dim_y = L.linear_2.dim_out();
    if (m.sc) {
      L.sc.emplace(*m.sc, model.nequip->type_embedding, num_species_, embedding_dim_,
                   where + " sc");
      if (L.sc->dim_in1() != L.dim_in || L.sc->dim_out() != L.dim_y)
        throw Error("NequipEngine: " + where + " sc maps " + m.sc->descriptor.irreps_in1().str() +
                    " -> " + m.sc->descriptor.irreps_out().str() + ", the layer has " +
                    m.irreps_in.str() + " -> " + m.linear_2.irreps_out.str());
    }
    L.gate = GateOp<S>(m.gate, where + " gate");
    if (L.gate.dim_in() != L.dim_y)
      throw Error("NequipEngine: " + where + " gate takes " + m.gate.irreps_in.str() +
                  ", linear_2 gives " + m.linear_2.irreps_out.str());
    L.dim_out = L.gate.dim_out();
    if (L.resnet && L.dim_out != L.dim_in)
      throw Error("NequipEngine: " + where + " has resnet but maps " + m.irreps_in.str() + " to " +
                  m.gate.irreps_out.str());
    dim_prev = L.dim_out;
    return L;
  }

  void ensure_workspaces() {
    const int nt = std::max(1, omp_get_max_threads());
    if (static_cast<int>(ws_.size()) >= nt) return;
    ws_.resize(nt);
    const int chunk = std::max(kEdgeChunk, kNodeChunk);
    for (Workspace<S>& w : ws_) {
      w.rows_in.assign(static_cast<std::size_t>(chunk) * max_mlp_in_, S(0));
      w.mlp.assign(static_cast<std::size_t>(chunk) * max_mlp_scratch_, S(0));
      w.grad_w.assign(static_cast<std::size_t>(chunk) * max_mlp_out_, S(0));
      w.grad_in.assign(static_cast<std::size_t>(chunk) * max_mlp_in_, S(0));
      w.mlp_grad.assign(2 * static_cast<std::size_t>(chunk) * max_mlp_width_, S(0));
      w.grad_x.assign(max_dim_x_, S(0));
      w.grad_y.assign(num_sh_, S(0));
      w.row.assign(std::max(max_dim_x_, max_dim_mid_), S(0));
      w.message.assign(max_dim_mid_, S(0));
      w.tp.assign(max_tp_scratch_, S(0));
    }
  }

  void edge_geometry(const AtomGraph& g);
  void forward_layer(const AtomGraph& g, int k, GhostExchange* exchange);
  void backward_layer(const AtomGraph& g, int k, GhostExchange* exchange);

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

// ---------------------------------------------------------------------------------------------

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
      const double* vd = g.vector + 3 * e;
      const G v[3] = {static_cast<G>(vd[0]), static_cast<G>(vd[1]), static_cast<G>(vd[2])};
      const G r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
      const int si = g.species[g.center[e]], sj = g.species[g.neighbor[e]];
      radial_.evaluate<G>(r, si, sj, feats.data());
      for (int n = 0; n < nb; ++n) emb_[e * nb + n] = static_cast<S>(feats[n]);
      spherical_harmonics<G>(lmax, v, y.data());
      for (int i = 0; i < nsh; ++i) sh_[e * nsh + i] = static_cast<S>(y[i]);
      if (zbl_) {
        const G recip = static_cast<G>(radial_.length().rmax_recip(si, sj));
        G de;
        zbl_edge_[e] = zbl_->energy<G>(r, r * recip, recip, si, sj, &de);
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
  const int nb = num_basis_, nsh = num_sh_, numel = L.tp.weight_numel();
#pragma omp parallel
  {
    Workspace<S>& ws = ws_[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 4)
    for (std::int64_t i = 0; i < nl; ++i) {
      S* out = ws.message.data();
      std::fill(out, out + dim_mid, S(0));
      const int begin = by_center_.ptr[i], end = by_center_.ptr[i + 1];
      for (int c0 = begin; c0 < end; c0 += kEdgeChunk) {
        const int n = std::min(kEdgeChunk, end - c0);
        for (int q = 0; q < n; ++q) {
          const int e = by_center_.idx[c0 + q];
          std::copy_n(emb_.data() + static_cast<std::size_t>(e) * nb, nb,
                      ws.rows_in.data() + q * nb);
        }
        const S* w = L.edge_mlp.forward(n, ws.rows_in.data(), ws.mlp.data());
        for (int q = 0; q < n; ++q) {
          const int e = by_center_.idx[c0 + q];
          L.tp.forward_edge(x.data() + static_cast<std::size_t>(g.neighbor[e]) * dim_x,
                            sh_.data() + static_cast<std::size_t>(e) * nsh, w + q * numel, out,
                            ws.tp.data());
        }
      }
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
void NequipImpl<S, G>::backward_layer(const AtomGraph& g, int k, GhostExchange* exchange) {
  const Layer<S>& L = layers_[k];
  const std::int64_t nl = static_cast<std::int64_t>(g.num_local);
  const std::int64_t nn = static_cast<std::int64_t>(g.num_nodes);
  const int dim_in = L.dim_in, dim_x = L.dim_x, dim_mid = L.dim_mid, dim_y = L.dim_y;
  const int dim_out = L.dim_out;
  // The first layer's input is the type embedding, a constant: no gradient to propagate.
  const bool need_grad_h = k > 0;

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
      const int begin = by_neighbor_.ptr[j], end = by_neighbor_.ptr[j + 1];
      if (begin == end) continue;
      S* gx = ws.grad_x.data();
      std::fill(gx, gx + dim_x, S(0));
      const S* xj = x.data() + j * dim_x;
      for (int c0 = begin; c0 < end; c0 += kEdgeChunk) {
        const int n = std::min(kEdgeChunk, end - c0);
        for (int q = 0; q < n; ++q) {
          const int e = by_neighbor_.idx[c0 + q];
          std::copy_n(emb_.data() + static_cast<std::size_t>(e) * nb, nb,
                      ws.rows_in.data() + q * nb);
        }
        const S* w = L.edge_mlp.forward(n, ws.rows_in.data(), ws.mlp.data());
        for (int q = 0; q < n; ++q) {
          const int e = by_neighbor_.idx[c0 + q];
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
          const int e = by_neighbor_.idx[c0 + q];
          G* acc = grad_emb_.data() + static_cast<std::size_t>(e) * nb;
          const S* gi = ws.grad_in.data() + q * nb;
          for (int t = 0; t < nb; ++t) acc[t] += static_cast<G>(gi[t]);
        }
      }
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
void NequipImpl<S, G>::compute(const AtomGraph& g, EngineResult& result, GhostExchange* exchange) {
  validate(g, exchange);
  ensure_workspaces();
  const std::size_t nl = g.num_local, nn = g.num_nodes, ne = g.num_edges;
  const std::int64_t nl64 = static_cast<std::int64_t>(nl);
  const std::int64_t ne64 = static_cast<std::int64_t>(ne);
  result.atom_energy.assign(nl, 0.0);
  result.edge_gradient.assign(3 * ne, 0.0);
  result.energy = 0;
  // No early return for an empty rank: its exchanges must still take part (see forward_layer).

  by_center_.build(nl, ne, g.center);
  by_neighbor_.build(nn, ne, g.neighbor);
  edge_geometry(g);

  // ---- forward ----
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

  // ---- backward ----
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
      const double* vd = g.vector + 3 * e;
      const G v[3] = {static_cast<G>(vd[0]), static_cast<G>(vd[1]), static_cast<G>(vd[2])};
      const G r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
      const int si = g.species[g.center[e]], sj = g.species[g.neighbor[e]];
      radial_.evaluate<G>(r, si, sj, feats.data(), dfeats.data());
      spherical_harmonics_with_gradient<G>(lmax, v, y.data(), dy.data());
      G de_dr = 0;
      const G* ge = grad_emb_.data() + e * nb;
      for (int n = 0; n < nb; ++n) de_dr += ge[n] * dfeats[n];
      if (zbl_) {
        const G recip = static_cast<G>(radial_.length().rmax_recip(si, sj));
        G dz;
        zbl_->energy<G>(r, r * recip, recip, si, sj, &dz);
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

}  // namespace

// ---------------------------------------------------------------------------------------------

NequipEngine::NequipEngine(const model::Model& model, Precision precision) {
  switch (precision) {
    case Precision::kFloat64:
      impl_ = std::make_unique<NequipImpl<double, double>>(model, precision);
      break;
    case Precision::kMixed:
      impl_ = std::make_unique<NequipImpl<float, double>>(model, precision);
      break;
    case Precision::kFloat32:
      impl_ = std::make_unique<NequipImpl<float, float>>(model, precision);
      break;
    default:
      throw Error("NequipEngine: unknown precision " + std::to_string(static_cast<int>(precision)));
  }
}

NequipEngine::~NequipEngine() = default;
NequipEngine::NequipEngine(NequipEngine&&) noexcept = default;
NequipEngine& NequipEngine::operator=(NequipEngine&&) noexcept = default;

const std::vector<std::string>& NequipEngine::species() const { return impl_->species_names_; }
double NequipEngine::r_max() const { return impl_->r_max_; }
double NequipEngine::r_max(int species_a, int species_b) const {
  const int ns = impl_->num_species_;
  if (species_a < 0 || species_a >= ns || species_b < 0 || species_b >= ns)
    throw Error("NequipEngine::r_max: species pair (" + std::to_string(species_a) + ", " +
                std::to_string(species_b) + ") is out of range [0, " + std::to_string(ns) + ")");
  return impl_->r_max_pairs_[static_cast<std::size_t>(species_a) * ns + species_b];
}
int NequipEngine::num_layers() const { return impl_->num_layers_; }
int NequipEngine::exchange_width() const { return impl_->exchange_width_; }
Precision NequipEngine::precision() const { return impl_->precision_; }

void NequipEngine::compute(const AtomGraph& graph, EngineResult& result, GhostExchange* exchange) {
  impl_->compute(graph, result, exchange);
}

}  // namespace clebsch
