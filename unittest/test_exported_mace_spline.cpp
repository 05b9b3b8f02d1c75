// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The spline mode of the radial functions (engine/radial_spline.h, `radial spline N`) on the
// host engine. References are independent of the spline: the Hermite table against a cubic
// and its derivative (which it must reproduce exactly), mace-torch's golden energies and
// forces of every exported MACE model the mode accepts (the spline converges to them at the
// fourth power of the knot spacing), and central differences of the spline model's own energy
// (its forces stay conservative). Models whose radial functions read species are refused by
// name.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "clebsch/engine/engine.h"
#include "clebsch/engine/mace_engine.h"
#include "clebsch/engine/radial_spline.h"
#include "clebsch/model/model.h"
#include "clebsch/model/model_reader.h"
#include "clebsch/model/safetensors.h"
#include "clebsch/support/error.h"
#include "exported_golden.h"

namespace clebsch {
namespace {

using test::GoldenStructure;

// f_w(r) = c0 + c1 r + c2 r^2 + c3 r^3 (a cubic per output) and its table on `n` intervals.
struct Cubic {
  std::vector<std::array<double, 4>> c;
  double value(int w, double r) const {
    return c[w][0] + r * (c[w][1] + r * (c[w][2] + r * c[w][3]));
  }
  double slope(int w, double r) const { return c[w][1] + r * (2 * c[w][2] + 3 * r * c[w][3]); }
  model::RadialSpline table(double r_lo, double r_hi, int n) const {
    model::RadialSpline s;
    s.r_lo = r_lo, s.r_hi = r_hi, s.intervals = n, s.width = static_cast<int>(c.size());
    const double h = (r_hi - r_lo) / n;
    for (int k = 0; k <= n; ++k) {
      const double r = r_lo + k * h;
      for (int w = 0; w < s.width; ++w) s.values.push_back(value(w, r));
      for (int w = 0; w < s.width; ++w) s.values.push_back(h * slope(w, r));
    }
    return s;
  }
};

TEST(RadialSpline, TheHermiteTableReproducesACubicAndItsDerivative) {
  const Cubic f{{{0.3, -1.2, 0.7, -0.05}, {-2.0, 0.4, 0.1, 0.02}, {1.0, 0.0, -0.3, 0.04}}};
  const SplineTable<double> table(f.table(0.1, 5.5, 13));
  const std::vector<double> g = {0.7, -1.3, 0.25};
  for (double r = 0.1; r <= 5.5; r += 0.0371) {
    double y[3];
    table.value(r, y);
    double dot = 0;
    for (int w = 0; w < 3; ++w) {
      EXPECT_NEAR(y[w], f.value(w, r), 1e-13) << "r = " << r << ", output " << w;
      dot += g[w] * f.slope(w, r);
    }
    EXPECT_NEAR(table.derivative_dot(r, g.data()), dot, 1e-12) << "r = " << r;
  }
}

// The exported MACE models with golden data, each with its reason when the mode refuses it.
struct SplineCase {
  test::GoldenCase golden;
  model::Model model;
  std::vector<GoldenStructure> structures;
};

std::vector<SplineCase> spline_cases(std::vector<std::string>* refused = nullptr) {
  std::vector<SplineCase> out;
  for (const test::GoldenCase& c : test::golden_cases("mace", "MACE")) {
    model::Model m = read_model(c.model_path);
    try {
      model::Model probe = m;
      tabulate_radial_functions(probe, kMinSplineIntervals);
    } catch (const Error& e) {
      if (refused) refused->push_back(c.name + ": " + e.what());
      continue;
    }
    // MACE's golden vectors are centre minus neighbour; the engine's the opposite.
    std::vector<GoldenStructure> structures =
        test::golden_structures(SafetensorsFile::read(c.golden_path));
    for (GoldenStructure& s : structures)
      for (double& x : s.vectors) x = -x;
    out.push_back({c, std::move(m), std::move(structures)});
  }
  return out;
}

// Largest force and per-atom energy errors against mace-torch over the case's structures, with
// the radial functions tabulated on `intervals` intervals (0: the exact MLP).
test::GoldenErrors errors_with(const SplineCase& c, int intervals) {
  model::Model m = c.model;
  if (intervals > 0) tabulate_radial_functions(m, intervals);
  MaceEngine engine(m, Precision::kFloat64);
  test::GoldenErrors worst;
  for (const GoldenStructure& s : c.structures) {
    const test::GoldenErrors e = test::compare_to_golden(engine, s);
    worst.force = std::max(worst.force, e.force);
    worst.node_energy = std::max(worst.node_energy, e.node_energy);
    worst.virial = std::max(worst.virial, e.virial);
  }
  return worst;
}

TEST(MaceSpline, ConvergesToMaceTorchAtTheFourthPowerOfTheKnotSpacing) {
  const std::vector<SplineCase> cases = spline_cases();
  ASSERT_GE(cases.size(), 3u) << "too few exported MACE models accept the spline mode";
  for (const SplineCase& c : cases) {
    SCOPED_TRACE(c.golden.name);
    const test::GoldenErrors exact = errors_with(c, 0);
    const test::GoldenErrors coarse = errors_with(c, 128), fine = errors_with(c, 256);
    const test::GoldenErrors dense = errors_with(c, 2000);
    // CLEBSCH_SPLINE_TABLE=1 prints the errors by interval count (doc/pair_clebsch.rst's table).
    if (std::getenv("CLEBSCH_SPLINE_TABLE"))
      for (int n : {64, 128, 256, 512, 1000, 2000, 4000}) {
        const test::GoldenErrors e = errors_with(c, n);
        std::printf("%s %d force %.2e atom_energy %.2e virial %.2e\n", c.golden.name.c_str(), n,
                    e.force, e.node_energy, e.virial);
      }
    // Halving h divides the energy's interpolation error by ~16 (h^4) and the forces' by ~8
    // (h^3: they are the interpolant's derivative).
    EXPECT_GT(coarse.node_energy, 10 * fine.node_energy);
    EXPECT_GT(coarse.force, 5 * fine.force);
    // 2,000 intervals (h = (r_max - 0.1 A) / 2000, ~3e-3 A): next to mace-torch's round-off.
    EXPECT_LT(dense.force, 1e-8);
    EXPECT_LT(dense.node_energy, 1e-11);
    EXPECT_LT(dense.virial, 1e-8);
    EXPECT_GT(coarse.force, 1e3 * std::max(exact.force, 1e-16))
        << "128 intervals should differ measurably from the exact MLP";
  }
}

TEST(MaceSpline, ForcesAreTheDerivativeOfTheSplineModelsEnergy) {
  const std::vector<SplineCase> cases = spline_cases();
  ASSERT_FALSE(cases.empty());
  for (const SplineCase& c : cases) {
    SCOPED_TRACE(c.golden.name);
    model::Model m = c.model;
    // Coarse on purpose: the interpolant's own derivative, not the MLP's, must match.
    tabulate_radial_functions(m, 16);
    MaceEngine engine(m, Precision::kFloat64);
    const GoldenStructure& s = c.structures.front();
    std::vector<double> v = s.vectors;
    AtomGraph g{s.n_atoms,       s.n_atoms,         s.species.data(), s.n_edges,
                s.center.data(), s.neighbor.data(), v.data()};
    EngineResult r;
    engine.compute(g, r, nullptr);
    const std::vector<double> grad = r.edge_gradient;
    double scale = 1;
    for (double x : grad) scale = std::max(scale, std::abs(x));
    const double h = 1e-5;
    for (std::size_t k = 0; k < std::min<std::size_t>(s.n_edges, 24); ++k)
      for (int a = 0; a < 3; ++a) {
        const double v0 = v[3 * k + a];
        EngineResult rp, rm;
        v[3 * k + a] = v0 + h;
        engine.compute(g, rp, nullptr);
        v[3 * k + a] = v0 - h;
        engine.compute(g, rm, nullptr);
        v[3 * k + a] = v0;
        EXPECT_NEAR(grad[3 * k + a], (rp.energy - rm.energy) / (2 * h), 1e-7 * scale)
            << "edge " << k << ", component " << a;
      }
  }
}

TEST(MaceSpline, ModelsWhoseRadialFunctionsReadSpeciesAreRefusedByName) {
  std::vector<std::string> refused;
  spline_cases(&refused);
  // The fixtures hold Agnesi- and soft-transformed models (models.json features).
  bool transform = false;
  for (const std::string& r : refused) {
    SCOPED_TRACE(r);
    EXPECT_NE(r.find("use radial exact"), std::string::npos);
    transform |= r.find("distance transform") != std::string::npos;
  }
  EXPECT_TRUE(transform) << "no exported model was refused for its distance transform";
}

TEST(MaceSpline, IntervalsOutOfRangeAndNonMaceModelsAreRefused) {
  const std::vector<SplineCase> cases = spline_cases();
  ASSERT_FALSE(cases.empty());
  model::Model m = cases.front().model;
  EXPECT_THROW(tabulate_radial_functions(m, kMinSplineIntervals - 1), Error);
  EXPECT_THROW(tabulate_radial_functions(m, kMaxSplineIntervals + 1), Error);
  model::Model other = m;
  other.arch = model::Arch::kNequip;
  try {
    tabulate_radial_functions(other, 100);
    ADD_FAILURE() << "a non-MACE model was tabulated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MACE models only"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace clebsch
