// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The size of the edge batches (edge_orderings.h) in which a device engine (MACE, NequIP) runs
// its per-edge weight stage (edge MLP -> convolution), one rule for both: with one batch each
// layer's weights are kept from the forward to the backward, which saves one MLP forward per
// layer but holds memory growing with the edges times every layer's weight count; with several
// a batch's weights live only while it is convolved and are computed again in the backward.
#pragma once

#include <algorithm>
#include <cstddef>

namespace clebsch::cuda {

/// What an engine's weight stage holds per edge, in values of its network type.
struct EdgeBatchBudget {
  /// One batch: every layer's weights and MLP activations, kept from forward to backward.
  std::size_t keep_per_edge = 0;
  /// Several batches: what the stage holds per edge of a batch (a layer's weights, the MLPs'
  /// activations, the backward's per-edge gradients).
  std::size_t batch_per_edge = 0;
  /// What the stage holds per centre of a batch, in any mode (the MACE engine's messages M and
  /// their gradient: the widest node rows, held for one batch's centres at a time).
  std::size_t batch_per_centre = 0;
  /// What a call keeps from the forward to the backward per centre and per edge, unless it
  /// holds one batch's and makes them again (MACE: the layers' contraction inputs, summed over
  /// the layers; the edges' harmonics and their gradient).
  std::size_t rows_per_centre = 0, rows_per_edge = 0;

  /// Whether a call keeps those rows for all its centres and edges (true) or holds one batch's
  /// and makes them again in the backward: kept while they fit a quarter of the device, as the
  /// weights (one receiver pass per layer more otherwise: about a fifth of the convolution's
  /// time, H200 run 25).
  bool keep_rows(std::size_t num_centres, std::size_t num_edges, std::size_t memory_values) const {
    return num_centres * rows_per_centre + num_edges * rows_per_edge <= memory_values / 4;
  }

  /// Edges per batch for @p num_edges edges on @p num_centres centres; 0: one batch (weights
  /// kept).
  /// @param option CudaEngineOptions::edge_batch: decides when not 0.
  /// @param memory_values the device's memory in values of the network type.
  /// @param keep_rows what keep_rows decided: else a batch holds its centres' and edges' share
  ///   of those rows too.
  std::size_t max_batch_edges(std::size_t num_edges, std::size_t num_centres, std::size_t option,
                              std::size_t memory_values, bool keep_rows = true) const {
    if (option > 0) return option;
    const std::size_t per_centre =
        batch_per_centre + (keep_rows || num_centres == 0
                                ? 0
                                : rows_per_centre + rows_per_edge * num_edges / num_centres);
    // A batch's per-centre rows stay within a sixteenth of the device: beyond, batches of that
    // many centres' edges at this graph's mean edges per centre (the rows would otherwise be
    // the largest buffer of a large system: 20 KB per atom of a MACE-MP-0-medium-sized model in
    // float32, H200 run 25).
    std::size_t cap = 0;
    if (per_centre > 0 && num_centres > 0 && num_centres * per_centre > memory_values / 16) {
      const std::size_t centres = std::max<std::size_t>(1, memory_values / 16 / per_centre);
      cap = std::max<std::size_t>(1, centres * num_edges / num_centres);
    }
    // Keeping every layer's weights is ~10 % faster (no second MLP forward) while it fits a
    // quarter of the device; beyond, batches of an eighth (H200 run 8: 10,192 atoms of a
    // MACE-MP-0-medium-sized model, float64: 0.142 s and 29.0 GB kept, 0.155 s and 8.6 GB in
    // 200,000-edge batches). The automatic sizes assume one engine per device.
    if (num_edges * keep_per_edge <= memory_values / 4) return cap;
    const std::size_t edges =
        std::max<std::size_t>(1, memory_values / 8 / std::max<std::size_t>(1, batch_per_edge));
    return cap > 0 ? std::min(cap, edges) : edges;
  }
};

}  // namespace clebsch::cuda
