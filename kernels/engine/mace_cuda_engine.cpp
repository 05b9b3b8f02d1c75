// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The MACE engine on the device layer: the host engine's sequence (src/engine/mace_engine.cpp) with
// every step a device kernel. Per edge (internal order: edges sorted by centre, as the host
// engine): harmonics, radial basis, cutoff and ZBL in the geometry precision
// (mace_edge_geometry); per layer the radial MLP (DeviceMlp), the optional cutoff on the
// weights and the density, the generated uvu convolution (ConvRunner: receiver pass forward,
// fused sender pass backward), the linears and the species-selected skip (DeviceLinear), the
// sparse symmetric contraction and the readouts; then the energies, and the hand-written
// backward layer by layer down to dE/dY, dE/d(radial features), dE/dcutoff, from which
// mace_edge_gradient makes dE/dvector. Rows are in e3nn's mul_ir layout throughout.
//
// The per-edge weight stage (radial MLP -> convolution) runs in batches of whole centres
// (edge_orderings.h). With one batch (while the weights of every layer fit the budget,
// CudaEngineOptions::edge_batch) each layer's weights W (E x weight_numel) and MLP activations
// are kept from its forward for its backward, as before. With several, a batch's weights live
// only while the batch is convolved, and the backward computes them again: one MLP forward more
// per layer, for memory that no longer grows with E times the weight count (which is what
// limited the system size on one GPU: 29 GB per 10,000 atoms of a MACE-MP-0-medium-sized model
// in float64 before).
//
// Host round trips: the graph in and the results out, and with a GhostExchange the per-layer
// ghost rows (staged through host memory). Validation: compute() validates the host graph with
// the host engine's rules and messages before any work; compute_device() checks a
// centre-sorted graph on the device (edge_order_kernels.h: no per-step copy of the index
// arrays), any other graph on the host (it copies the index arrays), and checks the geometry on
// the device (a status word read back at the end; the message from the host's rules). Both
// order a centre-sorted graph on the device and any other on the host (the same orderings).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <sstream>

#include "clebsch/cuda/engine/conv_runner.h"
#include "clebsch/cuda/engine/cuda_engine.h"
#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/nn/device_linear.h"
#include "clebsch/cuda/nn/device_mlp.h"
#include "clebsch/cuda/graph/edge_batch_budget.h"
#include "clebsch/cuda/graph/edge_order_kernels.h"
#include "clebsch/cuda/graph/edge_orderings.h"
#include "clebsch/cuda/graph/ghost_staging.h"
#include "clebsch/support/error.h"
#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/engine/mace_contraction_tables.h"
#include "clebsch/cuda/engine/mace_cuda_source.h"
#include "clebsch/cuda/templates/mace_device_args.h"
#include "clebsch/cuda/engine/mace_cuda_engine.h"
#include "clebsch/engine/mace_engine.h"

namespace clebsch::cuda {
namespace {

std::string fmt(double x) {
  std::ostringstream o;
  o.precision(10);
  o << x;
  return o.str();
}

template <class T>
struct Layer {
  explicit Layer(DeviceBackend& b)
      : d_to(b), d_from(b), pair_factors(b), pair_nu(b), pair_b_base(b), pair_b_stride(b),
        pair_term_begin(b), term_w_row(b), term_coef(b), weights(b), hu(b), W(b), Wf(b), rho(b),
        dedge(b), dens(b), Ml(b), A(b), Yc(b) {}
  bool sc_on_nodes = false, density = false;
  DeviceLinear<T> linear_up, linear, product_linear, skip;
  DeviceMlp<T> radial_mlp, density_mlp;
  std::unique_ptr<ConvRunner> conv;
  double inv_avg = 1;
  int dim_in = 0, dim_edge = 0, dim_mid = 0, dim_target = 0, dim_hidden = 0, dim_y = 0;
  int numel = 0, C = 0, D = 0, dim_b = 0, num_pairs = 0, num_w_rows = 0;
  DeviceArray<int> d_to, d_from;  // mul_ir <-> [C][D] maps
  DeviceArray<int> pair_factors, pair_nu, pair_b_base, pair_b_stride, pair_term_begin, term_w_row;
  DeviceArray<T> term_coef, weights;
  // Per call, kept from the forward for the backward.
  DeviceArray<T> hu, W, Wf, rho, dedge, dens, Ml, A, Yc;
};

template <class T>
struct Readout {
  explicit Readout(DeviceBackend& b) : z(b), a(b) {}
  int layer = 0;
  bool nonlinear = false;
  DeviceLinear<T> linear, linear_2;
  struct Act {
    int c0, c1, kind;
    double cst;
  };
  std::vector<Act> acts;
  DeviceArray<T> z, a;
};

template <class T, class G>
class MaceCuda final : public CudaEngine {
 public:
  MaceCuda(const model::Model& model, Precision precision, const CudaEngineOptions& options);

  const std::vector<std::string>& species() const override { return host_.species(); }
  double r_max() const override { return host_.r_max(); }
  double r_max(int a, int b) const override { return host_.r_max(a, b); }
  int num_layers() const override { return host_.num_layers(); }
  int exchange_width() const override { return host_.exchange_width(); }
  DeviceBackend& backend() override { return *backend_; }
  std::vector<std::pair<std::string, double>> phase_seconds() const override { return phases_; }

  void compute(const AtomGraph& graph, EngineResult& result, GhostExchange* exchange) override;
  void compute_device(const DeviceAtomGraph& graph, const DeviceResult& result,
                      GhostExchange* exchange, Stream stream) override;

