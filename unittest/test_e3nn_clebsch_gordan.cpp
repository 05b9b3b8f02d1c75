// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Wigner-3j tensors against the real e3nn o3.wigner_3j (reference/ref_clebsch_gordan.py): every
// valid triple with l <= 8 and a selection up to l = 12, float64, real basis, index m+l.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "clebsch/o3/clebsch_gordan.h"
#include "clebsch/o3/irreps.h"
#include "reference_data.h"

namespace clebsch {
namespace {

using test::load_reference;
using test::max_rel_error;

constexpr double kTolerance = 1e-12;  // relative to the largest |entry| of each tensor

const nlohmann::json& reference() {
  static const nlohmann::json ref = load_reference("clebsch_gordan");
  return ref;
}

class E3nnWignerThreeJ : public ::testing::TestWithParam<int> {};

TEST_P(E3nnWignerThreeJ, MatchesE3nnForEveryReferenceTriple) {
  const int l1 = GetParam();
  int count = 0;
  double worst = 0;
  for (const auto& t : reference().at("triples")) {
    const auto l = t.at("l").get<std::vector<int>>();
    if (l[0] != l1) continue;
    ++count;
    const std::string name =
        "(" + std::to_string(l[0]) + "," + std::to_string(l[1]) + "," + std::to_string(l[2]) + ")";
    std::vector<double> expected(
        static_cast<std::size_t>(2 * l[0] + 1) * (2 * l[1] + 1) * (2 * l[2] + 1), 0.0);
    const auto index = t.at("index").get<std::vector<std::size_t>>();
    const auto value = t.at("value").get<std::vector<double>>();
    ASSERT_EQ(index.size(), value.size()) << name;
    for (std::size_t n = 0; n < index.size(); ++n) {
      ASSERT_LT(index[n], expected.size()) << name;
      expected[index[n]] = value[n];
    }
    const double err = max_rel_error(wigner_3j(l[0], l[1], l[2]), expected);
    worst = std::max(worst, err);
    EXPECT_LT(err, kTolerance) << name;
  }
  // Every l1 <= 8 has all its triples in the file; the larger ones have a selection.
  EXPECT_GT(count, 0) << "no reference triple with l1=" << l1;
  if (l1 <= 8) {
    int expected_count = 0;
    for (int l2 = 0; l2 <= 8; ++l2) expected_count += std::min(l1 + l2, 8) - std::abs(l1 - l2) + 1;
    EXPECT_GE(count, expected_count);
  }
  RecordProperty("max_rel_error", std::to_string(worst));
  std::cout << "l1=" << l1 << ": " << count << " triples, max relative error " << worst << "\n";
}

INSTANTIATE_TEST_SUITE_P(AllDegrees, E3nnWignerThreeJ, ::testing::Range(0, kMaxL + 1),
                         [](const auto& info) { return "l1_" + std::to_string(info.param); });

}  // namespace
}  // namespace clebsch
