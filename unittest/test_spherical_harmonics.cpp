// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Property tests of the spherical harmonics (spherical_harmonics.h: e3nn order, index m+l, y the
// polar axis, component normalisation |Y_l|^2 = 2l+1): normalisation, the addition theorem,
// equivariance Y(Rv) = D(R) Y(v) with wigner_d.h, closed forms for l <= 2, analytic gradients
// against Richardson-extrapolated central differences for every l up to kMaxL, the zero and
// sub-eps vectors, float against double, batching and errors. Agreement with e3nn itself is
// test_e3nn_spherical_harmonics.cpp.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "clebsch/o3/irreps.h"
#include "clebsch/o3/spherical_harmonics.h"
#include "clebsch/o3/wigner_d.h"
#include "clebsch/support/error.h"

namespace clebsch {
namespace {

constexpr int kDim = (kMaxL + 1) * (kMaxL + 1);

template <typename E, typename F>
void expect_throw_with_message(F&& f, const std::string& substring) {
  try {
    f();
    ADD_FAILURE() << "no exception thrown";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(substring), std::string::npos)
        << "message \"" << e.what() << "\" lacks \"" << substring << "\"";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

// Random vectors of non-unit length (0.3 .. 3), deterministic.
std::vector<std::array<double, 3>> random_vectors(int n, unsigned seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> length(0.3, 3.0);
  std::vector<std::array<double, 3>> out(n);
  for (auto& v : out) {
    double r = 0;
    for (auto& x : v) {
      x = normal(gen);
      r += x * x;
    }
    const double s = length(gen) / std::sqrt(r);
    for (auto& x : v) x *= s;
  }
  return out;
}

std::vector<double> sh(int lmax, const double v[3]) {
  std::vector<double> y((lmax + 1) * (lmax + 1));
  spherical_harmonics(lmax, v, y.data());
  return y;
}

class SphericalHarmonicsDegree : public ::testing::TestWithParam<int> {};

TEST_P(SphericalHarmonicsDegree, HasComponentNormalisation) {
  const int l = GetParam();
  for (const auto& v : random_vectors(20, 1)) {
    const auto y = sh(l, v.data());
    double n2 = 0;
    for (int m = 0; m < 2 * l + 1; ++m) n2 += y[l * l + m] * y[l * l + m];
    EXPECT_NEAR(n2, 2 * l + 1, 1e-13 * (2 * l + 1));
  }
}

// sum_m Y_lm(u) Y_lm(w) = (2l+1) P_l(u.w): fixes every degree up to the choice of basis.
TEST_P(SphericalHarmonicsDegree, SatisfiesTheAdditionTheorem) {
  const int l = GetParam();
  const auto vs = random_vectors(12, 2);
  for (std::size_t a = 0; a + 1 < vs.size(); ++a) {
    const auto& u = vs[a];
    const auto& w = vs[a + 1];
    const double cosine = (u[0] * w[0] + u[1] * w[1] + u[2] * w[2]) /
                          std::sqrt((u[0] * u[0] + u[1] * u[1] + u[2] * u[2]) *
                                    (w[0] * w[0] + w[1] * w[1] + w[2] * w[2]));
    double p_prev = 1, p = cosine;  // Bonnet: (n+1) P_{n+1} = (2n+1) x P_n - n P_{n-1}
    if (l == 0) p = 1;
    for (int n = 1; n < l; ++n) {
      const double next = ((2 * n + 1) * cosine * p - n * p_prev) / (n + 1);
      p_prev = p;
      p = next;
    }
    const auto yu = sh(l, u.data()), yw = sh(l, w.data());
    double dot = 0;
    for (int m = 0; m < 2 * l + 1; ++m) dot += yu[l * l + m] * yw[l * l + m];
    EXPECT_NEAR(dot, (2 * l + 1) * p, 1e-13 * (2 * l + 1));
  }
}

TEST_P(SphericalHarmonicsDegree, IsEquivariantUnderRotations) {
  const int l = GetParam();
  const int d = 2 * l + 1;
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    double R[3][3];
    random_rotation(1000 + seed, R);
    if (seed % 2 == 1)  // improper: Y_l picks up (-1)^l, which wigner_d includes
      for (auto& row : R)
        for (auto& x : row) x = -x;
    const auto D = wigner_d(l, R);
    for (const auto& v : random_vectors(5, 3 + static_cast<unsigned>(seed))) {
      double rv[3];
      for (int a = 0; a < 3; ++a) rv[a] = R[a][0] * v[0] + R[a][1] * v[1] + R[a][2] * v[2];
      const auto y = sh(l, v.data()), yr = sh(l, rv);
      for (int i = 0; i < d; ++i) {
        double dy = 0;
        for (int j = 0; j < d; ++j) dy += D[i * d + j] * y[l * l + j];
        EXPECT_NEAR(yr[l * l + i], dy, 1e-12) << "m index " << i << " seed " << seed;
      }
    }
  }
}

// Richardson-extrapolated central differences: (4 D(h/2) - D(h)) / 3, error O(h^4).
TEST_P(SphericalHarmonicsDegree, GradientMatchesFiniteDifferences) {
  const int l = GetParam();
  const int d = 2 * l + 1, off = l * l, n = (l + 1) * (l + 1);
  for (const auto& v : random_vectors(6, 4)) {
    std::vector<double> y(n), g(3 * n);
    spherical_harmonics_with_gradient(l, v.data(), y.data(), g.data());
    const double r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    const double h = 2e-3 * r;
    double scale = 0, err = 0;
    for (int a = 0; a < 3; ++a) {
      auto central = [&](double step) {
        double vp[3] = {v[0], v[1], v[2]}, vm[3] = {v[0], v[1], v[2]};
        vp[a] += step;
        vm[a] -= step;
        const auto yp = sh(l, vp), ym = sh(l, vm);
        std::vector<double> out(d);
        for (int i = 0; i < d; ++i) out[i] = (yp[off + i] - ym[off + i]) / (2 * step);
        return out;
      };
      const auto d1 = central(h), d2 = central(h / 2);
      for (int i = 0; i < d; ++i) {
        const double fd = (4 * d2[i] - d1[i]) / 3;
        scale = std::max(scale, std::abs(fd));
        err = std::max(err, std::abs(g[3 * (off + i) + a] - fd));
      }
    }
    if (l == 0) {
      EXPECT_EQ(err, 0.0);
    } else {
      EXPECT_LT(err / scale, 1e-8) << "relative to the largest derivative " << scale;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDegrees, SphericalHarmonicsDegree, ::testing::Range(0, kMaxL + 1),
                         [](const auto& info) { return "l_" + std::to_string(info.param); });

TEST(SphericalHarmonics, MatchesClosedFormsUpToDegreeTwo) {
  // e3nn: Y0 = 1, Y1 = sqrt3 (x,y,z), Y2 = [sqrt15 xz, sqrt15 xy, sqrt5 (y^2 - (x^2+z^2)/2),
  // sqrt15 yz, sqrt15/2 (z^2 - x^2)] on the unit sphere.
  const double v[3] = {0.3, -1.2, 2.0};
  const double r = std::sqrt(0.09 + 1.44 + 4.0);
  const double x = v[0] / r, y = v[1] / r, z = v[2] / r;
  const double s3 = std::sqrt(3.0), s5 = std::sqrt(5.0), s15 = std::sqrt(15.0);
  const std::vector<double> expected = {1.0,
                                        s3 * x,
                                        s3 * y,
                                        s3 * z,
                                        s15 * x * z,
                                        s15 * x * y,
                                        s5 * (y * y - 0.5 * (x * x + z * z)),
                                        s15 * y * z,
                                        0.5 * s15 * (z * z - x * x)};
  const auto got = sh(2, v);
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-15) << i;
}

TEST(SphericalHarmonics, ZeroVectorGivesFiniteValuesAndE3nnGradient) {
  const double v[3] = {0, 0, 0};
  std::vector<double> y(kDim), g(3 * kDim);
  spherical_harmonics_with_gradient(kMaxL, v, y.data(), g.data());
  EXPECT_EQ(y[0], 1.0);
  for (int i = 1; i < kDim; ++i) EXPECT_EQ(y[i], 0.0) << i;
  // u = v / 1e-12 near zero, so dY_1/dv = sqrt(3) * 1e12 * I and every other row is 0.
  for (int i = 0; i < kDim; ++i)
    for (int a = 0; a < 3; ++a) {
      const double expected = (i >= 1 && i <= 3 && a == i - 1) ? std::sqrt(3.0) * 1e12 : 0.0;
      EXPECT_NEAR(g[3 * i + a], expected, 1e-3) << "row " << i << " component " << a;
    }
}

TEST(SphericalHarmonics, VectorsShorterThanEpsAreDividedByEps) {
  const double v[3] = {3e-13, -1e-13, 2e-13};  // |v| < 1e-12: F.normalize divides by 1e-12
  const auto y = sh(2, v);
  for (int a = 0; a < 3; ++a) EXPECT_NEAR(y[1 + a], std::sqrt(3.0) * v[a] / 1e-12, 1e-15);
  EXPECT_NEAR(y[4], std::sqrt(15.0) * (v[0] / 1e-12) * (v[2] / 1e-12), 1e-15);
}

TEST(SphericalHarmonics, DependsOnlyOnTheDirection) {
  for (const auto& v : random_vectors(5, 5)) {
    for (double scale : {1e-6, 0.37, 1e4}) {
      const double w[3] = {v[0] * scale, v[1] * scale, v[2] * scale};
      std::vector<double> yv(kDim), gv(3 * kDim), yw(kDim), gw(3 * kDim);
      spherical_harmonics_with_gradient(kMaxL, v.data(), yv.data(), gv.data());
      spherical_harmonics_with_gradient(kMaxL, w, yw.data(), gw.data());
      for (int i = 0; i < kDim; ++i) {
        EXPECT_NEAR(yw[i], yv[i], 1e-13) << i;
        for (int a = 0; a < 3; ++a)  // Y(s v) = Y(v) => grad(s v) = grad(v) / s
          EXPECT_NEAR(gw[3 * i + a] * scale, gv[3 * i + a], 1e-11) << i;
      }
    }
  }
}

TEST(SphericalHarmonics, GradientHasNoRadialComponent) {
  for (const auto& v : random_vectors(5, 6)) {
    std::vector<double> y(kDim), g(3 * kDim);
    spherical_harmonics_with_gradient(kMaxL, v.data(), y.data(), g.data());
    for (int i = 0; i < kDim; ++i)
      EXPECT_NEAR(g[3 * i] * v[0] + g[3 * i + 1] * v[1] + g[3 * i + 2] * v[2], 0.0, 1e-12) << i;
  }
}

TEST(SphericalHarmonics, HasParityMinusOneToTheL) {
  for (const auto& v : random_vectors(5, 7)) {
    const double w[3] = {-v[0], -v[1], -v[2]};
    const auto yv = sh(kMaxL, v.data()), yw = sh(kMaxL, w);
    for (int l = 0; l <= kMaxL; ++l)
      for (int m = 0; m < 2 * l + 1; ++m)
        EXPECT_NEAR(yw[l * l + m], (l % 2 ? -1.0 : 1.0) * yv[l * l + m], 1e-13);
  }
}

TEST(SphericalHarmonics, LowerLmaxIsAPrefix) {
  const auto v = random_vectors(1, 8)[0];
  std::vector<double> full(kDim), gfull(3 * kDim);
  spherical_harmonics_with_gradient(kMaxL, v.data(), full.data(), gfull.data());
  for (int lmax = 0; lmax <= kMaxL; ++lmax) {
    const int n = (lmax + 1) * (lmax + 1);
    std::vector<double> y(n), y2(n), g(3 * n);
    spherical_harmonics(lmax, v.data(), y.data());
    spherical_harmonics_with_gradient(lmax, v.data(), y2.data(), g.data());
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(y[i], full[i]);
      EXPECT_EQ(y2[i], full[i]);
    }
    for (int i = 0; i < 3 * n; ++i) EXPECT_EQ(g[i], gfull[i]);
  }
}

TEST(SphericalHarmonics, FloatAgreesWithDouble) {
  for (const auto& v : random_vectors(20, 9)) {
    const float vf[3] = {static_cast<float>(v[0]), static_cast<float>(v[1]),
                         static_cast<float>(v[2])};
    const double vd[3] = {vf[0], vf[1], vf[2]};  // the same input in both precisions
    std::vector<double> yd(kDim), gd(3 * kDim);
    std::vector<float> yf(kDim), gf(3 * kDim);
    spherical_harmonics_with_gradient(kMaxL, vd, yd.data(), gd.data());
    spherical_harmonics_with_gradient(kMaxL, vf, yf.data(), gf.data());
    for (int l = 0; l <= kMaxL; ++l) {
      double gscale = 0;
      for (int i = 3 * l * l; i < 3 * (l + 1) * (l + 1); ++i)
        gscale = std::max(gscale, std::abs(gd[i]));
      for (int i = l * l; i < (l + 1) * (l + 1); ++i) {
        EXPECT_NEAR(yf[i], yd[i], 2e-6 * std::sqrt(2.0 * l + 1)) << "l=" << l;
        for (int a = 0; a < 3; ++a)
          EXPECT_NEAR(gf[3 * i + a], gd[3 * i + a], 2e-6 * gscale) << "l=" << l;
      }
    }
  }
}

TEST(SphericalHarmonics, BatchMatchesSingleVectorCalls) {
  const auto vs = random_vectors(37, 10);
  std::vector<double> flat;
  for (const auto& v : vs) flat.insert(flat.end(), v.begin(), v.end());
  for (int lmax : {0, 3, kMaxL}) {
    const int n = (lmax + 1) * (lmax + 1);
    std::vector<double> y(vs.size() * n), g(vs.size() * 3 * n), y_only(vs.size() * n);
    spherical_harmonics_batch(lmax, vs.size(), flat.data(), y.data(), g.data());
    spherical_harmonics_batch(lmax, vs.size(), flat.data(), y_only.data(), nullptr);
    for (std::size_t e = 0; e < vs.size(); ++e) {
      std::vector<double> ye(n), ge(3 * n);
      spherical_harmonics_with_gradient(lmax, vs[e].data(), ye.data(), ge.data());
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(y[e * n + i], ye[i]);
        EXPECT_EQ(y_only[e * n + i], ye[i]);
      }
      for (int i = 0; i < 3 * n; ++i) EXPECT_EQ(g[e * 3 * n + i], ge[i]);
    }
  }
  std::vector<float> flat_f(flat.begin(), flat.end()), yf(vs.size() * kDim), ye(kDim);
  spherical_harmonics_batch(kMaxL, vs.size(), flat_f.data(), yf.data(), nullptr);
  spherical_harmonics(kMaxL, flat_f.data() + 3 * 5, ye.data());
  for (int i = 0; i < kDim; ++i) EXPECT_EQ(yf[5 * kDim + i], ye[i]);
}

TEST(SphericalHarmonics, RejectsLmaxOutOfRange) {
  const double v[3] = {1, 0, 0};
  double out[kDim + 64], grad[3 * (kDim + 64)];
  expect_throw_with_message<Error>([&] { spherical_harmonics(-1, v, out); },
                                   "lmax must be >= 0, got -1");
  expect_throw_with_message<CapacityError>(
      [&] { spherical_harmonics_with_gradient(kMaxL + 1, v, out, grad); },
      "lmax=" + std::to_string(kMaxL + 1) + " exceeds");
  expect_throw_with_message<CapacityError>(
      [&] { spherical_harmonics_batch(kMaxL + 1, 1, v, out, grad); }, "exceeds");
}

}  // namespace
}  // namespace clebsch