 private:
  void validate_indices(std::size_t num_local, std::size_t num_nodes, std::size_t num_edges,
                        const int* species, const int* center, const int* neighbor,
                        GhostExchange* exchange) const;
  void validate_vectors(std::size_t num_edges, const int* species, const int* center,
                        const int* neighbor, const double* vector) const;
  void build_orderings(std::size_t E, const int* center, const int* neighbor, Stream s);
  // After either path built edges_: drops per-edge weights kept by an earlier one-batch call.
  void batches_changed();
  // Edges per batch of the weight stage for E edges (0: one batch).
  std::size_t batch_edges(std::size_t E) const;
  // The weights of batch @p b of layer t into wb (and the cut ones into wfb); returns the
  // convolution's weights.
  const T* batch_weights(int t, std::size_t b, DeviceArray<T>& wb, DeviceArray<T>& wfb, Stream s);
  // The evaluation on device inputs; writes atom energies and graph-order edge gradients.
  void run(const int* d_species, const double* d_vector, double* atom_energy,
           double* edge_gradient, GhostExchange* exchange, Stream s);
  void prepare_layer(int t, GhostExchange* exchange, Stream s);
  void layer_forward(int t, Stream s);
  void node_forward(int t, Stream s);
  void readouts_forward(int t, Stream s);
  void node_backward(int t, Stream s);
  void readouts_backward(int t, Stream s);
  void edge_backward(int t, Stream s);
  void backward_tail(int t, GhostExchange* exchange, Stream s);
  ConvBuffers conv_buffers(const Layer<T>& Lp, std::size_t batch, const T* w) const;
  // Profiling (CudaEngineOptions::profile): ends the current phase.
  void phase(const std::string& name, Stream s) {
    backend_->end_timing_phase(name);  // kernel timing's label (kernel_timing.h); no-op when off
    if (!profile_) return;
    backend_->synchronize(s);
    const auto now = std::chrono::steady_clock::now();
    phases_.emplace_back(name, std::chrono::duration<double>(now - mark_).count());
    mark_ = now;
  }
  void start_phases() {
    phases_.clear();
    mark_ = std::chrono::steady_clock::now();
  }
  bool profile_ = false;
  std::vector<std::pair<std::string, double>> phases_;
  std::chrono::steady_clock::time_point mark_;

  MaceEngine host_;  // the model's validation and metadata (and nothing on the hot path)
  std::shared_ptr<DeviceBackend> backend_;
  std::unique_ptr<GenericKernels> gk_;
  std::unique_ptr<DeviceModule> module_;
  const DeviceKernel *k_geometry_, *k_gradient_, *k_cut_fwd_, *k_cut_bwd_, *k_dens_fwd_,
      *k_dens_bwd_, *k_permute_, *k_symcon_fwd_, *k_symcon_bwd_, *k_energy_;
  DType dt_ = dtype_of<T>(), dg_ = dtype_of<G>();

  // --- model ---
  int S_ = 0, T_ = 0, nsh_ = 0, nb_ = 0;
  bool apply_cutoff_ = true, zbl_ = false;
  double scale_ = 1, shift_ = 0;
  std::vector<double> r_max_pairs_;
  std::vector<Layer<T>> layers_;
  std::vector<Readout<T>> readouts_;
  DeviceArray<T> hu0_table_, sc0_table_;
  DeviceArray<double> e0_, d_r_max_pairs_;

