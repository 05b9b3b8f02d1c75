// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The host engine of NequIP models (potentials/FORMAT.md §6, model-spec.md §2): energies and the
// per-edge gradients dE/dvector of a model::Model with arch nequip, on the CPU with OpenMP. The
// forward pass is NequIP's own sequence (type embedding; per edge the normalised length with its
// per-species-pair cutoff, the Bessel basis times the polynomial cutoff times the global factor,
// and the spherical harmonics; per layer the self-connection, linear_1, the per-species
// normalisation, the edge MLP, the uvu convolution, linear_2, the gate and the optional resnet;
// then the readout MLP, the per-species scale/shift and the ZBL pair term); the backward pass is
// written by hand, layer by layer in reverse, down to dE/dvector. NequIP's edge vector convention
// (neighbour minus centre) is the engine interface's, so no sign is flipped.
//
// Message passing runs layer by layer: only local atoms are updated by a layer, and between
// layers the ghost rows of the node features are filled through the caller's GhostExchange
// (forward), and in the backward pass the ghost rows of the feature gradients are added to their
// owners (reverse). Without an exchange (one rank, no ghosts) nothing is exchanged; with one, the
// engine makes num_layers()-1 calls each way in every compute(), whatever this rank's graph, since
// under MPI every rank must take part in each communication. Precision (engine.h): fp64 runs
// everything in float64; mixed runs the network in float32 and the geometry (lengths, Bessel
// basis, cutoff, spherical harmonics and their gradients), the scale/shift, the ZBL term and the
// energy in float64, which is exactly what NequIP does for a float32 model; fp32 runs both in
// float32 (energies and gradients are still returned, and the total summed, in double).
//
// Work and memory are linear in atoms and edges: the per-edge MLP weights are recomputed in the
// backward pass rather than stored per layer, each pass is organised so that every output row
// has one owner (centres in the forward, senders in the backward), and the result is therefore
// independent of the number of OpenMP threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "clebsch/engine/engine.h"
#include "clebsch/engine/host_engine_pimpl.h"
#include "clebsch/model/model.h"

namespace clebsch {

/// Evaluates a NequIP model (model::Arch::kNequip) on the host. Not thread-safe: one instance per
/// thread of control (compute() reuses internal buffers between calls).
class NequipEngine : public Engine {
 public:
  /// Takes what it needs from @p model (the model may be destroyed afterwards).
  /// @throws Error naming the value when the model is not a NequIP model, or an op has a shape,
  ///   mode or activation the engine does not support (e.g. a convolution that is not uvu).
  NequipEngine(const model::Model& model, Precision precision = Precision::kFloat64);

  // The members of every host engine (host_engine_pimpl.h). exchange_width(): the widest feature
  // row exchanged, the output width of every layer but the last (forward), which is also the
  // input width of the layer after it (reverse); 0 with one layer. compute(): see
  // Engine::compute; validates the whole graph before any arithmetic and throws Error naming the
  // offending value: species out of range, an edge whose centre is not a local atom or whose
  // neighbour is not a node, a non-finite or zero-length vector, a vector longer than the cutoff
  // of its species pair, ghosts without an exchange.
  CLEBSCH_HOST_ENGINE_PIMPL(NequipEngine);
};

}  // namespace clebsch
