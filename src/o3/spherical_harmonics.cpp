// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Real spherical harmonics in e3nn's convention (see spherical_harmonics.h: component
// normalisation, index m+l, y polar), evaluated by the coupling recursion
//   Y_{l+1}[k](u) = c_l sum_ij C^{l,1,l+1}[i][j][k] Y_l[i](u) Y_1[j](u),   Y_1 = sqrt(3) u,
// with C the Wigner-3j tensor of clebsch_gordan.h and c_l > 0 fixed so that |Y_{l+1}|^2 = 2l+3.
// The coupled tensor is equivariant, so by Schur's lemma it is a multiple of the unique degree-
// (l+1) harmonic of the chosen basis; c_l > 0 reproduces e3nn's polynomials, signs included
// (checked against e3nn by test_e3nn_spherical_harmonics). The gradient differentiates the same
// recursion in forward mode with respect to u, then applies du/dv = (I - u u^T) / |v|.
#include "clebsch/o3/spherical_harmonics.h"

#include <cmath>
#include <string>
#include <vector>

#include "clebsch/o3/clebsch_gordan.h"
#include "clebsch/o3/irreps.h"
#include "clebsch/support/error.h"

namespace clebsch {
namespace {

// Smallest norm F.normalize divides by (its eps).
constexpr double kNormalizeEps = 1e-12;

// One term of the recursion: Y_{l+1}[k] += c * Y_l[i] * u[j], with c = c_l sqrt(3) C[i][j][k].
struct RecursionTerm {
  int k, i, j;
  double c;
};

// terms[l] builds Y_{l+1} from Y_l, for l = 0 .. kMaxL-1; computed once for every lmax.
const std::vector<std::vector<RecursionTerm>>& recursion_terms() {
  static const std::vector<std::vector<RecursionTerm>> terms = [] {
    std::vector<std::vector<RecursionTerm>> all(kMaxL);
    const double sqrt3 = std::sqrt(3.0);
    // Y_l at the pole u = (0, 1, 0), propagated with the recursion itself: the norm of the coupled
    // tensor does not depend on u, so the pole fixes c_l.
    std::vector<double> pole = {1.0};
    for (int l = 0; l < kMaxL; ++l) {
      const std::vector<double>& C = wigner_3j(l, 1, l + 1);
      const int d1 = 2 * l + 1, d3 = 2 * l + 3;
      std::vector<double> next(d3, 0.0);
      for (int i = 0; i < d1; ++i)
        for (int k = 0; k < d3; ++k) next[k] += C[(i * 3 + 1) * d3 + k] * pole[i] * sqrt3;
      double norm2 = 0;
      for (double x : next) norm2 += x * x;
      const double c_l = std::sqrt((2 * l + 3) / norm2);
      for (auto& x : next) x *= c_l;
      pole = next;
      // k-major order, so each output is accumulated in one run.
      for (int k = 0; k < d3; ++k)
        for (int i = 0; i < d1; ++i)
          for (int j = 0; j < 3; ++j) {
            const double c = C[(i * 3 + j) * d3 + k];
            if (c != 0) all[l].push_back({k, i, j, c_l * sqrt3 * c});
          }
    }
    return all;
  }();
  return terms;
}

void check_lmax(int lmax) {
  if (lmax < 0) throw Error("spherical_harmonics: lmax must be >= 0, got " + std::to_string(lmax));
  if (lmax > kMaxL)
    throw CapacityError("spherical_harmonics: lmax=" + std::to_string(lmax) +
                        " exceeds the supported maximum " + std::to_string(kMaxL));
}

// The work of every entry point; lmax is already checked. grad may be null.
template <typename T>
void evaluate(int lmax, const T v[3], T* out, T* grad,
              const std::vector<std::vector<RecursionTerm>>& terms) {
  const T r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
  const bool clamped = !(r > static_cast<T>(kNormalizeEps));
  const T denom = clamped ? static_cast<T>(kNormalizeEps) : r;
  const T u[3] = {v[0] / denom, v[1] / denom, v[2] / denom};
  const int dim = (lmax + 1) * (lmax + 1);

  out[0] = T(1);
  if (grad)
    for (int a = 0; a < 3; ++a) grad[a] = T(0);
  if (lmax >= 1) {
    const T sqrt3 = static_cast<T>(std::sqrt(3.0));
    for (int j = 0; j < 3; ++j) {
      out[1 + j] = sqrt3 * u[j];
      if (grad)
        for (int a = 0; a < 3; ++a) grad[3 * (1 + j) + a] = (a == j) ? sqrt3 : T(0);
    }
  }
  // Grad holds dY/du until the projection at the end.
  for (int l = 1; l < lmax; ++l) {
    const T* y = out + l * l;
    T* yn = out + (l + 1) * (l + 1);
    const int dn = 2 * l + 3;
    for (int k = 0; k < dn; ++k) yn[k] = T(0);
    if (!grad) {
      for (const auto& t : terms[l]) yn[t.k] += static_cast<T>(t.c) * y[t.i] * u[t.j];
      continue;
    }
    const T* g = grad + 3 * l * l;
    T* gn = grad + 3 * (l + 1) * (l + 1);
    for (int k = 0; k < 3 * dn; ++k) gn[k] = T(0);
    for (const auto& t : terms[l]) {
      const T c = static_cast<T>(t.c);
      yn[t.k] += c * y[t.i] * u[t.j];
      for (int a = 0; a < 3; ++a) gn[3 * t.k + a] += c * g[3 * t.i + a] * u[t.j];
      gn[3 * t.k + t.j] += c * y[t.i];
    }
  }
  if (!grad) return;
  // dY/dv = dY/du du/dv. Unclamped, du/dv = (I - u u^T) / r; clamped, u = v / eps is linear.
  for (int n = 0; n < dim; ++n) {
    T* g = grad + 3 * n;
    if (clamped) {
      for (int a = 0; a < 3; ++a) g[a] /= denom;
    } else {
      const T radial = g[0] * u[0] + g[1] * u[1] + g[2] * u[2];
      for (int a = 0; a < 3; ++a) g[a] = (g[a] - radial * u[a]) / r;
    }
  }
}

}  // namespace

template <typename T>
void spherical_harmonics(int lmax, const T v[3], T* out) {
  check_lmax(lmax);
  evaluate<T>(lmax, v, out, nullptr, recursion_terms());
}

template <typename T>
void spherical_harmonics_with_gradient(int lmax, const T v[3], T* out, T* grad) {
  check_lmax(lmax);
  evaluate<T>(lmax, v, out, grad, recursion_terms());
}

template <typename T>
void spherical_harmonics_batch(int lmax, std::size_t n, const T* v, T* out,
                               std::common_type_t<T>* grad) {
  check_lmax(lmax);
  // Build the table before the parallel region and throw nothing inside it.
  const auto& terms = recursion_terms();
  const std::ptrdiff_t dim = (lmax + 1) * (lmax + 1);
  const std::ptrdiff_t count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t e = 0; e < count; ++e)
    evaluate<T>(lmax, v + 3 * e, out + dim * e, grad ? grad + 3 * dim * e : nullptr, terms);
}

template void spherical_harmonics<float>(int, const float[3], float*);
template void spherical_harmonics<double>(int, const double[3], double*);
template void spherical_harmonics_with_gradient<float>(int, const float[3], float*, float*);
template void spherical_harmonics_with_gradient<double>(int, const double[3], double*, double*);
template void spherical_harmonics_batch<float>(int, std::size_t, const float*, float*, float*);
template void spherical_harmonics_batch<double>(int, std::size_t, const double*, double*, double*);

}  // namespace clebsch
