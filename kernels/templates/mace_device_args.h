// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Argument structs of the MACE device kernels (templates/mace_kernels.cuh.in). Included by the
// host and pasted into the device source (CMake embeds it as templates::k_mace_device_args), so
// both sides share one definition. Plain C only. "T" arrays are in the network precision, "G"
// arrays in the geometry precision (float64 for fp64 and mixed, float32 for fp32); the kernel
// name's suffix says which.
#pragma once

/// Per internal edge q (edges sorted by centre; perm[q] is the graph's edge id): geometry in G
/// from the graph vector (MACE's vector is centre minus neighbour = -vector), harmonics Y and
/// radial features ef rounded to T, the cutoff fc (T, only when the model does not apply it to
/// the features) and the ZBL energy (double, when the model has one). Status: an edge with a
/// non-finite vector, a length below the minimum or not below its pair cutoff sets *status to
/// min(code << 40 | graph edge id) (code 1 non-finite, 2 too long, 3 too short).
struct MaceEdgeArgs {
  const double* vector;
  const int* perm;
  const int* centre;
  const int* sender;
  const int* species;
  const double* r_max_pairs;  ///< [S][S]
  void* Y;                    ///< T [E][nsh] (geometry: null when made per batch)
  void* ef;                   ///< T [E][nb]
  void* fc;                   ///< T [E] or null
  double* zbl;                ///< [E] or null
  unsigned long long* status;
  /// Final gradient: dE/dY, dE/d(features), dE/dcutoff (G, internal order; gF may be null) to
  /// dE/dvector of the graph (double [E][3], graph order). zbl_scale = the model's scale.
  const void* gY;
  const void* gE;
  const void* gF;
  /// radial spline N: the lengths r (G [E], written by the geometry kernel) and dE/dr from the
  /// tables' slopes (G [E], read by the gradient kernel); null otherwise.
  void* rl;
  const void* gR;
  double* edge_gradient;
  double zbl_scale, min_length;
  long long num_edges;
  /// The gradient kernels add to edge_gradient instead of storing (CudaEngineOptions::
  /// kept_rows kBatch: each batch's dE/dY is turned into forces as it is made, the radial
  /// parts at the end, gY null there).
  int accumulate;
};

/// radial spline N (src/engine/radial_spline.h): a table [intervals + 1][2][width] (values and
/// h-scaled slopes at uniform knots from r_lo) evaluated at num_edges lengths r: forward
/// y[e][w] = f_w(r_e); backward gR[e] += sum_w gy[e][w] f_w'(r_e); both a warp per edge.
struct MaceSplineArgs {
  const void* table;  ///< T
  const void* r;      ///< G [E]
  void* y;            ///< T [E][width]
  const void* gy;     ///< T [E][width]
  void* gR;           ///< G [E]
  double r_lo, inv_h;
  int intervals, width;
  long long num_edges;
};

/// Per-edge cutoff on the convolution weights (models with apply_cutoff false): forward
/// Wf = W fc; backward gF += <gW, W>, gW *= fc (W the raw MLP output).
struct MaceCutArgs {
  const void* W;
  void* Wf;
  const void* fc;
  void* gW;
  void* gF;  ///< G
  long long num_edges, numel;
};

/// The input rows of the non-linear interaction block's radial and density MLPs (mace-torch
/// RealAgnosticResidualNonLinearInteractionBlock), per edge q in internal order, width
/// nb + 2 c0: x[q] = [ef[q] | src[species[sender[q]]] | tgt[species[centre[q]]]] (the species
/// embeddings of both ends, tabulated per species).
struct MaceMlpInputArgs {
  const void* ef;
  const void* src;
  const void* tgt;
  const int* species;
  const int* sender;
  const int* centre;
  void* x;
  long long num_edges, nb, c0;
};

/// Density normalisation per edge: forward d = tanh(rho^2) [* fc]; backward from the centre's
/// gradient gdens: gF += gdens tanh(rho^2) (with fc), grho = gdens [fc] (1 - tanh^2) 2 rho.
struct MaceDensityArgs {
  const void* rho;
  const void* fc;  ///< null: cutoff applied to the features
  void* d;
  const void* gdens;
  const int* centre;
  void* grho;
  void* gF;  ///< G, null when fc is null
  long long num_edges;
};

/// MACE's symmetric contraction of one layer (kernels generated per layer, one thread per
/// (node, channel)): B from A and the weights of each node's species; backward: gA from gB.
struct SymConArgs {
  const void* A;        ///< T [n][row]: the contraction's input irreps, mul_ir
  void* B;              ///< T [n][dim_b] (forward output; backward: the cotangent gB)
  void* gA;             ///< T [n][row], backward output
  const int* species;
  const void* weights;  ///< T [S][num_w_rows][C]
  long long rows;
};

/// e_i = e0[species[i]] + scale (zbl[i] + acc[i]) + shift, for local atoms.
struct MaceEnergyArgs {
  const int* species;
  const double* e0;
  const double* zbl;  ///< null: no pair repulsion
  const double* acc;
  double* energy;
  double scale, shift;
  long long rows;
};
