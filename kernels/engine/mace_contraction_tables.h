// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// MACE's symmetric contraction (model::SymmetricContraction, model-spec §1 "Product") in the
// sparse symmetrised form the device kernels evaluate: every nonzero U_nu[M, i1..i_nu, k] is
// added to the coefficient of its sorted monomial A[i1]...A[i_nu] (the polynomial only sees the
// symmetric part of U), grouped into pairs (monomial, output component) each with its list of
// (weight row, coefficient) terms. The weights of every (contraction, nu) are stacked into one
// table [species][row][C]. Host data only; the engine uploads it.
#pragma once

#include <vector>

#include "clebsch/model/model.h"

namespace clebsch::cuda {

struct ContractionTables {
  int C = 0, D = 0, dim_b = 0, num_w_rows = 0, num_species = 0;
  std::vector<int> pair_factors;                                          ///< [pairs][4], unused -1
  std::vector<int> pair_nu, pair_b_base, pair_b_stride, pair_term_begin;  ///< term_begin [P+1]
  std::vector<int> term_w_row;
  std::vector<double> term_coef;
  std::vector<double> weights;  ///< [S][num_w_rows][C]
  /// Every output component of a channel c: B[slot_base + c slot_stride], in output order (some
  /// may have no pair: they stay zero).
  std::vector<int> slot_base, slot_stride;
  int num_pairs() const { return static_cast<int>(pair_nu.size()); }
};

/// Largest correlation order the tables hold.
inline constexpr int kMaxCorrelation = 4;

/// @throws ModelFormatError naming @p where for inconsistent shapes; CapacityError for a
/// correlation above kMaxCorrelation.
ContractionTables make_contraction_tables(const model::SymmetricContraction& sc, int num_species,
                                          const std::string& where);

}  // namespace clebsch::cuda
