// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Property tests of the Wigner-D matrices and rotation helpers (wigner_d.h; e3nn's real basis,
// index m+l, y the polar axis): orthogonality, the homomorphism D(R1 R2) = D(R1) D(R2),
// D_1 = R, the structure of rotations about the polar axis, parity, Irreps-level block matrices,
// random rotations and errors. Agreement with e3nn's D_from_matrix is test_e3nn_wigner_d.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "clebsch/o3/irreps.h"
#include "clebsch/o3/wigner_d.h"
#include "clebsch/support/error.h"

namespace clebsch {
namespace {

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

std::vector<double> matmul(const std::vector<double>& a, const std::vector<double>& b, int n) {
  std::vector<double> c(static_cast<std::size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < n; ++k)
      for (int j = 0; j < n; ++j) c[i * n + j] += a[i * n + k] * b[k * n + j];
  return c;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double e = 0;
  for (std::size_t i = 0; i < a.size(); ++i) e = std::max(e, std::abs(a[i] - b[i]));
  return a.size() == b.size() ? e : 1e300;
}

std::vector<double> identity(int n) {
  std::vector<double> I(static_cast<std::size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) I[i * n + i] = 1;
  return I;
}

std::vector<double> transpose(const std::vector<double>& a, int n) {
  std::vector<double> t(a.size());
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) t[j * n + i] = a[i * n + j];
  return t;
}

void negate(double R[3][3]) {
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) R[a][b] = -R[a][b];
}

class WignerD : public ::testing::TestWithParam<int> {};

TEST_P(WignerD, IsOrthogonal) {
  const int l = GetParam(), d = 2 * l + 1;
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    double R[3][3];
    random_rotation(seed, R);
    const auto D = wigner_d(l, R);
    EXPECT_LT(max_abs_diff(matmul(D, transpose(D, d), d), identity(d)), 1e-14) << "seed " << seed;
  }
}

TEST_P(WignerD, IsAGroupHomomorphism) {
  const int l = GetParam(), d = 2 * l + 1;
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    double R1[3][3], R2[3][3], R12[3][3];
    random_rotation(2 * seed + 100, R1);
    random_rotation(2 * seed + 101, R2);
    if (seed % 2) negate(R2);  // improper factors too: O(3), not only SO(3)
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b)
        R12[a][b] = R1[a][0] * R2[0][b] + R1[a][1] * R2[1][b] + R1[a][2] * R2[2][b];
    EXPECT_LT(max_abs_diff(wigner_d(l, R12), matmul(wigner_d(l, R1), wigner_d(l, R2), d)), 1e-13)
        << "seed " << seed;
  }
}

TEST_P(WignerD, MapsIdentityToIdentityAndInverseToTranspose) {
  const int l = GetParam(), d = 2 * l + 1;
  const double I[3][3] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}};
  EXPECT_LT(max_abs_diff(wigner_d(l, I), identity(d)), 1e-15);
  double R[3][3], Rt[3][3];
  random_rotation(7, R);
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) Rt[a][b] = R[b][a];
  EXPECT_LT(max_abs_diff(wigner_d(l, Rt), transpose(wigner_d(l, R), d)), 1e-14);
}

// A rotation by t about y (the polar axis) only mixes m with -m, as a 2-d rotation by m t.
TEST_P(WignerD, RotationsAboutThePolarAxisMixOnlyPlusAndMinusM) {
  const int l = GetParam(), d = 2 * l + 1;
  const double t = 0.7;
  const double R[3][3] = {{std::cos(t), 0, std::sin(t)}, {0, 1, 0}, {-std::sin(t), 0, std::cos(t)}};
  const auto D = wigner_d(l, R);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) {
      const int mi = i - l, mj = j - l;
      if (std::abs(mi) != std::abs(mj)) {
        EXPECT_NEAR(D[i * d + j], 0.0, 1e-15) << i << "," << j;
      } else if (mi == mj) {
        EXPECT_NEAR(D[i * d + j], std::cos(mi * t), 1e-14) << "m=" << mi;
      } else {
        EXPECT_NEAR(std::abs(D[i * d + j]), std::abs(std::sin(mi * t)), 1e-14) << "m=" << mi;
      }
    }
}

TEST_P(WignerD, ImproperRotationsCarryTheSphericalHarmonicParity) {
  const int l = GetParam();
  double R[3][3];
  random_rotation(21, R);
  auto D = wigner_d(l, R);
  negate(R);
  const auto Dm = wigner_d(l, R);
  for (auto& x : D) x *= (l % 2 ? -1.0 : 1.0);
  EXPECT_EQ(max_abs_diff(Dm, D), 0.0);
}

INSTANTIATE_TEST_SUITE_P(AllDegrees, WignerD, ::testing::Range(0, kMaxL + 1),
                         [](const auto& info) { return "l_" + std::to_string(info.param); });

TEST(WignerD, DegreeOneIsTheRotationMatrix) {
  double R[3][3];
  random_rotation(3, R);
  const auto D = wigner_d(1, R);
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) EXPECT_EQ(D[a * 3 + b], R[a][b]);
}

