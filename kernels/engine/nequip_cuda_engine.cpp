// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The NequIP engine on the device layer: the host engine's sequence (src/engine/nequip_engine.cpp)
// with every step a device kernel. Per edge (internal order: edges sorted by centre, stable, as the
// host engine sums them): the normalised length with its per-species-pair cutoff, the Bessel
// basis times the polynomial cutoff times the global factor, the harmonics and the ZBL term in
// the geometry precision (nequip_edge_geometry). Per layer: linear_1 (DeviceLinear) and the
// per-species normalisation on every node, the edge MLP (DeviceMlp), the generated uvu
// convolution (ConvRunner: receiver pass forward, fused sender pass backward), linear_2, the
// self-connection (nequip_device_ops.h) and the gate (device_gate.h), the optional resnet; then the
// readout MLP, the per-species scale/shift and the ZBL sum (nequip_energy). The backward is written
// by hand, layer by layer in reverse, down to dE/dY and dE/d(radial embedding) summed over layers
// in the geometry precision, from which nequip_edge_gradient makes dE/dvector. Rows are in e3nn's
// mul_ir layout throughout (the host engine's component-major rows are its own CPU layout).
//
// The per-edge weight stage (edge MLP -> convolution) runs in batches of whole centres
// (edge_orderings.h), sized by the rule of edge_batch_budget.h (CudaEngineOptions::edge_batch).
// With one batch each layer's edge-MLP output W (E x weight_numel) and the MLP's activations are
// kept from its forward for its backward: no recomputation. With several, a batch's weights live
// only while the batch is convolved, and the backward computes them again (one MLP forward more
// per layer), so that this stage's memory no longer grows with E times every layer's weight
// count; the dE/dY and dE/d(embedding) of a batch are added to the per-edge sums batch by batch.
// In the fused radial form (CudaEngineOptions::fused_radial) the convolution makes each edge's
// weights itself from the edge MLP's last hidden rows and its last (plain linear) layer, and its
// backward gives dE/d(hidden rows): no E x weight_numel tensor at all, kept or per batch.
// The messages (the convolution's output, a layer's widest rows) and their gradient hold one
// batch's centres: linear_2 runs batch by batch behind the receiver pass, and its backward
// before each batch's sender pass; the batch cap keeps those rows within a sixteenth of the
// device. The results are the one-batch results to rounding (dE/dx of a sender is summed batch
// after batch), and bitwise reproducible in deterministic mode.
//
// Host round trips: the graph in and the results out, and with a GhostExchange the per-layer
// ghost rows (staged through host memory). Validation: compute() runs the host engine's checks
// (nequip_graph_check.h) on the host graph before any work; compute_device() checks the indices
// and builds the edge orderings on the device when the centres come sorted (edge_order_kernels.h),
// else copies the index arrays to the host for both, and checks the geometry on the device (a
// status word read back at the end); on any failure it copies the arrays and reruns the host
// checks, so both entry points throw the host engine's message for the first offending value.
// What the MACE engine does alike (host engine, backend, edge orderings and batches) is
// CudaEngineBase's (cuda_engine_base.h).
#include "clebsch/cuda/engine/nequip_cuda_engine.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/engine/conv_runner.h"
#include "clebsch/cuda/engine/cuda_engine_base.h"
#include "clebsch/cuda/engine/nequip_cuda_source.h"
#include "clebsch/cuda/engine/nequip_device_ops.h"
#include "clebsch/cuda/engine/radial_conv.h"
#include "clebsch/cuda/graph/edge_batch_budget.h"
#include "clebsch/cuda/graph/edge_order_kernels.h"
#include "clebsch/cuda/graph/edge_orderings.h"
#include "clebsch/cuda/graph/ghost_staging.h"
#include "clebsch/cuda/nn/device_gate.h"
#include "clebsch/cuda/nn/device_linear.h"
#include "clebsch/cuda/nn/device_mlp.h"
#include "clebsch/cuda/templates/nequip_device_args.h"
#include "clebsch/engine/nequip_engine.h"
#include "clebsch/engine/nequip_graph_check.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda {
namespace {

template <class T>
struct NqLayer {
  explicit NqLayer(DeviceBackend& b) : norm_const(b), x(b), W(b), y(b) {}
  bool resnet = false;
  int dim_in = 0, dim_x = 0, dim_mid = 0, dim_y = 0, dim_out = 0, numel = 0;
  // The convolution in the fused radial form (TpProblem::fused_hidden): it reads the edge MLP's
  // last hidden rows, so conv_width (its per-edge input and gradient) is the hidden width, else
  // the weight count.
  bool fused = false;
  int conv_width = 0;
  DeviceLinear<T> linear_1, linear_2;
  std::optional<NequipDeviceSelfConnection<T>> sc;
  DeviceArray<T> norm_const;  // [species]
  DeviceMlp<T> edge_mlp;
  std::unique_ptr<ConvRunner> conv;
  DeviceGate<T> gate;
  // Per call, kept from the forward for the backward.
  DeviceArray<T> x;  // [nodes][dim_x]: linear_1(h) * norm_const[species]
  DeviceArray<T> W;  // [edges][numel]: edge MLP output (one edge batch only, unfused)
  DeviceArray<T> y;  // [local][dim_y]: the gate input
  // One edge batch: the forward's batch_weights(), W or the MLP's hidden rows (fused).
  const T* kept = nullptr;
};

/// Resizes to @p n elements but never to zero, so that the pointers the convolution checks are
/// valid also on a rank without atoms or edges.
template <class A>
void size_at_least_one(A& a, std::size_t n) {
  a.resize(std::max<std::size_t>(n, 1));
}

template <class T, class G>
class NequipCuda final : public CudaEngineBase<NequipEngine> {
 public:
  NequipCuda(const model::Model& model, Precision precision, const CudaEngineOptions& options);

