// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// What the CUDA MACE and NequIP engines share around their own model code, written once: the
// host engine of the same model (it has checked the model, and answers species, cutoffs, layers
// and exchange width), the backend and its generic kernels, the graph's sizes during a call, the
// edge orderings in the host engine's order (built on the device when the kernels of
// edge_order_kernels.h accept the graph, else on the host) with their cut into the batches of the
// per-edge weight stage (edge_orderings.h, sized by edge_batch_budget.h), and whether a call keeps
// each layer's weights from the forward to the backward (one batch) or computes them again
// (several). Also the tails of the two entry points and the factories' dispatch on the precision.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/engine/conv_runner.h"
#include "clebsch/cuda/engine/cuda_engine.h"
#include "clebsch/cuda/graph/edge_batch_budget.h"
#include "clebsch/cuda/graph/edge_order_kernels.h"
#include "clebsch/cuda/graph/edge_orderings.h"
#include "clebsch/engine/mace_engine.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda {

/// The base of a CUDA engine whose model is checked and described by the host engine @p Host
/// (MaceEngine, NequipEngine).
template <class Host>
class CudaEngineBase : public CudaEngine {
 public:
  const std::vector<std::string>& species() const override { return host_.species(); }
  double r_max() const override { return host_.r_max(); }
  double r_max(int a, int b) const override { return host_.r_max(a, b); }
  int num_layers() const override { return host_.num_layers(); }
  int exchange_width() const override { return host_.exchange_width(); }
  DeviceBackend& backend() override { return *backend_; }
  /// Host: the host engine's copy of the model. Device: every allocation live on the backend,
  /// which is the engine's own unless CudaEngineOptions::backend shares one between engines.
  /// Its buffers by name from the backend's ledger, and the peak of the last call (a backend
  /// shared between engines lists every engine's).
  EngineMemory memory_usage() const override {
    EngineMemory m;
    m.host_bytes = host_.memory_usage().host_bytes, m.device_bytes = backend_->allocated_bytes();
    m.device_peak_bytes = call_peak_bytes_;
    for (const LedgerEntry& e : backend_->ledger().entries())
      m.device_buffers.push_back({e.name, e.bytes, to_string(e.scale)});
    return m;
  }

 protected:
  /// Builds the host engine first (its constructor rejects an unsupported model before any
  /// device work), then takes the backend of @p options.
  /// @param value_bytes the size of the engine's network type: edge batches are sized in its
  ///   values.
  CudaEngineBase(const model::Model& model, Precision precision, const CudaEngineOptions& options,
                 std::size_t value_bytes)
      : host_(make_host(model, precision, options)), value_bytes_(value_bytes) {
    backend_ = options.backend ? options.backend
                               : std::shared_ptr<DeviceBackend>(make_cuda_backend(options.device));
    edges_.bind(*backend_);
    edge_batch_option_ = options.edge_batch;
    kept_rows_option_ = options.kept_rows;
  }

  /// The host engine of the model's checks and metadata. A MACE one takes the structure inputs:
  /// a model with an embedding refuses to build without them, and so does the CUDA engine.
  static Host make_host(const model::Model& model, Precision precision,
                        const CudaEngineOptions& options) {
    if constexpr (std::is_same_v<Host, MaceEngine>) {
      MaceEngineOptions o;
      o.structure_inputs = options.structure_inputs;
      return Host(model, precision, o);
    } else {
      return Host(model, precision);
    }
  }

  /// Loads the engine's own module, then the generic kernels into gk_; returns the module.
  std::unique_ptr<DeviceModule> load_modules(const ModuleSource& engine_module) {
    std::unique_ptr<DeviceModule> m = backend_->load(engine_module);
    gk_ = std::make_unique<GenericKernels>(*backend_);
    return m;
  }

  /// Releases what a one-batch call kept per edge of every layer (weights, MLP activations,
  /// per-edge gradients): called when a call switches to several batches.
  virtual void drop_kept_weights() = 0;

  /// Edges per batch of the weight stage for @p num_edges edges (0: one batch), after
  /// deciding keep_rows_ for the call's L_ centres.
  std::size_t batch_edges(std::size_t num_edges) {
    const std::size_t memory_values = backend_->limits().memory_bytes / value_bytes_;
    keep_rows_ = kept_rows_option_ == KeptRows::kAuto
                     ? budget_.keep_rows(L_, num_edges, memory_values)
                     : kept_rows_option_ == KeptRows::kAll;
    return budget_.max_batch_edges(num_edges, L_, edge_batch_option_, memory_values, keep_rows_);
  }

  /// The orderings of the call's graph (N_, L_, E_ set) from host index arrays: the host
  /// engine's edge order (by centre, stable), so that sums run in the host's order.
  void order_edges_on_host(const int* center, const int* neighbor, Stream s) {
    AllocationScope scope(backend_->ledger(), {"edge orderings", BufferScale::kEdge});
    const EdgeOrderings o = order_edges_by_centre(L_, N_, E_, center, neighbor, batch_edges(E_));
    edges_.upload(o, *backend_, s);
    batches_changed();
  }

  /// The same orderings built on the device from device arrays; false (edges_ unspecified) when
  /// the kernels decline the graph: an index out of range or centres not sorted.
  bool order_edges_on_device(int num_species, const int* species, const int* center,
                             const int* neighbor, Stream s) {
    AllocationScope scope(backend_->ledger(), {"edge orderings", BufferScale::kEdge});
    if (!orderer_) orderer_ = std::make_unique<EdgeOrderKernels>(*backend_);
    if (!orderer_->build(edges_, L_, N_, E_, num_species, species, center, neighbor,
                         batch_edges(E_), s))
      return false;
    batches_changed();
    return true;
  }

