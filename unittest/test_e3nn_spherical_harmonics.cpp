// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Spherical harmonics and their gradients against the real e3nn
// (reference/ref_spherical_harmonics.py: spherical_harmonics(range(lmax+1), v, normalize=True,
// normalization='component') and its autograd Jacobian), for every lmax e3nn implements, on
// random vectors of many lengths, the axes, the zero vector and a vector shorter than eps.
// Errors are relative to the largest |entry| of each degree-l block of each vector.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "clebsch/o3/irreps.h"
#include "clebsch/o3/spherical_harmonics.h"
#include "reference_data.h"

namespace clebsch {
namespace {

using test::flat;
using test::load_reference;
using test::max_rel_error;

constexpr double kTolerance = 1e-12;  // float64

const nlohmann::json& reference() {
  static const nlohmann::json ref = load_reference("spherical_harmonics");
  return ref;
}

std::vector<double> block(const std::vector<double>& x, std::size_t begin, std::size_t end) {
  return std::vector<double>(x.begin() + begin, x.begin() + end);
}

// Relative error of a block; where e3nn's block is exactly zero (Y_{l>0} of the zero vector),
// the largest |entry| of ours, which must be zero too.
double block_error(const std::vector<double>& ours, const std::vector<double>& e3nn) {
  double ref_max = 0, our_max = 0;
  for (double x : e3nn) ref_max = std::max(ref_max, std::abs(x));
  for (double x : ours) our_max = std::max(our_max, std::abs(x));
  return ref_max == 0 ? our_max : max_rel_error(ours, e3nn);
}

class E3nnSphericalHarmonics : public ::testing::TestWithParam<int> {};

TEST_P(E3nnSphericalHarmonics, ValuesAndGradientsMatchE3nn) {
  const int lmax = GetParam();
  const auto vectors = flat(reference().at("vectors"));
  const auto& entry = reference().at("per_lmax").at(lmax);
  ASSERT_EQ(entry.at("lmax").get<int>(), lmax);
  const auto values = flat(entry.at("values"));
  const auto grads = flat(entry.at("gradients"));
  const std::size_t n = vectors.size() / 3, dim = (lmax + 1) * (lmax + 1);
  ASSERT_EQ(values.size(), n * dim);
  ASSERT_EQ(grads.size(), n * dim * 3);

  std::vector<double> y(dim), g(3 * dim);
  double worst_y = 0, worst_g = 0;
  for (std::size_t e = 0; e < n; ++e) {
    spherical_harmonics_with_gradient(lmax, &vectors[3 * e], y.data(), g.data());
    for (int l = 0; l <= lmax; ++l) {
      const std::size_t b = l * l, end = (l + 1) * (l + 1);
      const auto ry = block(values, e * dim + b, e * dim + end);
      const auto rg = block(grads, 3 * (e * dim + b), 3 * (e * dim + end));
      const double ey = block_error(block(y, b, end), ry);
      const double eg = block_error(block(g, 3 * b, 3 * end), rg);
      worst_y = std::max(worst_y, ey);
      worst_g = std::max(worst_g, eg);
      EXPECT_LT(ey, kTolerance) << "vector " << e << " l=" << l;
      EXPECT_LT(eg, kTolerance) << "gradient, vector " << e << " l=" << l;
    }
  }
  RecordProperty("max_rel_error_values", std::to_string(worst_y));
  RecordProperty("max_rel_error_gradients", std::to_string(worst_g));
  std::cout << "lmax=" << lmax << ": " << n << " vectors, max relative error values " << worst_y
            << ", gradients " << worst_g << "\n";
}

INSTANTIATE_TEST_SUITE_P(AllLmax, E3nnSphericalHarmonics, ::testing::Range(0, kMaxL + 1),
                         [](const auto& info) { return "lmax_" + std::to_string(info.param); });

}  // namespace
}  // namespace clebsch
