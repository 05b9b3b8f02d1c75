// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Property tests of Gate (e3nn's nn.Gate): input layout and gather indices worked out by hand
// from e3nn's sort/simplify rules, output irreps and parities, forward against the definition,
// backward against central finite differences, O(3) equivariance (a proper and an improper
// rotation, which checks every parity rule), float against double, and descriptor validation.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <numeric>
#include <random>
#include <vector>

#include "clebsch/nn/gate.h"
#include "clebsch/o3/wigner_d.h"
#include "clebsch/support/error.h"
#include "reference_data.h"

namespace clebsch {
namespace {

using test::max_rel_error;

const ScaledActivation kSilu = ScaledActivation::normalized(ActivationKind::kSilu);
const ScaledActivation kTanh = ScaledActivation::normalized(ActivationKind::kTanh);
const ScaledActivation kNone = ScaledActivation::none();

std::vector<double> randn(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  std::vector<double> v(n);
  for (auto& e : v) e = normal(gen);
  return v;
}

std::vector<double> apply_rows(const std::vector<double>& A, int dim,
                               const std::vector<double>& x) {
  std::vector<double> y(x.size(), 0.0);
  for (std::size_t r = 0; r < x.size() / dim; ++r)
    for (int i = 0; i < dim; ++i)
      for (int j = 0; j < dim; ++j) y[r * dim + i] += A[i * dim + j] * x[r * dim + j];
  return y;
}

template <class F>
void expect_error(F&& f, const std::string& substring) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one containing \"" << substring << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(substring), std::string::npos) << e.what();
  }
}

// Scalars 4x0e (silu) + 3x0o (tanh), gates 2x0o (tanh) + 3x0e (silu), gated 2x1e+1x2o+2x0e.
Gate mixed_gate() {
  return Gate("4x0e+3x0o", {kSilu, kTanh}, "2x0o+3x0e", {kTanh, kSilu}, "2x1e+1x2o+2x0e");
}

TEST(Gate, NequipBlockKeepsItsOrder) {
  const Gate gate("32x0e", {kSilu}, "64x0e", {kSilu}, "32x1o+32x2e");
  EXPECT_EQ(gate.irreps_in().str(), "96x0e+32x1o+32x2e");
  EXPECT_EQ(gate.irreps_out().str(), "32x0e+32x1o+32x2e");
  std::vector<int> identity(gate.irreps_in().dim());
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(gate.gather(), identity);
  EXPECT_EQ(gate.num_scalars(), 32);
  EXPECT_EQ(gate.num_gates(), 64);
  EXPECT_EQ(gate.gated_dim(), 32 * 3 + 32 * 5);
}

TEST(Gate, InputIsSortedConcatenationAndGatherUndoesIt) {
  // Concatenated entries: e0 4x0e, e1 3x0o | e2 2x0o, e3 3x0e | e4 2x1e, e5 1x2o, e6 2x0e.
  // Stable sort by irrep (0o < 0e < 1e < 2o): e1 e2 | e0 e3 e6 | e4 | e5, at offsets
  // e1 0, e2 3, e0 5, e3 9, e6 12, e4 14, e5 20; simplified: 5x0o+9x0e+2x1e+1x2o.
  const Gate gate = mixed_gate();
  EXPECT_EQ(gate.irreps_in().str(), "5x0o+9x0e+2x1e+1x2o");
  const std::vector<int> expect = {5,  6,  7,  8,  0,  1,  2,                   // scalars e0, e1
                                   3,  4,  9,  10, 11,                          // gates e2, e3
                                   14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,  // gated e4, e5
                                   12, 13};                                     // gated e6
  EXPECT_EQ(gate.gather(), expect);
  EXPECT_EQ(gate.irreps_scalars().str(), "4x0e+3x0o");
  EXPECT_EQ(gate.irreps_gates().str(), "2x0o+3x0e");
  EXPECT_EQ(gate.irreps_gated().str(), "2x1e+1x2o+2x0e");
}

