// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// make_contraction_tables (see mace_contraction_tables.h).
#include "clebsch/cuda/engine/mace_contraction_tables.h"

#include <algorithm>
#include <array>
#include <map>
#include <string>

#include "clebsch/support/error.h"

namespace clebsch::cuda {

ContractionTables make_contraction_tables(const model::SymmetricContraction& sc, int S,
                                          const std::string& where) {
  ContractionTables t;
  t.C = sc.num_features;
  t.D = sc.dim_a;
  t.num_species = S;
  // (b_base, b_stride, sorted monomial) -> (weight row -> coefficient); ordered for stable output.
  using Key = std::tuple<int, int, std::array<int, kMaxCorrelation>, int>;
  std::map<Key, std::map<int, double>> pairs;
  std::vector<std::vector<double>> w_rows;  // per row: [S][C]
  int row_off = 0;
  for (std::size_t ci = 0; ci < sc.contractions.size(); ++ci) {
    const auto& con = sc.contractions[ci];
    const int dL = con.irrep_out.dim();
    const std::string w = where + ".contractions[" + std::to_string(ci) + "]";
    for (int M = 0; M < dL; ++M) {
      t.slot_base.push_back(t.C * row_off + M);
      t.slot_stride.push_back(dL);
    }
    for (const auto& term : con.terms) {
      const int nu = term.nu;
      if (nu < 1 || nu > kMaxCorrelation)
        throw CapacityError(w + ": correlation order " + std::to_string(nu) +
                            " (the GPU engine supports 1.." + std::to_string(kMaxCorrelation) +
                            ")");
      std::size_t dense = 1;
      for (int k = 0; k < nu; ++k) dense *= static_cast<std::size_t>(t.D);
      const std::size_t K = static_cast<std::size_t>(term.K);
      if (term.U.size() != static_cast<std::size_t>(dL) * dense * K ||
          term.W.size() != static_cast<std::size_t>(S) * K * t.C)
        throw ModelFormatError(w + ": term nu=" + std::to_string(nu) + " has U of " +
                               std::to_string(term.U.size()) + " and W of " +
                               std::to_string(term.W.size()) + " values");
      const int row0 = static_cast<int>(w_rows.size());
      for (std::size_t k = 0; k < K; ++k) {
        std::vector<double> r(static_cast<std::size_t>(S) * t.C);
        for (int s = 0; s < S; ++s)
          for (int c = 0; c < t.C; ++c)
            r[static_cast<std::size_t>(s) * t.C + c] = term.W[(s * K + k) * t.C + c];
        w_rows.push_back(std::move(r));
      }
      for (int M = 0; M < dL; ++M)
        for (std::size_t idx = 0; idx < dense; ++idx)
          for (std::size_t k = 0; k < K; ++k) {
            const double u = term.U[(M * dense + idx) * K + k];
            if (u == 0) continue;
            std::array<int, kMaxCorrelation> mono;
            mono.fill(-1);
            std::size_t rest = idx;
            for (int f = nu - 1; f >= 0; --f) {
              mono[f] = static_cast<int>(rest % t.D);
              rest /= t.D;
            }
            std::sort(mono.begin(), mono.begin() + nu);
            pairs[{t.C * row_off + M, dL, mono, nu}][row0 + static_cast<int>(k)] += u;
          }
    }
    row_off += dL;
  }
  t.dim_b = t.C * row_off;
  t.num_w_rows = static_cast<int>(w_rows.size());
  for (const auto& [key, terms] : pairs) {
    const auto& [b_base, b_stride, mono, nu] = key;
    t.pair_term_begin.push_back(static_cast<int>(t.term_w_row.size()));
    for (const auto& [row, coef] : terms) {
      if (coef == 0) continue;
      t.term_w_row.push_back(row);
      t.term_coef.push_back(coef);
    }
    t.pair_factors.insert(t.pair_factors.end(), mono.begin(), mono.end());
    t.pair_nu.push_back(nu);
    t.pair_b_base.push_back(b_base);
    t.pair_b_stride.push_back(b_stride);
  }
  t.pair_term_begin.push_back(static_cast<int>(t.term_w_row.size()));
  t.weights.resize(static_cast<std::size_t>(S) * t.num_w_rows * t.C);
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < t.num_w_rows; ++r)
      for (int c = 0; c < t.C; ++c)
        t.weights[(static_cast<std::size_t>(s) * t.num_w_rows + r) * t.C + c] =
            w_rows[r][static_cast<std::size_t>(s) * t.C + c];
  return t;
}

}  // namespace clebsch::cuda
