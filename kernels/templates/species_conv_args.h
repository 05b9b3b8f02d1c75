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

/// The GEMM form (templates/species_gemm_conv.cuh.in): one slot per (receiver, species present
/// among all senders), slot = receiver * num_present + rank of the species. The per-slot rows
/// live in z (Z or dZ, [attribute block][slot][its dims][kHidden]) and t (T or dT,
/// [path][slot][its attribute dims][its multiplicity]); the W4 contraction between them is a
/// dense GEMM per path on the host side.
struct SpeciesGemmArgs {
  const void* table;     ///< [num_species][kDim1]
  const int* species;    ///< [num_senders]
  const void* h;         ///< [num_edges][kHidden]
  const void* y;         ///< [num_edges][kDim2]
  const void* g;         ///< backward: [num_receivers][kDimOut] dE/dout
  void* out;             ///< forward: [num_receivers][kDimOut], every value stored
  void* grad_h;          ///< backward: [num_edges][kHidden], every value stored
  void* grad_y;          ///< backward: [num_edges][kDim2], stored (or added: accumulate_grad_y)
  const int* sender;     ///< [num_edges]
  const int* ptr;        ///< [num_receivers + 1] CSR of the edges by receiver
  const int* order;      ///< [num_edges] CSR order, or null: edges already sorted by receiver
  void* z;               ///< Z (forward) or dZ (backward) rows
  void* t;               ///< T (forward) or dT (backward) rows
  int* slot_edges;       ///< [num_receivers * num_present] edges of each slot (made by z)
  int* present;          ///< [num_species] marks of the species present (zero between calls)
  int* rank;             ///< [num_species] a species' rank among those present, or -1
  int* slot_species;     ///< [num_species] the species of each rank
  int* num_present;      ///< the number of species present (made by rank)
  unsigned int* status;  ///< bit 0: an edge whose index, sender or species is out of range
  long long num_edges, num_senders, num_receivers, num_species, slots_per_receiver;
  long long accumulate_grad_y;
};
