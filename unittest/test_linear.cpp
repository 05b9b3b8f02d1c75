// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Property tests of Linear (e3nn's o3.Linear): default instructions and path weights worked out
// by hand from e3nn's rules, forward against a plain per-element formula, backward against
// central finite differences, O(3) equivariance (a proper and an improper rotation), float
// against double, and descriptor validation.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "clebsch/nn/linear.h"
#include "clebsch/o3/wigner_d.h"
#include "clebsch/support/error.h"
#include "reference_data.h"

namespace clebsch {
namespace {

using test::max_rel_error;

std::vector<double> randn(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  std::vector<double> v(n);
  for (auto& e : v) e = normal(gen);
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// y = A x per row, with A a dense (dim x dim) row-major matrix.
std::vector<double> apply_rows(const std::vector<double>& A, int dim,
                               const std::vector<double>& x) {
  std::vector<double> y(x.size(), 0.0);
  for (std::size_t r = 0; r < x.size() / dim; ++r)
    for (int i = 0; i < dim; ++i)
      for (int j = 0; j < dim; ++j) y[r * dim + i] += A[i * dim + j] * x[r * dim + j];
  return y;
}

// The definition, element by element: y[i_out][w, m] = sum_ins pw * sum_u W[u, w] x[i_in][u, m].
std::vector<double> naive_forward(const Linear& lin, const std::vector<double>& w,
                                  const std::vector<double>& x) {
  const int din = lin.irreps_in().dim(), dout = lin.irreps_out().dim();
  const auto oin = lin.irreps_in().offsets(), oout = lin.irreps_out().offsets();
  const std::size_t rows = x.size() / din;
  std::vector<double> y(rows * dout, 0.0);
  for (std::size_t r = 0; r < rows; ++r)
    for (const auto& ins : lin.instructions()) {
      const int d = lin.irreps_in()[ins.i_in].ir.dim();
      for (int o = 0; o < ins.mul_out; ++o)
        for (int m = 0; m < d; ++m)
          for (int u = 0; u < ins.mul_in; ++u)
            y[r * dout + oout[ins.i_out] + o * d + m] +=
                ins.path_weight * w[ins.weight_offset + u * ins.mul_out + o] *
                x[r * din + oin[ins.i_in] + u * d + m];
    }
  return y;
}

TEST(Linear, DefaultInstructionsPairEqualIrrepsInputMajorWithElementWeights) {
  // Three instructions: (0,0) 4x0e->3x0e, then (1,1) and (2,1), both 4x1o->3x1o. Into 0e the
  // mul_in sum is 4 (alpha 1/2); into 1o it is 4+4 = 8 (alpha 1/sqrt 8).
  const Linear lin("4x0e+4x1o+4x1o", "3x0e+3x1o");
  ASSERT_EQ(lin.instructions().size(), 3u);
  const int expect[3][2] = {{0, 0}, {1, 1}, {2, 1}};
  const double pw[3] = {0.5, 1 / std::sqrt(8.0), 1 / std::sqrt(8.0)};
  for (int k = 0; k < 3; ++k) {
    const auto& ins = lin.instructions()[k];
    EXPECT_EQ(ins.i_in, expect[k][0]);
    EXPECT_EQ(ins.i_out, expect[k][1]);
    EXPECT_DOUBLE_EQ(ins.path_weight, pw[k]);
    EXPECT_EQ(ins.mul_in, 4);
    EXPECT_EQ(ins.mul_out, 3);
    EXPECT_EQ(ins.weight_offset, 12u * k);
  }
  EXPECT_EQ(lin.weight_numel(), 36u);
}

TEST(Linear, PathNormalizationCountsPathsTimesOwnMultiplicity) {
  // Into 1o come 3x1o (i_in 1) and 4x1o (i_in 3): 'element' gives both 1/sqrt(3+4), 'path'
  // gives 1/sqrt(2*3) and 1/sqrt(2*4).
  const Irreps in("5x0e+3x1o+2x2e+4x1o"), out("2x0e+4x1o+3x1e");
  const Linear element(in, out, PathNormalization::kElement);
  const Linear path(in, out, PathNormalization::kPath);
  ASSERT_EQ(path.instructions().size(), 3u);
  EXPECT_DOUBLE_EQ(element.instructions()[1].path_weight, 1 / std::sqrt(7.0));
  EXPECT_DOUBLE_EQ(element.instructions()[2].path_weight, 1 / std::sqrt(7.0));
  EXPECT_DOUBLE_EQ(path.instructions()[0].path_weight, 1 / std::sqrt(5.0));
  EXPECT_DOUBLE_EQ(path.instructions()[1].path_weight, 1 / std::sqrt(6.0));
  EXPECT_DOUBLE_EQ(path.instructions()[2].path_weight, 1 / std::sqrt(8.0));
  EXPECT_EQ(path.weight_numel(), 5u * 2 + 3 * 4 + 4 * 4);
}

TEST(Linear, ExplicitPairsKeepOrderAndRepeats) {
  const Linear lin("4x0e+3x0e+2x1o", "5x0e+2x1o", {{0, 0}, {0, 0}, {1, 0}, {2, 1}});
  ASSERT_EQ(lin.instructions().size(), 4u);
  EXPECT_DOUBLE_EQ(lin.instructions()[0].path_weight, 1 / std::sqrt(11.0));  // 4 + 4 + 3
  EXPECT_EQ(lin.instructions()[1].weight_offset, 20u);
  EXPECT_EQ(lin.instructions()[2].weight_offset, 40u);
  EXPECT_EQ(lin.weight_numel(), 20u + 20 + 15 + 4);
  const Linear given("4x0e+3x0e", "4x0e+3x0e", std::vector<LinearPath>{{1, 1, 0.25}, {0, 0, 2.0}});
  EXPECT_EQ(given.instructions()[0].i_in, 1);
  EXPECT_EQ(given.instructions()[0].path_weight, 0.25);
  EXPECT_EQ(given.instructions()[1].weight_offset, 9u);
}

TEST(Linear, ZeroMultiplicityEntriesGiveFiniteWeightsAndZeroOutput) {
  const Linear lin("0x0e+3x1o+2x0e", "2x1o+0x0e+1x0e+2x2e");
  for (const auto& ins : lin.instructions()) EXPECT_TRUE(std::isfinite(ins.path_weight));
  const auto w = randn(lin.weight_numel(), 1);
  const auto x = randn(2 * lin.irreps_in().dim(), 2);
  std::vector<double> y(2 * lin.irreps_out().dim(), 42.0);
  lin.forward(w.data(), 2, x.data(), y.data());
  // 2x2e has no input: its 10 components per row must be zero, not stale.
  for (int r = 0; r < 2; ++r)
    for (int k = 7; k < 17; ++k) EXPECT_EQ(y[r * 17 + k], 0.0);
  EXPECT_LT(max_rel_error(y, naive_forward(lin, w, x)), 1e-15);
}

TEST(Linear, ForwardMatchesDefinition) {
  const Linear lin("5x0e+3x1o+2x2e+4x1o+1x3o", "2x0e+4x1o+3x1e+2x2e+2x3o");
  const std::size_t rows = 7;
  const auto w = randn(lin.weight_numel(), 3);
  const auto x = randn(rows * lin.irreps_in().dim(), 4);
  std::vector<double> y(rows * lin.irreps_out().dim());
  lin.forward(w.data(), rows, x.data(), y.data());
  EXPECT_LT(max_rel_error(y, naive_forward(lin, w, x)), 1e-14);
}

class LinearBackward : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(LinearBackward, MatchesCentralFiniteDifferences) {
  const Linear lin(GetParam().first, GetParam().second);
  const std::size_t rows = 3;
  const int din = lin.irreps_in().dim(), dout = lin.irreps_out().dim();
  auto w = randn(lin.weight_numel(), 5);
  auto x = randn(rows * din, 6);
  const auto gy = randn(rows * dout, 7);
  std::vector<double> gx(rows * din), gw(lin.weight_numel());
  lin.backward(w.data(), rows, x.data(), gy.data(), gx.data(), gw.data());

  // L = <grad_y, y>; its gradient is what backward returns.
  std::vector<double> y(rows * dout);
  auto loss = [&]() {
    lin.forward(w.data(), rows, x.data(), y.data());
    return dot(gy, y);
  };
  const double h = 1e-3;  // L is linear in x and in w: no truncation error, only rounding
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
  EXPECT_LT(max_rel_error(gx, fd(x)), 1e-9);
  EXPECT_LT(max_rel_error(gw, fd(w)), 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearBackward,
                         ::testing::Values(std::make_pair("4x0e+4x1o+4x1o", "3x0e+3x1o"),
                                           std::make_pair("5x0e+3x1o+2x2e+4x1o",
                                                          "2x0e+4x1o+3x1e+2x2e+2x3o"),
                                           std::make_pair("0x0e+3x1o+2x0e", "2x1o+0x0e+1x0e"),
                                           std::make_pair("8x0e+8x1o+8x2e", "8x0e+8x1o+8x2e")));

TEST(Linear, BackwardSkipsNullOutputsAndSumsWeightGradientsOverManyRows) {
  // Enough rows for every OpenMP thread to own several; the weight gradient must equal the
  // sum of single-row gradients.
  const Linear lin("3x0e+2x1o", "2x0e+3x1o");
  const std::size_t rows = 101;
  const int din = lin.irreps_in().dim(), dout = lin.irreps_out().dim();
  const auto w = randn(lin.weight_numel(), 8);
  const auto x = randn(rows * din, 9);
  const auto gy = randn(rows * dout, 10);
  std::vector<double> gw(lin.weight_numel()), sum(lin.weight_numel(), 0.0), one(gw.size());
  lin.backward(w.data(), rows, x.data(), gy.data(), nullptr, gw.data());
  for (std::size_t r = 0; r < rows; ++r) {
    lin.backward(w.data(), 1, x.data() + r * din, gy.data() + r * dout, nullptr, one.data());
    for (std::size_t k = 0; k < sum.size(); ++k) sum[k] += one[k];
  }
  EXPECT_LT(max_rel_error(gw, sum), 1e-13);
  std::vector<double> gx(rows * din, 0.0);
  lin.backward(w.data(), rows, nullptr, gy.data(), gx.data(), nullptr);
  EXPECT_GT(std::abs(gx[0]), 0.0);
}

TEST(Linear, EquivariantUnderProperAndImproperRotations) {
  const Linear lin("3x0e+2x0o+4x1o+2x1e+3x2e+2x2o+2x3o", "2x0e+3x0o+3x1o+1x1e+2x2e+1x2o+3x3o");
  const int din = lin.irreps_in().dim(), dout = lin.irreps_out().dim();
  const std::size_t rows = 4;
  const auto w = randn(lin.weight_numel(), 11);
  const auto x = randn(rows * din, 12);
  for (const double sign : {1.0, -1.0}) {
    double R[3][3];
    random_rotation(sign > 0 ? 1234 : 4321, R);
    for (auto& row : R)
      for (double& e : row) e *= sign;  // -R: det -1, parity acts
    const auto Din = D_from_matrix(lin.irreps_in(), R);
    const auto Dout = D_from_matrix(lin.irreps_out(), R);
    std::vector<double> y(rows * dout), y_rot(rows * dout);
    lin.forward(w.data(), rows, x.data(), y.data());
    const auto x_rot = apply_rows(Din, din, x);
    lin.forward(w.data(), rows, x_rot.data(), y_rot.data());
    EXPECT_LT(max_rel_error(y_rot, apply_rows(Dout, dout, y)), 1e-12) << "det " << sign;
    // The backward map is the transpose, hence equivariant too.
    const auto gy = randn(rows * dout, 13);
    std::vector<double> gx(rows * din), gx_rot(rows * din);
    lin.backward(w.data(), rows, x.data(), gy.data(), gx.data(), nullptr);
    const auto gy_rot = apply_rows(Dout, dout, gy);
    lin.backward(w.data(), rows, x.data(), gy_rot.data(), gx_rot.data(), nullptr);
    EXPECT_LT(max_rel_error(gx_rot, apply_rows(Din, din, gx)), 1e-12) << "det " << sign;
  }
}

TEST(Linear, FloatAgreesWithDouble) {
  const Linear lin("16x0e+8x1o+8x2e", "8x0e+16x1o+4x2e");
  const int din = lin.irreps_in().dim(), dout = lin.irreps_out().dim();
  const std::size_t rows = 5;
  const auto w = randn(lin.weight_numel(), 14), x = randn(rows * din, 15);
  const auto gy = randn(rows * dout, 16);
  std::vector<float> wf(w.begin(), w.end()), xf(x.begin(), x.end()), gyf(gy.begin(), gy.end());
  std::vector<double> y(rows * dout), gx(rows * din), gw(w.size());
  std::vector<float> yf(y.size()), gxf(gx.size()), gwf(gw.size());
  lin.forward(w.data(), rows, x.data(), y.data());
  lin.forward(wf.data(), rows, xf.data(), yf.data());
  lin.backward(w.data(), rows, x.data(), gy.data(), gx.data(), gw.data());
  lin.backward(wf.data(), rows, xf.data(), gyf.data(), gxf.data(), gwf.data());
  EXPECT_LT(max_rel_error(std::vector<double>(yf.begin(), yf.end()), y), 1e-5);
  EXPECT_LT(max_rel_error(std::vector<double>(gxf.begin(), gxf.end()), gx), 1e-5);
  EXPECT_LT(max_rel_error(std::vector<double>(gwf.begin(), gwf.end()), gw), 1e-5);
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

TEST(Linear, RejectsPathsBetweenDifferentIrreps) {
  expect_error([] { Linear("4x0e+2x1o", "3x0e", {{1, 0}}); }, "joins 1o to 0e");
  expect_error(
      [] {
        Linear("4x0e+2x1o", "3x0e+1x1e", std::vector<LinearPath>{{1, 1, 1.0}});
      },
      "joins 1o to 1e");
}

TEST(Linear, RejectsIndicesOutOfRange) {
  expect_error([] { Linear("4x0e", "3x0e", {{1, 0}}); }, "(1, 0) is out of range");
  expect_error(
      [] {
        Linear("4x0e", "3x0e", std::vector<LinearPath>{{0, 2, 1.0}});
      },
      "i_out=2 is out of range");
  expect_error(
      [] {
        Linear("4x0e", "3x0e", std::vector<LinearPath>{{-1, 0, 1.0}});
      },
      "i_in=-1 is out of range");
}

TEST(Linear, RejectsNonFinitePathWeight) {
  expect_error(
      [] {
        Linear("4x0e", "3x0e", std::vector<LinearPath>{{0, 0, NAN}});
      },
      "path_weight must be finite, got nan");
}

}  // namespace
}  // namespace clebsch
