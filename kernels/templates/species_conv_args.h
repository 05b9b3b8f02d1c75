// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Argument struct of the species-factored convolution (templates/species_conv.cuh.in,
// engine/species_conv.h). Included by the host and pasted into the device source (CMake embeds
// it as templates::k_species_conv_args), so both sides share one definition. Plain C only; the
// arrays are in the convolution's type unless said otherwise.
#pragma once

/// One receiver row per block. The senders' features are rows of a per-species table
/// (x[s] = table[species[s]]); W = h W4 per edge is never formed.
struct SpeciesConvArgs {
  const void* table;    ///< [num_species][kDim1]
  const int* species;   ///< [num_senders]
  const void* h;        ///< [num_edges][kHidden] the radial MLP's last hidden rows (cut)
  const void* w4;       ///< [kHidden][kNumWeights] its last layer
  const void* y;        ///< [num_edges][kDim2] the edge attributes
  const void* g;        ///< backward: [num_receivers][kDimOut] dE/dout
  void* out;            ///< forward: [num_receivers][kDimOut], every value stored
  void* grad_h;         ///< backward: [num_edges][kHidden], every value stored
  void* grad_y;         ///< backward: [num_edges][kDim2], stored (or added: accumulate_grad_y)
  const int* sender;    ///< [num_edges]
  const int* ptr;       ///< [num_receivers + 1] CSR of the edges by receiver
  const int* order;     ///< [num_edges] CSR order, or null: edges already sorted by receiver
  unsigned int* status; ///< bit 0: an edge whose sender or species is out of range (skipped)
  long long num_edges, num_senders, num_receivers, num_species;
  long long accumulate_grad_y;
};
