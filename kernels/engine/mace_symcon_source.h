// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The symmetric contraction of one MACE layer as straight-line device code, forward and
// backward. The sparse symmetrised tables of mace_contraction_tables.h (which monomial of A feeds
// which output component, through which weight rows and coefficients) are printed into the
// kernels, so that a thread of one (node, channel) holds its A components, its species' weight
// rows and its outputs in registers and writes every output once. The table-driven loop this
// replaces re-read the tables and updated B in global memory for each (monomial, output) pair;
// it took 5.3 + 9.1 ms of a 65.6 ms step at 10k atoms in float32 (bench/NOTES.md, run 19).
#pragma once

#include <string>
#include <vector>

#include "clebsch/cuda/engine/mace_contraction_tables.h"
#include "clebsch/o3/irreps.h"

namespace clebsch::cuda {

/// Where the kernels find component i (0 <= i < D) of channel c in a row of A and of gA: the
/// contraction's input irreps (every block of multiplicity C) in mul_ir order, the layout the
/// skip and the interaction linear write, so that no permutation pass is needed.
struct SymconLayout {
  int row = 0;                    ///< width of an A row (the irreps' dim)
  std::vector<int> base, stride;  ///< component i of channel c at base[i] + c stride[i]
};

/// @throws ModelFormatError naming @p where when a block's multiplicity is not @p C or the
/// irreps' components are not @p D.
SymconLayout symcon_layout(const Irreps& input, int C, int D, const std::string& where);

/// The extern "C" names of layer @p layer's kernels (both take SymConArgs).
std::string symcon_kernel_name(int layer, bool backward);

/// Both kernels of layer @p layer, after mace_kernels.cuh.in in the MACE module (they use its
/// real_t T and CLEBSCH_GRID_LOOP). Deterministic text.
/// @throws CapacityError when the straight-line code would exceed kMaxSymconTerms terms.
std::string mace_symcon_source(const ContractionTables& t, const SymconLayout& a, int layer);

/// Bound on the printed (monomial, output, weight row) terms of one layer: far above today's
/// foundation models (MACE-MP-0 medium: a few thousand), below what NVRTC compiles in seconds.
inline constexpr std::size_t kMaxSymconTerms = 200000;

}  // namespace clebsch::cuda
