// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The MACE host engine (see mace_engine.h): model plan, graph validation and CSR orderings, the
// per-edge geometry, the layer-by-layer forward pass, the hand-written backward pass, and the
// final chain rule to dE/dvector. Node and message features are kept channel-innermost (ir_mul,
// see mace_kernels.h); the symmetric contraction keeps its own [node][channel][D] layout.
//
// Data flow of one layer t (rows: L local atoms, N all nodes, E edges):
//   sc[L]    = skip_tp(h^{t-1}, species)            residual blocks
//   hu[N]    = linear_up(h^{t-1})                   ghost rows by GhostExchange::forward (t > 0)
//   Mraw[L]  = sum over the centre's edges of conv_tp(hu[sender], Y_e, mlp(e_e) [* f_e])
//   Ml[L]    = linear(Mraw) / avg_num_neighbors  or  / (1 + sum_e tanh(density(e_e)^2) [* f_e])
//   A[L]     = Ml or skip_tp(Ml, species)            (residual or not)
//   h^t[L]   = product_linear(SC(A)) [+ sc]
// Work is organised in centre tasks (whole centres, ~256 edges): a task computes its edges'
// radial MLPs in chunks of 32, accumulates its centres' messages in a per-thread buffer and runs
// their node part at once, so Mraw and the node temporaries never exist for all atoms. Stored
// for the backward pass: per edge only the harmonics and the radial basis (with the cutoff);
// per node hu (every layer), A, and for density blocks the denominators (and Ml of non-residual
// ones) and the pre-activations of non-linear readouts. The backward pass of layers before the
// last runs the node part for all atoms, then the edges sender by sender (so dE/dhu of a sender
// has one owner), recomputing the radial MLPs; the last layer runs forward and backward in the
// same task (fused_last_layer), which computes its radial MLPs once.
#include "clebsch/engine/mace_engine.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <sstream>
#include <utility>

#include "clebsch/support/error.h"
#include "clebsch/engine/mace_kernels.h"
#include "clebsch/nn/radial.h"
#include "clebsch/o3/spherical_harmonics.h"
#include "clebsch/nn/symmetric_contraction.h"

