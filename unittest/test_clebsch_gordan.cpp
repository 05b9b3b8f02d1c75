// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Property tests of the Wigner-3j tensors (clebsch_gordan.h) for every valid (l1, l2, l3) up to
// kMaxL: unit Frobenius norm, orthogonality, invariance under rotations (with the Wigner-D of
// wigner_d.h), the permutation symmetries e3nn's real basis keeps, closed forms for small l,
// caching and errors. Agreement with e3nn itself is test_e3nn_clebsch_gordan.cpp.
// Real basis, index m+l, l=1 ordered (x, y, z); C flat row-major [i][j][k].
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "clebsch/o3/clebsch_gordan.h"
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

double at(const std::vector<double>& c, int l2, int l3, int i, int j, int k) {
  return c[(static_cast<std::size_t>(i) * (2 * l2 + 1) + j) * (2 * l3 + 1) + k];
}

// Every (l2, l3) completing l1 to a valid triple with all degrees <= kMaxL.
std::vector<std::pair<int, int>> partners(int l1) {
  std::vector<std::pair<int, int>> out;
  for (int l2 = 0; l2 <= kMaxL; ++l2)
    for (int l3 = std::abs(l1 - l2); l3 <= std::min(l1 + l2, kMaxL); ++l3) out.emplace_back(l2, l3);
  return out;
}

std::string triple_name(int l1, int l2, int l3) {
  return "(" + std::to_string(l1) + "," + std::to_string(l2) + "," + std::to_string(l3) + ")";
}

// The sweep runs over l1; (l2, l3) loop inside, so CTest starts 13 processes rather than 1105.
class WignerThreeJ : public ::testing::TestWithParam<int> {};

TEST_P(WignerThreeJ, HasUnitFrobeniusNorm) {
  const int l1 = GetParam();
  for (auto [l2, l3] : partners(l1)) {
    double n2 = 0;
    for (double x : wigner_3j(l1, l2, l3)) n2 += x * x;
    EXPECT_NEAR(std::sqrt(n2), 1.0, 1e-14) << triple_name(l1, l2, l3);
  }
}

TEST_P(WignerThreeJ, IsOrthogonalInTheCoupledIndex) {
  const int l1 = GetParam();
  for (auto [l2, l3] : partners(l1)) {
    const auto& c = wigner_3j(l1, l2, l3);
    const int d1 = 2 * l1 + 1, d2 = 2 * l2 + 1, d3 = 2 * l3 + 1;
    double worst = 0;
    for (int k = 0; k < d3; ++k)
      for (int kk = 0; kk < d3; ++kk) {
        double s = 0;
        for (int i = 0; i < d1; ++i)
          for (int j = 0; j < d2; ++j) s += at(c, l2, l3, i, j, k) * at(c, l2, l3, i, j, kk);
        worst = std::max(worst, std::abs(s - (k == kk ? 1.0 / d3 : 0.0)));
      }
    EXPECT_LT(worst, 1e-15) << triple_name(l1, l2, l3);
  }
}

// C_abc = sum_ijk C_ijk D1_ia D2_jb D3_kc, applied one index at a time.
std::vector<double> rotate(const std::vector<double>& c, int l1, int l2, int l3,
                           const double R[3][3]) {
  const int d1 = 2 * l1 + 1, d2 = 2 * l2 + 1, d3 = 2 * l3 + 1;
  const auto D1 = wigner_d(l1, R), D2 = wigner_d(l2, R), D3 = wigner_d(l3, R);
  std::vector<double> a(c.size(), 0.0), b(c.size(), 0.0);
  for (int i = 0; i < d1; ++i)
    for (int j = 0; j < d2; ++j)
      for (int k = 0; k < d3; ++k)
        for (int kk = 0; kk < d3; ++kk)
          a[(i * d2 + j) * d3 + kk] += c[(i * d2 + j) * d3 + k] * D3[k * d3 + kk];
  for (int i = 0; i < d1; ++i)
    for (int j = 0; j < d2; ++j)
      for (int jj = 0; jj < d2; ++jj)
        for (int k = 0; k < d3; ++k)
          b[(i * d2 + jj) * d3 + k] += a[(i * d2 + j) * d3 + k] * D2[j * d2 + jj];
  std::fill(a.begin(), a.end(), 0.0);
  for (int i = 0; i < d1; ++i)
    for (int ii = 0; ii < d1; ++ii)
      for (int jk = 0; jk < d2 * d3; ++jk)
        a[ii * d2 * d3 + jk] += b[i * d2 * d3 + jk] * D1[i * d1 + ii];
  return a;
}

TEST_P(WignerThreeJ, IsInvariantUnderRotations) {
  const int l1 = GetParam();
  for (std::uint64_t seed : {11u, 12u}) {
    double R[3][3];
    random_rotation(seed + 100 * static_cast<std::uint64_t>(l1), R);
    for (auto [l2, l3] : partners(l1)) {
      const auto& c = wigner_3j(l1, l2, l3);
      const auto r = rotate(c, l1, l2, l3, R);
      double worst = 0;
      for (std::size_t n = 0; n < c.size(); ++n) worst = std::max(worst, std::abs(r[n] - c[n]));
      EXPECT_LT(worst, 1e-12) << triple_name(l1, l2, l3) << " seed " << seed;
    }
  }
}