TEST(Gate, OutputParitiesFollowActivationsAndGates) {
  // 0o through tanh (odd) stays 0o; 1e times an odd gate becomes 1o.
  EXPECT_EQ(mixed_gate().irreps_out().str(), "4x0e+3x0o+2x1o+1x2o+2x0e");
  // Gate blocks 2x0e|3x0o split the gated block 3x1o into 2x1o (even gates) and 1x1e (odd).
  const Gate split("", {}, "2x0e+3x0o", {kSilu, kTanh}, "3x1o+2x2e");
  EXPECT_EQ(split.irreps_out().str(), "2x1o+1x1e+2x2o");
  // Zero multiplicities stay in the scalar part, as nn.Activation keeps them.
  const Gate zero("0x0e+5x0e+2x0o", {kSilu, kNone, kTanh}, "3x0e", {kNone}, "2x2e+1x1o");
  EXPECT_EQ(zero.irreps_out().str(), "0x0e+5x0e+2x0o+2x2e+1x1o");
  EXPECT_EQ(zero.irreps_in().str(), "2x0o+8x0e+1x1o+2x2e");
}

TEST(Gate, GateChannelKMultipliesGatedCopyK) {
  const Gate gate = mixed_gate();
  const std::vector<int> expect = {0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 3, 4};
  EXPECT_EQ(gate.gate_of_gated(), expect);
  ASSERT_EQ(gate.scalar_activations().size(), 7u);
  EXPECT_EQ(gate.scalar_activations()[3], kSilu);
  EXPECT_EQ(gate.scalar_activations()[4], kTanh);
  ASSERT_EQ(gate.gate_activations().size(), 5u);
  EXPECT_EQ(gate.gate_activations()[1], kTanh);
  EXPECT_EQ(gate.gate_activations()[2], kSilu);
}

TEST(Gate, ForwardMatchesDefinition) {
  const Gate gate = mixed_gate();
  const auto x = randn(2 * 25, 1);
  std::vector<double> y(2 * 20);
  gate.forward(2, x.data(), y.data());
  for (int r = 0; r < 2; ++r) {
    const double* xr = x.data() + r * 25;
    const double* yr = y.data() + r * 20;
    // Input layout 3x0o (scalars) 2x0o (gates) 4x0e (scalars) 3x0e (gates) 2x0e (gated)
    // 2x1e (gated) 1x2o (gated).
    for (int s = 0; s < 4; ++s) EXPECT_DOUBLE_EQ(yr[s], kSilu(xr[5 + s]));
    for (int s = 0; s < 3; ++s) EXPECT_DOUBLE_EQ(yr[4 + s], kTanh(xr[s]));
    const double g[5] = {kTanh(xr[3]), kTanh(xr[4]), kSilu(xr[9]), kSilu(xr[10]), kSilu(xr[11])};
    for (int m = 0; m < 3; ++m) {
      EXPECT_DOUBLE_EQ(yr[7 + m], g[0] * xr[14 + m]);
      EXPECT_DOUBLE_EQ(yr[10 + m], g[1] * xr[17 + m]);
    }
    for (int m = 0; m < 5; ++m) EXPECT_DOUBLE_EQ(yr[13 + m], g[2] * xr[20 + m]);
    EXPECT_DOUBLE_EQ(yr[18], g[3] * xr[12]);
    EXPECT_DOUBLE_EQ(yr[19], g[4] * xr[13]);
  }
}

std::vector<Gate> test_gates() {
  return {mixed_gate(),
          Gate("2x0o+3x0e", {kTanh, kSilu}, "2x0e+3x0o", {kSilu, kTanh}, "3x1o+2x2e"),
          Gate("0x0e+5x0e+2x0o", {kSilu, kNone, kTanh}, "3x0e", {kNone}, "2x2e+1x1o"),
          Gate("4x0e", {kSilu}, "3x0e+2x0o", {kSilu, kTanh}, "2x1o+1x3e+2x2e"),
          Gate("8x0e", {kSilu}, "", {}, ""),
          Gate("", {}, "4x0e", {kTanh}, "4x1o")};
}

TEST(Gate, BackwardMatchesCentralFiniteDifferences) {
  for (const Gate& gate : test_gates()) {
    SCOPED_TRACE(gate.irreps_in().str());
    const std::size_t rows = 4;
    const int din = gate.irreps_in().dim(), dout = gate.irreps_out().dim();
    auto x = randn(rows * din, 2);
    const auto gy = randn(rows * dout, 3);
    std::vector<double> gx(x.size(), NAN), y(rows * dout), fd(x.size());
    gate.backward(rows, x.data(), gy.data(), gx.data());
    auto loss = [&]() {
      gate.forward(rows, x.data(), y.data());
      double s = 0;
      for (std::size_t i = 0; i < y.size(); ++i) s += gy[i] * y[i];
      return s;
    };
    const double h = 1e-5;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double x0 = x[i];
      x[i] = x0 + h;
      const double lp = loss();
      x[i] = x0 - h;
      const double lm = loss();
      x[i] = x0;
      fd[i] = (lp - lm) / (2 * h);
    }
    const double err = max_rel_error(gx, fd);
    EXPECT_LT(err, 1e-8);
    std::cout << gate.irreps_in().str() << ": backward vs finite differences " << err << "\n";
  }
}