TEST(WignerD, RejectsNonOrthogonalMatrices) {
  const double S[3][3] = {{1, 0, 0}, {0, 2, 0}, {0, 0, 1}};
  expect_throw_with_message<Error>([&] { wigner_d(2, S); }, "wigner_d: R is not orthogonal");
  expect_throw_with_message<Error>([&] { D_from_matrix(Irreps("1x0e"), S); },
                                   "D_from_matrix: R is not orthogonal");
}

TEST(WignerD, RejectsDegreesOutOfRange) {
  const double I[3][3] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}};
  expect_throw_with_message<Error>([&] { wigner_d(-2, I); }, "l=-2 is negative");
  expect_throw_with_message<CapacityError>([&] { wigner_d(kMaxL + 1, I); },
                                           "l=" + std::to_string(kMaxL + 1) + " exceeds");
}

TEST(DFromMatrix, IsBlockDiagonalWithOneBlockPerCopy) {
  const Irreps irreps("2x0e+1x1o+0x2e+2x2o+1x1e");
  double R[3][3];
  random_rotation(5, R);
  const auto D = D_from_matrix(irreps, R);
  const int dim = irreps.dim();
  ASSERT_EQ(D.size(), static_cast<std::size_t>(dim * dim));
  std::vector<double> expected(D.size(), 0.0);
  int off = 0;
  for (const auto& mi : irreps)
    for (int u = 0; u < mi.mul; ++u) {
      const auto block = wigner_d(mi.ir.l(), R);
      const int d = mi.ir.dim();
      for (int a = 0; a < d; ++a)
        for (int b = 0; b < d; ++b) expected[(off + a) * dim + off + b] = block[a * d + b];
      off += d;
    }
  EXPECT_EQ(max_abs_diff(D, expected), 0.0);
}

TEST(DFromMatrix, ImproperRotationsMultiplyEachBlockByItsParity) {
  const double P[3][3] = {{-1, 0, 0}, {0, -1, 0}, {0, 0, -1}};
  const auto D = D_from_matrix(Irreps("1x0o+1x1e+1x1o+1x0e+1x2o"), P);
  const std::vector<double> diagonal = {-1, 1, 1, 1, -1, -1, -1, 1, -1, -1, -1, -1, -1};
  const int dim = static_cast<int>(diagonal.size());
  for (int i = 0; i < dim; ++i)
    for (int j = 0; j < dim; ++j) EXPECT_NEAR(D[i * dim + j], i == j ? diagonal[i] : 0.0, 1e-15);

  // A general improper R: block = p * D_l(-R).
  double R[3][3];
  random_rotation(8, R);
  negate(R);
  const auto Dr = D_from_matrix(Irreps("1x2o+1x2e"), R);
  negate(R);
  const auto D2 = wigner_d(2, R);
  for (int a = 0; a < 5; ++a)
    for (int b = 0; b < 5; ++b) {
      EXPECT_EQ(Dr[a * 10 + b], -D2[a * 5 + b]);
      EXPECT_EQ(Dr[(5 + a) * 10 + 5 + b], D2[a * 5 + b]);
    }
}

TEST(DFromMatrix, EmptyIrrepsGiveAnEmptyMatrix) {
  double R[3][3];
  random_rotation(9, R);
  EXPECT_TRUE(D_from_matrix(Irreps(""), R).empty());
  EXPECT_TRUE(D_from_matrix(Irreps("0x1o"), R).empty());
}

TEST(RandomRotation, IsAProperRotation) {
  for (std::uint64_t seed = 0; seed < 100; ++seed) {
    double R[3][3];
    random_rotation(seed, R);
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b)
        EXPECT_NEAR(R[0][a] * R[0][b] + R[1][a] * R[1][b] + R[2][a] * R[2][b], a == b, 1e-15);
    const double det = R[0][0] * (R[1][1] * R[2][2] - R[1][2] * R[2][1]) -
                       R[0][1] * (R[1][0] * R[2][2] - R[1][2] * R[2][0]) +
                       R[0][2] * (R[1][0] * R[2][1] - R[1][1] * R[2][0]);
    EXPECT_NEAR(det, 1.0, 1e-15);
  }
}

TEST(RandomRotation, IsDeterministicInTheSeed) {
  double A[3][3], B[3][3], C[3][3];
  random_rotation(42, A);
  random_rotation(42, B);
  random_rotation(43, C);
  double diff = 0;
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      EXPECT_EQ(A[a][b], B[a][b]);
      diff = std::max(diff, std::abs(A[a][b] - C[a][b]));
    }
  EXPECT_GT(diff, 0.1);
}

// Haar measure: E[R_ab] = 0 and E[R_ab R_cd] = delta_ac delta_bd / 3. With N samples the
// standard error is about 0.58/sqrt(N) = 0.0041 for the first and 0.0030 for the second.
TEST(RandomRotation, HasTheMomentsOfTheHaarMeasure) {
  constexpr int kSamples = 20000;
  double mean[3][3] = {}, second[3][3] = {};
  for (int s = 0; s < kSamples; ++s) {
    double R[3][3];
    random_rotation(static_cast<std::uint64_t>(s), R);
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) {
        mean[a][b] += R[a][b] / kSamples;
        second[a][b] += R[a][b] * R[a][b] / kSamples;
      }
  }
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      EXPECT_NEAR(mean[a][b], 0.0, 0.025);
      EXPECT_NEAR(second[a][b], 1.0 / 3.0, 0.02);
    }
}

}  // namespace
}  // namespace clebsch