TEST_P(WignerThreeJ, SwappingTheFirstTwoIndicesGivesTheParitySign) {
  const int l1 = GetParam();
  for (auto [l2, l3] : partners(l1)) {
    const auto& c = wigner_3j(l1, l2, l3);
    const auto& s = wigner_3j(l2, l1, l3);
    const double sign = ((l1 + l2 + l3) % 2 == 0) ? 1.0 : -1.0;
    double worst = 0;
    for (int i = 0; i < 2 * l1 + 1; ++i)
      for (int j = 0; j < 2 * l2 + 1; ++j)
        for (int k = 0; k < 2 * l3 + 1; ++k)
          worst = std::max(worst, std::abs(at(s, l1, l3, j, i, k) - sign * at(c, l2, l3, i, j, k)));
    EXPECT_LT(worst, 1e-15) << triple_name(l1, l2, l3);
  }
}

TEST_P(WignerThreeJ, IsSymmetricUnderCyclicPermutations) {
  const int l1 = GetParam();
  for (auto [l2, l3] : partners(l1)) {
    const auto& c = wigner_3j(l1, l2, l3);
    const auto& s = wigner_3j(l2, l3, l1);  // s[j][k][i] == c[i][j][k]
    double worst = 0;
    for (int i = 0; i < 2 * l1 + 1; ++i)
      for (int j = 0; j < 2 * l2 + 1; ++j)
        for (int k = 0; k < 2 * l3 + 1; ++k)
          worst = std::max(worst, std::abs(at(s, l3, l1, j, k, i) - at(c, l2, l3, i, j, k)));
    EXPECT_LT(worst, 1e-15) << triple_name(l1, l2, l3);
  }
}

INSTANTIATE_TEST_SUITE_P(AllDegrees, WignerThreeJ, ::testing::Range(0, kMaxL + 1),
                         [](const auto& info) { return "l1_" + std::to_string(info.param); });

TEST(WignerThreeJ, CouplingToAScalarIsTheNormalisedIdentity) {
  for (int l = 0; l <= kMaxL; ++l) {
    const auto& c = wigner_3j(l, l, 0);
    const auto& s = wigner_3j(0, l, l);
    const int d = 2 * l + 1;
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) {
        const double expected = (i == j) ? 1.0 / std::sqrt(d) : 0.0;
        EXPECT_NEAR(at(c, l, 0, i, j, 0), expected, 1e-15) << "l=" << l;
        EXPECT_NEAR(at(s, l, l, 0, i, j), expected, 1e-15) << "l=" << l;
      }
  }
}

TEST(WignerThreeJ, VectorCouplingToAVectorIsTheCrossProduct) {
  // C^{111}_ijk = eps_ijk / sqrt(6) in (x, y, z) order, with e3nn's sign (C[x][y][z] > 0).
  const auto& c = wigner_3j(1, 1, 1);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) {
        const double eps = (i == j || j == k || i == k) ? 0.0 : ((j - i + 3) % 3 == 1) ? 1.0 : -1.0;
        EXPECT_NEAR(at(c, 1, 1, i, j, k), eps / std::sqrt(6.0), 1e-15);
      }
}

TEST(WignerThreeJ, ReturnsOneCachedTensorPerTriple) {
  const std::vector<double>* first = &wigner_3j(3, 4, 5);
  EXPECT_EQ(first, &wigner_3j(3, 4, 5));
  EXPECT_NE(first, &wigner_3j(4, 3, 5));
  EXPECT_EQ(first->size(), 7u * 9u * 11u);
}

TEST(WignerThreeJ, ConcurrentFirstCallsAgree) {
  constexpr int kThreads = 8;
  std::vector<const std::vector<double>*> seen(kThreads, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&seen, t] { seen[t] = &wigner_3j(12, 11, 10); });
  for (auto& th : threads) th.join();
  for (int t = 1; t < kThreads; ++t) EXPECT_EQ(seen[t], seen[0]);
  double n2 = 0;
  for (double x : *seen[0]) n2 += x * x;
  EXPECT_NEAR(n2, 1.0, 1e-14);
}

TEST(WignerThreeJ, RejectsTriangleRuleViolations) {
  expect_throw_with_message<Error>([] { wigner_3j(1, 1, 3); },
                                   "wigner_3j(1, 1, 3) violates the triangle rule");
  expect_throw_with_message<Error>([] { wigner_3j(5, 1, 3); },
                                   "wigner_3j(5, 1, 3) violates the triangle rule");
  expect_throw_with_message<Error>([] { wigner_3j(0, 2, 1); }, "triangle rule");
}

TEST(WignerThreeJ, RejectsNegativeDegrees) {
  expect_throw_with_message<Error>([] { wigner_3j(-1, 1, 0); }, "l=-1 is negative");
}

TEST(WignerThreeJ, RejectsDegreesAboveKMaxLWithCapacityError) {
  const int l = kMaxL + 1;
  expect_throw_with_message<CapacityError>([l] { wigner_3j(l, l, 0); },
                                           "l=" + std::to_string(l) + " exceeds");
  expect_throw_with_message<CapacityError>([l] { wigner_3j(1, l - 1, l); }, "exceeds");
}

}  // namespace
}  // namespace clebsch