namespace clebsch {

using mace_detail::ConvTp;
using mace_detail::Mlp;
using mace_detail::NodeLinear;
using mace_detail::ScalarAct;
using mace_detail::SpeciesLinear;

namespace {

// Edges per MLP batch: large enough for the GEMM to reuse each weight panel, small enough that
// the batch's radial-MLP output (edges x weight_numel) stays in L2.
constexpr std::size_t kEdgeChunk = 32;
// Edges per scheduling task (whole centres, or whole senders, per task), and the most rows (atoms)
// a task may have: bounds the per-thread node scratch when atoms have few edges.
constexpr std::size_t kTaskEdges = 256;
constexpr std::size_t kTaskRows = 64;
// The least work (flops) worth an OpenMP parallel region: a fork/join costs microseconds, and
// far more on a loaded machine, where a descheduled thread holds the whole team at a barrier.
constexpr double kParallelWork = 2e6;

// Calls f with the OpenMP regions it opens limited to one thread unless `parallel` (for library
// calls that decide their own threading).
template <class F>
void maybe_serial(bool parallel, F&& f) {
  if (parallel) {
    f();
    return;
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  f();
  omp_set_num_threads(saved);
}

// Whole centres (or senders) per task, about kTaskEdges edges and at most kTaskRows rows each.
void make_tasks(const std::vector<int>& ptr, std::vector<std::pair<int, int>>& tasks) {
  tasks.clear();
  const int n = static_cast<int>(ptr.size()) - 1;
  int begin = 0;
  for (int i = 0; i < n; ++i)
    if (static_cast<std::size_t>(ptr[i + 1] - ptr[begin]) >= kTaskEdges ||
        static_cast<std::size_t>(i + 1 - begin) >= kTaskRows || i + 1 == n) {
      tasks.push_back({begin, i + 1});
      begin = i + 1;
    }
}

double contraction_flops(const SymmetricContraction& sc, std::size_t n) {
  return 2.0 * n * sc.num_channels() * static_cast<double>(sc.num_pairs() + sc.num_monomials());
}

std::string fmt(double x) {
  std::ostringstream s;
  s.precision(10);
  s << x;
  return s.str();
}

// ---------------------------------------------------------------------------------------------
// Per-edge geometry functions (double parameters, evaluated in the geometry type G)
// ---------------------------------------------------------------------------------------------

// The radial embedding e_e and the cutoff f(r_e), with d/dr (FORMAT.md §5 "radial").
class Radial {
 public:
  Radial(const model::MaceRadial& r, const std::vector<model::Species>& species)
      : bessel_(r.bessel_weights, r.prefactor),
        cutoff_(r.r_max, r.cutoff_p),
        apply_cutoff_(r.apply_cutoff),
        num_species_(static_cast<int>(species.size())) {
    if (r.num_basis != static_cast<int>(r.bessel_weights.size()))
      throw ModelFormatError("mace.radial: num_basis " + std::to_string(r.num_basis) + " but " +
                             std::to_string(r.bessel_weights.size()) + " bessel_weights");
    if (r.agnesi && r.soft)
      throw ModelFormatError("mace.radial: both an Agnesi and a soft distance transform");
    if (r.agnesi) {
      check_radii(r.agnesi->covalent_radii, "mace.radial.distance_transform (agnesi)");
      // The library's transform takes a table indexed by atomic number: index species s + 1.
      std::vector<double> table{0.0};
      std::vector<int> numbers;
      for (int s = 0; s < num_species_; ++s) {
        table.push_back(r.agnesi->covalent_radii[s]);
        numbers.push_back(s + 1);
      }
      agnesi_.emplace(r.agnesi->q, r.agnesi->p, r.agnesi->a, table, numbers);
    }
    if (r.soft) {
      check_radii(r.soft->covalent_radii, "mace.radial.distance_transform (soft)");
      soft_alpha_ = r.soft->alpha;
      soft_radii_ = r.soft->covalent_radii;
      soft_ = true;
    }
  }

  int num_basis() const { return bessel_.num_basis(); }
  bool apply_cutoff() const { return apply_cutoff_; }

  // feats[n], f; with derivatives d/dr when dfeats is not null.
  template <class G>
  void evaluate(G r, int s_centre, int s_neigh, G* feats, G* dfeats, G* f, G* df) const {
    G dfc;
    const G fc = cutoff_(r, &dfc);
    G x = r, dx = G(1);
    if (agnesi_) x = (*agnesi_)(r, s_neigh, s_centre, &dx);
    if (soft_) x = soft(r, s_centre, s_neigh, &dx);
    bessel_.evaluate(x, feats, dfeats);
    const int nb = num_basis();
    if (dfeats)
      for (int n = 0; n < nb; ++n) dfeats[n] *= dx;
    if (apply_cutoff_) {
      for (int n = 0; n < nb; ++n) {
        if (dfeats) dfeats[n] = dfeats[n] * fc + feats[n] * dfc;
        feats[n] *= fc;
      }
    }
    *f = fc;
    if (df) *df = dfc;
  }

 private:
  void check_radii(const std::vector<double>& radii, const std::string& where) const {
    if (static_cast<int>(radii.size()) != num_species_)
      throw ModelFormatError(where + ": " + std::to_string(radii.size()) +
                             " covalent radii for " + std::to_string(num_species_) + " species");
    for (double v : radii)
      if (!(std::isfinite(v) && v > 0))
        throw ModelFormatError(where + ": covalent radius " + fmt(v) + " is not positive");
  }

  // T(r) = p0 + (r - p0) (1 + tanh(alpha (r - m))) / 2 (FORMAT.md §5, "soft").
  template <class G>
  G soft(G r, int si, int sj, G* dx) const {
    const G r0 = static_cast<G>(soft_radii_[si] + soft_radii_[sj]);
    const G p0 = G(0.75) * r0, p1 = (G(4) / G(3)) * r0;
    const G m = G(0.5) * (p0 + p1);
    const G alpha = static_cast<G>(soft_alpha_) / (p1 - p0);
    const G t = std::tanh(alpha * (r - m));
    *dx = G(0.5) * (G(1) + t) + (r - p0) * G(0.5) * alpha * (G(1) - t * t);
    return p0 + (r - p0) * G(0.5) * (G(1) + t);
  }

  BesselBasis bessel_;
  PolynomialCutoff cutoff_;
  bool apply_cutoff_;
  int num_species_;
  std::optional<AgnesiTransform> agnesi_;
  bool soft_ = false;
  double soft_alpha_ = 0;
  std::vector<double> soft_radii_;
};

// MACE's ZBL pair repulsion, per edge (FORMAT.md §5 "pair_repulsion").
class Zbl {
 public:
  Zbl(const model::MaceZbl& z, int num_species) : S_(num_species), c_(z.c), e_(z.exponents) {
    if (static_cast<int>(z.atomic_numbers.size()) != S_ ||
        static_cast<int>(z.covalent_radii.size()) != S_)
      throw ModelFormatError("mace.pair_repulsion: atomic_numbers/covalent_radii do not have " +
                             std::to_string(S_) + " entries");
    for (int i = 0; i < S_; ++i)
      for (int j = 0; j < S_; ++j) {
        const double zi = z.atomic_numbers[i], zj = z.atomic_numbers[j];
        pairs_.push_back({z.a_prefactor * z.bohr / (std::pow(zi, z.a_exp) + std::pow(zj, z.a_exp)),
                          0.5 * z.coulomb * zi * zj,
                          PolynomialCutoff(z.covalent_radii[i] + z.covalent_radii[j], z.p)});
      }
  }

  // Energy of one edge and dE/dr.
  template <class G>
  G energy(G r, int si, int sj, G* dE) const {
    const Pair& p = pairs_[static_cast<std::size_t>(si) * S_ + sj];
    G df;
    const G f = p.cutoff(r, &df);
    if (f == G(0) && df == G(0)) {
      *dE = G(0);
      return G(0);
    }
    const G inv_a = G(1) / static_cast<G>(p.a);
    G phi = G(0), dphi = G(0);
    for (int k = 0; k < 4; ++k) {
      const G term = static_cast<G>(c_[k]) * std::exp(-static_cast<G>(e_[k]) * r * inv_a);
      phi += term;
      dphi -= static_cast<G>(e_[k]) * inv_a * term;
    }
    const G zz = static_cast<G>(p.half_coulomb_zz);
    const G v = zz / r * phi;
    *dE = zz * ((dphi - phi / r) / r) * f + v * df;
    return v * f;
  }

 private:
  struct Pair {
    double a, half_coulomb_zz;
    PolynomialCutoff cutoff;
  };
  int S_;
  std::array<double, 4> c_, e_;
  std::vector<Pair> pairs_;
};

// Builds the library's SymmetricContraction from the model's description.
std::unique_ptr<SymmetricContraction> make_contraction(const model::SymmetricContraction& m,
                                                       int num_species, const std::string& where) {
  std::vector<ContractionTensors> cts;
  for (std::size_t c = 0; c < m.contractions.size(); ++c) {
    const auto& con = m.contractions[c];
    ContractionTensors ct{con.irrep_out, {}, {}};
    std::vector<const model::SymmetricContraction::Term*> by_nu(con.terms.size(), nullptr);
    for (const auto& term : con.terms) {
      if (term.nu < 1 || term.nu > static_cast<int>(con.terms.size()) || by_nu[term.nu - 1])
        throw ModelFormatError(where + ".contractions[" + std::to_string(c) +
                               "]: terms must hold nu = 1.." + std::to_string(con.terms.size()) +
                               " once each, found nu = " + std::to_string(term.nu));
      by_nu[term.nu - 1] = &term;
    }
    for (const auto* term : by_nu) {
      ct.U.push_back(DenseTensor{term->u_shape, term->U});
      ct.W.push_back(DenseTensor{{num_species, term->K, m.num_features}, term->W});
    }
    cts.push_back(std::move(ct));
  }
  auto sc = std::make_unique<SymmetricContraction>(m.irreps_in, std::move(cts));
  if (sc->num_elements() != num_species)
    throw ModelFormatError(where + ": weights for " + std::to_string(sc->num_elements()) +
                           " species, the model has " + std::to_string(num_species));
  return sc;
}

// ---------------------------------------------------------------------------------------------
// Model plan, per network precision T
// ---------------------------------------------------------------------------------------------

template <class T>
struct LayerPlan {
  bool sc_on_nodes = false;  // residual: sc = skip(h^{t-1}) is added to h^t
  bool density = false;
  NodeLinear<T> linear_up, linear, product_linear;
  Mlp<T> radial_mlp, density_mlp;
  ConvTp<T> conv;
  SpeciesLinear<T> skip;
  T inv_avg = T(1);
  std::unique_ptr<SymmetricContraction> contraction;
  Irreps target, b_irreps;
  double edge_flops = 0;  // forward flops of one edge (radial and density MLPs, product)
  double node_flops = 0;  // forward flops of one node (linears, skip, contraction)
  int dim_in = 0, dim_edge = 0, dim_mid = 0, dim_target = 0, dim_hidden = 0;
  int C = 0, D = 0, dim_b = 0;
};

template <class T>
struct ReadoutPlan {
  int layer = 0;
  bool nonlinear = false;
  NodeLinear<T> linear, linear_2;
  std::vector<std::optional<ScalarAct>> acts;  // per block of linear's output (non-linear)
  std::vector<int> act_offsets;
};

void check_equal(const Irreps& a, const Irreps& b, const std::string& what) {
  if (a != b) throw ModelFormatError(what + ": " + a.str() + " vs " + b.str());
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Engine implementation
// ---------------------------------------------------------------------------------------------

class MaceEngine::Impl {
 public:
  virtual ~Impl() = default;
  virtual void compute(const AtomGraph& graph, EngineResult& result, GhostExchange* exchange) = 0;

  std::vector<std::string> species_names;
  double r_max = 0;
  std::vector<double> r_max_pairs;
  int num_species = 0;
  int num_layers = 0;
  int exchange_width = 0;
  Precision precision = Precision::kFloat64;
};

namespace {

template <class T, class G>
class MaceImpl final : public MaceEngine::Impl {
 public:
  MaceImpl(const model::Model& model, const MaceEngineOptions& options);
  void compute(const AtomGraph& graph, EngineResult& result, GhostExchange* exchange) override;

 private:
  // Per-thread scratch of the edge passes, and of the node passes of a block of rows.
  struct EdgeWork {
    std::vector<T> mlp, dmlp, W, Wf, gW, efc, gef, work, rho, grho, gy;
    std::vector<int> q_of;
  };
  struct NodeWork {
    std::vector<T> Mraw, gMraw, Ml, Air, gMl, B, Bir, gA;
  };
  void size_edge_work(const LayerPlan<T>& Lp, std::size_t rows, EdgeWork& w) const;
  void size_node_work(const LayerPlan<T>& Lp, std::size_t rows, bool messages,
                      NodeWork& w) const;

  void validate(const AtomGraph& graph, GhostExchange* exchange) const;
  void build_orderings(const AtomGraph& graph);
  void edge_geometry(const AtomGraph& graph);
  void prepare_layer(int t, GhostExchange* exchange);
  void layer_forward(int t);
  void fused_last_layer(bool need_hu_gradient);
  void node_forward(int t, std::size_t r0, std::size_t r1, const T* Mraw, NodeWork& w);
  void node_backward(int t, std::size_t r0, std::size_t r1, T* gMraw, NodeWork& w);
  void layer_node_backward(int t);
  void edge_backward(int t, T* ghu);
  void backward_tail(int t, GhostExchange* exchange);
  void edges_forward_chunk(const LayerPlan<T>& Lp, std::size_t q0, std::size_t n, T* W, T* mlp,
                           T* rho, T* dmlp) const;
  void edges_messages(const LayerPlan<T>& Lp, int t, std::size_t e0, std::size_t e1, const T* W,
                      const T* rho, int c0, T* Mraw, T* dens, EdgeWork& w) const;
  void edges_backward_chunk(const LayerPlan<T>& Lp, int t, const int* q_of, std::size_t n,
                            const T* W, T* mlp, const T* rho, T* dmlp, const T* gMraw, int c0,
                            EdgeWork& w, T* ghu);
  void readouts_forward(int t, std::size_t r0, std::size_t r1);
  void readouts_backward(int t, std::size_t r0, std::size_t r1);
  void final_gradient(const AtomGraph& graph, EngineResult& result);

  // --- model ---
  MaceEngineOptions options_;
  int S_ = 0, T_ = 0, lmax_ = 0, nsh_ = 0;
  Radial radial_;
  std::optional<Zbl> zbl_;
  std::vector<LayerPlan<T>> layers_;
  std::vector<ReadoutPlan<T>> readouts_;
  std::vector<T> hu0_table_, sc0_table_;  // [S][...]: layer 0 reads the species embedding only
  std::vector<double> e0_;
  double scale_ = 1, shift_ = 0;

  // --- per call ---
  std::size_t N_ = 0, L_ = 0, E_ = 0;
  const int* species_ = nullptr;
  std::vector<int> perm_;             // internal edge q (centre-sorted) -> graph edge id
  std::vector<int> centre_, sender_;  // per internal edge
  std::vector<int> centre_ptr_;       // [L+1] internal edges of each centre
  std::vector<int> by_sender_;        // internal edges sorted by sender
  std::vector<int> sender_ptr_;       // [N+1]
  std::vector<std::pair<int, int>> centre_tasks_, sender_tasks_;
  std::vector<T> Y_, ef_, fc_;        // [E][nsh], [E][nb], [E] (fc only without apply_cutoff)
  std::vector<G> gY_, gE_, gF_;       // per internal edge
  std::vector<double> zbl_atom_;      // [L]
  std::vector<double> energy_acc_;    // [L]: sum of readouts (before scale)
  std::vector<std::vector<T>> hu_, A_, dens_, Ml_;  // per layer
  std::vector<std::vector<T>> readout_z_;           // per readout (non-linear)
  std::vector<T> h_, sc_;                              // h^t, residual sc: [L][...]
  std::vector<T> gh_, gh_prev_, gMraw_, gdens_, ghu_;  // backward
  std::vector<std::vector<T>> ghu_private_;  // fused pass: per thread [N][dim_edge]
};

template <class T, class G>
MaceImpl<T, G>::MaceImpl(const model::Model& model, const MaceEngineOptions& options)
    : options_(options), radial_(model.mace->radial, model.species) {
  const model::Mace& m = *model.mace;
  S_ = model.num_species();
  for (const auto& s : model.species) species_names.push_back(s.symbol);
  r_max = model.r_max;
  r_max_pairs = model.r_max_pairs;
  if (r_max_pairs.size() != static_cast<std::size_t>(S_) * S_)
    throw ModelFormatError("r_max_pairs has " + std::to_string(r_max_pairs.size()) +
                           " entries for " + std::to_string(S_) + " species");
  num_species = S_;
  lmax_ = model.sh_lmax;
  nsh_ = (lmax_ + 1) * (lmax_ + 1);
  if (m.pair_repulsion) zbl_.emplace(*m.pair_repulsion, S_);
  if (m.interactions.empty() || m.interactions.size() != m.products.size())
    throw ModelFormatError("mace: " + std::to_string(m.interactions.size()) +
                           " interactions and " + std::to_string(m.products.size()) +
                           " products (need the same number, at least one)");
  T_ = static_cast<int>(m.interactions.size());
  num_layers = T_;
  if (static_cast<int>(m.atomic_energies.size()) != S_)
    throw ModelFormatError("mace.atomic_energies has " + std::to_string(m.atomic_energies.size()) +
                           " entries for " + std::to_string(S_) + " species");
  e0_ = m.atomic_energies;
  scale_ = m.scale;
  shift_ = m.shift;

  const std::string scalars = std::to_string(S_) + "x0e";
  check_equal(m.node_embedding.irreps_in, Irreps(scalars), "mace.node_embedding input");
  NodeLinear<T> embedding(m.node_embedding);
  Irreps h_irreps = m.node_embedding.irreps_out;

  for (int t = 0; t < T_; ++t) {
    const model::MaceInteraction& in = m.interactions[t];
    const model::MaceProduct& pr = m.products[t];
    const std::string w = "mace.interactions[" + std::to_string(t) + "]";
    LayerPlan<T> L;
    check_equal(in.linear_up.irreps_in, h_irreps, w + ".linear_up input vs node features");
    L.linear_up = NodeLinear<T>(in.linear_up);
    L.conv = ConvTp<T>(in.conv_tp, w + ".conv_tp");
    check_equal(in.conv_tp.descriptor.irreps_in1(), in.linear_up.irreps_out,
                w + ".conv_tp input vs linear_up output");
    if (L.conv.dim_in2() > nsh_)
      throw ModelFormatError(w + ".conv_tp: edge attributes " +
                             in.conv_tp.descriptor.irreps_in2().str() + " exceed lmax " +
                             std::to_string(lmax_));
    L.radial_mlp = Mlp<T>(in.radial_mlp, w + ".radial_mlp");
    if (L.radial_mlp.dim_in() != radial_.num_basis() ||
        L.radial_mlp.dim_out() != L.conv.weight_numel())
      throw ModelFormatError(w + ".radial_mlp maps " + std::to_string(L.radial_mlp.dim_in()) +
                             " -> " + std::to_string(L.radial_mlp.dim_out()) + ", expected " +
                             std::to_string(radial_.num_basis()) + " -> " +
                             std::to_string(L.conv.weight_numel()));
    check_equal(in.linear.irreps_in, in.conv_tp.descriptor.irreps_out(),
                w + ".linear input vs conv_tp output");
    L.linear = NodeLinear<T>(in.linear);
    L.density = in.density_normalization;
    if (L.density) {
      if (!in.density_mlp) throw ModelFormatError(w + ": density normalisation without an MLP");
      L.density_mlp = Mlp<T>(*in.density_mlp, w + ".density_mlp");
      if (L.density_mlp.dim_in() != radial_.num_basis() || L.density_mlp.dim_out() != 1)
        throw ModelFormatError(w + ".density_mlp maps " + std::to_string(L.density_mlp.dim_in()) +
                               " -> " + std::to_string(L.density_mlp.dim_out()) + ", expected " +
                               std::to_string(radial_.num_basis()) + " -> 1");
    } else {
      if (!(std::isfinite(in.avg_num_neighbors) && in.avg_num_neighbors > 0))
        throw ModelFormatError(w + ": avg_num_neighbors " + fmt(in.avg_num_neighbors) +
                               " is not positive");
      L.inv_avg = static_cast<T>(1.0 / in.avg_num_neighbors);
    }
    L.skip = SpeciesLinear<T>(in.skip_tp, S_, w + ".skip_tp");
    L.sc_on_nodes = in.skip_on_node_features;
    const Irreps& A_irreps = in.linear.irreps_out;
    if (L.sc_on_nodes) {
      check_equal(in.skip_tp.descriptor.irreps_in1(), h_irreps, w + ".skip_tp input");
      if (!pr.add_skip)
        throw ModelFormatError("mace.products[" + std::to_string(t) +
                               "]: residual interaction but add_skip is false");
    } else {
      check_equal(in.skip_tp.descriptor.irreps_in1(), A_irreps, w + ".skip_tp input");
      check_equal(in.skip_tp.descriptor.irreps_out(), A_irreps, w + ".skip_tp output");
      if (pr.add_skip)
        throw ModelFormatError("mace.products[" + std::to_string(t) +
                               "]: add_skip without a residual interaction");
    }
    const std::string pw = "mace.products[" + std::to_string(t) + "]";
    L.contraction = make_contraction(pr.contraction, S_, pw + ".contraction");
    check_equal(L.contraction->irreps_in(), A_irreps, pw + ".contraction input");
    L.target = A_irreps;
    L.C = L.contraction->num_channels();
    L.D = L.contraction->dim_a();
    L.b_irreps = L.contraction->irreps_out();
    L.dim_b = L.b_irreps.dim();
    check_equal(pr.linear.irreps_in, L.b_irreps, pw + ".linear input");
    L.product_linear = NodeLinear<T>(pr.linear);
    if (L.sc_on_nodes)
      check_equal(in.skip_tp.descriptor.irreps_out(), pr.linear.irreps_out,
                  w + ".skip_tp output vs product output");
    L.dim_in = h_irreps.dim();
    L.dim_edge = in.linear_up.irreps_out.dim();
    L.dim_mid = in.conv_tp.descriptor.irreps_out().dim();
    L.dim_target = A_irreps.dim();
    L.dim_hidden = pr.linear.irreps_out.dim();
    h_irreps = pr.linear.irreps_out;
    L.edge_flops = 2 * (L.radial_mlp.macs_per_row() + L.conv.macs() +
                        (L.density ? L.density_mlp.macs_per_row() : 0.0));
    L.node_flops = L.linear.flops_per_row() + L.product_linear.flops_per_row() +
                   L.linear_up.flops_per_row() + L.skip.flops_per_row() +
                   contraction_flops(*L.contraction, 1);
    if (t > 0) exchange_width = std::max(exchange_width, L.dim_edge);
    layers_.push_back(std::move(L));
  }

  for (std::size_t r = 0; r < m.readouts.size(); ++r) {
    const model::MaceReadout& src = m.readouts[r];
    const std::string w = "mace.readouts[" + std::to_string(r) + "]";
    if (src.layer < 0 || src.layer >= T_)
      throw ModelFormatError(w + ": reads layer " + std::to_string(src.layer) + " of " +
                             std::to_string(T_));
    ReadoutPlan<T> R;
    R.layer = src.layer;
    R.nonlinear = src.nonlinear;
    const Irreps h_t = m.products[src.layer].linear.irreps_out;
    check_equal(src.linear.irreps_in, h_t, w + " input");
    R.linear = NodeLinear<T>(src.linear);
    const NodeLinear<T>* last = &R.linear;
    if (src.nonlinear) {
      if (!src.activation || !src.linear_2)
        throw ModelFormatError(w + ": non-linear readout without activation or linear_2");
      check_equal(src.activation->irreps_in, src.linear.irreps_out, w + ".activation input");
      check_equal(src.linear_2->irreps_in, src.linear.irreps_out, w + ".linear_2 input");
      const std::vector<int> off = src.linear.irreps_out.offsets();
      for (std::size_t b = 0; b < src.activation->acts.size(); ++b) {
        if (src.activation->acts[b] && src.linear.irreps_out[b].ir.l() != 0)
          throw ModelFormatError(w + ".activation: activation on a non-scalar block");
        R.acts.push_back(src.activation->acts[b]
                             ? std::optional<ScalarAct>(ScalarAct::from(*src.activation->acts[b],
                                                                        w + ".activation"))
                             : std::nullopt);
      }
      if (R.acts.size() != src.linear.irreps_out.size())
        throw ModelFormatError(w + ".activation: " + std::to_string(R.acts.size()) +
                               " activations for " + src.linear.irreps_out.str());
      R.act_offsets = off;
      R.linear_2 = NodeLinear<T>(*src.linear_2);
      last = &R.linear_2;
    }
    if (last->irreps_out().dim() < 1 || last->irreps_out()[0].ir.l() != 0)
      throw ModelFormatError(w + ": output " + last->irreps_out().str() +
                             " does not start with a scalar");
    readouts_.push_back(std::move(R));
  }

  // Layer 0 reads the embedding of the species only: tabulate its inputs per species.
  {
    std::vector<T> onehot(static_cast<std::size_t>(S_) * S_, T(0));
    std::vector<int> sp(S_);
    for (int s = 0; s < S_; ++s) {
      onehot[static_cast<std::size_t>(s) * S_ + s] = T(1);
      sp[s] = s;
    }
    const LayerPlan<T>& L0 = layers_[0];
    std::vector<T> h0_table(static_cast<std::size_t>(S_) * L0.dim_in);
    embedding.forward(S_, onehot.data(), S_, h0_table.data(), L0.dim_in, false, false);
    hu0_table_.resize(static_cast<std::size_t>(S_) * L0.dim_edge);
    L0.linear_up.forward(S_, h0_table.data(), L0.dim_in, hu0_table_.data(), L0.dim_edge, false,
                         false);
    if (L0.sc_on_nodes) {
      sc0_table_.resize(static_cast<std::size_t>(S_) * L0.dim_hidden);
      L0.skip.forward(S_, sp.data(), h0_table.data(), L0.dim_in, sc0_table_.data(),
                      L0.dim_hidden, false);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Validation and orderings
// ---------------------------------------------------------------------------------------------

template <class T, class G>
void MaceImpl<T, G>::validate(const AtomGraph& g, GhostExchange* exchange) const {
  if (g.num_local > g.num_nodes)
    throw Error("graph has num_local = " + std::to_string(g.num_local) + " > num_nodes = " +
                std::to_string(g.num_nodes));
  if (g.num_nodes > static_cast<std::size_t>(INT32_MAX) ||
      g.num_edges > static_cast<std::size_t>(INT32_MAX))
    throw CapacityError("graph has " + std::to_string(g.num_nodes) + " nodes and " +
                        std::to_string(g.num_edges) + " edges; at most 2^31-1 of each");
  if (g.num_nodes > 0 && !g.species) throw Error("graph.species is null");
  if (g.num_edges > 0 && (!g.center || !g.neighbor || !g.vector))
    throw Error("graph has " + std::to_string(g.num_edges) + " edges but a null edge array");
  if (g.num_nodes > g.num_local && !exchange)
    throw Error("graph has " + std::to_string(g.num_nodes - g.num_local) +
                " ghost atoms but no GhostExchange was given");
  for (std::size_t n = 0; n < g.num_nodes; ++n)
    if (g.species[n] < 0 || g.species[n] >= S_)
      throw Error("atom " + std::to_string(n) + " has species " + std::to_string(g.species[n]) +
                  ", the model has " + std::to_string(S_) + " species (0.." +
                  std::to_string(S_ - 1) + ")");
  for (std::size_t e = 0; e < g.num_edges; ++e) {
    const int c = g.center[e], j = g.neighbor[e];
    if (c < 0 || static_cast<std::size_t>(c) >= g.num_local)
      throw Error("edge " + std::to_string(e) + " has centre " + std::to_string(c) +
                  ", not a local atom (0.." + std::to_string(g.num_local) + ")");
    if (j < 0 || static_cast<std::size_t>(j) >= g.num_nodes)
      throw Error("edge " + std::to_string(e) + " has neighbour " + std::to_string(j) +
                  ", not an atom (0.." + std::to_string(g.num_nodes) + ")");
    const double* v = g.vector + 3 * e;
    const double r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    if (!std::isfinite(r))
      throw Error("edge " + std::to_string(e) + " (centre " + std::to_string(c) +
                  ", neighbour " + std::to_string(j) + ") has a non-finite vector");
    const int sc = g.species[c], sj = g.species[j];
    const double rc = r_max_pairs[static_cast<std::size_t>(sc) * S_ + sj];
    if (!(r < rc))
      throw Error("edge " + std::to_string(e) + " (centre " + std::to_string(c) +
                  ", neighbour " + std::to_string(j) + ") has length " + fmt(r) +
                  " A, not below the cutoff " + fmt(rc) + " A of species pair (" +
                  species_names[sc] + ", " + species_names[sj] + ")");
    if (r < MaceEngine::kMinEdgeLength)
      throw Error("edge " + std::to_string(e) + " (centre " + std::to_string(c) +
                  ", neighbour " + std::to_string(j) + ") has length " + fmt(r) +
                  " A, below the minimum " + fmt(MaceEngine::kMinEdgeLength) +
                  " A (overlapping atoms)");
  }
}

template <class T, class G>
void MaceImpl<T, G>::build_orderings(const AtomGraph& g) {
  // Internal edge order: by centre (stable), so a centre's edges are contiguous.
  centre_ptr_.assign(L_ + 1, 0);
  for (std::size_t e = 0; e < E_; ++e) ++centre_ptr_[g.center[e] + 1];
  for (std::size_t i = 0; i < L_; ++i) centre_ptr_[i + 1] += centre_ptr_[i];
  perm_.resize(E_);
  centre_.resize(E_);
  sender_.resize(E_);
  {
    std::vector<int> next(centre_ptr_.begin(), centre_ptr_.end() - 1);
    for (std::size_t e = 0; e < E_; ++e) {
      const int q = next[g.center[e]]++;
      perm_[q] = static_cast<int>(e);
      centre_[q] = g.center[e];
      sender_[q] = g.neighbor[e];
    }
  }
  sender_ptr_.assign(N_ + 1, 0);
  for (std::size_t q = 0; q < E_; ++q) ++sender_ptr_[sender_[q] + 1];
  for (std::size_t i = 0; i < N_; ++i) sender_ptr_[i + 1] += sender_ptr_[i];
  by_sender_.resize(E_);
  {
    std::vector<int> next(sender_ptr_.begin(), sender_ptr_.end() - 1);
    for (std::size_t q = 0; q < E_; ++q) by_sender_[next[sender_[q]]++] = static_cast<int>(q);
  }
  make_tasks(centre_ptr_, centre_tasks_);
  make_tasks(sender_ptr_, sender_tasks_);
}

// Harmonics, radial basis and cutoff of every edge (network inputs, in T), and the ZBL energy
// per centre.
template <class T, class G>
void MaceImpl<T, G>::edge_geometry(const AtomGraph& g) {
  const int nb = radial_.num_basis();
  Y_.resize(E_ * nsh_);
  ef_.resize(E_ * nb);
  fc_.resize(radial_.apply_cutoff() ? 0 : E_);
  zbl_atom_.assign(L_, 0.0);
  const long long n_tasks = static_cast<long long>(centre_tasks_.size());
  const bool par = n_tasks > 1 && E_ * (20.0 * nsh_ + 40.0 * nb) > kParallelWork;
#pragma omp parallel if (par)
  {
    std::vector<G> yg(nsh_), fg(nb);
#pragma omp for schedule(dynamic, 1)
    for (long long task = 0; task < n_tasks; ++task) {
      const auto [c0, c1] = centre_tasks_[task];
      for (int i = c0; i < c1; ++i) {
        double zsum = 0;
        for (int q = centre_ptr_[i]; q < centre_ptr_[i + 1]; ++q) {
          const double* vec = g.vector + 3 * static_cast<std::size_t>(perm_[q]);
          // MACE's vector: centre minus neighbour.
          const G v[3] = {static_cast<G>(-vec[0]), static_cast<G>(-vec[1]),
                          static_cast<G>(-vec[2])};
          const G r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
          spherical_harmonics<G>(lmax_, v, yg.data());
          T* yq = Y_.data() + static_cast<std::size_t>(q) * nsh_;
          for (int k = 0; k < nsh_; ++k) yq[k] = static_cast<T>(yg[k]);
          G f;
          const int si = species_[i], sj = species_[sender_[q]];
          radial_.evaluate<G>(r, si, sj, fg.data(), nullptr, &f, nullptr);
          T* eq = ef_.data() + static_cast<std::size_t>(q) * nb;
          for (int n = 0; n < nb; ++n) eq[n] = static_cast<T>(fg[n]);
          if (!radial_.apply_cutoff()) fc_[q] = static_cast<T>(f);
          if (zbl_) {
            G dE;
            zsum += static_cast<double>(zbl_->energy<G>(r, si, sj, &dE));
          }
        }
        zbl_atom_[i] = zsum;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Scratch
// ---------------------------------------------------------------------------------------------

template <class T, class G>
void MaceImpl<T, G>::size_edge_work(const LayerPlan<T>& Lp, std::size_t rows, EdgeWork& w) const {
  const std::size_t nb = radial_.num_basis(), numel = Lp.conv.weight_numel();
  const std::size_t width =
      std::max(Lp.radial_mlp.max_width(), Lp.density ? Lp.density_mlp.max_width() : 1);
  w.mlp.resize(Lp.radial_mlp.scratch_size(rows));
  w.dmlp.resize(Lp.density ? Lp.density_mlp.scratch_size(rows) : 0);
  w.W.resize(rows * numel);
  w.Wf.resize(radial_.apply_cutoff() ? 0 : numel);
  w.gW.resize(kEdgeChunk * numel);
  w.efc.resize(kEdgeChunk * nb);
  w.gef.resize(kEdgeChunk * nb);
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

// ---------------------------------------------------------------------------------------------
// Edge chunks (shared by the forward, backward and fused passes)
// ---------------------------------------------------------------------------------------------

// Radial-MLP outputs W (rows of weight_numel, before any cutoff factor) and density values rho
// of the n internal edges q0..q0+n-1, keeping the MLPs' scratch for a later backward.
template <class T, class G>
void MaceImpl<T, G>::edges_forward_chunk(const LayerPlan<T>& Lp, std::size_t q0, std::size_t n,
                                         T* W, T* mlp, T* rho, T* dmlp) const {
  const std::size_t nb = radial_.num_basis();
  Lp.radial_mlp.forward(n, ef_.data() + q0 * nb, W, mlp);
  if (Lp.density) Lp.density_mlp.forward(n, ef_.data() + q0 * nb, rho, dmlp);
}

// Messages of the internal edges [e0, e1) (all of them with centres in [c0, ...)) added to the
// rows Mraw[centre - c0], densities to dens[centre]; W, rho hold the chunk's MLP outputs from
// offset `o`.
template <class T, class G>
void MaceImpl<T, G>::edges_messages(const LayerPlan<T>& Lp, int t, std::size_t e0,
                                    std::size_t e1, const T* W, const T* rho, int c0, T* Mraw,
                                    T* dens, EdgeWork& w) const {
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
                                          std::size_t n, const T* W, T* mlp, const T* rho,
                                          T* dmlp, const T* gMraw, int c0, EdgeWork& w, T* ghu) {
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
  Lp.radial_mlp.backward(n, mlp, w.gW.data(), w.gef.data(), w.work.data());
  for (std::size_t p = 0; p < n; ++p) {
    G* gEq = gE_.data() + static_cast<std::size_t>(q_of[p]) * nb;
    for (int k = 0; k < nb; ++k) gEq[k] += static_cast<G>(w.gef[p * nb + k]);
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
      for (int k = 0; k < nb; ++k) gEq[k] += static_cast<G>(w.gef[p * nb + k]);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------------

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
    } else {
      Lp.skip.forward(L, species_, h_.data(), Lp.dim_in, sc_.data(), Lp.dim_hidden, false);
    }
  }
  // h_ now changes from h^{t-1} to h^t.
  const std::size_t dt = Lp.dim_target;
  h_.resize(L * Lp.dim_hidden);
  A_[t].resize(L * dt);
  dens_[t].resize(Lp.density ? L : 0);
  Ml_[t].resize(Lp.density && !Lp.sc_on_nodes ? L * dt : 0);
  for (std::size_t r = 0; r < readouts_.size(); ++r)
    if (readouts_[r].layer == t && readouts_[r].nonlinear)
      readout_z_[r].resize(L * readouts_[r].linear.dim_out());
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

// A[n][c][i] (the contraction's layout) from ir_mul rows of the target irreps, and back.
template <class T>
void to_contraction_layout(const Irreps& target, int C, int D, std::size_t n, const T* in,
                           T* out, bool inverse) {
  const std::vector<int> off = target.offsets();
  const std::size_t dim = target.dim();
  for (std::size_t r = 0; r < n; ++r) {
    const T* a = in + r * dim;
    T* b = out + r * dim;
    int i0 = 0;
    for (std::size_t blk = 0; blk < target.size(); ++blk) {
      const int d = target[blk].ir.dim();
      for (int m = 0; m < d; ++m)
        for (int c = 0; c < C; ++c) {
          const std::size_t ir = off[blk] + static_cast<std::size_t>(m) * C + c;
          const std::size_t ci = static_cast<std::size_t>(c) * D + i0 + m;
          if (inverse)
            b[ir] = a[ci];
          else
            b[ci] = a[ir];
        }
      i0 += d;
    }
  }
}

template <class T>
void convert_rows(const Irreps& irreps, std::size_t n, const T* in, T* out, bool to_ir_mul) {
  const std::size_t dim = irreps.dim();
  for (std::size_t r = 0; r < n; ++r) {
    if (to_ir_mul)
      mace_detail::mul_ir_to_ir_mul(irreps, in + r * dim, out + r * dim);
    else
      mace_detail::ir_mul_to_mul_ir(irreps, in + r * dim, out + r * dim);
  }
}

// Node part of layer t's forward for local rows [r0, r1) on the calling thread: from the rows'
// raw messages Mraw (row r0 first) and dens_[t] to A_[t], h_, the readouts of h^t and their
// energies.
template <class T, class G>
void MaceImpl<T, G>::node_forward(int t, std::size_t r0, std::size_t r1, const T* Mraw,
                                  NodeWork& w) {
  const LayerPlan<T>& Lp = layers_[t];
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
    const std::size_t dout = R.linear_2.dim_out();
    y.resize(n * dout);
    R.linear_2.forward(n, a.data(), dz, y.data(), dout, false, false);
    for (std::size_t i = 0; i < n; ++i) energy_acc_[r0 + i] += static_cast<double>(y[i * dout]);
  }
}

// ---------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------

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
    const T* z = readout_z_[r].data() + r0 * dz;
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
    R.linear.backward(n, gz.data(), dz, gh, dh, true, false);
  }
}

// Node part of layer t's backward for rows [r0, r1) on the calling thread: gh_ (dE/dh^t from
// later layers) plus the readouts, down to gMraw (dE/dMraw, row r0 first) and gdens_ (dE/dD).
template <class T, class G>
void MaceImpl<T, G>::node_backward(int t, std::size_t r0, std::size_t r1, T* gMraw,
                                   NodeWork& w) {
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
  if (!Lp.sc_on_nodes) {
    // A = skip(Ml): dE/dMl = skip^T(dE/dA).
    std::copy_n(gMl, n * dt, w.Air.data());
    Lp.skip.backward(n, sp, w.Air.data(), dt, gMl, dt, false, false);
  }
  if (Lp.density) {
    // Ml = Mlin / (1 + D): dE/dD = -<dE/dMl, Ml> / (1 + D), dE/dMlin = dE/dMl / (1 + D).
    const T* ml;
    if (Lp.sc_on_nodes) {
      to_contraction_layout(Lp.target, Lp.C, Lp.D, n, A_[t].data() + r0 * dt, w.Ml.data(),
                            true);
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
  const int nb = radial_.num_basis();
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
        for (std::size_t p = 0; p < n; ++p) {
          w.q_of[p] = by_sender_[p0 + p];
          std::copy_n(ef_.data() + static_cast<std::size_t>(w.q_of[p]) * nb, nb,
                      w.efc.data() + p * nb);
        }
        Lp.radial_mlp.forward(n, w.efc.data(), w.W.data(), w.mlp.data());
        if (Lp.density) Lp.density_mlp.forward(n, w.efc.data(), w.rho.data(), w.dmlp.data());
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
      edges_messages(Lp, t, e0, e1, ew.W.data(), ew.rho.data(), c0, nw.Mraw.data(),
                     dens_[t].data(), ew);
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
  gh_prev_.resize(L * Lp.dim_in);
  Lp.linear_up.backward(L, ghu_.data(), Lp.dim_edge, gh_prev_.data(), Lp.dim_in, false);
  if (Lp.sc_on_nodes)
    Lp.skip.backward(L, species_, gh_.data(), Lp.dim_hidden, gh_prev_.data(), Lp.dim_in, true);
  std::swap(gh_, gh_prev_);
}

// dE/dvector per edge, from the accumulated gradients of the harmonics, the radial basis, the
// cutoff and the ZBL energy.
template <class T, class G>
void MaceImpl<T, G>::final_gradient(const AtomGraph& g, EngineResult& result) {
  const int nb = radial_.num_basis();
  const G scale = static_cast<G>(scale_);
  const long long E = static_cast<long long>(E_);
#pragma omp parallel if (E_ * (60.0 * nsh_ + 40.0 * nb) > kParallelWork)
  {
    std::vector<G> yg(nsh_), dy(3 * nsh_), fg(nb), dfg(nb);
#pragma omp for schedule(static)
    for (long long q = 0; q < E; ++q) {
      const std::size_t e = perm_[q];
      const double* vec = g.vector + 3 * e;
      const G v[3] = {static_cast<G>(-vec[0]), static_cast<G>(-vec[1]), static_cast<G>(-vec[2])};
      const G r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
      spherical_harmonics_with_gradient<G>(lmax_, v, yg.data(), dy.data());
      const G* gy = gY_.data() + q * nsh_;
      G gv[3] = {G(0), G(0), G(0)};
      for (int k = 0; k < nsh_; ++k)
        for (int a = 0; a < 3; ++a) gv[a] += gy[k] * dy[3 * k + a];
      const int si = species_[centre_[q]], sj = species_[sender_[q]];
      G f, df;
      radial_.evaluate<G>(r, si, sj, fg.data(), dfg.data(), &f, &df);
      const G* ge = gE_.data() + q * nb;
      G dEdr = G(0);
      for (int k = 0; k < nb; ++k) dEdr += ge[k] * dfg[k];
      if (!radial_.apply_cutoff()) dEdr += gF_[q] * df;
      if (zbl_) {
        G dz;
        zbl_->energy<G>(r, si, sj, &dz);
        dEdr += scale * dz;
      }
      for (int a = 0; a < 3; ++a) gv[a] += dEdr * v[a] / r;
      // The engine's vector is minus MACE's.
      for (int a = 0; a < 3; ++a) result.edge_gradient[3 * e + a] = -static_cast<double>(gv[a]);
    }
  }
}

template <class T, class G>
void MaceImpl<T, G>::compute(const AtomGraph& g, EngineResult& result, GhostExchange* exchange) {
  validate(g, exchange);
  N_ = g.num_nodes;
  L_ = g.num_local;
  E_ = g.num_edges;
  species_ = g.species;
  build_orderings(g);
  edge_geometry(g);
  hu_.resize(T_);
  A_.resize(T_);
  dens_.resize(T_);
  Ml_.resize(T_);
  readout_z_.resize(readouts_.size());
  energy_acc_.assign(L_, 0.0);
  const int nb = radial_.num_basis();
  gY_.assign(E_ * nsh_, G(0));
  gE_.assign(E_ * nb, G(0));
  gF_.assign(radial_.apply_cutoff() ? 0 : E_, G(0));

  // Forward through every layer but the last.
  for (int t = 0; t + 1 < T_; ++t) {
    prepare_layer(t, exchange);
    layer_forward(t);
  }
  // The last layer: fused forward and backward when the per-thread sender buffers fit the
  // budget, else forward now and backward (recomputing the MLP) below.
  const int last = T_ - 1;
  const LayerPlan<T>& Ll = layers_[last];
  prepare_layer(last, exchange);
  const bool need_hu = last > 0;
  const double fused_bytes = need_hu ? static_cast<double>(omp_get_max_threads()) * N_ *
                                           Ll.dim_edge * sizeof(T)
                                     : 0.0;
  const bool fused =
      options_.fuse_last_layer && fused_bytes <= static_cast<double>(options_.fusion_memory_budget);
  gh_.assign(L_ * Ll.dim_hidden, T(0));
  if (fused)
    fused_last_layer(need_hu);
  else
    layer_forward(last);

  result.atom_energy.resize(L_);
  result.energy = 0;
  for (std::size_t i = 0; i < L_; ++i) {
    const double e = e0_[species_[i]] + scale_ * (zbl_atom_[i] + energy_acc_[i]) + shift_;
    result.atom_energy[i] = e;
    result.energy += e;
  }

  // Backward, layer by layer.
  for (int t = last; t >= 0; --t) {
    const bool hu_gradient = t > 0;
    if (!(t == last && fused)) {
      layer_node_backward(t);
      if (hu_gradient) ghu_.resize(N_ * layers_[t].dim_edge);
      edge_backward(t, hu_gradient ? ghu_.data() : nullptr);
    }
    if (hu_gradient) backward_tail(t, exchange);
  }

  result.edge_gradient.resize(3 * E_);
  final_gradient(g, result);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// MaceEngine
// ---------------------------------------------------------------------------------------------

MaceEngine::MaceEngine(const model::Model& model, Precision precision,
                       const MaceEngineOptions& options) {
  if (model.arch != model::Arch::kMace || !model.mace)
    throw Error("MaceEngine needs a MACE model (arch mace)");
  switch (precision) {
    case Precision::kFloat64:
      impl_ = std::make_unique<MaceImpl<double, double>>(model, options);
      break;
    case Precision::kFloat32:
      impl_ = std::make_unique<MaceImpl<float, float>>(model, options);
      break;
    case Precision::kMixed:
      impl_ = std::make_unique<MaceImpl<float, double>>(model, options);
      break;
  }
  if (!impl_) throw Error("MaceEngine: unknown precision");
  impl_->precision = precision;
}

MaceEngine::~MaceEngine() = default;
MaceEngine::MaceEngine(MaceEngine&&) noexcept = default;
MaceEngine& MaceEngine::operator=(MaceEngine&&) noexcept = default;

const std::vector<std::string>& MaceEngine::species() const { return impl_->species_names; }
double MaceEngine::r_max() const { return impl_->r_max; }
double MaceEngine::r_max(int a, int b) const {
  if (a < 0 || b < 0 || a >= impl_->num_species || b >= impl_->num_species)
    throw Error("r_max: species pair (" + std::to_string(a) + ", " + std::to_string(b) +
                ") out of range 0.." + std::to_string(impl_->num_species - 1));
  return impl_->r_max_pairs[static_cast<std::size_t>(a) * impl_->num_species + b];
}
int MaceEngine::num_layers() const { return impl_->num_layers; }
int MaceEngine::exchange_width() const { return impl_->exchange_width; }
Precision MaceEngine::precision() const { return impl_->precision; }

void MaceEngine::compute(const AtomGraph& graph, EngineResult& result, GhostExchange* exchange) {
  impl_->compute(graph, result, exchange);
}

}  // namespace clebsch
