// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The optional spline mode of the radial functions (`pair_style clebsch ... radial spline N`):
// a MACE layer's radial MLP, W(r) = radial_mlp(e(r)), depends on the edge length alone when the
// MLP reads only the radial basis, so it can be tabulated once, at load, as a cubic Hermite
// spline on N uniform intervals of [kMinEdgeLength, r_max] (values and exact-to-round-off
// slopes at the knots, so W and dW/dr are continuous and the forces stay conservative). The
// engines then evaluate the table (four rows per edge) in place of the MLP: no MLP GEMMs in the
// forward or the backward. It is an approximation of the model, the user's choice: the exact
// MLP stays the default, and the error against it is measured in doc/pair_clebsch.rst.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "clebsch/model/model.h"

namespace clebsch {

/// The fewest and the most intervals `radial spline N` accepts.
inline constexpr int kMinSplineIntervals = 8;
inline constexpr int kMaxSplineIntervals = 1000000;

/// Replaces, in @p model, every MACE layer's radial MLP (and density MLP) by its spline on
/// @p intervals uniform intervals (model::MaceInteraction::radial_spline), evaluated in float64
/// from the model's own weights.
/// @throws Error naming the reason when the model's radial functions are not functions of the
///   length alone (species-dependent distance transforms, non-linear interaction blocks whose
///   MLP reads species embeddings), when the model is not a MACE model, or when @p intervals is
///   out of range.
void tabulate_radial_functions(model::Model& model, int intervals);

/// A model::RadialSpline in the network type T, evaluated per edge.
template <class T>
class SplineTable {
 public:
  SplineTable() = default;
  explicit SplineTable(const model::RadialSpline& s)
      : r_lo_(s.r_lo),
        inv_h_(s.intervals / (s.r_hi - s.r_lo)),
        n_(s.intervals),
        width_(s.width),
        values_(s.values.begin(), s.values.end()) {}

  int width() const { return width_; }

  /// y[w] = f_w(r), w < width().
  template <class G>
  void value(G r, T* y) const {
    T u;
    const T* p = rows(r, &u);
    const T u2 = u * u, u3 = u2 * u;
    const T a0 = T(2) * u3 - T(3) * u2 + T(1), a1 = u3 - T(2) * u2 + u;
    const T a2 = T(3) * u2 - T(2) * u3, a3 = u3 - u2;
    const std::size_t W = static_cast<std::size_t>(width_);
    for (std::size_t w = 0; w < W; ++w)
      y[w] = a0 * p[w] + a1 * p[W + w] + a2 * p[2 * W + w] + a3 * p[3 * W + w];
  }

  /// f_w'(r) of one output.
  template <class G>
  G slope(G r, int w) const {
    const T one[1] = {T(1)};
    return derivative_dot(r, one, w, 1);
  }

  /// sum_w g[w] f_w'(r): dE/dr from dE/df.
  template <class G>
  G derivative_dot(G r, const T* g) const {
    return derivative_dot(r, g, 0, width_);
  }

 private:
  // sum over w in [w0, w0 + n) of g[w - w0] f_w'(r).
  template <class G>
  G derivative_dot(G r, const T* g, int w0, int n) const {
    T u;
    const T* p = rows(r, &u);
    const T u2 = u * u;
    const T d0 = T(6) * (u2 - u), d1 = T(3) * u2 - T(4) * u + T(1);
    const T d2 = -d0, d3 = T(3) * u2 - T(2) * u;
    const std::size_t W = static_cast<std::size_t>(width_);
    T acc = T(0);
    for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
      const std::size_t w = w0 + i;
      acc += g[i] * (d0 * p[w] + d1 * p[W + w] + d2 * p[2 * W + w] + d3 * p[3 * W + w]);
    }
    return static_cast<G>(acc * static_cast<T>(inv_h_));
  }

  // The four rows (f_k, h f'_k, f_k+1, h f'_k+1) of r's interval, and r's place u in it.
  template <class G>
  const T* rows(G r, T* u) const {
    const double x = (static_cast<double>(r) - r_lo_) * inv_h_;
    const int k = std::clamp(static_cast<int>(x), 0, n_ - 1);
    *u = static_cast<T>(x - k);
    return values_.data() + static_cast<std::size_t>(k) * 2 * width_;
  }

  double r_lo_ = 0, inv_h_ = 0;
  int n_ = 0, width_ = 0;
  std::vector<T> values_;
};

}  // namespace clebsch
