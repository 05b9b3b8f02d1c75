// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Wigner-D matrices against the real e3nn Irrep/Irreps.D_from_matrix (reference/ref_wigner_d.py):
// every irrep (l, p), l <= 12, and a few direct sums, for proper and improper rotations. e3nn's
// own matrices (Euler angles and matrix exponentials) are accurate to ~1e-14 at l = 12.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "clebsch/o3/irreps.h"
#include "clebsch/o3/wigner_d.h"
#include "reference_data.h"

namespace clebsch {
namespace {

using test::flat;
using test::load_reference;
using test::max_rel_error;

constexpr double kTolerance = 1e-12;  // float64, relative to the largest |entry|

TEST(E3nnWignerD, SingleIrrepsMatchE3nn) {
  const auto ref = load_reference("wigner_d");
  double worst = 0;
  int count = 0;
  for (const auto& c : ref.at("cases")) {
    const auto r = flat(c.at("R"));
    const double R[3][3] = {{r[0], r[1], r[2]}, {r[3], r[4], r[5]}, {r[6], r[7], r[8]}};
    for (const auto& s : c.at("single")) {
      const Irrep ir(s.at("l").get<int>(), s.at("p").get<int>());
      const double err = max_rel_error(D_from_matrix(Irreps({{1, ir}}), R), flat(s.at("D")));
      worst = std::max(worst, err);
      ++count;
      EXPECT_LT(err, kTolerance) << ir.str() << " det " << c.at("det");
      if (ir.p() == (ir.l() % 2 ? -1 : 1)) {  // the spherical-harmonic parity: wigner_d itself
        EXPECT_LT(max_rel_error(wigner_d(ir.l(), R), flat(s.at("D"))), kTolerance) << ir.str();
      }
    }
  }
  EXPECT_EQ(count, 4 * 2 * (kMaxL + 1));
  std::cout << count << " matrices, max relative error " << worst << "\n";
}

TEST(E3nnWignerD, DirectSumsMatchE3nn) {
  const auto ref = load_reference("wigner_d");
  for (const auto& c : ref.at("cases")) {
    const auto r = flat(c.at("R"));
    const double R[3][3] = {{r[0], r[1], r[2]}, {r[3], r[4], r[5]}, {r[6], r[7], r[8]}};
    for (const auto& s : c.at("sums")) {
      const std::string text = s.at("irreps");
      EXPECT_LT(max_rel_error(D_from_matrix(Irreps(text), R), flat(s.at("D"))), kTolerance)
          << text << " det " << c.at("det");
    }
  }
}

}  // namespace
}  // namespace clebsch
