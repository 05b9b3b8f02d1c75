// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The convolution tensor products of MACE and NequIP interactions, built the way those packages
// build them (one uvu output block per instruction that lands in the target irreps, output blocks
// sorted, per-edge weights), and the named benchmark shapes of docs/kernels.md. Used by the
// tests and the benchmark so that both exercise the shapes real models have.
#pragma once

#include <string>
#include <vector>

#include "clebsch/o3/tensor_product.h"

namespace clebsch::cuda {

/// MACE's conv_tp (and NequIP's InteractionBlock tensor product): for every (i_in1, i_in2) and
/// every l_out of their product whose irrep appears in @p target, one uvu instruction into its
/// own output block of multiplicity mul1; the output irreps are then sorted (stable) and the
/// instructions renumbered, in MACE's instruction order. Component irrep normalisation, element
/// path normalisation, per-row (per-edge) weights.
TensorProduct conv_tensor_product(const Irreps& node_irreps, const Irreps& edge_irreps,
                                  const Irreps& target);

/// An e3nn TensorProduct(node_irreps, edge_irreps, out_irreps) with instructions (i_in1, i_in2,
/// i_out, "uvu", weighted) for every output block whose irrep the pair's product contains, in
/// e3nn's loop order: several instructions sum into one output block (the form of a hand-built
/// e3nn convolution, and of bench/train_step.py's NequIP-style model), unlike the one block per
/// instruction of conv_tensor_product. Same normalisations and per-row weights.
TensorProduct summed_tensor_product(const Irreps& node_irreps, const Irreps& edge_irreps,
                                    const Irreps& out_irreps);

/// A benchmark problem of docs/kernels.md.
struct ConvShape {
  std::string name;
  Irreps node_irreps, edge_irreps, target;
  /// Nodes and edges of the benchmark size.
  int num_nodes, num_edges;
  /// Instructions summed into the target's blocks (summed_tensor_product), else one block per
  /// instruction (conv_tensor_product).
  bool summed = false;
};

/// The product of @p shape (conv_tensor_product or summed_tensor_product).
TensorProduct shape_tensor_product(const ConvShape& shape);

/// mace-medium, mace-large, nequip-benzene, nequip-water, high-l-4 .. high-l-8, and
/// e3nn-summed-l3 (nequip-benzene's irreps with summed instructions; not in kernels.md's set).
std::vector<ConvShape> benchmark_shapes();
/// One of benchmark_shapes() by name. @throws Error naming an unknown shape.
ConvShape benchmark_shape(const std::string& name);

/// A small product that exercises one code path of the generator.
struct CoverageShape {
  std::string name;  ///< usable as a test name
  TensorProduct tp;
};

/// Small products covering the generator's paths: MACE-like (partial last chunk), MACE-large
/// structure, NequIP-like (odd and even parities), non-uniform multiplicities, l = 8, and an
/// instruction without weights with edge attributes of multiplicity 2, and instructions summed
/// into shared output blocks (SummedPaths).
std::vector<CoverageShape> coverage_shapes();

}  // namespace clebsch::cuda
