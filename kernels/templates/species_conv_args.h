// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Argument struct of the species-factored convolution (templates/species_conv.cuh.in,
// engine/species_conv.h). Included by the host and pasted into the device source (CMake embeds
// it as templates::k_species_conv_args), so both sides share one definition. Plain C only; the
// arrays are in the convolution's type unless said otherwise.
#pragma once

/// The senders' features are rows of a per-species table (x[s] = table[species[s]]); W = h W4
/// per edge is never formed. A slot is one (receiver, sender species present among its edges)
/// pair; a receiver's slots are consecutive, its species in increasing order.
struct SpeciesConvArgs {
  const void* table;    ///< [num_species][kDim1]
  const int* species;   ///< [num_senders]
  const void* h;        ///< [num_edges][kHidden] the radial MLP's last hidden rows (cut)
  const void* y;        ///< [num_edges][kDim2] the edge attributes
  const void* g;        ///< backward: [num_receivers][kDimOut] dE/dout
  void* out;            ///< forward: [num_receivers][kDimOut], every value stored
  void* grad_h;         ///< backward: [num_edges][kHidden], every value stored
  void* grad_y;         ///< backward: [num_edges][kDim2], stored (or added: accumulate_grad_y)
  const int* sender;    ///< [num_edges]
  const int* ptr;       ///< [num_receivers + 1] CSR of the edges by receiver
  const int* order;     ///< [num_edges] CSR order, or null: edges already sorted by receiver
  unsigned int* status; ///< bit 0: an edge whose sender or species is out of range (skipped)
  int* slot_ptr;        ///< [num_receivers + 1]: slot counts, then (scan) each receiver's first
  int* slot_species;    ///< [num_slots] the sender species of each slot
  unsigned int* present; ///< [ceil(num_species / 32) + 1]: the species among all senders (bit
                         ///< sp % 32 of word sp / 32), then the number of slots
  void* z;              ///< Z or dZ: edge-attribute block b's rows [num_slots][dim b][kHidden]
                        ///< from num_slots * offset(b) * kHidden
  void* t;              ///< T or dT: path p's rows [num_slots][dim in2(p)][mul p] from
                        ///< num_slots * (sum over the paths before p of dim in2 x mul)
  long long num_edges, num_senders, num_receivers, num_species, num_slots;
  long long accumulate_grad_y;
};
