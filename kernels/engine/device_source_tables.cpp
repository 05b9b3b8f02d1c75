// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Shared pieces of the generated per-model preludes (see device_source_tables.h).
#include "clebsch/cuda/engine/device_source_tables.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "clebsch/o3/clebsch_gordan.h"

namespace clebsch::cuda {

std::string double_literal(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string device_double_array(const std::string& name, const std::vector<double>& v) {
  std::ostringstream o;
  o << "__device__ const double " << name << "[" << std::max<std::size_t>(v.size(), 1) << "] = {";
  for (std::size_t i = 0; i < v.size(); ++i) o << (i ? ", " : "") << double_literal(v[i]);
  if (v.empty()) o << "0.0";
  o << "};\n";
  return o.str();
}

std::string device_int_array(const std::string& name, const std::vector<int>& v) {
  std::ostringstream o;
  o << "__device__ const int " << name << "[" << std::max<std::size_t>(v.size(), 1) << "] = {";
  for (std::size_t i = 0; i < v.size(); ++i) o << (i ? ", " : "") << v[i];
  if (v.empty()) o << "0";
  o << "};\n";
  return o.str();
}

std::string sh_recursion_table(int lmax) {
  // Y_1 is always built (the recursion's second factor), even for lmax 0.
  const int top = std::max(lmax, 1);
  std::vector<int> begin(top + 1, 0), K, I, J;
  std::vector<double> C;
  const double sqrt3 = std::sqrt(3.0);
  std::vector<double> pole = {1.0};
  for (int l = 0; l < top; ++l) {
    begin[l] = static_cast<int>(K.size());
    const std::vector<double>& w = wigner_3j(l, 1, l + 1);
    const int d1 = 2 * l + 1, d3 = 2 * l + 3;
    std::vector<double> next(d3, 0.0);
    for (int i = 0; i < d1; ++i)
      for (int k = 0; k < d3; ++k) next[k] += w[(i * 3 + 1) * d3 + k] * pole[i] * sqrt3;
    double norm2 = 0;
    for (double x : next) norm2 += x * x;
    const double c_l = std::sqrt((2 * l + 3) / norm2);
    for (auto& x : next) x *= c_l;
    pole = next;
    if (l >= 1)
      for (int k = 0; k < d3; ++k)
        for (int i = 0; i < d1; ++i)
          for (int j = 0; j < 3; ++j) {
            const double c = w[(i * 3 + j) * d3 + k];
            if (c != 0) {
              K.push_back(k), I.push_back(i), J.push_back(j);
              C.push_back(c_l * sqrt3 * c);
            }
          }
  }
  begin[top] = static_cast<int>(K.size());
  return device_int_array("kShTermBegin", begin) + device_int_array("kShTermK", K) +
         device_int_array("kShTermI", I) + device_int_array("kShTermJ", J) +
         device_double_array("kShTermC", C);
}

}  // namespace clebsch::cuda
