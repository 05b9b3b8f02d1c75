// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Access to the reference values that the real e3nn computed (unittest/reference/*.py), for the
// test_e3nn_*.cpp suites. A missing file is a test failure, never a skip: the fixture that makes
// the files runs first under CTest.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace clebsch::test {

/// Loads <reference dir>/<component>.json. The directory is $CLEBSCH_REFERENCE_DIR if set, else
/// the one CMake configured.
inline nlohmann::json load_reference(const std::string& component) {
  const char* env = std::getenv("CLEBSCH_REFERENCE_DIR");
  const std::string dir = env ? env : CLEBSCH_REFERENCE_DIR;
  const std::string path = dir + "/" + component + ".json";
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("reference file " + path +
                             " is missing: run unittest/reference/make_references.py (ctest "
                             "does it through the e3nn_references fixture)");
  return nlohmann::json::parse(in);
}

/// Flattens a (nested) JSON array of numbers in row-major order.
inline std::vector<double> flat(const nlohmann::json& j) {
  std::vector<double> out;
  if (j.is_array()) {
    for (const auto& e : j) {
      auto sub = flat(e);
      out.insert(out.end(), sub.begin(), sub.end());
    }
  } else {
    out.push_back(j.get<double>());
  }
  return out;
}

/// Largest |a-b| / max(|b|_inf, tiny): the relative error used by every reference comparison.
inline double max_rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return 1e300;
  double scale = 0, err = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    scale = std::max(scale, std::abs(b[i]));
    err = std::max(err, std::abs(a[i] - b[i]));
  }
  return err / std::max(scale, 1e-300);
}

}  // namespace clebsch::test
