// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The host engine of MACE models (potentials/FORMAT.md §5, model-spec.md §1): energies and the
// per-edge gradients dE/dvector of a model::Model with arch mace, on the CPU with OpenMP. The
// forward pass is MACE's own sequence: the species embedding; per edge the spherical harmonics,
// the Bessel basis (optionally of the Agnesi or soft-transformed length) with the polynomial
// cutoff, and the ZBL pair repulsion; per layer the self-connection, linear_up, the radial MLP,
// the uvu convolution, linear, the message normalisation (average neighbour count or density),
// the species-dependent skip of non-residual blocks, the symmetric contraction (correlation
// 1..3 or more) and the product linear; the linear and non-linear readouts; then
// e_i = E0 + scale * (ZBL_i + sum of readouts) + shift. The backward pass is written by hand,
// layer by layer in reverse, down to dE/dvector (no autodiff).
//
// Conventions: the engine interface's edge vector is x[neighbour] - x[centre]; MACE's is
// centre minus neighbour, so the engine evaluates the model at -vector (odd-l harmonics change
// sign) and returns the gradient with respect to vector. An edge shorter than kMinEdgeLength, or
// at or beyond the cutoff of its species pair, is rejected: MACE's Bessel and harmonic gradients
// are singular at r = 0, and such an edge means overlapping atoms (a duplicated atom, a lost
// simulation), for which no number would be meaningful.
//
// Message passing runs layer by layer: a layer updates only local atoms; before every layer but
// the first the ghost rows of its input (the linear_up features, the rows neighbours read) are
// filled through the caller's GhostExchange (forward), and in the backward pass the gradients of
// those ghost rows are returned to their owners (reverse). With an exchange the engine makes
// num_layers()-1 calls each way in every compute(), whatever this rank's graph (the calls are
// collective under MPI); without one the graph must have no ghosts.
//
// Precision (engine.h): fp64 everywhere; fp32 everywhere; or mixed: the network in float32 and
// the geometry (lengths, harmonics, radial basis, cutoff and their gradients), the ZBL term, the
// energies and the edge gradients in float64.
//
// Work and memory are linear in atoms and edges. The per-edge radial-MLP outputs (the largest
// per-edge quantity, thousands of numbers per edge) are never stored for all edges: edges are
// processed in chunks of a centre task, the forward pass consumes them at once, the backward
// pass of every layer but the last recomputes them, and the last layer runs its forward and
// backward in the same task so that they are computed once (MaceEngineOptions). Per edge only
// the harmonics, the radial basis and their gradients are kept (about 50 numbers), per atom the
// features the backward pass needs (MACE-MP-0 medium in float64: about 0.4 KB per edge and
// 80 KB per atom, 1.2 GB for 10,000 atoms with 795,000 edges).
// Hot loops run channel-innermost with AVX-512, AVX2 or baseline x86-64 code chosen at run time.
// Every pass gives each output row one owner (a centre task, a sender task), except the fused
// last layer's sender gradients, which go to one buffer per thread and are summed in thread
// order: results are reproducible for a given thread count and agree across thread counts to
// rounding.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "clebsch/engine/engine.h"
#include "clebsch/engine/host_engine_pimpl.h"
#include "clebsch/model/model.h"

namespace clebsch {

/// Tuning knobs of MaceEngine (the defaults are what the pair style uses).
struct MaceEngineOptions {
  /// Run the last layer's forward and backward in one pass, so that its radial-MLP outputs (the
  /// largest per-edge quantity) are computed once instead of twice. Senders' feature gradients
  /// then go to one buffer per thread (threads x nodes x feature width), so the fusion is only
  /// used while those buffers fit fusion_memory_budget.
  bool fuse_last_layer = true;
  std::size_t fusion_memory_budget = std::size_t(256) << 20;
  /// Per-structure inputs of models with an embedding (mace embedding_specs), by name, e.g.
  /// {"total_charge", 0}, {"total_spin", 1}. A model that needs one that is absent is refused
  /// at construction; inputs the model does not use are ignored.
  std::vector<std::pair<std::string, double>> structure_inputs;
};

/// Evaluates a MACE model (model::Arch::kMace) on the host. Not thread-safe: one instance per
/// thread of control (compute() reuses internal buffers between calls).
class MaceEngine : public Engine {
 public:
  /// Edges shorter than this (Å) are rejected as overlapping atoms.
  static constexpr double kMinEdgeLength = 0.1;

  /// Takes what it needs from @p model (the model may be destroyed afterwards).
  /// @throws Error naming the value when the model is not a MACE model, or an op has a shape,
  ///   mode or activation the engine does not support (e.g. a convolution that is not uvu).
  explicit MaceEngine(const model::Model& model, Precision precision = Precision::kFloat64,
                      const MaceEngineOptions& options = {});

  // The members of every host engine (host_engine_pimpl.h). exchange_width(): the widest row
  // exchanged, the linear_up output width of layers 1..T-1 (0 with one layer). compute(): see
  // Engine::compute; validates the whole graph before any arithmetic and throws Error naming the
  // offending value: species out of range, an edge whose centre is not a local atom or whose
  // neighbour is not a node, a non-finite vector, a vector shorter than kMinEdgeLength or not
  // shorter than the cutoff of its species pair, ghosts without an exchange.
  CLEBSCH_HOST_ENGINE_PIMPL(MaceEngine);
};

}  // namespace clebsch