  // --- per call ---
  std::size_t N_ = 0, L_ = 0, E_ = 0;
  const int* d_species_ = nullptr;
  DeviceEdgeOrderings edges_;  // the host engine's edge order (edge_orderings.h)
  std::unique_ptr<EdgeOrderKernels> orderer_;  // compute_device's orderings on the device
  std::size_t edge_batch_option_ = 0;
  EdgeBatchBudget budget_;  // weight-stage values per edge
  bool keep_weights_ = true;  // one batch: W and MLP activations kept from forward to backward
  DeviceArray<T> wb_, wfb_;   // several batches: one batch's weights (and cut weights)
  DeviceArray<int> species_buf_, centre_buf_, neighbour_buf_;
  DeviceArray<double> vector_buf_, zbl_edge_, zbl_atom_, energy_acc_, atom_energy_, edge_grad_;
  DeviceArray<unsigned long long> status_;
  DeviceArray<T> Y_, ef_, fc_, h_, h_prev_, sc_, Mraw_, Air_, B_, ones_;
  DeviceArray<T> gh_, gh_prev_, gB_, gA_, gMl_, gtmp_, gMraw_, gdens_, ghu_, gyT_, gw_, gef_,
      grho_, gy_, gz_;
  DeviceArray<G> gY_, gE_, gF_;
};

template <class T, class G>
MaceCuda<T, G>::MaceCuda(const model::Model& model, Precision precision,
                         const CudaEngineOptions& options)
    : host_(model, precision) {
  profile_ = options.profile;
  backend_ = options.backend ? options.backend : std::shared_ptr<DeviceBackend>(make_cuda_backend(options.device));
  DeviceBackend& b = *backend_;
  const model::Mace& m = *model.mace;
  S_ = model.num_species();
  T_ = static_cast<int>(m.interactions.size());
  nsh_ = (model.sh_lmax + 1) * (model.sh_lmax + 1);
  nb_ = m.radial.num_basis;
  apply_cutoff_ = m.radial.apply_cutoff;
  zbl_ = m.pair_repulsion.has_value();
  scale_ = m.scale, shift_ = m.shift;
  r_max_pairs_ = model.r_max_pairs;
  edges_.bind(b);
  species_buf_.bind(b), centre_buf_.bind(b), neighbour_buf_.bind(b);
  for (auto* a : {&vector_buf_, &zbl_edge_, &zbl_atom_, &energy_acc_, &atom_energy_,
                  &edge_grad_, &e0_, &d_r_max_pairs_})
    a->bind(b);
  status_.bind(b);
  wb_.bind(b), wfb_.bind(b);
  edge_batch_option_ = options.edge_batch;
  for (auto* a : {&Y_, &ef_, &fc_, &h_, &h_prev_, &sc_, &Mraw_, &Air_, &B_, &ones_, &gh_,
                  &gh_prev_, &gB_, &gA_, &gMl_, &gtmp_, &gMraw_, &gdens_, &ghu_, &gyT_, &gw_,
                  &gef_, &grho_, &gy_, &gz_, &hu0_table_, &sc0_table_})
    a->bind(b);
  for (auto* a : {&gY_, &gE_, &gF_}) a->bind(b);

  const Accumulation acc =
      options.deterministic ? Accumulation::kDeterministic : Accumulation::kAtomic;
  int max_d = 1;
  std::size_t batch_weights_per_edge = 0;
  for (int t = 0; t < T_; ++t) {
    const model::MaceInteraction& in = m.interactions[t];
    const model::MaceProduct& pr = m.products[t];
    const std::string w = "mace.interactions[" + std::to_string(t) + "]";
    Layer<T> L(b);
    L.sc_on_nodes = in.skip_on_node_features;
    L.density = in.density_normalization;
    L.linear_up = DeviceLinear<T>(b, in.linear_up);
    L.linear = DeviceLinear<T>(b, in.linear);
    L.product_linear = DeviceLinear<T>(b, pr.linear);
    L.skip = DeviceLinear<T>(b, in.skip_tp, S_, w + ".skip_tp");
    L.radial_mlp = DeviceMlp<T>(b, in.radial_mlp, w + ".radial_mlp");
    if (L.density) L.density_mlp = DeviceMlp<T>(b, *in.density_mlp, w + ".density_mlp");
    else L.inv_avg = 1.0 / in.avg_num_neighbors;
    L.conv = std::make_unique<ConvRunner>(b, in.conv_tp.descriptor, dt_, acc);
    L.dim_in = in.linear_up.irreps_in.dim();
    L.dim_edge = in.linear_up.irreps_out.dim();
    L.dim_mid = in.conv_tp.descriptor.irreps_out().dim();
    L.dim_y = in.conv_tp.descriptor.irreps_in2().dim();
    L.numel = in.conv_tp.descriptor.weight_numel();
    L.dim_target = in.linear.irreps_out.dim();
    L.dim_hidden = pr.linear.irreps_out.dim();
    const std::size_t weights = static_cast<std::size_t>(L.numel) * (apply_cutoff_ ? 1 : 2);
    budget_.keep_per_edge += weights + L.radial_mlp.scratch_per_row();
    // In batches one batch's weights are held at a time (wb_, wfb_), but every layer's radial
    // MLP keeps its own activations at the batch's size.
    batch_weights_per_edge = std::max(batch_weights_per_edge, weights);
    budget_.batch_per_edge += L.radial_mlp.scratch_per_row();
    const ContractionTables ct = make_contraction_tables(
        pr.contraction, S_, "mace.products[" + std::to_string(t) + "].contraction");
    L.C = ct.C, L.D = ct.D, L.dim_b = ct.dim_b;
    L.num_pairs = ct.num_pairs(), L.num_w_rows = ct.num_w_rows;
    max_d = std::max(max_d, L.D);
    L.pair_factors.upload(ct.pair_factors);
    L.pair_nu.upload(ct.pair_nu);
    L.pair_b_base.upload(ct.pair_b_base);
    L.pair_b_stride.upload(ct.pair_b_stride);
    L.pair_term_begin.upload(ct.pair_term_begin);
    L.term_w_row.upload(ct.term_w_row);
    L.term_coef.upload(std::vector<T>(ct.term_coef.begin(), ct.term_coef.end()));
    L.weights.upload(std::vector<T>(ct.weights.begin(), ct.weights.end()));
    // [C][D] index p = c D + i0 + m  <->  mul_ir index off_blk + c d + m.
    const Irreps& target = in.linear.irreps_out;
    const std::vector<int> off = target.offsets();
    std::vector<int> to(L.dim_target), from(L.dim_target);
    int i0 = 0;
    for (std::size_t blk = 0; blk < target.size(); ++blk) {
      const int d = target[blk].ir.dim();
      for (int c = 0; c < L.C; ++c)
        for (int mm = 0; mm < d; ++mm) {
          const int ir = off[blk] + c * d + mm, ci = c * L.D + i0 + mm;
          to[ci] = ir;
          from[ir] = ci;
        }
      i0 += d;
    }
    L.d_to.upload(to);
    L.d_from.upload(from);
    layers_.push_back(std::move(L));
  }
  {
    // Plus the weight gradients, one layer at a time.
    std::size_t max_numel = 0;
    for (const Layer<T>& L : layers_) max_numel = std::max(max_numel, std::size_t(L.numel));
    budget_.keep_per_edge += max_numel;
    budget_.batch_per_edge += batch_weights_per_edge + max_numel;
  }
  for (const model::MaceReadout& src : m.readouts) {
    Readout<T> R(b);
    R.layer = src.layer;
    R.nonlinear = src.nonlinear;
    R.linear = DeviceLinear<T>(b, src.linear);
    if (src.nonlinear) {
      R.linear_2 = DeviceLinear<T>(b, *src.linear_2);
      const std::vector<int> off = src.linear.irreps_out.offsets();
      for (std::size_t blk = 0; blk < src.activation->acts.size(); ++blk)
        if (src.activation->acts[blk])
          R.acts.push_back({off[blk], off[blk + 1], static_cast<int>(src.activation->acts[blk]->kind),
                            src.activation->acts[blk]->cst});
    }
    readouts_.push_back(std::move(R));
  }

  module_ = b.load({"clebsch_mace.cu", mace_kernels_source(model, precision, max_d),
                    mace_kernel_specs()});
  gk_ = std::make_unique<GenericKernels>(b);
  k_geometry_ = &module_->kernel("mace_edge_geometry");
  k_gradient_ = &module_->kernel("mace_edge_gradient");
  k_cut_fwd_ = &module_->kernel("mace_cut_forward");
  k_cut_bwd_ = &module_->kernel("mace_cut_backward");
  k_dens_fwd_ = &module_->kernel("mace_density_forward");
  k_dens_bwd_ = &module_->kernel("mace_density_backward");
  k_permute_ = &module_->kernel("mace_permute");
  k_symcon_fwd_ = &module_->kernel("mace_symcon_forward");
  k_symcon_bwd_ = &module_->kernel("mace_symcon_backward");
  k_energy_ = &module_->kernel("mace_energy");

  e0_.upload(m.atomic_energies);
  d_r_max_pairs_.upload(r_max_pairs_);
  // Layer 0 reads the species embedding only: tabulate its inputs per species on the device.
  {
    DeviceLinear<T> embedding(b, m.node_embedding);
    std::vector<T> onehot(static_cast<std::size_t>(S_) * S_, T(0));
    std::vector<int> sp(S_);
    for (int s = 0; s < S_; ++s) onehot[static_cast<std::size_t>(s) * S_ + s] = T(1), sp[s] = s;
    DeviceArray<T> d_onehot(b), h0(b, static_cast<std::size_t>(S_) * layers_[0].dim_in);
    DeviceArray<int> d_sp(b);
    d_onehot.upload(onehot);
    d_sp.upload(sp);
    const Layer<T>& L0 = layers_[0];
    embedding.forward(*gk_, S_, d_onehot.data(), S_, h0.data(), L0.dim_in, false, nullptr, nullptr);
    hu0_table_.resize(static_cast<std::size_t>(S_) * L0.dim_edge);
    L0.linear_up.forward(*gk_, S_, h0.data(), L0.dim_in, hu0_table_.data(), L0.dim_edge, false,
                         nullptr, nullptr);
    if (L0.sc_on_nodes) {
      sc0_table_.resize(static_cast<std::size_t>(S_) * L0.dim_hidden);
      L0.skip.forward(*gk_, S_, h0.data(), L0.dim_in, sc0_table_.data(), L0.dim_hidden, false,
                      d_sp.data(), nullptr);
    }
    b.synchronize(nullptr);
  }
}

// ---------------------------------------------------------------------------------------------
// Validation (the host engine's rules and messages) and orderings
// ---------------------------------------------------------------------------------------------

template <class T, class G>
void MaceCuda<T, G>::validate_indices(std::size_t num_local, std::size_t num_nodes,
                                      std::size_t num_edges, const int* species,
                                      const int* center, const int* neighbor,
                                      GhostExchange* exchange) const {
  if (num_local > num_nodes)
    throw Error("graph has num_local = " + std::to_string(num_local) + " > num_nodes = " +
                std::to_string(num_nodes));
  if (num_nodes > static_cast<std::size_t>(INT32_MAX) ||
      num_edges > static_cast<std::size_t>(INT32_MAX))
    throw CapacityError("graph has " + std::to_string(num_nodes) + " nodes and " +
                        std::to_string(num_edges) + " edges; at most 2^31-1 of each");
  if (num_nodes > 0 && !species) throw Error("graph.species is null");
  if (num_edges > 0 && (!center || !neighbor))
    throw Error("graph has " + std::to_string(num_edges) + " edges but a null edge array");
  if (num_nodes > num_local && !exchange)
    throw Error("graph has " + std::to_string(num_nodes - num_local) +
                " ghost atoms but no GhostExchange was given");
  for (std::size_t n = 0; n < num_nodes; ++n)
    if (species[n] < 0 || species[n] >= S_)
      throw Error("atom " + std::to_string(n) + " has species " + std::to_string(species[n]) +
                  ", the model has " + std::to_string(S_) + " species (0.." +
                  std::to_string(S_ - 1) + ")");
  for (std::size_t e = 0; e < num_edges; ++e) {
    const int c = center[e], j = neighbor[e];
    if (c < 0 || static_cast<std::size_t>(c) >= num_local)
      throw Error("edge " + std::to_string(e) + " has centre " + std::to_string(c) +
                  ", not a local atom (0.." + std::to_string(num_local) + ")");
    if (j < 0 || static_cast<std::size_t>(j) >= num_nodes)
      throw Error("edge " + std::to_string(e) + " has neighbour " + std::to_string(j) +
                  ", not an atom (0.." + std::to_string(num_nodes) + ")");
  }
}

template <class T, class G>
void MaceCuda<T, G>::validate_vectors(std::size_t num_edges, const int* species,
                                      const int* center, const int* neighbor,
                                      const double* vector) const {
  const std::vector<std::string>& names = host_.species();
  for (std::size_t e = 0; e < num_edges; ++e) {
    const int c = center[e], j = neighbor[e];
    const double* v = vector + 3 * e;
    const double r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    if (!std::isfinite(r))
      throw Error("edge " + std::to_string(e) + " (centre " + std::to_string(c) +
                  ", neighbour " + std::to_string(j) + ") has a non-finite vector");
    const int sc = species[c], sj = species[j];
    const double rc = r_max_pairs_[static_cast<std::size_t>(sc) * S_ + sj];
    if (!(r < rc))
      throw Error("edge " + std::to_string(e) + " (centre " + std::to_string(c) +
                  ", neighbour " + std::to_string(j) + ") has length " + fmt(r) +
                  " A, not below the cutoff " + fmt(rc) + " A of species pair (" + names[sc] +
                  ", " + names[sj] + ")");
    if (r < MaceEngine::kMinEdgeLength)
      throw Error("edge " + std::to_string(e) + " (centre " + std::to_string(c) +
                  ", neighbour " + std::to_string(j) + ") has length " + fmt(r) +
                  " A, below the minimum " + fmt(MaceEngine::kMinEdgeLength) +
                  " A (overlapping atoms)");
  }
}

template <class T, class G>
void MaceCuda<T, G>::build_orderings(std::size_t E, const int* center, const int* neighbor,
                                     Stream s) {
  // The host engine's edge order (by centre, stable), so that sums run in the host's order.
  const EdgeOrderings o = order_edges_by_centre(L_, N_, E, center, neighbor, batch_edges(E));
  edges_.upload(o, *backend_, s);
  batches_changed();
}

template <class T, class G>
void MaceCuda<T, G>::batches_changed() {
  const bool keep = edges_.num_batches() == 1;
  if (keep_weights_ && !keep) {
    // Switching to batches: drop what a previous, smaller call kept for every edge.
    for (Layer<T>& Lp : layers_) Lp.W.release(), Lp.Wf.release(), Lp.radial_mlp.release_scratch();
    gw_.release();
  }
  keep_weights_ = keep;
}

template <class T, class G>
std::size_t MaceCuda<T, G>::batch_edges(std::size_t E) const {
  return budget_.max_batch_edges(E, edge_batch_option_,
                                 backend_->limits().memory_bytes / sizeof(T));
}

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------

template <class T, class G>
void MaceCuda<T, G>::compute(const AtomGraph& g, EngineResult& result, GhostExchange* exchange) {
  start_phases();
  validate_indices(g.num_local, g.num_nodes, g.num_edges, g.species, g.center, g.neighbor,
                   exchange);
  if (g.num_edges > 0 && !g.vector)
    throw Error("graph has " + std::to_string(g.num_edges) + " edges but a null edge array");
  validate_vectors(g.num_edges, g.species, g.center, g.neighbor, g.vector);
  N_ = g.num_nodes, L_ = g.num_local, E_ = g.num_edges;
  const Stream s = nullptr;
  phase("validate graph (host)", s);
  species_buf_.upload(g.species, N_, s);
  vector_buf_.upload(g.vector, 3 * E_, s);
  centre_buf_.upload(g.center, E_, s);
  neighbour_buf_.upload(g.neighbor, E_, s);
  phase("upload graph", s);
  // Ordered on the device when the centres come sorted (LAMMPS's neighbor lists), else here.
  if (!orderer_) orderer_ = std::make_unique<EdgeOrderKernels>(*backend_);
  if (orderer_->build(edges_, L_, N_, E_, S_, species_buf_.data(), centre_buf_.data(),
                      neighbour_buf_.data(), batch_edges(E_), s)) {
    batches_changed();
    phase("edge orderings (device)", s);
  } else {
    build_orderings(E_, g.center, g.neighbor, s);
    phase("edge orderings (host: centres not sorted)", s);
  }
  atom_energy_.resize(L_);
  edge_grad_.resize(3 * E_);
  run(species_buf_.data(), vector_buf_.data(), atom_energy_.data(), edge_grad_.data(), exchange,
      s);
  result.atom_energy.resize(L_);
  result.edge_gradient.resize(3 * E_);
  backend_->download(result.atom_energy.data(), atom_energy_.data(), L_ * sizeof(double), s);
  backend_->download(result.edge_gradient.data(), edge_grad_.data(), 3 * E_ * sizeof(double), s);
  phase("download results", s);
  result.energy = 0;
  for (double e : result.atom_energy) result.energy += e;
}

template <class T, class G>
void MaceCuda<T, G>::compute_device(const DeviceAtomGraph& g, const DeviceResult& r,
                                    GhostExchange* exchange, Stream s) {
  start_phases();
  if (g.num_nodes > 0 && !g.species) throw Error("graph.species is null");
  if (g.num_edges > 0 && (!g.center || !g.neighbor || !g.vector))
    throw Error("graph has " + std::to_string(g.num_edges) + " edges but a null edge array");
  if (g.num_nodes > static_cast<std::size_t>(INT32_MAX) ||
      g.num_edges > static_cast<std::size_t>(INT32_MAX))
    throw CapacityError("graph has " + std::to_string(g.num_nodes) + " nodes and " +
                        std::to_string(g.num_edges) + " edges; at most 2^31-1 of each");
  if (g.num_nodes > g.num_local && !exchange)
    throw Error("graph has " + std::to_string(g.num_nodes - g.num_local) +
                " ghost atoms but no GhostExchange was given");
  N_ = g.num_nodes, L_ = g.num_local, E_ = g.num_edges;
  // The index arrays: the host's copies only when needed (a graph the device kernels decline,
  // whose error or order the host path gives, and the message of a failed geometry check).
  HostGraphIndices host;
  auto download_indices = [&] { host.download(*backend_, g, s); };
  if (!orderer_) orderer_ = std::make_unique<EdgeOrderKernels>(*backend_);
  if (orderer_->build(edges_, L_, N_, E_, S_, g.species, g.center, g.neighbor, batch_edges(E_),
                      s)) {
    batches_changed();
    phase("edge orderings (device)", s);
  } else {
    download_indices();
    validate_indices(g.num_local, g.num_nodes, g.num_edges, host.species.data(),
                     host.center.data(), host.neighbor.data(), exchange);
    build_orderings(E_, host.center.data(), host.neighbor.data(), s);
    phase("edge orderings (host: centres not sorted)", s);
  }
  atom_energy_.resize(L_);
  double* ae = r.atom_energy ? r.atom_energy : atom_energy_.data();
  run(g.species, g.vector, ae, r.edge_gradient, exchange, s);
  const unsigned long long status = [&] {
    unsigned long long v = 0;
    backend_->download(&v, status_.data(), sizeof v, s);
    return v;
  }();
  if (status != ~0ull) {
    // Re-run the host checks on the offending edge for the host engine's message.
    if (host.empty()) download_indices();
    const std::size_t e = static_cast<std::size_t>(status & ((1ull << 40) - 1));
    double v[3];
    backend_->download(v, g.vector + 3 * e, sizeof v, s);
    int c = host.center[e], j = host.neighbor[e];
    try {
      validate_vectors(1, host.species.data(), &c, &j, v);
    } catch (const Error& err) {
      std::string msg = err.what();
      throw Error("edge " + std::to_string(e) + msg.substr(msg.find(' ', 5)));
    }
    throw Error("edge " + std::to_string(e) + " failed the device geometry check");
  }
  if (r.energy) {
    gk_->total(ae, static_cast<long long>(L_), r.energy, s);
    backend_->synchronize(s);
  }
}

// ---------------------------------------------------------------------------------------------
// The evaluation
// ---------------------------------------------------------------------------------------------

// The convolution of batch @p batch as a problem of its own (edge_orderings.h): its edges and
// receivers numbered from the batch's first, all senders; @p w: the batch's weights.
template <class T, class G>
ConvBuffers MaceCuda<T, G>::conv_buffers(const Layer<T>& Lp, std::size_t batch,
                                         const T* w) const {
  const std::size_t e0 = std::size_t(edges_.batch_edge[batch]);
  ConvBuffers b = batch_conv_buffers(edges_, batch, N_);
  b.x = Lp.hu.data();
  b.y = (Lp.dim_y == nsh_ ? Y_.data() : Lp.Yc.data()) + e0 * Lp.dim_y;
  b.w = w;
  return b;
}

template <class T, class G>
const T* MaceCuda<T, G>::batch_weights(int t, std::size_t batch, DeviceArray<T>& wb,
                                       DeviceArray<T>& wfb, Stream s) {
  Layer<T>& Lp = layers_[t];
  const std::size_t e0 = edges_.batch_edge[batch];
  const long long n = edges_.batch_edge[batch + 1] - static_cast<long long>(e0);
  wb.resize(n * Lp.numel);
  Lp.radial_mlp.forward(*gk_, n, ef_.data() + e0 * nb_, wb.data(), s);
  if (apply_cutoff_) return wb.data();
  wfb.resize(n * Lp.numel);
  MaceCutArgs c{wb.data(), wfb.data(), fc_.data() + e0, nullptr, nullptr, n, Lp.numel};
  backend_->launch(*k_cut_fwd_, grid_for(n * Lp.numel), s, c);
  return wfb.data();
}

template <class T, class G>
void MaceCuda<T, G>::run(const int* d_species, const double* d_vector, double* atom_energy,
                         double* edge_gradient, GhostExchange* exchange, Stream s) {
  DeviceBackend& b = *backend_;
  d_species_ = d_species;
  const long long E = static_cast<long long>(E_), L = static_cast<long long>(L_);
  status_.resize(1);
  b.memset(status_.data(), 0xff, sizeof(unsigned long long), s);
  Y_.resize(E_ * nsh_);
  ef_.resize(E_ * nb_);
  fc_.resize(apply_cutoff_ ? 0 : E_);
  zbl_edge_.resize(zbl_ ? E_ : 0);
  zbl_atom_.resize(zbl_ ? L_ : 0);
  MaceEdgeArgs ea{};
  ea.vector = d_vector, ea.perm = edges_.perm.data(), ea.centre = edges_.centre.data();
  ea.sender = edges_.sender.data(), ea.species = d_species, ea.r_max_pairs = d_r_max_pairs_.data();
  ea.Y = Y_.data(), ea.ef = ef_.data(), ea.fc = apply_cutoff_ ? nullptr : fc_.data();
  ea.zbl = zbl_ ? zbl_edge_.data() : nullptr;
  ea.status = status_.data();
  ea.zbl_scale = scale_, ea.min_length = MaceEngine::kMinEdgeLength;
  ea.num_edges = E;
  b.launch(*k_geometry_, grid_for(E), s, ea);
  phase("edge geometry", s);
  if (zbl_)
    gk_->segment_sum(DType::kFloat64, DType::kFloat64,
                     SegmentSumArgs{zbl_edge_.data(), zbl_atom_.data(), edges_.centre_ptr.data(), L, 1,
                                    0, 0},
                     s);
  energy_acc_.resize(L_);
  energy_acc_.zero(s);
  gY_.resize(E_ * nsh_), gY_.zero(s);
  gE_.resize(E_ * nb_), gE_.zero(s);
  gF_.resize(apply_cutoff_ ? 0 : E_), gF_.zero(s);
  ones_.resize(L_);
  gk_->fill(dt_, ones_.data(), L, 1.0, s);

  for (int t = 0; t < T_; ++t) {
    prepare_layer(t, exchange, s);
    layer_forward(t, s);
    phase("layer " + std::to_string(t) + " forward", s);
  }
  MaceEnergyArgs en{d_species, e0_.data(), zbl_ ? zbl_atom_.data() : nullptr,
                    energy_acc_.data(), atom_energy, scale_, shift_, L};
  b.launch(*k_energy_, grid_for(L), s, en);

  gh_.resize(L_ * layers_.back().dim_hidden);
  gh_.zero(s);
  for (int t = T_ - 1; t >= 0; --t) {
    node_backward(t, s);
    phase("layer " + std::to_string(t) + " node backward", s);
    edge_backward(t, s);
    if (t > 0) backward_tail(t, exchange, s);
    phase("layer " + std::to_string(t) + " edge backward", s);
  }
  ea.gY = gY_.data(), ea.gE = gE_.data(), ea.gF = apply_cutoff_ ? nullptr : gF_.data();
  ea.edge_gradient = edge_gradient;
  b.launch(*k_gradient_, grid_for(E), s, ea);
  b.synchronize(s);
  phase("edge gradient", s);
}

template <class T, class G>
void MaceCuda<T, G>::prepare_layer(int t, GhostExchange* exchange, Stream s) {
  Layer<T>& Lp = layers_[t];
  const long long N = static_cast<long long>(N_), L = static_cast<long long>(L_);
  Lp.hu.resize(N_ * Lp.dim_edge);
  if (t == 0) {
    AxpbyArgs a{};
    a.x = hu0_table_.data(), a.y = Lp.hu.data(), a.x_rows = d_species_;
    a.rows = N, a.cols = Lp.dim_edge, a.ldx = Lp.dim_edge, a.ldy = Lp.dim_edge, a.alpha = 1;
    gk_->axpby(dt_, dt_, a, s);
  } else {
    Lp.linear_up.forward(*gk_, L, h_.data(), Lp.dim_in, Lp.hu.data(), Lp.dim_edge, false,
                         nullptr, s);
    if (exchange) exchange_forward_rows(*backend_, Lp.hu.data(), L_, N_, Lp.dim_edge, *exchange, s);
  }
  if (Lp.sc_on_nodes) {
    sc_.resize(L_ * Lp.dim_hidden);
    if (t == 0) {
      AxpbyArgs a{};
      a.x = sc0_table_.data(), a.y = sc_.data(), a.x_rows = d_species_;
      a.rows = L, a.cols = Lp.dim_hidden, a.ldx = Lp.dim_hidden, a.ldy = Lp.dim_hidden;
      a.alpha = 1;
      gk_->axpby(dt_, dt_, a, s);
    } else {
      Lp.skip.forward(*gk_, L, h_.data(), Lp.dim_in, sc_.data(), Lp.dim_hidden, false,
                      d_species_, s);
    }
  }
}

template <class T, class G>
void MaceCuda<T, G>::layer_forward(int t, Stream s) {
  Layer<T>& Lp = layers_[t];
  DeviceBackend& b = *backend_;
  const long long E = static_cast<long long>(E_), L = static_cast<long long>(L_);
  if (Lp.density) {
    Lp.rho.resize(E_), Lp.dedge.resize(E_), Lp.dens.resize(L_);
    Lp.density_mlp.forward(*gk_, E, ef_.data(), Lp.rho.data(), s);
    MaceDensityArgs d{};
    d.rho = Lp.rho.data(), d.fc = apply_cutoff_ ? nullptr : fc_.data(), d.d = Lp.dedge.data();
    d.num_edges = E;
    b.launch(*k_dens_fwd_, grid_for(E), s, d);
    gk_->segment_sum(dt_, dt_,
                     SegmentSumArgs{Lp.dedge.data(), Lp.dens.data(), edges_.centre_ptr.data(), L, 1, 0,
                                    0},
                     s);
  }
  if (Lp.dim_y != nsh_) {
    Lp.Yc.resize(E_ * Lp.dim_y);
    AxpbyArgs a{};
    a.x = Y_.data(), a.y = Lp.Yc.data(), a.rows = E, a.cols = Lp.dim_y, a.ldx = nsh_;
    a.ldy = Lp.dim_y, a.alpha = 1;
    gk_->axpby(dt_, dt_, a, s);
  }
  Mraw_.resize(L_ * Lp.dim_mid);
  for (std::size_t bt = 0; bt < edges_.num_batches(); ++bt) {
    // One batch: the weights stay in the layer for its backward.
    const T* w = keep_weights_ ? batch_weights(t, bt, Lp.W, Lp.Wf, s)
                               : batch_weights(t, bt, wb_, wfb_, s);
    ConvBuffers cb = conv_buffers(Lp, bt, w);
    cb.out = Mraw_.data() + static_cast<std::size_t>(edges_.batch_centre[bt]) * Lp.dim_mid;
    Lp.conv->run(s, Pass::kForward, cb);
  }
  node_forward(t, s);
}

template <class T, class G>
void MaceCuda<T, G>::node_forward(int t, Stream s) {
  Layer<T>& Lp = layers_[t];
  DeviceBackend& b = *backend_;
  const long long L = static_cast<long long>(L_);
  const int dt = Lp.dim_target;
  Lp.Ml.resize(L_ * dt);
  Lp.linear.forward(*gk_, L, Mraw_.data(), Lp.dim_mid, Lp.Ml.data(), dt, false, nullptr, s);
  if (Lp.density)
    gk_->scale_rows(dt_, ScaleRowsArgs{Lp.Ml.data(), Lp.dens.data(), L, dt, dt, 1}, s);
  else
    gk_->axpby(dt_, dt_, GenericKernels::vector(Lp.Ml.data(), Lp.Ml.data(), L * dt, Lp.inv_avg, 0),
               s);
  const T* air = Lp.Ml.data();
  if (!Lp.sc_on_nodes) {
    Air_.resize(L_ * dt);
    Lp.skip.forward(*gk_, L, Lp.Ml.data(), dt, Air_.data(), dt, false, d_species_, s);
    air = Air_.data();
  }
  Lp.A.resize(L_ * dt);
  b.launch(*k_permute_, grid_for(L * dt), s, PermuteArgs{air, Lp.A.data(), Lp.d_to.data(), L, dt});
  B_.resize(L_ * Lp.dim_b);
  B_.zero(s);
  SymConArgs sa{};
  sa.A = Lp.A.data(), sa.B = B_.data(), sa.species = d_species_;
  sa.pair_factors = Lp.pair_factors.data(), sa.pair_nu = Lp.pair_nu.data();
  sa.pair_b_base = Lp.pair_b_base.data(), sa.pair_b_stride = Lp.pair_b_stride.data();
  sa.pair_term_begin = Lp.pair_term_begin.data(), sa.term_w_row = Lp.term_w_row.data();
  sa.term_coef = Lp.term_coef.data(), sa.weights = Lp.weights.data();
  sa.rows = L, sa.C = Lp.C, sa.D = Lp.D, sa.dim_b = Lp.dim_b, sa.num_pairs = Lp.num_pairs;
  sa.num_w_rows = Lp.num_w_rows;
  b.launch(*k_symcon_fwd_, grid_for(L * Lp.C), s, sa);
  // h^t replaces h^{t-1}, which prepare_layer(t) has consumed.
  h_.resize(L_ * Lp.dim_hidden);
  Lp.product_linear.forward(*gk_, L, B_.data(), Lp.dim_b, h_.data(), Lp.dim_hidden, false,
                            nullptr, s);
  if (Lp.sc_on_nodes)
    gk_->axpby(dt_, dt_, GenericKernels::vector(sc_.data(), h_.data(), L * Lp.dim_hidden, 1, 1),
               s);
  readouts_forward(t, s);
}

template <class T, class G>
void MaceCuda<T, G>::readouts_forward(int t, Stream s) {
  const long long L = static_cast<long long>(L_);
  const int dh = layers_[t].dim_hidden;
  for (Readout<T>& R : readouts_) {
    if (R.layer != t) continue;
    const DeviceLinear<T>& last = R.nonlinear ? R.linear_2 : R.linear;
    const int dout = last.dim_out();
    gy_.resize(L_ * dout);
    if (!R.nonlinear) {
      R.linear.forward(*gk_, L, h_.data(), dh, gy_.data(), dout, false, nullptr, s);
    } else {
      const int dz = R.linear.dim_out();
      R.z.resize(L_ * dz), R.a.resize(L_ * dz);
      R.linear.forward(*gk_, L, h_.data(), dh, R.z.data(), dz, false, nullptr, s);
      gk_->axpby(dt_, dt_, GenericKernels::vector(R.z.data(), R.a.data(), L * dz, 1, 0), s);
      for (const auto& act : R.acts) {
        ActArgs a{};
        a.z = R.z.data(), a.a = R.a.data(), a.rows = L, a.ld = dz, a.c0 = act.c0, a.c1 = act.c1;
        a.kind = act.kind, a.cst = act.cst, a.out_scale = 1;
        gk_->act_forward(dt_, a, s);
      }
      R.linear_2.forward(*gk_, L, R.a.data(), dz, gy_.data(), dout, false, nullptr, s);
    }
    AxpbyArgs a{};
    a.x = gy_.data(), a.y = energy_acc_.data(), a.rows = L, a.cols = 1, a.ldx = dout, a.ldy = 1;
    a.alpha = 1, a.beta = 1;
    gk_->axpby(dt_, DType::kFloat64, a, s);
  }
}

template <class T, class G>
void MaceCuda<T, G>::readouts_backward(int t, Stream s) {
  const long long L = static_cast<long long>(L_);
  const int dh = layers_[t].dim_hidden;
  for (Readout<T>& R : readouts_) {
    if (R.layer != t) continue;
    const DeviceLinear<T>& last = R.nonlinear ? R.linear_2 : R.linear;
    const int dout = last.dim_out();
    // dE/dy = scale on the first (scalar) output, 0 elsewhere.
    gy_.resize(L_ * dout);
    gy_.zero(s);
    AxpbyArgs a{};
    a.x = ones_.data(), a.y = gy_.data(), a.rows = L, a.cols = 1, a.ldx = 1, a.ldy = dout;
    a.alpha = scale_, a.beta = 0;
    gk_->axpby(dt_, dt_, a, s);
    if (!R.nonlinear) {
      R.linear.backward(*gk_, L, gy_.data(), dout, gh_.data(), dh, true, nullptr, s);
      continue;
    }
    const int dz = R.linear.dim_out();
    gz_.resize(L_ * dz);
    R.linear_2.backward(*gk_, L, gy_.data(), dout, gz_.data(), dz, false, nullptr, s);
    for (const auto& act : R.acts) {
      ActArgs aa{};
      aa.z = R.z.data(), aa.g = gz_.data(), aa.rows = L, aa.ld = dz, aa.c0 = act.c0;
      aa.c1 = act.c1, aa.kind = act.kind, aa.cst = act.cst, aa.out_scale = 1;
      gk_->act_backward(dt_, aa, s);
    }
    R.linear.backward(*gk_, L, gz_.data(), dz, gh_.data(), dh, true, nullptr, s);
  }
}

template <class T, class G>
void MaceCuda<T, G>::node_backward(int t, Stream s) {
  Layer<T>& Lp = layers_[t];
  DeviceBackend& b = *backend_;
  const long long L = static_cast<long long>(L_);
  const int dt = Lp.dim_target;
  readouts_backward(t, s);
  gB_.resize(L_ * Lp.dim_b);
  Lp.product_linear.backward(*gk_, L, gh_.data(), Lp.dim_hidden, gB_.data(), Lp.dim_b, false,
                             nullptr, s);
  gA_.resize(L_ * dt);
  SymConArgs sa{};
  sa.A = Lp.A.data(), sa.B = gB_.data(), sa.gA = gA_.data(), sa.species = d_species_;
  sa.pair_factors = Lp.pair_factors.data(), sa.pair_nu = Lp.pair_nu.data();
  sa.pair_b_base = Lp.pair_b_base.data(), sa.pair_b_stride = Lp.pair_b_stride.data();
  sa.pair_term_begin = Lp.pair_term_begin.data(), sa.term_w_row = Lp.term_w_row.data();
  sa.term_coef = Lp.term_coef.data(), sa.weights = Lp.weights.data();
  sa.rows = L, sa.C = Lp.C, sa.D = Lp.D, sa.dim_b = Lp.dim_b, sa.num_pairs = Lp.num_pairs;
  sa.num_w_rows = Lp.num_w_rows;
  b.launch(*k_symcon_bwd_, grid_for(L * Lp.C), s, sa);
  gMl_.resize(L_ * dt);
  b.launch(*k_permute_, grid_for(L * dt), s,
           PermuteArgs{gA_.data(), gMl_.data(), Lp.d_from.data(), L, dt});
  if (!Lp.sc_on_nodes) {
    gtmp_.resize(L_ * dt);
    b.copy(gtmp_.data(), gMl_.data(), L_ * dt * sizeof(T), s);
    Lp.skip.backward(*gk_, L, gtmp_.data(), dt, gMl_.data(), dt, false, d_species_, s);
  }
  if (Lp.density) {
    // Ml = Mlin / (1 + D): dE/dD = -<dE/dMl, Ml> / (1 + D), dE/dMlin = dE/dMl / (1 + D).
    gdens_.resize(L_);
    gk_->row_dot(dt_, RowDotArgs{gMl_.data(), Lp.Ml.data(), gdens_.data(), L, dt, dt, dt, -1, 0},
                 s);
    gk_->scale_rows(dt_, ScaleRowsArgs{gdens_.data(), Lp.dens.data(), L, 1, 1, 1}, s);
    gk_->scale_rows(dt_, ScaleRowsArgs{gMl_.data(), Lp.dens.data(), L, dt, dt, 1}, s);
  } else {
    gk_->axpby(dt_, dt_, GenericKernels::vector(gMl_.data(), gMl_.data(), L * dt, Lp.inv_avg, 0),
               s);
  }
  gMraw_.resize(L_ * Lp.dim_mid);
  Lp.linear.backward(*gk_, L, gMl_.data(), dt, gMraw_.data(), Lp.dim_mid, false, nullptr, s);
}

template <class T, class G>
void MaceCuda<T, G>::edge_backward(int t, Stream s) {
  Layer<T>& Lp = layers_[t];
  DeviceBackend& b = *backend_;
  const long long E = static_cast<long long>(E_);
  ghu_.resize(t > 0 ? N_ * Lp.dim_edge : 0);
  if (E_ == 0) {
    // No edge: nothing reaches the senders (the convolution rejects a pass with no output).
    ghu_.zero(s);
    return;
  }
  gyT_.resize(E_ * Lp.dim_y);
  gef_.resize(E_ * nb_);
  const std::size_t batches = edges_.num_batches();
  if (batches > 1 && t > 0) ghu_.zero(s);  // the batches add their grad_x
  for (std::size_t bt = 0; bt < batches; ++bt) {
    const std::size_t e0 = edges_.batch_edge[bt], r0 = edges_.batch_centre[bt];
    const long long n = edges_.batch_edge[bt + 1] - static_cast<long long>(e0);
    if (n == 0) continue;
    const T* w = keep_weights_ ? (apply_cutoff_ ? Lp.W.data() : Lp.Wf.data())
                               : batch_weights(t, bt, wb_, wfb_, s);
    const T* w_raw = keep_weights_ ? Lp.W.data() : wb_.data();
    gw_.resize(n * Lp.numel);
    ConvBuffers cb = conv_buffers(Lp, bt, w);
    cb.grad_out = gMraw_.data() + r0 * Lp.dim_mid;
    cb.grad_x = t > 0 ? ghu_.data() : nullptr;
    cb.accumulate_grad_x = batches > 1;
    cb.grad_y = gyT_.data() + e0 * Lp.dim_y;
    cb.grad_w = gw_.data();
    Lp.conv->run(s, Pass::kBackward, cb);
    if (!apply_cutoff_) {
      MaceCutArgs c{w_raw, nullptr, fc_.data() + e0, gw_.data(), gF_.data() + e0, n, Lp.numel};
      b.launch(*k_cut_bwd_, grid_for(n), s, c);
    }
    Lp.radial_mlp.backward(*gk_, n, gw_.data(), gef_.data() + e0 * nb_, s);
  }
  {
    AxpbyArgs a{};
    a.x = gyT_.data(), a.y = gY_.data(), a.rows = E, a.cols = Lp.dim_y, a.ldx = Lp.dim_y;
    a.ldy = nsh_, a.alpha = 1, a.beta = 1;
    gk_->axpby(dt_, dg_, a, s);
  }
  AxpbyArgs ga{};
  ga.x = gef_.data(), ga.y = gE_.data(), ga.rows = E, ga.cols = nb_, ga.ldx = nb_, ga.ldy = nb_;
  ga.alpha = 1, ga.beta = 1;
  gk_->axpby(dt_, dg_, ga, s);
  if (Lp.density) {
    grho_.resize(E_);
    MaceDensityArgs d{};
    d.rho = Lp.rho.data(), d.fc = apply_cutoff_ ? nullptr : fc_.data();
    d.gdens = gdens_.data(), d.centre = edges_.centre.data(), d.grho = grho_.data();
    d.gF = apply_cutoff_ ? nullptr : gF_.data(), d.num_edges = E;
    b.launch(*k_dens_bwd_, grid_for(E), s, d);
    Lp.density_mlp.backward(*gk_, E, grho_.data(), gef_.data(), s);
    gk_->axpby(dt_, dg_, ga, s);
  }
}

template <class T, class G>
void MaceCuda<T, G>::backward_tail(int t, GhostExchange* exchange, Stream s) {
  Layer<T>& Lp = layers_[t];
  const long long L = static_cast<long long>(L_);
  if (exchange) exchange_reverse_rows(*backend_, ghu_.data(), N_, Lp.dim_edge, *exchange, s);
  gh_prev_.resize(L_ * Lp.dim_in);
  Lp.linear_up.backward(*gk_, L, ghu_.data(), Lp.dim_edge, gh_prev_.data(), Lp.dim_in, false,
                        nullptr, s);
  if (Lp.sc_on_nodes)
    Lp.skip.backward(*gk_, L, gh_.data(), Lp.dim_hidden, gh_prev_.data(), Lp.dim_in, true,
                     d_species_, s);
  std::swap(gh_, gh_prev_);
}

}  // namespace

std::unique_ptr<CudaEngine> make_mace_cuda_engine(const model::Model& model, Precision precision,
                                                  const CudaEngineOptions& options) {
  if (model.arch != model::Arch::kMace || !model.mace)
    throw Error("the CUDA MACE engine needs a MACE model");
  switch (precision) {
    case Precision::kFloat64:
      return std::make_unique<MaceCuda<double, double>>(model, precision, options);
    case Precision::kFloat32:
      return std::make_unique<MaceCuda<float, float>>(model, precision, options);
    case Precision::kMixed:
      return std::make_unique<MaceCuda<float, double>>(model, precision, options);
  }
  throw Error("make_mace_cuda_engine: unknown precision");
}

}  // namespace clebsch::cuda
