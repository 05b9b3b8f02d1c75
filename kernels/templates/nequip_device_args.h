// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Argument structs of the NequIP device kernels (templates/nequip_kernels.cuh.in). Included by
// the host and pasted into the device source (CMake embeds it as
// templates::k_nequip_device_args), so both sides share one definition. Plain C only. "T"
// arrays are in the network precision, "G" arrays in the geometry precision (float64 for fp64
// and mixed, float32 for fp32), as the host engine (src/nequip_engine.cpp) keeps them.
#pragma once

/// Per internal edge q (edges sorted by centre, stable; perm[q] is the graph's edge id), from
/// the graph vector (NequIP's convention: neighbour minus centre, as the engine interface's):
/// geometry forward writes the harmonics Y (T [E][nsh]), the radial embedding emb
/// (T [E][nb]: Bessel basis times cutoff times factor) and, with ZBL, the pair energy zbl
/// (G [E]). The gradient pass turns gY (G [E][nsh]) and gEmb (G [E][nb]), dE with respect to
/// the network's edge inputs summed over layers, into dE/dvector (double [E][3], graph order).
/// With status (device graphs, whose vectors the host has not checked): an edge whose vector is
/// not finite, of length 0 or beyond its pair cutoff (r_max_pairs, [centre][neighbour]) lowers
/// *status to its graph edge id (the caller starts it at ~0).
struct NequipEdgeArgs {
  const double* vector;
  const int* perm;
  const int* centre;
  const int* neighbour;
  const int* species;
  void* Y;
  void* emb;
  void* zbl;
  const void* gY;
  const void* gEmb;
  double* edge_gradient;
  const double* r_max_pairs;
  unsigned long long* status;
  long long num_edges;
};

/// Per local atom i: e_i = shift[s] + scale[s] e_net[i] (+ zbl_node[i]), in G, stored as
/// double; scale and shift are in T (the host engine's per-species vectors), e_net T, zbl_node
/// G (null without ZBL). Backward seed: g[i] = scale[s] (T).
struct NequipEnergyArgs {
  const int* species;
  const void* scale;
  const void* shift;
  const void* e_net;
  const void* zbl_node;
  double* atom_energy;
  void* seed;
  long long rows;
};
