// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// tabulate_radial_functions (radial_spline.h): the knots' values come from the model's own MLP
// in float64, and their slopes from central differences of it (one-sided at the last knot,
// which is the cutoff). A difference step of 1e-5 Å leaves the slope within ~1e-10 of dW/dr,
// and the slope enters the interpolant multiplied by h/4 at most, so the table's error is the
// Hermite interpolation error alone (O(h^4)).
#include "clebsch/engine/radial_spline.h"

#include <cmath>
#include <string>

#include "clebsch/engine/mace_engine.h"
#include "clebsch/engine/mace_engine_geometry.h"
#include "clebsch/engine/mace_kernels.h"
#include "clebsch/support/error.h"

namespace clebsch {

namespace {

constexpr double kStep = 1e-5;      // Å, the slopes' difference step
constexpr int kKnotsPerBatch = 64;  // knots evaluated per MLP call (4 rows each)

// The spline of r -> mlp(e(r)) on [r_lo, r_hi].
model::RadialSpline tabulate(const mace_detail::Radial& radial, const model::Mlp& m, double r_lo,
                             double r_hi, int intervals, const std::string& where) {
  const mace_detail::Mlp<double> mlp(m, where);
  const int nb = radial.num_basis(), width = mlp.dim_out();
  model::RadialSpline s;
  s.r_lo = r_lo, s.r_hi = r_hi, s.intervals = intervals, s.width = width;
  s.values.resize(static_cast<std::size_t>(intervals + 1) * 2 * width);
  const double h = (r_hi - r_lo) / intervals;
  // Per knot the rows r - 2d, r - d, r, r + d.
  constexpr double kOffsets[4] = {-2 * kStep, -kStep, 0, kStep};
  std::vector<double> x, y, scratch;
  for (int k0 = 0; k0 <= intervals; k0 += kKnotsPerBatch) {
    const int k1 = std::min(intervals + 1, k0 + kKnotsPerBatch);
    const std::size_t rows = static_cast<std::size_t>(k1 - k0) * 4;
    x.resize(rows * nb), y.resize(rows * width), scratch.resize(mlp.scratch_size(rows));
    for (int k = k0; k < k1; ++k)
      for (int o = 0; o < 4; ++o) {
        const double r = r_lo + k * h + kOffsets[o];
        double f;
        radial.evaluate<double>(r, 0, 0, x.data() + (static_cast<std::size_t>(k - k0) * 4 + o) * nb,
                                nullptr, &f, nullptr);
      }
    mlp.forward(rows, x.data(), y.data(), scratch.data());
    for (int k = k0; k < k1; ++k) {
      const double* yk = y.data() + static_cast<std::size_t>(k - k0) * 4 * width;
      double* v = s.values.data() + static_cast<std::size_t>(k) * 2 * width;
      for (int w = 0; w < width; ++w) {
        const double m2 = yk[w], m1 = yk[width + w], f0 = yk[2 * width + w], p1 = yk[3 * width + w];
        const double slope =
            k < intervals ? (p1 - m1) / (2 * kStep) : (3 * f0 - 4 * m1 + m2) / (2 * kStep);
        if (!std::isfinite(f0) || !std::isfinite(slope))
          throw Error(where + " is not finite at r = " + std::to_string(r_lo + k * h) +
                      " A: it cannot be tabulated");
        v[w] = f0;
        v[width + w] = h * slope;
      }
    }
  }
  return s;
}

}  // namespace

void tabulate_radial_functions(model::Model& model, int intervals) {
  if (intervals < kMinSplineIntervals || intervals > kMaxSplineIntervals)
    throw Error("radial spline needs " + std::to_string(kMinSplineIntervals) + " to " +
                std::to_string(kMaxSplineIntervals) + " intervals, got " +
                std::to_string(intervals));
  if (model.arch != model::Arch::kMace || !model.mace)
    throw Error("radial spline is implemented for MACE models only; use radial exact");
  model::Mace& m = *model.mace;
  if (m.radial.agnesi || m.radial.soft)
    throw Error(
        "radial spline needs radial functions of the length alone, but this model's "
        "distance transform (" +
        std::string(m.radial.agnesi ? "Agnesi" : "soft") +
        ") depends on the species of both atoms; use radial exact");
  const mace_detail::Radial radial(m.radial, model.species);
  const double r_lo = MaceEngine::kMinEdgeLength, r_hi = m.radial.r_max;
  for (std::size_t t = 0; t < m.interactions.size(); ++t) {
    model::MaceInteraction& in = m.interactions[t];
    const std::string w = "mace.interactions[" + std::to_string(t) + "]";
    if (in.nonlinear)
      throw Error("radial spline cannot tabulate " + in.cls + " (" + w +
                  "): its radial MLP also reads the species of both atoms; use radial exact");
    if (in.radial_mlp.dim_in() != radial.num_basis())
      throw ModelFormatError(w + ".radial_mlp reads " + std::to_string(in.radial_mlp.dim_in()) +
                             " inputs, expected the " + std::to_string(radial.num_basis()) +
                             " radial basis functions");
    in.radial_spline = tabulate(radial, in.radial_mlp, r_lo, r_hi, intervals, w + ".radial_mlp");
    if (in.density_normalization && in.density_mlp)
      in.density_spline =
          tabulate(radial, *in.density_mlp, r_lo, r_hi, intervals, w + ".density_mlp");
  }
}

}  // namespace clebsch
