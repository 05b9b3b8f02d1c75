// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Tests of Irrep/Irreps (irreps.h) against e3nn's documented semantics: parsing (implicit
// multiplicity, "y" parity, blanks, the empty sum), dimensions and offsets of the
// "mul_ir" layout, the order 0o < 0e < 1o < 1e, sort() with e3nn's p and inv, simplify(),
// regroup(), and the errors for malformed input. The expected values are e3nn's docstring
// examples and hand-derived layouts; test_e3nn_irreps.cpp compares with e3nn itself.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "clebsch/o3/irreps.h"
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

TEST(Irrep, ParsesParityLetters) {
  EXPECT_EQ(Irrep("0e"), Irrep(0, 1));
  EXPECT_EQ(Irrep("1o"), Irrep(1, -1));
  EXPECT_EQ(Irrep("1y"), Irrep(1, -1));  // y: parity (-1)^l of spherical harmonics
  EXPECT_EQ(Irrep("2y"), Irrep(2, 1));
  EXPECT_EQ(Irrep(" 3o "), Irrep(3, -1));
  EXPECT_EQ(Irrep("12e").l(), 12);
}

TEST(Irrep, ReportsDimensionAndText) {
  EXPECT_EQ(Irrep(2, -1).dim(), 5);
  EXPECT_EQ(Irrep(0, 1).dim(), 1);
  EXPECT_EQ(Irrep(2, -1).str(), "2o");
  EXPECT_EQ(Irrep(3, 1).str(), "3e");
}

TEST(Irrep, OrdersByDegreeThenOddBeforeEven) {
  const std::vector<Irrep> order = {Irrep("0o"), Irrep("0e"), Irrep("1o"), Irrep("1e"),
                                    Irrep("2o")};
  for (std::size_t i = 0; i + 1 < order.size(); ++i) {
    EXPECT_TRUE(order[i] < order[i + 1]) << order[i].str() << " < " << order[i + 1].str();
    EXPECT_FALSE(order[i + 1] < order[i]);
  }
}

TEST(Irrep, ProductListsEveryCoupledDegreeWithTheProductParity) {
  const auto p = Irrep("1o") * Irrep("2o");
  const std::vector<Irrep> expected = {Irrep(1, 1), Irrep(2, 1), Irrep(3, 1)};
  EXPECT_EQ(p, expected);
  const auto q = Irrep("0e") * Irrep("3o");
  EXPECT_EQ(q, std::vector<Irrep>{Irrep(3, -1)});
}

TEST(Irrep, RejectsNegativeL) {
  expect_throw_with_message<Error>([] { Irrep(-1, 1); }, "got -1");
}

TEST(Irrep, RejectsBadParity) {
  expect_throw_with_message<Error>([] { Irrep(1, 0); }, "parity must be +1 or -1, got 0");
  expect_throw_with_message<Error>([] { Irrep("1z"); }, "got 'z'");
}

TEST(Irrep, RejectsMalformedText) {
  for (const std::string text : {"", "e", "1", "-1e", "1.0e", "x1e", "1 e1"})
    expect_throw_with_message<Error>([&] { static_cast<void>(Irrep{text}); }, "cannot parse irrep");
}

TEST(Irrep, RejectsLAboveKMaxLWithCapacityError) {
  expect_throw_with_message<CapacityError>([] { Irrep(kMaxL + 1, 1); },
                                           "l=" + std::to_string(kMaxL + 1));
  expect_throw_with_message<CapacityError>([] { Irrep("13o"); }, "l=13");
}

TEST(Irreps, ParsesMultiplicitiesAndImplicitOnes) {
  const Irreps a("16x0e+8x1o+4x2e");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0], (MulIrrep{16, Irrep(0, 1)}));
  EXPECT_EQ(a[1], (MulIrrep{8, Irrep(1, -1)}));
  EXPECT_EQ(a[2], (MulIrrep{4, Irrep(2, 1)}));
  const Irreps b("0e+1o");
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].mul, 1);
  EXPECT_EQ(b[1].mul, 1);
}

TEST(Irreps, ParsesBlanksAndYParity) {
  EXPECT_EQ(Irreps(" 2 x 1o + 3x0e "), Irreps("2x1o+3x0e"));
  EXPECT_EQ(Irreps("1y+2y+3y"), Irreps("1x1o+1x2e+1x3o"));
  EXPECT_EQ(Irreps("128x0e + 64x1o").str(), "128x0e+64x1o");
}

TEST(Irreps, ParsesTheEmptySum) {
  for (const char* text : {"", "   "}) {
    const Irreps e(text);
    EXPECT_TRUE(e.empty());
    EXPECT_EQ(e.dim(), 0);
    EXPECT_EQ(e.str(), "");
    EXPECT_EQ(e.offsets(), std::vector<int>{0});
  }
  EXPECT_EQ(Irreps(), Irreps(""));
}

TEST(Irreps, KeepsZeroMultiplicities) {
  const Irreps z("0x0e+2x1o");
  ASSERT_EQ(z.size(), 2u);
  EXPECT_EQ(z.dim(), 6);
  EXPECT_EQ(z.str(), "0x0e+2x1o");
}

