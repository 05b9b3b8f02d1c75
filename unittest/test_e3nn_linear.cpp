// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Linear against the real e3nn o3.Linear (reference/ref_linear.py): instructions, path weights
// and weight count, forward and autograd backward (input and weights), in float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <vector>

#include "clebsch/nn/linear.h"
#include "reference_data.h"

namespace clebsch {
namespace {

using test::flat;
using test::load_reference;
using test::max_rel_error;

constexpr double kTolerance = 1e-12;  // float64, relative to the largest reference entry

Linear make_linear(const nlohmann::json& c) {
  const PathNormalization norm =
      c.at("path_normalization") == "path" ? PathNormalization::kPath : PathNormalization::kElement;
  const Irreps in(c.at("irreps_in").get<std::string>()), out(c.at("irreps_out").get<std::string>());
  if (c.at("pairs").is_null()) return Linear(in, out, norm);
  std::vector<std::pair<int, int>> pairs;
  for (const auto& p : c.at("pairs")) pairs.emplace_back(p.at(0).get<int>(), p.at(1).get<int>());
  return Linear(in, out, pairs, norm);
}

TEST(E3nnLinear, InstructionsAndPathWeightsMatch) {
  const auto ref = load_reference("linear");
  for (const auto& c : ref.at("cases")) {
    SCOPED_TRACE(c.at("irreps_in").get<std::string>() + " -> " +
                 c.at("irreps_out").get<std::string>() + " " +
                 c.at("path_normalization").get<std::string>());
    const Linear lin = make_linear(c);
    EXPECT_EQ(lin.weight_numel(), c.at("weight_numel").get<std::size_t>());
    const auto& ins = c.at("instructions");
    ASSERT_EQ(lin.instructions().size(), ins.size());
    for (std::size_t k = 0; k < ins.size(); ++k) {
      EXPECT_EQ(lin.instructions()[k].i_in, ins[k].at(0).get<int>());
      EXPECT_EQ(lin.instructions()[k].i_out, ins[k].at(1).get<int>());
      EXPECT_NEAR(lin.instructions()[k].path_weight, ins[k].at(2).get<double>(), 1e-16);
    }
  }
}

TEST(E3nnLinear, ForwardAndBackwardMatchInFloat64) {
  const auto ref = load_reference("linear");
  double worst_y = 0, worst_gx = 0, worst_gw = 0;
  for (const auto& c : ref.at("cases")) {
    SCOPED_TRACE(c.at("irreps_in").get<std::string>() + " -> " +
                 c.at("irreps_out").get<std::string>());
    const Linear lin = make_linear(c);
    const auto w = flat(c.at("weight")), x = flat(c.at("x")), gy = flat(c.at("grad_y"));
    const std::size_t rows = x.size() / lin.irreps_in().dim();
    std::vector<double> y(rows * lin.irreps_out().dim()), gx(x.size()), gw(w.size());
    lin.forward(w.data(), rows, x.data(), y.data());
    lin.backward(w.data(), rows, x.data(), gy.data(), gx.data(), gw.data());
    const double ey = max_rel_error(y, flat(c.at("y")));
    const double egx = max_rel_error(gx, flat(c.at("grad_x")));
    const double egw = max_rel_error(gw, flat(c.at("grad_weight")));
    EXPECT_LT(ey, kTolerance);
    EXPECT_LT(egx, kTolerance);
    EXPECT_LT(egw, kTolerance);
    worst_y = std::max(worst_y, ey);
    worst_gx = std::max(worst_gx, egx);
    worst_gw = std::max(worst_gw, egw);
  }
  std::cout << "max relative error vs e3nn: y " << worst_y << ", grad_x " << worst_gx
            << ", grad_weight " << worst_gw << "\n";
}

}  // namespace
}  // namespace clebsch
