// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// SymmetricContraction (symmetric_contraction.h) against mace-torch's own SymmetricContraction
// (reference/pkg_symmetric_contraction.py): correlation 1..3, max_ell 1..3, max_L 0..2, several
// species, random weights; the tensors are taken by their module names (U_matrix_{nu},
// weights_max, weights.{j}), so MACE's reverse weight order is exercised. Forward and autograd
// grad_A must agree to 1e-12 (float64).
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "clebsch/nn/symmetric_contraction.h"
#include "reference_data.h"

namespace clebsch {
namespace {

using test::flat;
using test::load_reference;
using test::max_rel_error;

constexpr double kTolerance = 1e-12;  // float64, relative to the largest reference entry
constexpr double kFloatTolerance = 1e-5;

// {"shape", "values"} (dense) or {"shape", "index", "value"} (sparse) as the generator writes.
DenseTensor tensor(const nlohmann::json& j) {
  DenseTensor t;
  std::int64_t n = 1;
  for (const auto& d : j.at("shape")) {
    t.shape.push_back(d.get<std::int64_t>());
    n *= t.shape.back();
  }
  if (j.contains("values")) {
    t.values = flat(j.at("values"));
  } else {
    t.values.assign(n, 0.0);
    const auto& idx = j.at("index");
    const auto val = flat(j.at("value"));
    for (std::size_t k = 0; k < val.size(); ++k) t.values.at(idx[k].get<std::int64_t>()) = val[k];
  }
  return t;
}

std::vector<ContractionTensors> contractions(const nlohmann::json& c) {
  std::vector<ContractionTensors> out;
  for (const auto& ct : c.at("contractions")) {
    std::map<std::string, DenseTensor> named;
    for (const auto& [name, t] : ct.at("tensors").items()) named[name] = tensor(t);
    out.push_back(ContractionTensors::from_module(Irrep(ct.at("ir_out").get<std::string>()),
                                                  ct.at("correlation").get<int>(), named));
  }
  return out;
}

std::string label(const nlohmann::json& c) {
  return "max_ell " + std::to_string(c.at("max_ell").get<int>()) + " max_L " +
         std::to_string(c.at("max_L").get<int>()) + " correlation " +
         std::to_string(c.at("correlation").get<int>());
}

TEST(PkgSymmetricContraction, ForwardAndBackwardMatchMaceTorch) {
  const auto ref = load_reference("pkg_symmetric_contraction");
  double worst_b = 0, worst_g = 0, worst_bf = 0;
  for (const auto& c : ref.at("cases")) {
    SCOPED_TRACE(label(c));
    const SymmetricContraction sc(Irreps(c.at("irreps_in").get<std::string>()), contractions(c));
    EXPECT_EQ(sc.irreps_out(), Irreps(c.at("irreps_out").get<std::string>()));
    EXPECT_EQ(sc.num_elements(), c.at("num_elements").get<int>());
    std::vector<int> species;
    for (const auto& s : c.at("species")) species.push_back(s.get<int>());
    const auto A = flat(c.at("A")), gB = flat(c.at("grad_B"));
    const std::size_t n = species.size();
    ASSERT_EQ(A.size(), n * sc.num_channels() * sc.dim_a());
    std::vector<double> B(n * sc.dim_out()), gA(A.size());
    sc.forward(n, species.data(), A.data(), B.data());
    sc.backward(n, species.data(), A.data(), gB.data(), gA.data());
    const double eb = max_rel_error(B, flat(c.at("B")));
    const double eg = max_rel_error(gA, flat(c.at("grad_A")));
    EXPECT_LT(eb, kTolerance);
    EXPECT_LT(eg, kTolerance);
    worst_b = std::max(worst_b, eb);
    worst_g = std::max(worst_g, eg);

    std::vector<float> Af(A.begin(), A.end()), Bf(B.size());
    sc.forward(n, species.data(), Af.data(), Bf.data());
    const double ebf = max_rel_error(std::vector<double>(Bf.begin(), Bf.end()), flat(c.at("B")));
    EXPECT_LT(ebf, kFloatTolerance);
    worst_bf = std::max(worst_bf, ebf);
    std::cout << label(c) << ": " << sc.num_dense_nonzeros() << " nonzeros of U -> "
              << sc.num_terms() << " symmetrised terms, " << sc.num_pairs()
              << " (monomial, M) pairs over " << sc.num_monomials() << " monomials\n";
  }
  std::cout << "max relative error vs mace-torch: B " << worst_b << ", grad_A " << worst_g
            << ", float B " << worst_bf << "\n";
}

// Records a fact of mace-torch 0.3.16 (model-spec section 6, open question): Contraction flags
// path_weight per nu = idx+1 but zeroes weights[idx], which holds nu = correlation-1-idx. For
// 0e+1o -> 2e with correlation 3, U_matrix_1 is zero, so `weights.0` (the live nu = 2 path) is
// replaced by zeros in a freshly built module. The stored tensors are what count: the C++ uses
// them as they are.
TEST(PkgSymmetricContraction, MaceZeroesTheWeightsOfALivePath) {
  const auto ref = load_reference("pkg_symmetric_contraction");
  bool seen = false;
  for (const auto& c : ref.at("cases")) {
    if (c.at("max_ell") != 1 || c.at("max_L") != 2 || c.at("correlation") != 3) continue;
    for (const auto& ct : c.at("contractions")) {
      if (ct.at("ir_out") != "2e") continue;
      seen = true;
      EXPECT_TRUE(ct.at("tensors").at("U_matrix_1").at("index").empty());   // nu = 1: no path
      EXPECT_FALSE(ct.at("tensors").at("U_matrix_2").at("index").empty());  // nu = 2: live
      EXPECT_TRUE(ct.at("zeroed").at("weights_0_zeroed").get<bool>());      // weights.0 is nu = 2
    }
  }
  EXPECT_TRUE(seen);
}

}  // namespace
}  // namespace clebsch
