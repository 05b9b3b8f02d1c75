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

/// nn.Gate on rows of width dim_in -> dim_out (out row stride ld_out). Forward, per output
/// column o: out = act_o(x[src[o]]) for scalars (gate[o] < 0), act_o(x[gate[o]]) x[src[o]] for
/// gated values. Backward, per input column c (in_kind: 0 unused, 1 scalar with output
/// in_out[c], 2 gate of the output columns [in_out[c], in_out[c] + in_dim[c]), 3 gated value
/// of output in_out[c] whose gate is in_gate[c]): gx = d<gy, out>/dx (overwritten).
/// act kinds: ActKind of device_args.h (0 silu ... 4 ssp), -1 identity; act value cst phi.
struct NequipGateArgs {
  const void* x;
  void* out;
  const void* gy;
  void* gx;
  const int* src;
  const int* gate;
  const int* act_kind;
  const double* act_cst;
  const int* in_kind;
  const int* in_out;
  const int* in_dim;
  const int* in_gate;
  const int* in_act_kind;
  const double* in_act_cst;
  long long rows, dim_in, dim_out, ld_out;
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
