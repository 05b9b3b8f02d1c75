// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Wigner-D matrices in e3nn's real basis (see wigner_d.h), built by an exact recursion over l:
// because Y_{l+1} is proportional to the (l, 1 -> l+1) coupling of Y_l and Y_1, and the Wigner-3j
// tensor C = C^{l,1,l+1} (Frobenius norm 1) is invariant, D_{l+1} = (2l+3) C^T (D_l (x) D_1) C,
// starting from D_0 = 1 and D_1 = R. Each step is an orthogonal change of basis, so rounding
// errors grow only linearly in l (~1e-15 at l = 12), with no angles and no conditioning issues.
#include "clebsch/o3/wigner_d.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "clebsch/o3/clebsch_gordan.h"
#include "clebsch/support/error.h"

namespace clebsch {
namespace {

// The non-zero entries of C^{l,1,l+1}, i.e. C[i][j][k] with i: m+l, j: x,y,z, k: m+l+1.
struct CouplingEntry {
  int i, j, k;
  double c;
};

// entries[l] lists C^{l,1,l+1} for l = 0..kMaxL-1; built once (thread-safe static).
const std::vector<std::vector<CouplingEntry>>& coupling_to_next() {
  static const std::vector<std::vector<CouplingEntry>> entries = [] {
    std::vector<std::vector<CouplingEntry>> all(kMaxL);
    for (int l = 0; l < kMaxL; ++l) {
      const std::vector<double>& c = wigner_3j(l, 1, l + 1);
      const int d1 = 2 * l + 1, d3 = 2 * l + 3;
      for (int i = 0; i < d1; ++i)
        for (int j = 0; j < 3; ++j)
          for (int k = 0; k < d3; ++k) {
            const double v = c[(i * 3 + j) * d3 + k];
            if (v != 0) all[l].push_back({i, j, k, v});
          }
    }
    return all;
  }();
  return entries;
}

// max |R^T R - I| and det R; throws if R is not orthogonal.
double checked_determinant(const double R[3][3], const char* caller) {
  double err = 0;
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      double s = 0;
      for (int k = 0; k < 3; ++k) s += R[k][a] * R[k][b];
      err = std::max(err, std::abs(s - (a == b ? 1.0 : 0.0)));
    }
  if (!(err <= 1e-6))
    throw Error(std::string(caller) +
                ": R is not orthogonal, max |R^T R - I| = " + std::to_string(err));
  return R[0][0] * (R[1][1] * R[2][2] - R[1][2] * R[2][1]) -
         R[0][1] * (R[1][0] * R[2][2] - R[1][2] * R[2][0]) +
         R[0][2] * (R[1][0] * R[2][1] - R[1][1] * R[2][0]);
}

// D_0 .. D_lmax of a proper rotation Q, by the recursion in the file comment.
std::vector<std::vector<double>> proper_wigner_d(int lmax, const double Q[3][3]) {
  std::vector<std::vector<double>> D(lmax + 1);
  D[0] = {1.0};
  if (lmax >= 1) D[1].assign(&Q[0][0], &Q[0][0] + 9);
  for (int l = 1; l < lmax; ++l) {
    const int d = 2 * l + 1, dn = 2 * l + 3;
    const std::vector<CouplingEntry>& terms = coupling_to_next()[l];
    std::vector<double>& next = D[l + 1];
    next.assign(static_cast<std::size_t>(dn) * dn, 0.0);
    for (const auto& t : terms)
      for (const auto& u : terms)
        next[t.k * dn + u.k] += t.c * u.c * D[l][t.i * d + u.i] * Q[t.j][u.j];
    for (auto& x : next) x *= 2 * l + 3;
  }
  return D;
}

void check_degree(int l, const char* caller) {
  if (l < 0) throw Error(std::string(caller) + ": degree l=" + std::to_string(l) + " is negative");
  if (l > kMaxL)
    throw CapacityError(std::string(caller) + ": degree l=" + std::to_string(l) +
                        " exceeds the supported maximum " + std::to_string(kMaxL));
}

// The proper part d*R of R (d = det R = +-1), and whether R was improper.
bool proper_part(const double R[3][3], double Q[3][3], const char* caller) {
  const bool improper = checked_determinant(R, caller) < 0;
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) Q[a][b] = improper ? -R[a][b] : R[a][b];
  return improper;
}

}  // namespace

std::vector<double> wigner_d(int l, const double R[3][3]) {
  check_degree(l, "wigner_d");
  double Q[3][3];
  const bool improper = proper_part(R, Q, "wigner_d");
  std::vector<double> D = std::move(proper_wigner_d(l, Q)[l]);
  if (improper && l % 2 == 1)
    for (auto& x : D) x = -x;
  return D;
}

std::vector<double> D_from_matrix(const Irreps& irreps, const double R[3][3]) {
  double Q[3][3];
  const bool improper = proper_part(R, Q, "D_from_matrix");
  const int dim = irreps.dim();
  std::vector<double> out(static_cast<std::size_t>(dim) * dim, 0.0);
  int lmax = -1;  // over the irreps actually present (zero multiplicities take no space)
  for (const auto& mi : irreps)
    if (mi.mul > 0) lmax = std::max(lmax, mi.ir.l());
  if (lmax < 0) return out;
  const auto D = proper_wigner_d(lmax, Q);
  int offset = 0;
  for (const auto& mi : irreps) {
    const int d = mi.ir.dim();
    const double sign = (improper && mi.ir.p() == -1) ? -1.0 : 1.0;
    for (int u = 0; u < mi.mul; ++u, offset += d)
      for (int a = 0; a < d; ++a)
        for (int b = 0; b < d; ++b)
          out[static_cast<std::size_t>(offset + a) * dim + offset + b] =
              sign * D[mi.ir.l()][a * d + b];
  }
  return out;
}

void random_rotation(std::uint64_t seed, double R[3][3]) {
  // SplitMix64: portable, so a seed names the same rotation on every platform and compiler.
  std::uint64_t state = seed;
  auto uniform = [&state]() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;
  };
  // Shoemake (1992): a unit quaternion uniform on S^3 gives a Haar-distributed rotation.
  const double u1 = uniform(), u2 = uniform(), u3 = uniform();
  const double two_pi = 2.0 * std::acos(-1.0);
  const double a = std::sqrt(1.0 - u1), b = std::sqrt(u1);
  const double w = a * std::sin(two_pi * u2), x = a * std::cos(two_pi * u2);
  const double y = b * std::sin(two_pi * u3), z = b * std::cos(two_pi * u3);
  R[0][0] = 1 - 2 * (y * y + z * z);
  R[0][1] = 2 * (x * y - z * w);
  R[0][2] = 2 * (x * z + y * w);
  R[1][0] = 2 * (x * y + z * w);
  R[1][1] = 1 - 2 * (x * x + z * z);
  R[1][2] = 2 * (y * z - x * w);
  R[2][0] = 2 * (x * z - y * w);
  R[2][1] = 2 * (y * z + x * w);
  R[2][2] = 1 - 2 * (x * x + y * y);
}

}  // namespace clebsch
