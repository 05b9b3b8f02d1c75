// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Property tests of the activation functions (activation.h) and of FullyConnectedNet: values
// against closed forms, derivatives and backward against central finite differences, parities
// measured numerically, the tabulated normalize2mom constants against a quadrature of the exact
// second moment, float against double, and descriptor validation.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <random>
#include <vector>

#include "clebsch/nn/activation.h"
#include "clebsch/nn/fully_connected_net.h"
#include "clebsch/support/error.h"
#include "reference_data.h"

namespace clebsch {

// Readable TEST_P parameter names in gtest output.
void PrintTo(ActivationKind kind, std::ostream* os) { *os << activation_name(kind); }

namespace {

using test::max_rel_error;

const ActivationKind kAllKinds[] = {ActivationKind::kIdentity, ActivationKind::kSilu,
                                    ActivationKind::kTanh};

std::vector<double> randn(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  std::vector<double> v(n);
  for (auto& e : v) e = normal(gen);
  return v;
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

TEST(Activation, ValuesMatchClosedForms) {
  const ScaledActivation silu(ActivationKind::kSilu, 2.0), tanh(ActivationKind::kTanh, 3.0);
  const ScaledActivation id(ActivationKind::kIdentity, 0.5);
  for (double x : {-30.0, -2.5, -0.3, 0.0, 0.7, 4.0, 30.0}) {
    EXPECT_NEAR(silu(x), 2.0 * x / (1.0 + std::exp(-x)), 1e-15 * (1 + std::abs(x)));
    EXPECT_NEAR(tanh(x), 3.0 * std::tanh(x), 1e-15);
    EXPECT_EQ(id(x), 0.5 * x);
  }
  EXPECT_EQ(silu(-1000.0), 0.0);  // exp overflow gives the right limit, not NaN
  EXPECT_TRUE(std::isfinite(silu.derivative(-1000.0)));
}

TEST(Activation, DerivativesMatchCentralFiniteDifferences) {
  const double h = 1e-5;
  for (ActivationKind kind : kAllKinds) {
    const ScaledActivation act = ScaledActivation::normalized(kind);
    for (double x : {-6.0, -1.3, -0.2, 0.0, 0.4, 2.2, 7.0}) {
      const double fd = (act(x + h) - act(x - h)) / (2 * h);
      double v, d;
      act.value_and_derivative(x, &v, &d);
      EXPECT_EQ(v, act(x));
      EXPECT_EQ(d, act.derivative(x));
      EXPECT_NEAR(d, fd, 1e-9) << activation_name(kind) << " at " << x;
    }
  }
}

TEST(Activation, ParityIsTheMeasuredSymmetry) {
  for (ActivationKind kind : kAllKinds) {
    const ScaledActivation act(kind, 1.0);
    bool even = true, odd = true;
    for (double x = 0; x <= 10; x += 0.25) {
      even = even && std::abs(act(x) - act(-x)) < 1e-12;
      odd = odd && std::abs(act(x) + act(-x)) < 1e-12;
    }
    EXPECT_EQ(activation_parity(kind), even ? 1 : odd ? -1 : 0) << activation_name(kind);
  }
}

TEST(Activation, Normalize2momTableIsCloseToTheExactSecondMoment) {
  // The table holds e3nn's Monte-Carlo estimates (1e6 samples: relative noise ~1e-3); the exact
  // E[phi(z)^2] by quadrature must agree to that level. test_e3nn_fully_connected_net checks
  // the table digit for digit against the live e3nn.
  for (ActivationKind kind : kAllKinds) {
    const ScaledActivation phi(kind, 1.0);
    const int n = 20000;
    const double a = -12, b = 12, step = (b - a) / n;
    double m2 = 0;
    for (int i = 0; i <= n; ++i) {
      const double z = a + i * step, f = phi(z);
      const double simpson = (i == 0 || i == n) ? 1 : (i % 2 ? 4 : 2);
      m2 += simpson * f * f * std::exp(-z * z / 2) / std::sqrt(2 * M_PI);
    }
    m2 *= step / 3;
    const double exact = 1 / std::sqrt(m2);
    EXPECT_NEAR(normalize2mom_cst(kind) / exact, 1.0, 3e-3) << activation_name(kind);
  }
  EXPECT_EQ(normalize2mom_cst(ActivationKind::kSilu), kNormalize2momSilu);
  EXPECT_EQ(normalize2mom_cst(ActivationKind::kTanh), kNormalize2momTanh);
  EXPECT_EQ(ScaledActivation::normalized(ActivationKind::kSilu).cst(), kNormalize2momSilu);
}

TEST(Activation, Normalize2momEffectiveDropsScalesWithin1e4OfOne) {
  EXPECT_EQ(normalize2mom_effective(1.00005), 1.0);
  EXPECT_EQ(normalize2mom_effective(kNormalize2momIdentity), kNormalize2momIdentity);
  EXPECT_EQ(normalize2mom_effective(kNormalize2momSilu), kNormalize2momSilu);
}

TEST(Activation, NamesRoundTrip) {
  for (ActivationKind kind : kAllKinds)
    EXPECT_EQ(activation_from_name(activation_name(kind)), kind);
  EXPECT_EQ(ScaledActivation::none(), ScaledActivation(ActivationKind::kIdentity, 1.0));
}

TEST(Activation, RejectsUnknownNameAndBadScale) {
  expect_error([] { activation_from_name("relu"); }, "unknown activation \"relu\"");
  expect_error([] { ScaledActivation(ActivationKind::kSilu, INFINITY); },
               "activation silu: scale cst must be finite and > 0, got inf");
  expect_error([] { ScaledActivation(ActivationKind::kTanh, -1.5); }, "got -1.5");
}

// The definition for hs = [n0, n1, n2]: y = (phi~(x W0 / sqrt n0)) W1 / sqrt n1.
TEST(FullyConnectedNet, ForwardMatchesDefinition) {
  const ScaledActivation act = ScaledActivation::normalized(ActivationKind::kSilu);
  const FullyConnectedNet net({3, 4, 2}, act);
  ASSERT_EQ(net.weight_numel(), 3u * 4 + 4 * 2);
  ASSERT_EQ(net.weight_offset(1), 12u);
  const auto w = randn(net.weight_numel(), 1);
  const std::size_t rows = 5;
  const auto x = randn(rows * 3, 2);
  std::vector<double> y(rows * 2), expect(rows * 2, 0.0);
  net.forward(w.data(), rows, x.data(), y.data());
  for (std::size_t r = 0; r < rows; ++r) {
    double h[4];
    for (int j = 0; j < 4; ++j) {
      double z = 0;
      for (int i = 0; i < 3; ++i) z += x[r * 3 + i] * w[i * 4 + j];
      z /= std::sqrt(3.0);
      h[j] = kNormalize2momSilu * z / (1 + std::exp(-z));
    }
    for (int k = 0; k < 2; ++k) {
      for (int j = 0; j < 4; ++j) expect[r * 2 + k] += h[j] * w[12 + j * 2 + k];
      expect[r * 2 + k] /= 2.0;  // sqrt(4)
    }
  }
  EXPECT_LT(max_rel_error(y, expect), 1e-14);
}

TEST(FullyConnectedNet, SingleLayerIsLinearWithoutActivation) {
  // MACE's density function: [N, 1], the activation is never applied.
  const FullyConnectedNet net({5, 1}, ScaledActivation::normalized(ActivationKind::kTanh));
  const auto w = randn(5, 3), x = randn(5, 4);
  double y = 0, expect = 0;
  net.forward(w.data(), 1, x.data(), &y);
  for (int i = 0; i < 5; ++i) expect += x[i] * w[i];
  EXPECT_NEAR(y, expect / std::sqrt(5.0), 1e-15);
}

class FullyConnectedNetBackward : public ::testing::TestWithParam<ActivationKind> {};

TEST_P(FullyConnectedNetBackward, MatchesCentralFiniteDifferences) {
  const FullyConnectedNet net({4, 7, 6, 5, 3}, ScaledActivation::normalized(GetParam()));
  const std::size_t rows = 9;
  auto w = randn(net.weight_numel(), 5);
  auto x = randn(rows * net.dim_in(), 6);
  const auto gy = randn(rows * net.dim_out(), 7);
  std::vector<double> gx(x.size()), gw(w.size()), y(rows * net.dim_out());
  net.backward(w.data(), rows, x.data(), gy.data(), gx.data(), gw.data());
  auto loss = [&]() {
    net.forward(w.data(), rows, x.data(), y.data());
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += gy[i] * y[i];
    return s;
  };
  const double h = 1e-5;
  auto fd = [&](std::vector<double>& v) {
    std::vector<double> g(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double v0 = v[i];
      v[i] = v0 + h;
      const double lp = loss();
      v[i] = v0 - h;
      const double lm = loss();
      v[i] = v0;
      g[i] = (lp - lm) / (2 * h);
    }
    return g;
  };
  const double ex = max_rel_error(gx, fd(x)), ew = max_rel_error(gw, fd(w));
  EXPECT_LT(ex, 1e-8);
  EXPECT_LT(ew, 1e-8);
  std::cout << activation_name(GetParam()) << ": backward vs finite differences, grad_x " << ex
            << ", grad_weight " << ew << "\n";
  // Null outputs are skipped, and the weight gradient alone is unchanged.
  std::vector<double> gw_only(w.size());
  net.backward(w.data(), rows, x.data(), gy.data(), nullptr, gw_only.data());
  EXPECT_EQ(gw_only, gw);
}

INSTANTIATE_TEST_SUITE_P(Activations, FullyConnectedNetBackward,
                         ::testing::Values(ActivationKind::kSilu, ActivationKind::kTanh,
                                           ActivationKind::kIdentity),
                         [](const auto& info) { return activation_name(info.param); });

TEST(FullyConnectedNet, FloatAgreesWithDouble) {
  const FullyConnectedNet net({8, 64, 64, 64, 16},
                              ScaledActivation::normalized(ActivationKind::kSilu));
  const std::size_t rows = 6;
  const auto w = randn(net.weight_numel(), 8), x = randn(rows * 8, 9), gy = randn(rows * 16, 10);
  std::vector<float> wf(w.begin(), w.end()), xf(x.begin(), x.end()), gyf(gy.begin(), gy.end());
  std::vector<double> y(rows * 16), gx(x.size()), gw(w.size());
  std::vector<float> yf(y.size()), gxf(gx.size()), gwf(gw.size());
  net.forward(w.data(), rows, x.data(), y.data());
  net.forward(wf.data(), rows, xf.data(), yf.data());
  net.backward(w.data(), rows, x.data(), gy.data(), gx.data(), gw.data());
  net.backward(wf.data(), rows, xf.data(), gyf.data(), gxf.data(), gwf.data());
  EXPECT_LT(max_rel_error(std::vector<double>(yf.begin(), yf.end()), y), 1e-5);
  EXPECT_LT(max_rel_error(std::vector<double>(gxf.begin(), gxf.end()), gx), 1e-5);
  EXPECT_LT(max_rel_error(std::vector<double>(gwf.begin(), gwf.end()), gw), 1e-5);
}

TEST(FullyConnectedNet, RejectsTooFewOrEmptyLayers) {
  const auto silu = ScaledActivation::normalized(ActivationKind::kSilu);
  expect_error([&] { FullyConnectedNet({8}, silu); },
               "FullyConnectedNet [8]: needs at least two layer widths");
  expect_error(
      [&] {
        FullyConnectedNet({8, 0, 4}, silu);
      },
      "FullyConnectedNet [8, 0, 4]: width 1 must be >= 1, got 0");
}

}  // namespace
}  // namespace clebsch