  void compute(const AtomGraph& graph, EngineResult& result, GhostExchange* exchange) override;
  void compute_device(const DeviceAtomGraph& graph, const DeviceResult& result,
                      GhostExchange* exchange, Stream stream) override;

 private:
  void drop_kept_weights() override;
  // The per-call buffers' names in the backend's ledger (constructor).
  void name_buffers();
  // The edge MLP's output for batch @p batch of layer @p Lk into @p w (the MLP keeps its
  // activations for the backward of those rows); returns w's data. Fused: the MLP's last hidden
  // rows, in its own scratch (w unused).
  const T* batch_weights(NqLayer<T>& Lk, std::size_t batch, DeviceArray<T>& w, Stream s);
  // The evaluation on device inputs; writes atom energies and graph-order edge gradients.
  void run(const int* d_species, const double* d_vector, double* atom_energy, double* edge_gradient,
           GhostExchange* exchange, bool check_geometry, Stream s);
  // Copies the vectors of a device graph that failed a check and reruns the host checks, which
  // throw the host engine's message (a device flag the host does not confirm, an edge within
  // rounding of its cutoff, is dropped: the host's rule decides).
  void recheck_on_host(const DeviceAtomGraph& g, const std::vector<int>& species,
                       const std::vector<int>& center, const std::vector<int>& neighbor,
                       GhostExchange* exchange, Stream s) const;
  void forward_layer(int k, GhostExchange* exchange, Stream s);
  void backward_layer(int k, GhostExchange* exchange, Stream s);
  void node_norm(const NqLayer<T>& L, Stream s);
  // y[r][0:cols] += x[r][0:cols] for r < rows (row strides ldx, ldy); y of type @p y_type.
  void add_rows(const T* x, long long ldx, void* y, long long ldy, long long rows, long long cols,
                DType y_type, Stream s) const {
    AxpbyArgs a{};
    a.x = x, a.y = y;
    a.rows = rows, a.cols = cols, a.ldx = ldx, a.ldy = ldy;
    a.alpha = 1.0, a.beta = 1.0;
    gk_->axpby(dt_, y_type, a, s);
  }
  ConvBuffers conv_buffers(const NqLayer<T>& L, std::size_t batch, const T* w) const;

  NequipGraphLimits limits_;
  std::unique_ptr<DeviceModule> module_;
  const DeviceKernel *k_geometry_ = nullptr, *k_gradient_ = nullptr, *k_energy_ = nullptr;
  DType dt_ = dtype_of<T>(), dg_ = dtype_of<G>();

  // --- model ---
  int S_ = 0, nsh_ = 0, nb_ = 0, emb_dim_ = 0;
  bool zbl_ = false;
  std::vector<NqLayer<T>> layers_;
  DeviceMlp<T> readout_;
  DeviceArray<T> type_embedding_, scale_, shift_;

