// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// FullyConnectedNet and the normalize2mom table against the real e3nn
// (reference/ref_fully_connected_net.py): constants, forward and autograd backward (input and
// weights), in float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <vector>

#include "clebsch/nn/fully_connected_net.h"
#include "reference_data.h"

namespace clebsch {
namespace {

using test::flat;
using test::load_reference;
using test::max_rel_error;

constexpr double kTolerance = 1e-12;  // float64, relative to the largest reference entry

TEST(E3nnFullyConnectedNet, Normalize2momTableMatchesE3nn) {
  const auto ref = load_reference("fully_connected_net");
  const auto& cst = ref.at("normalize2mom");
  // Same generator, seed and float64 arithmetic: the digits must agree, not just the value.
  EXPECT_DOUBLE_EQ(normalize2mom_cst(ActivationKind::kSilu), cst.at("silu").get<double>());
  EXPECT_DOUBLE_EQ(normalize2mom_cst(ActivationKind::kTanh), cst.at("tanh").get<double>());
  EXPECT_DOUBLE_EQ(normalize2mom_cst(ActivationKind::kIdentity), cst.at("identity").get<double>());
}

TEST(E3nnFullyConnectedNet, ForwardAndBackwardMatchInFloat64) {
  const auto ref = load_reference("fully_connected_net");
  double worst_y = 0, worst_gx = 0, worst_gw = 0;
  for (const auto& c : ref.at("cases")) {
    const auto hs = c.at("hs").get<std::vector<int>>();
    const std::string act_name = c.at("act").get<std::string>();
    SCOPED_TRACE(act_name + " net of " + std::to_string(hs.size()) + " widths");
    ScaledActivation act = ScaledActivation::none();
    if (act_name != "none") {
      act = ScaledActivation::normalized(activation_from_name(act_name));
      // Null when no layer applies the activation (a single linear layer).
      if (!c.at("cst").is_null()) {
        EXPECT_DOUBLE_EQ(act.cst(), c.at("cst").get<double>());
      }
    }
    const FullyConnectedNet net(hs, act);
    const auto w = flat(c.at("weight")), x = flat(c.at("x")), gy = flat(c.at("grad_y"));
    ASSERT_EQ(w.size(), net.weight_numel());
    const std::size_t rows = x.size() / net.dim_in();
    std::vector<double> y(rows * net.dim_out()), gx(x.size()), gw(w.size());
    net.forward(w.data(), rows, x.data(), y.data());
    net.backward(w.data(), rows, x.data(), gy.data(), gx.data(), gw.data());
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