  /// Batch @p b of the weight stage: its first edge and first centre, and its number of edges.
  struct EdgeBatch {
    std::size_t e0, r0;
    long long n;
  };
  EdgeBatch edge_batch(std::size_t b) const {
    const std::size_t e0 = edges_.batch_edge[b], r0 = edges_.batch_centre[b];
    return {e0, r0, edges_.batch_edge[b + 1] - static_cast<long long>(e0)};
  }
  /// The number of centres of batch @p b, and the most of any batch.
  std::size_t batch_centres(std::size_t b) const {
    return static_cast<std::size_t>(edges_.batch_centre[b + 1] - edges_.batch_centre[b]);
  }
  std::size_t max_batch_centres() const {
    std::size_t most = 0;
    for (std::size_t b = 0; b < edges_.num_batches(); ++b) most = std::max(most, batch_centres(b));
    return most;
  }
  /// The most edges of any batch.
  std::size_t max_batch_edges() const {
    std::size_t most = 0;
    for (std::size_t b = 0; b < edges_.num_batches(); ++b)
      most = std::max(most, static_cast<std::size_t>(edge_batch(b).n));
    return most;
  }

  /// The convolution of batch @p batch as a problem of its own (edge_orderings.h): its edges and
  /// receivers numbered from the batch's first, all senders; x the senders' rows, y the rows of
  /// dim_y values of every edge (the batch's are taken; dim_y 0: y holds only the batch's
  /// rows), w the batch's weights.
  template <class T>
  ConvBuffers batch_conv(std::size_t batch, const T* x, const T* y, int dim_y, const T* w) const {
    const std::size_t e0 = std::size_t(edges_.batch_edge[batch]);
    ConvBuffers b = batch_conv_buffers(edges_, batch, N_);
    b.x = x;
    b.y = y + e0 * dim_y;
    b.w = w;
    return b;
  }

  /// compute()'s results: the device's atom energies and edge gradients into @p result, and the
  /// energy summed on the host.
  void download_results(const DeviceArray<double>& atom_energy,
                        const DeviceArray<double>& edge_gradient, EngineResult& result,
                        Stream s) const {
    result.atom_energy.resize(L_);
    result.edge_gradient.resize(3 * E_);
    backend_->download(result.atom_energy.data(), atom_energy.data(), L_ * sizeof(double), s);
    backend_->download(result.edge_gradient.data(), edge_gradient.data(), 3 * E_ * sizeof(double),
                       s);
    result.energy = 0;
    for (double e : result.atom_energy) result.energy += e;
  }

  /// compute_device()'s total: the device sum of @p atom_energy into @p energy when the caller
  /// asked for it, complete on return.
  void device_total(const double* atom_energy, double* energy, Stream s) const {
    if (!energy) return;
    gk_->total(atom_energy, static_cast<long long>(L_), energy, s);
    backend_->synchronize(s);
  }

  /// A call starts: the ledger's peak from here is the call's.
  void start_call_peak() { backend_->ledger().reset_peak(); }
  /// A call ends: keeps its peak for memory_usage().
  void end_call_peak() { call_peak_bytes_ = backend_->ledger().peak_bytes(); }

  Host host_;  // the model's checks and metadata (nothing on the hot path)
  std::shared_ptr<DeviceBackend> backend_;
  std::unique_ptr<GenericKernels> gk_;  // made by load_modules

  // --- per call ---
  std::size_t N_ = 0, L_ = 0, E_ = 0;
  const int* d_species_ = nullptr;
  DeviceEdgeOrderings edges_;  // the host engine's edge order (edge_orderings.h)
  EdgeBatchBudget budget_;     // weight-stage values per edge (set by the engine)
  bool keep_weights_ = true;   // one batch: W and MLP activations kept from forward to backward
  // The layers' per-centre rows (EdgeBatchBudget::rows_per_centre) kept for every centre from
  // the forward to the backward; false: one batch's, made again in the backward.
  bool keep_rows_ = true;

 private:
  // After either path built edges_.
  void batches_changed() {
    const bool keep = edges_.num_batches() == 1;
    if (keep_weights_ && !keep) drop_kept_weights();
    keep_weights_ = keep;
  }

  std::size_t value_bytes_;
  std::size_t call_peak_bytes_ = 0;  // the ledger's peak during the last call
  std::size_t edge_batch_option_ = 0;
  KeptRows kept_rows_option_ = KeptRows::kAuto;
  std::unique_ptr<EdgeOrderKernels> orderer_;  // compute_device's orderings on the device
};

/// The factories' dispatch on the precision: @p Engine<network type, geometry type>.
/// @param factory the factory's name, for the message of an unknown precision
template <template <class, class> class Engine>
std::unique_ptr<CudaEngine> make_engine_for_precision(const model::Model& model,
                                                      Precision precision,
                                                      const CudaEngineOptions& options,
                                                      const char* factory) {
  switch (precision) {
    case Precision::kFloat64:
      return std::make_unique<Engine<double, double>>(model, precision, options);
    case Precision::kFloat32:
      return std::make_unique<Engine<float, float>>(model, precision, options);
    case Precision::kMixed:
      return std::make_unique<Engine<float, double>>(model, precision, options);
  }
  throw Error(std::string(factory) + ": unknown precision");
}

}  // namespace clebsch::cuda