  // --- per call ---
  DeviceArray<T> wb_;  // several batches: one batch's weights
  DeviceArray<int> species_buf_;
  DeviceArray<double> vector_buf_, atom_energy_, edge_grad_, d_r_max_pairs_;
  DeviceArray<unsigned long long> status_;
  DeviceArray<T> Y_, emb_, h_, h_next_, node_c_, message_, e_net_, seed_;
  DeviceArray<T> gh_, gh_in_, gy_, gm_, gx_, gsh_, gw_, gemb_;
  DeviceArray<G> zbl_edge_, zbl_node_, grad_sh_, grad_emb_;
};

template <class T, class G>
NequipCuda<T, G>::NequipCuda(const model::Model& model, Precision precision,
                             const CudaEngineOptions& options)
    : CudaEngineBase<NequipEngine>(model, precision, options, sizeof(T)) {
  DeviceBackend& b = *backend_;
  // What the constructor allocates and names no further is the model (weights, tables, kernels'
  // status words): fixed in size.
  AllocationScope model_scope(b.ledger(), {"model: weights and tables", BufferScale::kFixed});
  const model::Nequip& m = *model.nequip;
  S_ = model.num_species();
  nsh_ = (model.sh_lmax + 1) * (model.sh_lmax + 1);
  nb_ = m.radial.num_basis;
  emb_dim_ = m.embedding_dim;
  zbl_ = m.pair_potential.has_value();
  limits_ = {S_, model.r_max_pairs, host_.species()};
  species_buf_.bind(b);
  for (auto* a : {&vector_buf_, &atom_energy_, &edge_grad_, &d_r_max_pairs_}) a->bind(b);
  status_.bind(b);
  wb_.bind(b);
  for (auto* a : {&Y_, &emb_, &h_, &h_next_, &node_c_, &message_, &e_net_, &seed_, &gh_, &gh_in_,
                  &gy_, &gm_, &gx_, &gsh_, &gw_, &gemb_, &type_embedding_, &scale_, &shift_})
    a->bind(b);
  for (auto* a : {&zbl_edge_, &zbl_node_, &grad_sh_, &grad_emb_}) a->bind(b);

  // The host engine's constructor has checked every shape, mode and activation by now.
  const Accumulation acc =
      options.deterministic ? Accumulation::kDeterministic : Accumulation::kAtomic;
  const auto per_species = [&](const std::vector<double>& v) {
    std::vector<T> out(S_);
    for (int s = 0; s < S_; ++s) out[s] = static_cast<T>(v[v.size() == 1 ? 0 : s]);
    return out;
  };
  for (std::size_t k = 0; k < m.layers.size(); ++k) {
    const model::NequipLayer& src = m.layers[k];
    const std::string w = "layer " + std::to_string(k);
    NqLayer<T> L(b);
    L.resnet = src.resnet;
    L.linear_1 = DeviceLinear<T>(b, src.linear_1);
    L.linear_2 = DeviceLinear<T>(b, src.linear_2);
    L.dim_in = src.linear_1.irreps_in.dim();
    L.dim_x = src.linear_1.irreps_out.dim();
    L.dim_mid = src.tp.descriptor.irreps_out().dim();
    L.dim_y = src.linear_2.irreps_out.dim();
    L.numel = src.tp.descriptor.weight_numel();
    if (src.sc) L.sc.emplace(b, *src.sc, m.type_embedding, S_, emb_dim_, w + " sc");
    L.norm_const.upload(per_species(src.norm_const));
    L.edge_mlp = DeviceMlp<T>(b, src.edge_mlp, w + " edge_mlp");
    // The fused radial form where the edge MLP allows it and the product's schedule has it (the
    // unrolled CG form); else the MLP writes the weights.
    L.conv = make_radial_conv(b, src.tp.descriptor, dt_, acc, L.edge_mlp, options.fused_radial,
                              options.require_fused_radial, w + " edge_mlp", L.fused);
    L.conv_width = L.fused ? L.edge_mlp.dim_hidden() : L.numel;
    L.gate = DeviceGate<T>(b, src.gate, "NequipEngine: " + w + " gate");
    L.dim_out = L.gate.dim_out();
    layers_.push_back(std::move(L));
  }
  {
    // Every layer's MLP keeps its activations (for one batch's rows with several batches); the
    // backward adds one batch's dE/dW (fused: dE/dh), dE/dY and dE/d(embedding) per edge. A fused
    // layer holds no weights: its hidden rows are MLP scratch, counted in scratch_per_row().
    std::size_t max_weights = 0, max_width = 0, scratch = 0;
    for (const NqLayer<T>& L : layers_) {
      const std::size_t weights = L.fused ? 0 : static_cast<std::size_t>(L.numel);
      max_weights = std::max(max_weights, weights);
      max_width = std::max(max_width, static_cast<std::size_t>(L.conv_width));
      scratch += L.edge_mlp.scratch_per_row();
      budget_.keep_per_edge += weights;
    }
    const std::size_t gradients = max_width + nsh_ + nb_;
    budget_.keep_per_edge += scratch + gradients;
    budget_.batch_per_edge = max_weights + scratch + gradients;
    // The messages of one batch's centres and, in the backward, their gradient: a layer's
    // widest rows (74 KB per atom each of a nequip-benzene-sized model in float32).
    for (const NqLayer<T>& L : layers_)
      budget_.batch_per_centre =
          std::max(budget_.batch_per_centre, 2 * static_cast<std::size_t>(L.dim_mid));
  }
  readout_ = DeviceMlp<T>(b, m.readout, "readout");
  type_embedding_.upload(std::vector<T>(m.type_embedding.begin(), m.type_embedding.end()));
  scale_.upload(per_species(m.scales));
  shift_.upload(per_species(m.shifts));
  d_r_max_pairs_.upload(model.r_max_pairs);

  module_ = load_modules(
      {"clebsch_nequip.cu", nequip_kernels_source(model, precision), nequip_kernel_specs()});
  k_geometry_ = &module_->kernel("nequip_edge_geometry");
  k_gradient_ = &module_->kernel("nequip_edge_gradient");
  k_energy_ = &module_->kernel("nequip_energy");
  b.synchronize(nullptr);  // the uploads above read host vectors that die here
  name_buffers();
}

// Every per-call buffer by name in the backend's ledger (memory_usage().device_buffers), with
// what it grows with; the per-layer ones once per layer ("layer[k].W").
template <class T, class G>
void NequipCuda<T, G>::name_buffers() {
  const BufferScale E = BufferScale::kEdge, A = BufferScale::kAtom, F = BufferScale::kFixed;
  auto nm = [](auto& a, const std::string& name, BufferScale scale) { a.name(name, scale); };
  nm(species_buf_, "graph: species", A), nm(vector_buf_, "graph: vectors", E);
  nm(atom_energy_, "result: atom energies", A), nm(edge_grad_, "result: dE/dvector", E);
  nm(status_, "geometry status", F), nm(wb_, "W (one batch: edge MLP weights)", E);
  nm(Y_, "Y (edge harmonics)", E), nm(emb_, "edge embedding (radial basis)", E);
  nm(zbl_edge_, "ZBL per edge", E), nm(zbl_node_, "ZBL per atom", A);
  nm(h_, "h (node features)", A), nm(h_next_, "h next", A), nm(node_c_, "norm per node", A);
  nm(message_, "message (one batch's conv output)", A), nm(e_net_, "readout energies", A);
  nm(seed_, "readout seed", A), nm(gh_, "dE/dh", A), nm(gh_in_, "dE/dh in", A);
  nm(gy_, "dE/dy (gate input)", A), nm(gm_, "dE/dmessage (one batch)", A),
      nm(gx_, "dE/dx (senders)", A);
  nm(gsh_, "dE/dY (one batch, T: mixed precision)", E), nm(gw_, "dE/dW (one batch)", E);
  nm(gemb_, "dE/d(edge embedding) (one batch)", E), nm(grad_sh_, "dE/dY (all layers, G)", E);
  nm(grad_emb_, "dE/d(edge embedding) (all layers, G)", E);
  for (std::size_t k = 0; k < layers_.size(); ++k) {
    NqLayer<T>& L = layers_[k];
    const std::string l = "layer[" + std::to_string(k) + "].";
    nm(L.x, l + "x (conv input)", A), nm(L.W, l + "W (edge MLP weights, kept)", E);
    nm(L.y, l + "y (gate input)", A);
    L.edge_mlp.name_scratch(l + "edge MLP");
  }
  readout_.name_scratch("readout MLP");
}

// ---------------------------------------------------------------------------------------------
// Orderings and entry points
// ---------------------------------------------------------------------------------------------

template <class T, class G>
void NequipCuda<T, G>::drop_kept_weights() {
  for (NqLayer<T>& Lk : layers_) Lk.W.release(), Lk.edge_mlp.release_scratch(), Lk.kept = nullptr;
  gw_.release(), gsh_.release(), gemb_.release();
}

template <class T, class G>
void NequipCuda<T, G>::compute(const AtomGraph& g, EngineResult& result, GhostExchange* exchange) {
  check_nequip_graph(g, exchange != nullptr, limits_);
  start_call_peak();
  N_ = g.num_nodes, L_ = g.num_local, E_ = g.num_edges;
  const Stream s = nullptr;
  order_edges_on_host(g.center, g.neighbor, s);
  species_buf_.upload(g.species, N_, s);
  vector_buf_.upload(g.vector, 3 * E_, s);
  size_at_least_one(atom_energy_, L_);
  size_at_least_one(edge_grad_, 3 * E_);
  run(species_buf_.data(), vector_buf_.data(), atom_energy_.data(), edge_grad_.data(), exchange,
      false, s);
  download_results(atom_energy_, edge_grad_, result, s);
  end_call_peak();
}

template <class T, class G>
void NequipCuda<T, G>::recheck_on_host(const DeviceAtomGraph& g, const std::vector<int>& species,
                                       const std::vector<int>& center,
                                       const std::vector<int>& neighbor, GhostExchange* exchange,
                                       Stream s) const {
  std::vector<double> vector(3 * g.num_edges);
  backend_->download(vector.data(), g.vector, vector.size() * sizeof(double), s);
  const AtomGraph host{g.num_local,   g.num_nodes,     species.data(), g.num_edges,
                       center.data(), neighbor.data(), vector.data()};
  check_nequip_graph(host, exchange != nullptr, limits_);
}

template <class T, class G>
void NequipCuda<T, G>::compute_device(const DeviceAtomGraph& g, const DeviceResult& r,
                                      GhostExchange* exchange, Stream s) {
  if (g.num_nodes > 0 && !g.species) throw Error("NequipEngine: graph.species is null");
  if (g.num_edges > 0 && (!g.center || !g.neighbor || !g.vector))
    throw Error("NequipEngine: graph.center, neighbor or vector is null with " +
                std::to_string(g.num_edges) + " edges");
  // The index arrays come to the host only when needed: a graph the device orderings decline
  // (an index out of range, centres not sorted) and the message of a failed geometry check.
  HostGraphIndices host;
  auto download_indices = [&] { host.download(*backend_, g, s); };
  auto check_indices_on_host = [&] {
    try {
      const AtomGraph indices{g.num_local, g.num_nodes,        host.species.data(),
                              g.num_edges, host.center.data(), host.neighbor.data(),
                              nullptr};
      check_nequip_graph(indices, exchange != nullptr, limits_, /*check_vectors=*/false);
    } catch (const Error&) {
      // A vector before the bad index may be bad too: the host's first error is the message.
      recheck_on_host(g, host.species, host.center, host.neighbor, exchange, s);
      throw;  // not reached: the host checks find the same index error
    }
  };
  start_call_peak();
  N_ = g.num_nodes, L_ = g.num_local, E_ = g.num_edges;
  const bool counts_ok = g.num_local <= g.num_nodes &&
                         g.num_nodes <= static_cast<std::size_t>(INT32_MAX) &&
                         g.num_edges <= static_cast<std::size_t>(INT32_MAX) &&
                         (g.num_nodes == g.num_local || exchange);
  if (!(counts_ok &&
        order_edges_on_device(limits_.num_species, g.species, g.center, g.neighbor, s))) {
    download_indices();
    check_indices_on_host();
    order_edges_on_host(host.center.data(), host.neighbor.data(), s);
  }
  size_at_least_one(atom_energy_, L_);
  double* ae = r.atom_energy ? r.atom_energy : atom_energy_.data();
  run(g.species, g.vector, ae, r.edge_gradient, exchange, true, s);
  unsigned long long status = 0;
  backend_->download(&status, status_.data(), sizeof status, s);
  if (status != ~0ull) {
    if (host.empty() && (g.num_edges > 0 || g.num_nodes > 0)) download_indices();
    recheck_on_host(g, host.species, host.center, host.neighbor, exchange, s);
  }
  device_total(ae, r.energy, s);
  end_call_peak();
}

// ---------------------------------------------------------------------------------------------
// The evaluation
// ---------------------------------------------------------------------------------------------

// Layer L's convolution of batch @p batch with its weights @p w (fused: the hidden rows).
template <class T, class G>
ConvBuffers NequipCuda<T, G>::conv_buffers(const NqLayer<T>& L, std::size_t batch,
                                           const T* w) const {
  ConvBuffers cb = batch_conv(batch, L.x.data(), Y_.data(), nsh_, w);
  if (L.fused) {
    cb.h = cb.w, cb.w = nullptr;
    cb.w4 = L.edge_mlp.last_weights(), cb.w4t = L.edge_mlp.last_weights_t();
  }
  return cb;
}

template <class T, class G>
const T* NequipCuda<T, G>::batch_weights(NqLayer<T>& Lk, std::size_t batch, DeviceArray<T>& w,
                                         Stream s) {
  const EdgeBatch eb = edge_batch(batch);
  const T* emb = emb_.data() + eb.e0 * nb_;
  if (Lk.fused) return Lk.edge_mlp.forward_hidden(*gk_, eb.n, emb, s);
  size_at_least_one(w, eb.n * Lk.numel);
  Lk.edge_mlp.forward(*gk_, eb.n, emb, w.data(), s);
  return w.data();
}

// node_c_[n] = norm_const[species[n]] on every node.
template <class T, class G>
void NequipCuda<T, G>::node_norm(const NqLayer<T>& L, Stream s) {
  size_at_least_one(node_c_, N_);
  AxpbyArgs a{};
  a.x = L.norm_const.data(), a.y = node_c_.data(), a.x_rows = d_species_;
  a.rows = static_cast<long long>(N_), a.cols = 1, a.ldx = 1, a.ldy = 1;
  a.alpha = 1.0, a.beta = 0.0;
  gk_->axpby(dt_, dt_, a, s);
}

template <class T, class G>
void NequipCuda<T, G>::run(const int* d_species, const double* d_vector, double* atom_energy,
                           double* edge_gradient, GhostExchange* exchange, bool check_geometry,
                           Stream s) {
  DeviceBackend& b = *backend_;
  d_species_ = d_species;
  const long long N = static_cast<long long>(N_), L = static_cast<long long>(L_),
                  E = static_cast<long long>(E_);

  // ---- geometry ----
  size_at_least_one(Y_, E_ * nsh_);
  size_at_least_one(emb_, E_ * nb_);
  size_at_least_one(zbl_edge_, zbl_ ? E_ : 0);
  size_at_least_one(zbl_node_, zbl_ ? L_ : 0);
  NequipEdgeArgs ea{};
  ea.vector = d_vector, ea.perm = edges_.perm.data(), ea.centre = edges_.centre.data();
  ea.neighbour = edges_.sender.data(), ea.species = d_species;
  ea.Y = Y_.data(), ea.emb = emb_.data(), ea.zbl = zbl_edge_.data();
  ea.num_edges = E;
  if (check_geometry) {
    status_.resize(1);
    b.memset(status_.data(), 0xff, sizeof(unsigned long long), s);
    ea.status = status_.data(), ea.r_max_pairs = d_r_max_pairs_.data();
  }
  b.launch(*k_geometry_, grid_for(E), s, ea);
  if (zbl_)
    gk_->segment_sum(
        dg_, dg_,
        SegmentSumArgs{zbl_edge_.data(), zbl_node_.data(), edges_.centre_ptr.data(), L, 1, 0, 0},
        s);

  // ---- forward ----
  size_at_least_one(h_, N_ * emb_dim_);
  {
    AxpbyArgs a{};
    a.x = type_embedding_.data(), a.y = h_.data(), a.x_rows = d_species;
    a.rows = N, a.cols = emb_dim_, a.ldx = emb_dim_, a.ldy = emb_dim_;
    a.alpha = 1.0, a.beta = 0.0;
    gk_->axpby(dt_, dt_, a, s);
  }
  for (int k = 0; k < static_cast<int>(layers_.size()); ++k) forward_layer(k, exchange, s);

  const int dim_last = layers_.back().dim_out;
  size_at_least_one(e_net_, L_);
  size_at_least_one(seed_, L_);
  readout_.forward(*gk_, L, h_.data(), e_net_.data(), s);
  NequipEnergyArgs en{d_species,
                      scale_.data(),
                      shift_.data(),
                      e_net_.data(),
                      zbl_ ? zbl_node_.data() : nullptr,
                      atom_energy,
                      seed_.data(),
                      L};
  b.launch(*k_energy_, grid_for(L), s, en);

  // ---- backward ----
  size_at_least_one(grad_sh_, E_ * nsh_);
  grad_sh_.zero(s);
  size_at_least_one(grad_emb_, E_ * nb_);
  grad_emb_.zero(s);
  size_at_least_one(gh_, N_ * dim_last);
  gh_.zero(s);
  readout_.backward(*gk_, L, seed_.data(), gh_.data(), s);
  for (int k = static_cast<int>(layers_.size()) - 1; k >= 0; --k) backward_layer(k, exchange, s);

  ea.gY = grad_sh_.data(), ea.gEmb = grad_emb_.data(), ea.edge_gradient = edge_gradient;
  ea.status = nullptr;
  b.launch(*k_gradient_, grid_for(E), s, ea);
  b.synchronize(s);
}

template <class T, class G>
void NequipCuda<T, G>::forward_layer(int k, GhostExchange* exchange, Stream s) {
  NqLayer<T>& Lk = layers_[k];
  const long long N = static_cast<long long>(N_), L = static_cast<long long>(L_);
  // x = linear_1(h) * norm_const[species], on every node: ghosts are read as senders.
  size_at_least_one(Lk.x, N_ * Lk.dim_x);
  Lk.linear_1.forward(*gk_, N, h_.data(), Lk.dim_in, Lk.x.data(), Lk.dim_x, false, nullptr, s);
  node_norm(Lk, s);
  gk_->scale_rows(dt_, ScaleRowsArgs{Lk.x.data(), node_c_.data(), N, Lk.dim_x, Lk.dim_x, 0, 0, 0},
                  s);

  // message[i] = sum over the edges into i of tp(x[sender], Y_e, edge_mlp(emb_e)), the widest
  // rows of a layer: one batch's centres at a time, each batch's through linear_2 into y.
  size_at_least_one(message_, max_batch_centres() * Lk.dim_mid);
  size_at_least_one(Lk.y, L_ * Lk.dim_y);
  for (std::size_t bt = 0; bt < edges_.num_batches(); ++bt) {
    // One batch: the weights stay in the layer for its backward.
    const T* w = batch_weights(Lk, bt, keep_weights_ ? Lk.W : wb_, s);
    if (keep_weights_) Lk.kept = w;
    const long long rows = static_cast<long long>(batch_centres(bt));
    ConvBuffers c = conv_buffers(Lk, bt, w);
    c.out = message_.data();
    // The pass writes every row of its batch's centres (zeros for one without edges).
    Lk.conv->run(s, Pass::kForward, c);
    Lk.linear_2.forward(*gk_, rows, message_.data(), Lk.dim_mid,
                        Lk.y.data() + static_cast<std::size_t>(edges_.batch_centre[bt]) * Lk.dim_y,
                        Lk.dim_y, false, nullptr, s);
  }

  // y = linear_2(message) + sc(h, a); h' = gate(y) (+ h); ghost rows of h' zero until exchanged.
  if (Lk.sc) Lk.sc->forward(*gk_, L, h_.data(), Lk.dim_in, Lk.y.data(), Lk.dim_y, d_species_, s);
  size_at_least_one(h_next_, N_ * Lk.dim_out);
  h_next_.zero(s);
  Lk.gate.forward(*gk_, L, Lk.y.data(), h_next_.data(), Lk.dim_out, s);
  if (Lk.resnet) add_rows(h_.data(), Lk.dim_in, h_next_.data(), Lk.dim_out, L, Lk.dim_out, dt_, s);
  // The next layer reads the ghosts' new features; the readout after the last layer does not.
  // With an exchange the call is made whatever this rank's ghost count (collective under MPI).
  if (exchange && k + 1 < static_cast<int>(layers_.size()))
    exchange_forward_rows(*backend_, h_next_.data(), L_, N_, Lk.dim_out, *exchange, s);
  std::swap(h_, h_next_);
}

template <class T, class G>
void NequipCuda<T, G>::backward_layer(int k, GhostExchange* exchange, Stream s) {
  NqLayer<T>& Lk = layers_[k];
  const long long N = static_cast<long long>(N_), L = static_cast<long long>(L_);
  // The first layer's input is the type embedding, a constant: no gradient to propagate.
  const bool need_grad_h = k > 0;

  // gh_ holds dE/dh' on the local rows.
  size_at_least_one(gy_, L_ * Lk.dim_y);
  Lk.gate.backward(*gk_, L, Lk.y.data(), gh_.data(), Lk.dim_out, gy_.data(), s);
  // dE/dmessage follows batch by batch (one batch's centres' rows at a time).
  size_at_least_one(gm_, max_batch_centres() * Lk.dim_mid);
  if (need_grad_h) {
    size_at_least_one(gh_in_, N_ * Lk.dim_in);
    gh_in_.zero(s);
    if (Lk.resnet) add_rows(gh_.data(), Lk.dim_out, gh_in_.data(), Lk.dim_in, L, Lk.dim_in, dt_, s);
    if (Lk.sc)
      Lk.sc->backward(*gk_, L, gy_.data(), Lk.dim_y, gh_in_.data(), Lk.dim_in, d_species_, s);
  }

  // The fused sender pass, batch by batch: dE/dx per sender (summed over the batches), dE/dY
  // and dE/dW (fused radial form: dE/dh) per edge of the batch. Outputs that a pass may leave
  // untouched (blocks no path reaches) are cleared first.
  const std::size_t batches = edges_.num_batches();
  constexpr bool direct_gy = std::is_same_v<T, G>;
  if (need_grad_h) {
    size_at_least_one(gx_, N_ * Lk.dim_x);
    gx_.zero(s);
  }
  for (std::size_t bt = 0; bt < batches; ++bt) {
    const auto [e0, r0, n] = edge_batch(bt);
    if (n == 0) continue;
    // Several batches: the MLP forward again, which also restores its activations for the
    // batch's rows.
    const T* w = keep_weights_ ? Lk.kept : batch_weights(Lk, bt, wb_, s);
    // dE/dY straight into grad_sh_ when it has the layer's type (the pass adds to it); in mixed
    // precision through a batch-sized scratch.
    if (!direct_gy) {
      size_at_least_one(gsh_, n * nsh_);
      gsh_.zero(s);
    }
    // Not cleared: the pass stores every edge's dE/dW (dE/dh) once (tp_launcher clears it when
    // no group has weights), which the emulated backend's NaN-filled allocations check.
    size_at_least_one(gw_, n * Lk.conv_width);
    ConvBuffers c = conv_buffers(Lk, bt, w);
    Lk.linear_2.backward(*gk_, static_cast<long long>(batch_centres(bt)),
                         gy_.data() + r0 * Lk.dim_y, Lk.dim_y, gm_.data(), Lk.dim_mid, false,
                         nullptr, s);
    c.grad_out = gm_.data();
    c.grad_y = direct_gy ? static_cast<void*>(grad_sh_.data() + e0 * nsh_)
                         : static_cast<void*>(gsh_.data());
    c.accumulate_grad_y = direct_gy;
    (Lk.fused ? c.grad_h : c.grad_w) = gw_.data();
    c.grad_x = need_grad_h ? gx_.data() : nullptr;
    c.accumulate_grad_x = batches > 1;
    Lk.conv->run(s, Pass::kBackward, c);
    if (!direct_gy) add_rows(gsh_.data(), nsh_, grad_sh_.data() + e0 * nsh_, nsh_, n, nsh_, dg_, s);
    size_at_least_one(gemb_, n * nb_);
    if (Lk.fused)
      Lk.edge_mlp.backward_hidden(*gk_, n, gw_.data(), gemb_.data(), s);
    else
      Lk.edge_mlp.backward(*gk_, n, gw_.data(), gemb_.data(), s);
    add_rows(gemb_.data(), nb_, grad_emb_.data() + e0 * nb_, nb_, n, nb_, dg_, s);
  }

  if (need_grad_h) {
    node_norm(Lk, s);
    gk_->scale_rows(dt_, ScaleRowsArgs{gx_.data(), node_c_.data(), N, Lk.dim_x, Lk.dim_x, 0, 0, 0},
                    s);
    Lk.linear_1.backward(*gk_, N, gx_.data(), Lk.dim_x, gh_in_.data(), Lk.dim_in, true, nullptr, s);
    // Ghost rows hold gradients that belong to their owners' features.
    if (exchange) exchange_reverse_rows(*backend_, gh_in_.data(), N_, Lk.dim_in, *exchange, s);
    std::swap(gh_, gh_in_);
  }
}

}  // namespace

std::unique_ptr<CudaEngine> make_nequip_cuda_engine(const model::Model& model, Precision precision,
                                                    const CudaEngineOptions& options) {
  if (model.arch != model::Arch::kNequip || !model.nequip)
    throw Error("make_nequip_cuda_engine: not a NequIP model");
  return make_engine_for_precision<NequipCuda>(model, precision, options,
                                               "make_nequip_cuda_engine");
}

}  // namespace clebsch::cuda