TEST(Gate, EquivariantUnderProperAndImproperRotations) {
  for (const Gate& gate : test_gates()) {
    SCOPED_TRACE(gate.irreps_in().str());
    const int din = gate.irreps_in().dim(), dout = gate.irreps_out().dim();
    const std::size_t rows = 3;
    const auto x = randn(rows * din, 4);
    for (const double sign : {1.0, -1.0}) {
      double R[3][3];
      random_rotation(sign > 0 ? 77 : 78, R);
      for (auto& row : R)
        for (double& e : row) e *= sign;
      const auto Din = D_from_matrix(gate.irreps_in(), R);
      const auto Dout = D_from_matrix(gate.irreps_out(), R);
      std::vector<double> y(rows * dout), y_rot(rows * dout);
      gate.forward(rows, x.data(), y.data());
      const auto x_rot = apply_rows(Din, din, x);
      gate.forward(rows, x_rot.data(), y_rot.data());
      EXPECT_LT(max_rel_error(y_rot, apply_rows(Dout, dout, y)), 1e-12) << "det " << sign;
    }
  }
}

TEST(Gate, FloatAgreesWithDouble) {
  const Gate gate("16x0e+4x0o", {kSilu, kTanh}, "8x0e+8x0o", {kSilu, kTanh}, "8x1o+4x1e+4x2e");
  const std::size_t rows = 5;
  const int din = gate.irreps_in().dim(), dout = gate.irreps_out().dim();
  const auto x = randn(rows * din, 5), gy = randn(rows * dout, 6);
  std::vector<float> xf(x.begin(), x.end()), gyf(gy.begin(), gy.end());
  std::vector<double> y(rows * dout), gx(x.size());
  std::vector<float> yf(y.size()), gxf(gx.size());
  gate.forward(rows, x.data(), y.data());
  gate.forward(rows, xf.data(), yf.data());
  gate.backward(rows, x.data(), gy.data(), gx.data());
  gate.backward(rows, xf.data(), gyf.data(), gxf.data());
  EXPECT_LT(max_rel_error(std::vector<double>(yf.begin(), yf.end()), y), 1e-6);
  EXPECT_LT(max_rel_error(std::vector<double>(gxf.begin(), gxf.end()), gx), 1e-6);
}

TEST(Gate, RejectsNonScalarScalarsOrGates) {
  expect_error(
      [] {
        Gate("4x0e+1x1o", {kSilu, kSilu}, "", {}, "");
      },
      "irreps_scalars must be scalars (l = 0), got 4x0e+1x1o");
  expect_error([] { Gate("", {}, "2x1e", {kSilu}, "2x1o"); },
               "irreps_gates must be scalars (l = 0), got 2x1e");
}

TEST(Gate, RejectsGateCountDifferentFromGatedCount) {
  expect_error([] { Gate("", {}, "3x0e", {kSilu}, "2x1o"); },
               "irreps_gated 2x1o has 2 irreps but irreps_gates 3x0e has 3 gate scalars");
}

TEST(Gate, RejectsWrongNumberOfActivations) {
  expect_error([] { Gate("4x0e+2x0e", {kSilu}, "", {}, ""); },
               "1 act_scalars for the 2 entries of irreps_scalars 4x0e+2x0e");
  expect_error([] { Gate("", {}, "2x0e", {}, "2x1o"); },
               "0 act_gates for the 1 entries of irreps_gates 2x0e");
}

TEST(Gate, RejectsActivationWithoutParityOnOddScalars) {
  expect_error(
      [] {
        Gate("4x0e+3x0o", {kSilu, kSilu}, "", {}, "");
      },
      "act_scalars[1] = silu is neither even nor odd, so it cannot act on 3x0o");
  expect_error([] { Gate("", {}, "2x0o", {kSilu}, "2x1o"); },
               "act_gates[0] = silu is neither even nor odd");
}

}  // namespace
}  // namespace clebsch
