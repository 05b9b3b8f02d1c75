// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The scaled activations of the host engines (nequip_engine_ops.h, ScaledAct; used by the NequIP
// MLPs and gates and the MACE gates): the value and derivative of gelu (exact, erf form) and
// mish against torch.nn.GELU() / torch.nn.Mish() and their autograd derivatives (float64 values
// printed by torch 2.15, pinned below), the derivative of every kind against a five-point finite
// difference of the value evaluated in long double, and finite, correctly limiting results for
// large |x| (softplus and exp must not overflow). The model-level comparison with the real nequip
// is test_exported_nequip_golden.cpp (cases nequip_readout_gelu / nequip_readout_mish).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "clebsch/engine/nequip_engine_ops.h"
#include "clebsch/model/model.h"
#include "clebsch/support/error.h"

namespace clebsch {
namespace {

using nequip_ops::ScaledAct;

ScaledAct act(const std::string& name, model::Activation::Kind kind, double cst = 1.0) {
  model::Activation a;
  a.name = name;
  a.kind = kind;
  a.cst = cst;
  return ScaledAct::from(a, "test");
}

struct Pinned {
  double x, value, derivative;
};

// torch.nn.GELU()(x) and Mish()(x) in float64 with d/dx from torch.autograd.grad.
const std::vector<Pinned> kTorchGelu = {
    {-40.0, -0.0, 0.0},
    {-8.0, -4.884981308350689e-15, -3.9807546004751306e-14},
    {-3.1, -0.00299956996097695, -0.009159535861001376},
    {-1.0, -0.15865525393145702, -0.08331547058768635},
    {-0.25, -0.10032341857926907, 0.304626645116364},
    {0.0, 0.0, 0.5},
    {0.4, 0.2621686966441297, 0.8027297977316535},
    {1.7, 1.6242387133104768, 1.1153179687821648},
    {6.0, 5.999999994080474, 1.0000000354687093},
    {35.0, 35.0, 1.0},
    {10000.0, 10000.0, 1.0},
};
const std::vector<Pinned> kTorchMish = {
    {-40.0, -1.6993417021166355e-16, -1.6568581595637197e-16},
    {-8.0, -0.002683250882546538, -0.0023473943816052943},
    {-3.1, -0.1365099612829229, -0.0893378891350286},
    {-1.0, -0.30340146137410895, 0.059216755877395014},
    {-0.25, -0.129926963679141, 0.43981560172180506},
    {0.0, 0.0, 0.6},
    {0.4, 0.2890305340723631, 0.8370175025417962},
    {1.7, 1.6207680739755408, 1.0842573159450624},
    {6.0, 5.999926634065252, 1.00013414050621},
    {35.0, 35.0, 1.0},
    {10000.0, 10000.0, 1.0},
};

void expect_matches_torch(const ScaledAct& a, const std::vector<Pinned>& table) {
  for (const Pinned& p : table) {
    SCOPED_TRACE("x = " + std::to_string(p.x));
    double v, d;
    a.eval(p.x, &v, &d);
    // Absolute 1e-15 below |f| = 1: torch's own erf form keeps only ~1e-16 absolute accuracy in
    // the gelu tail (-4.88e-15 at x = -8, exactly -4.98e-15), which is what the engine is held to
    // at model level anyway; relative 1e-14 above.
    EXPECT_NEAR(v, p.value, 1e-15 + 1e-14 * std::abs(p.value));
    EXPECT_NEAR(d, p.derivative, 1e-15 + 1e-14 * std::abs(p.derivative));
  }
}

TEST(ScaledAct, GeluEqualsTorchGeluAndItsAutogradDerivative) {
  expect_matches_torch(act("gelu", model::Activation::Kind::kGelu), kTorchGelu);
}

TEST(ScaledAct, MishEqualsTorchMishAndItsAutogradDerivative) {
  expect_matches_torch(act("mish", model::Activation::Kind::kMish), kTorchMish);
}

// Five-point central difference of the long double value: truncation ~h^4 f^(5) / 30 and
// rounding ~1e-19 / h, both far below the 1e-11 the double derivative is held to.
long double fd_derivative(const ScaledAct& a, long double x) {
  const long double h = 1e-4L;
  return (a.value(x - 2 * h) - 8 * a.value(x - h) + 8 * a.value(x + h) - a.value(x + 2 * h)) /
         (12 * h);
}

TEST(ScaledAct, DerivativeIsTheFiniteDifferenceOfTheValue) {
  using K = model::Activation::Kind;
  const std::vector<std::pair<std::string, K>> kinds = {
      {"gelu", K::kGelu}, {"mish", K::kMish},       {"silu", K::kSilu},
      {"tanh", K::kTanh}, {"sigmoid", K::kSigmoid}, {"ssp", K::kSsp}};
  for (const auto& [name, kind] : kinds) {
    // cst != 1: the scale must multiply the derivative too.
    const ScaledAct a = act(name, kind, 1.7);
    double worst = 0;
    for (double x = -12.0; x <= 12.0; x += 0.0625) {
      if (x == 0.0) continue;
      double v, d;
      a.eval(x, &v, &d);
      const double fd = static_cast<double>(fd_derivative(a, x));
      worst = std::max(worst, std::abs(d - fd));
      EXPECT_NEAR(d, fd, 1e-11) << name << " at x = " << x;
      EXPECT_NEAR(v, static_cast<double>(a.value(static_cast<long double>(x))), 1e-14)
          << name << " at x = " << x;
    }
    std::cout << "  " << name << ": max |d - finite difference| on [-12, 12] = " << worst << "\n";
  }
}

TEST(ScaledAct, GeluAndMishAreFiniteWithTheRightLimitsForLargeArguments) {
  for (const auto& [name, kind] : {std::pair{"gelu", model::Activation::Kind::kGelu},
                                   std::pair{"mish", model::Activation::Kind::kMish}}) {
    const ScaledAct a = act(name, kind);
    for (double x : {-1e300, -1e10, -750.0, -100.0, 100.0, 750.0, 1e10, 1e300}) {
      SCOPED_TRACE(std::string(name) + " at x = " + std::to_string(x));
      double v, d;
      a.eval(x, &v, &d);
      ASSERT_TRUE(std::isfinite(v) && std::isfinite(d)) << v << " " << d;
      if (x > 0) {
        EXPECT_EQ(v, x);
        EXPECT_EQ(d, 1.0);
      } else {
        EXPECT_LE(std::abs(v), 1e-30);
        EXPECT_LE(std::abs(d), 1e-30);
      }
      float vf, df;
      a.eval(static_cast<float>(std::max(-3e38, std::min(3e38, x))), &vf, &df);
      EXPECT_TRUE(std::isfinite(vf) && std::isfinite(df)) << vf << " " << df;
    }
  }
}

TEST(ScaledAct, UnknownKindsAreRefusedNamingTheActivation) {
  model::Activation a;
  a.name = "swish2";
  a.kind = static_cast<model::Activation::Kind>(17);
  try {
    ScaledAct::from(a, "readout layer 0");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("readout layer 0 has activation \"swish2\""),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("gelu, mish"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace clebsch