TEST(Irreps, ComputesDimensionsAndOffsetsOfTheMulIrLayout) {
  const Irreps a("16x0e+8x1o+0x3e+4x2e");
  EXPECT_EQ(a.dim(), 16 + 24 + 0 + 20);
  EXPECT_EQ(a.num_irreps(), 28);
  EXPECT_EQ(a.offsets(), (std::vector<int>{0, 16, 40, 40, 60}));
}

TEST(Irreps, ReportsLmax) {
  EXPECT_EQ(Irreps("3x0e+1x2o+2x1e").lmax(), 2);
  expect_throw_with_message<Error>([] { Irreps("").lmax(); }, "empty");
}

// e3nn's docstring: Irreps("100x0e + 50x1e + 0x2e").lmax == 1, since lmax counts irreps with a
// non-zero multiplicity only.
TEST(Irreps, LmaxIgnoresZeroMultiplicities) {
  EXPECT_EQ(Irreps("100x0e + 50x1e + 0x2e").lmax(), 1);
}

TEST(Irreps, SortMatchesE3nnDocstring) {
  const auto s = Irreps("2o + 1e + 0e + 1e").sort();
  EXPECT_EQ(s.irreps, Irreps("1x0e+1x1e+1x1e+1x2o"));
  EXPECT_EQ(s.p, (std::vector<int>{3, 1, 0, 2}));
  EXPECT_EQ(s.inv, (std::vector<int>{2, 1, 3, 0}));
  EXPECT_EQ(Irreps("1e + 0e + 1e").sort().irreps, Irreps("1x0e+1x1e+1x1e"));
}

TEST(Irreps, SortPutsOddBeforeEvenAndIsStable) {
  const Irreps a("3x1e+2x0e+1x0o+4x1e+5x1o");
  const auto s = a.sort();
  EXPECT_EQ(s.irreps, Irreps("1x0o+2x0e+5x1o+3x1e+4x1e"));
  EXPECT_EQ(s.inv, (std::vector<int>{2, 1, 4, 0, 3}));
  for (std::size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(s.irreps[k], a[s.inv[k]]);  // irreps[k] == original[inv[k]]
    EXPECT_EQ(s.irreps[s.p[k]], a[k]);    // original entry k went to p[k]
  }
}

TEST(Irreps, SimplifyMergesOnlyAdjacentEqualIrreps) {
  EXPECT_EQ(Irreps("1e + 1e + 0e").simplify(), Irreps("2x1e+1x0e"));
  EXPECT_EQ(Irreps("1e + 1e + 0e + 1e").simplify(), Irreps("2x1e+1x0e+1x1e"));
  EXPECT_EQ(Irreps("3x1e+0x2o+2x1e").simplify(), Irreps("5x1e"));
  EXPECT_EQ(Irreps("0x0e").simplify(), Irreps(""));
}

TEST(Irreps, RegroupSortsThenSimplifies) {
  EXPECT_EQ(Irreps("1e + 0e + 1e + 0x2e").regroup(), Irreps("1x0e+2x1e"));
  EXPECT_EQ(Irreps("2x1o+3x0e+1x1o").regroup(), Irreps("3x0e+3x1o"));
}

TEST(Irreps, RemovesZeroMultiplicities) {
  EXPECT_EQ(Irreps("4x0e + 0x1o + 2x3e").remove_zero_multiplicities(), Irreps("4x0e+2x3e"));
}

TEST(Irreps, ConcatenatesWithPlus) {
  EXPECT_EQ(Irreps("1x0e") + Irreps("2x1o"), Irreps("1x0e+2x1o"));
  EXPECT_EQ(Irreps("") + Irreps("1x0e"), Irreps("1x0e"));
}

TEST(Irreps, BuildsSphericalHarmonicsIrreps) {
  EXPECT_EQ(Irreps::spherical_harmonics(3), Irreps("1x0e+1x1o+1x2e+1x3o"));
  EXPECT_EQ(Irreps::spherical_harmonics(2, 1), Irreps("1x0e+1x1e+1x2e"));
  EXPECT_EQ(Irreps::spherical_harmonics(0), Irreps("1x0e"));
}

TEST(Irreps, RejectsMalformedStringsNamingThem) {
  for (const std::string text : {"x0e", "1x", "1e+", "+1e", "1x0q", "1X0e", "1.5x0e", "1xx1e"})
    expect_throw_with_message<Error>([&] { static_cast<void>(Irreps{text}); }, "\"" + text + "\"");
}

TEST(Irreps, RejectsNegativeMultiplicities) {
  expect_throw_with_message<Error>([] { Irreps("-1x0e"); }, "-1x0e");
  expect_throw_with_message<Error>(
      [] {
        Irreps(std::vector<MulIrrep>{{-2, Irrep(1, -1)}});
      },
      "multiplicity must be >= 0, got -2");
}

TEST(Irreps, RejectsLAboveKMaxLWithCapacityError) {
  expect_throw_with_message<CapacityError>([] { Irreps("4x0e+2x13o"); }, "l=13");
  expect_throw_with_message<CapacityError>([] { Irreps("4x0e+2x13o"); }, "4x0e+2x13o");
}

}  // namespace
}  // namespace clebsch
