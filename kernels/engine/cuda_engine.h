// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The CUDA engine: clebsch::Engine on a GPU (or on the emulated backend, for tests without one).
// make_cuda_engine picks the implementation by the model's architecture (MACE:
// mace_cuda_engine.cpp, NequIP: nequip_cuda_engine.cpp). Besides Engine::compute (host graph in,
// host results out), a CudaEngine takes device-resident inputs on the caller's stream through
// compute_device(), for callers that keep atoms on the device (the Kokkos pair style).
//
// The library also exports an extern "C" factory, clebsch_cuda_create_engine_v3, that the LAMMPS
// plugin resolves with dlopen/dlsym, so that the plugin never links libclebsch_cuda (and with it
// the CUDA toolkit's libraries) and still loads on machines without a GPU.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/engine/engine.h"
#include "clebsch/model/model.h"

namespace clebsch::cuda {

/// CudaEngineOptions::kept_rows.
enum class KeptRows {
  kAuto,   ///< kAll while those rows fit a quarter of the device memory, else kBatch
  kAll,    ///< every atom's and edge's rows, from the forward to the backward
  kBatch,  ///< one edge batch's rows at a time, made again in the backward
};

struct CudaEngineOptions {
  /// Fixed-order accumulation everywhere (the convolution's deterministic mode): bitwise
  /// reproducible results run to run. false: atomic accumulation in the convolution.
  bool deterministic = true;
  /// CUDA device ordinal; -1: the node-local MPI rank modulo the device count
  /// (device_for_local_rank).
  int device = 0;
  /// Use this backend instead of make_cuda_backend(device) (tests pass the emulated one).
  std::shared_ptr<DeviceBackend> backend;
  /// Record the wall time of each phase of compute() (synchronising the stream between phases,
  /// so the total is slower): CudaEngine::phase_seconds(). For benchmarks.
  bool profile = false;
  /// Edges per batch of the per-edge weight stage (MACE's radial MLP, NequIP's edge MLP ->
  /// convolution): a batch's weights are computed, used and dropped, and computed again in the
  /// backward, so the stage needs memory for one batch, not for every edge of every layer.
  /// 0: automatic (all edges in one batch, weights kept from the forward to the backward, while
  /// that fits a quarter of the device memory; else batches that fit an eighth:
  /// edge_batch_budget.h). The automatic sizes assume one engine per GPU: with several MPI ranks
  /// on one GPU and systems near the memory limit, set it.
  std::size_t edge_batch = 0;
  /// MACE and NequIP: the convolution makes the per-edge weights itself from the radial (NequIP:
  /// edge) MLP's last hidden layer, per edge tile (TpProblem::fused_hidden), so that no edges x
  /// weights tensor is stored; false: the MLP writes the weights (A/B benchmarks:
  /// bench_mace_model --engine cuda-fused versus cuda-unfused). Models whose MLP ends in an
  /// activation or bias, or whose product needs the looped CG form, run unfused either way. Off
  /// by default: exact on the H200 but 1.9x (fp32) and 2.7x (fp64) slower than stored weights
  /// for a MACE-MP-0-medium-sized model at 10k atoms, for 3x less memory (bench/NOTES.md runs
  /// 21, 27: the per-warp weight tiles leave one to four blocks per multiprocessor; the float64
  /// tiles on the tensor cores and the shared W4 slice gained 1.0-1.3x per pass).
  bool fused_radial = false;
  /// MACE with radial spline N: the convolution interpolates the layer's table itself per edge
  /// tile (TpProblem::with_fused_spline) and its backward writes dE/dr, so that no edges x
  /// weights tensor exists; false: the table writes the weights, which the convolution reads
  /// (A/B benchmarks: bench_mace_model --engine cuda-spline versus cuda-spline-stored). Layers
  /// whose weights the cutoff scales after the MLP (apply_cutoff off) or whose product needs the
  /// looped CG form use the stored weights either way.
  bool fused_spline = true;
  /// MACE: the first layer's convolution in the species-factored form (species_factored_conv.h;
  /// GEMMs over slots, or per-receiver blocks with CLEBSCH_SPECIES_FORM=block), where
  /// its radial MLP ends in a plain linear layer: the senders' features are a per-species table
  /// there, so the edges' hidden rows are summed per receiver and species against the harmonics
  /// and contracted with the MLP's last layer once per receiver, and no per-edge weight exists.
  /// Exact to rounding; false (or CLEBSCH_SPECIES_CONV=0): the first layer as the others (A/B
  /// benchmarks, tests).
  bool species_factored = true;
  /// With fused_radial: a layer that cannot run fused is an error (CapacityError naming it)
  /// instead of running unfused (tests that must exercise the fused form).
  bool require_fused_radial = false;
  /// MACE: what a call keeps from the forward to the backward for every atom and edge, beyond
  /// the node features: the layers' contraction inputs (the interaction linear's output Ml, the
  /// skip's output A, the non-linear block's gate input X: 8 KB per atom and layer of a
  /// MACE-MP-0-medium-sized model in float32) and the edges' spherical harmonics Y with their
  /// gradient dE/dY (10 KB per atom). kBatch holds one edge batch's at a time: the backward
  /// runs the batch's receiver pass, node inputs and harmonics again (one more receiver pass
  /// per layer) and turns each batch's dE/dY into forces at once, so that these rows no longer
  /// grow with the system. kAuto keeps them while they fit a quarter of the device
  /// (edge_batch_budget.h). NequIP keeps no such rows.
  KeptRows kept_rows = KeptRows::kAuto;
  /// Per-structure inputs of MACE models with an embedding (mace embedding_specs), by name, as
  /// MaceEngineOptions::structure_inputs: e.g. {"total_charge", 0}, {"total_spin", 1}. A model
  /// that needs one that is absent is refused at construction; unused names are ignored.
  std::vector<std::pair<std::string, double>> structure_inputs;
};

/// A graph whose arrays are device pointers (of the engine's backend), valid during the call.
/// Same conventions as AtomGraph (engine.h).
struct DeviceAtomGraph {
  std::size_t num_local = 0, num_nodes = 0, num_edges = 0;
  const int* species = nullptr;    ///< [num_nodes]
  const int* center = nullptr;     ///< [num_edges]
  const int* neighbor = nullptr;   ///< [num_edges]
  const double* vector = nullptr;  ///< [num_edges][3]
};

/// Host copies of a device graph's index arrays, for the paths that need them on the host (a
/// graph the device orderings decline, and the wording of an error).
struct HostGraphIndices {
  std::vector<int> species, center, neighbor;
  bool empty() const { return species.empty() && center.empty(); }
  /// Copies the three arrays of @p g (synchronous on @p stream).
  void download(DeviceBackend& backend, const DeviceAtomGraph& g, Stream stream);
};

/// Device outputs of compute_device (device pointers the caller allocated).
struct DeviceResult {
  double* energy = nullptr;         ///< [1] total of the local atoms' energies
  double* atom_energy = nullptr;    ///< [num_local] or null
  double* edge_gradient = nullptr;  ///< [num_edges][3] dE/dvector
};

class CudaEngine : public Engine {
 public:
  /// The backend the engine runs on (allocate DeviceAtomGraph / DeviceResult arrays with it).
  virtual DeviceBackend& backend() = 0;
  /// Evaluates a device-resident graph on @p stream; results are written asynchronously to
  /// @p result (complete when the stream is). The edge orderings are built and the indices
  /// checked on the device when the edges come sorted by centre (edge_order_kernels.h), else the
  /// index arrays are copied to the host for both. Geometry is validated on the device.
  /// @throws Error as compute() does.
  virtual void compute_device(const DeviceAtomGraph& graph, const DeviceResult& result,
                              GhostExchange* exchange, Stream stream) = 0;
  /// With CudaEngineOptions::profile: (phase, seconds) of the last call, in order; else empty.
  virtual std::vector<std::pair<std::string, double>> phase_seconds() const { return {}; }
};

/// The CUDA engine of @p model. @throws CudaError when no driver or device is usable (the
/// message says what to check and to use the host engine instead); Error for an unsupported
/// model.
std::unique_ptr<CudaEngine> make_cuda_engine(const model::Model& model, Precision precision,
                                             const CudaEngineOptions& options = {});

}  // namespace clebsch::cuda

extern "C" {
/// C entry point for dlopen users: returns a new clebsch::Engine* (CudaEngine) or null with the
/// reason in @p error (a buffer of @p error_size bytes). @p model is a const
/// clebsch::model::Model*. The caller owns the engine and deletes it through Engine's virtual
/// destructor (same C++ runtime: plugin and library are built together). @p edge_batch is
/// CudaEngineOptions:: edge_batch (0: automatic). @p input_names / @p input_values
/// (@p num_inputs of each, may be null when 0) are CudaEngineOptions::structure_inputs. With
/// $CLEBSCH_CUDA_BACKEND=emulated the engine runs on the emulated backend (tests of the LAMMPS
/// integration without a GPU). v2: edge_batch added; v3: the structure inputs (a plugin looking
/// for an older version fails to load this library with a message, not a wrong call).
void* clebsch_cuda_create_engine_v3(const void* model, int precision, int deterministic, int device,
                                    long long edge_batch, const char* const* input_names,
                                    const double* input_values, int num_inputs, char* error,
                                    std::size_t error_size);
}
