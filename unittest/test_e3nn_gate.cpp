// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Gate against the real e3nn nn.Gate (reference/ref_gate.py): derived irreps, gather indices,
// activation constants, forward and autograd backward, in float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <vector>

#include "clebsch/nn/gate.h"
#include "reference_data.h"

namespace clebsch {
namespace {

using test::flat;
using test::load_reference;
using test::max_rel_error;

constexpr double kTolerance = 1e-12;  // float64, relative to the largest reference entry

// Activations from the reference's names; e3nn's constant, where it has one, must be the table's.
std::vector<ScaledActivation> acts(const nlohmann::json& names, const nlohmann::json& csts) {
  std::vector<ScaledActivation> out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string name = names[i].get<std::string>();
    if (name == "none") {
      EXPECT_TRUE(csts[i].is_null());
      out.push_back(ScaledActivation::none());
    } else {
      out.push_back(ScaledActivation::normalized(activation_from_name(name)));
      EXPECT_DOUBLE_EQ(out.back().cst(), csts[i].get<double>()) << name;
    }
  }
  return out;
}

Gate make_gate(const nlohmann::json& c) {
  return Gate(Irreps(c.at("irreps_scalars_arg").get<std::string>()),
              acts(c.at("act_scalars"), c.at("cst_scalars")),
              Irreps(c.at("irreps_gates_arg").get<std::string>()),
              acts(c.at("act_gates"), c.at("cst_gates")),
              Irreps(c.at("irreps_gated_arg").get<std::string>()));
}

std::string case_name(const nlohmann::json& c) {
  return c.at("irreps_scalars_arg").get<std::string>() + " | " +
         c.at("irreps_gates_arg").get<std::string>() + " | " +
         c.at("irreps_gated_arg").get<std::string>();
}

TEST(E3nnGate, IrrepsAndGatherMatch) {
  const auto ref = load_reference("gate");
  for (const auto& c : ref.at("cases")) {
    SCOPED_TRACE(case_name(c));
    const Gate gate = make_gate(c);
    EXPECT_EQ(gate.irreps_in().str(), c.at("irreps_in").get<std::string>());
    EXPECT_EQ(gate.irreps_out().str(), c.at("irreps_out").get<std::string>());
    EXPECT_EQ(gate.irreps_scalars().str(), c.at("irreps_scalars").get<std::string>());
    EXPECT_EQ(gate.irreps_gates().str(), c.at("irreps_gates").get<std::string>());
    EXPECT_EQ(gate.irreps_gated().str(), c.at("irreps_gated").get<std::string>());
    EXPECT_EQ(gate.gather(), c.at("gather").get<std::vector<int>>());
  }
}

TEST(E3nnGate, ForwardAndBackwardMatchInFloat64) {
  const auto ref = load_reference("gate");
  double worst_y = 0, worst_gx = 0;
  for (const auto& c : ref.at("cases")) {
    SCOPED_TRACE(case_name(c));
    const Gate gate = make_gate(c);
    const auto x = flat(c.at("x")), gy = flat(c.at("grad_y"));
    const std::size_t rows = x.size() / gate.irreps_in().dim();
    std::vector<double> y(rows * gate.irreps_out().dim()), gx(x.size());
    gate.forward(rows, x.data(), y.data());
    gate.backward(rows, x.data(), gy.data(), gx.data());
    const double ey = max_rel_error(y, flat(c.at("y")));
    const double egx = max_rel_error(gx, flat(c.at("grad_x")));
    EXPECT_LT(ey, kTolerance);
    EXPECT_LT(egx, kTolerance);
    worst_y = std::max(worst_y, ey);
    worst_gx = std::max(worst_gx, egx);
  }
  std::cout << "max relative error vs e3nn: y " << worst_y << ", grad_x " << worst_gx << "\n";
}

}  // namespace
}  // namespace clebsch
