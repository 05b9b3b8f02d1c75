// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The CUDA MACE engine (kernels/engine/cuda_engine.h) against the host MACE engine (the reference,
// itself checked against mace-torch) on every MACE model of the exported_models fixture. Runs on
// the emulated backend (the engine's device source compiled by the host compiler: no GPU
// needed), and on the GPU as well when one is present. Per model and precision: energies, atom
// energies and dE/dvector of a small periodic cell (atoms see their own images) and a cluster;
// float64 to 1e-10, float32 and mixed to model-spec §5 (1e-5 eV/atom, 1e-4 eV/A) against the
// host engine at the same precision; deterministic mode bitwise reproducible; image ghosts
// through a GhostExchange equal the no-ghost result; compute_device() equals compute(); invalid
// graphs throw the host engine's messages. Models: $CLEBSCH_MODELS_DIR or the fixture's
// directory.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "clebsch/cuda/device/cuda_driver.h"
#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/engine/cuda_engine.h"
#include "clebsch/engine/mace_engine.h"
#include "clebsch/engine/radial_spline.h"
#include "clebsch/model/model.h"
#include "clebsch/model/model_heads.h"
#include "clebsch/model/model_reader.h"
#include "clebsch/model/safetensors.h"
#include "clebsch/support/error.h"
#include "exported_golden.h"
#include "exported_models_dir.h"
#include "owner_map_exchange.h"

namespace clebsch::cuda {
namespace {

using Vec = std::vector<double>;
using test::exported_models_dir;
using test::OwnerMapExchange;

struct Case {
  std::string name;
  model::Model model;
};

const std::vector<Case>& mace_cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> out;
    std::ifstream in(exported_models_dir() + "/models.json");
    if (!in) {
      ADD_FAILURE() << exported_models_dir() << "/models.json is missing (exported_models fixture)";
      return out;
    }
    const nlohmann::json index = nlohmann::json::parse(in);
    for (const auto& m : index.at("models"))
      if (m.at("arch") == "mace")
        out.push_back({m.at("name").get<std::string>(),
                       read_model(exported_models_dir() + "/" + m.at("file").get<std::string>())});
    EXPECT_FALSE(out.empty());
    return out;
  }();
  return cases;
}

struct Rng {
  std::uint64_t s;
  double operator()() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * (2.0 / 9007199254740992.0) - 1.0;
  }
};

struct System {
  Vec pos, cell = Vec(9, 0.0), vec;
  std::vector<int> species, center, neighbor;
  std::vector<std::array<int, 3>> shift;
  std::size_t n() const { return species.size(); }
};

void build_edges(System& s, double cutoff, bool pbc) {
  const int rep = pbc ? 3 : 0;
  for (std::size_t i = 0; i < s.n(); ++i)
    for (std::size_t j = 0; j < s.n(); ++j)
      for (int a = -rep; a <= rep; ++a)
        for (int b = -rep; b <= rep; ++b)
          for (int c = -rep; c <= rep; ++c) {
            if (i == j && a == 0 && b == 0 && c == 0) continue;
            double d[3], r2 = 0;
            for (int x = 0; x < 3; ++x) {
              d[x] = s.pos[3 * j + x] + a * s.cell[x] + b * s.cell[3 + x] + c * s.cell[6 + x] -
                     s.pos[3 * i + x];
              r2 += d[x] * d[x];
            }
            if (r2 < cutoff * cutoff * 0.999) {
              s.center.push_back(int(i));
              s.neighbor.push_back(int(j));
              s.shift.push_back({a, b, c});
              s.vec.insert(s.vec.end(), d, d + 3);
            }
          }
}

System periodic_cell(int num_species, std::uint64_t seed, double cutoff) {
  Rng rng{seed};
  System s;
  s.cell = {2.9, 0.1, 0.0, -0.2, 3.4, 0.15, 0.1, 0.05, 2.6};
  const double frac[4][3] = {{0, 0, 0}, {0.5, 0.5, 0}, {0.5, 0, 0.5}, {0, 0.5, 0.5}};
  for (int i = 0; i < 4; ++i) {
    for (int a = 0; a < 3; ++a) {
      double x = 0;
      for (int k = 0; k < 3; ++k) x += frac[i][k] * s.cell[3 * k + a];
      s.pos.push_back(x + 0.12 * rng());
    }
    s.species.push_back(i % num_species);
  }
  build_edges(s, cutoff, true);
  return s;
}

System cluster(int n, int num_species, double box, std::uint64_t seed, double cutoff) {
  Rng rng{seed};
  System s;
  while (static_cast<int>(s.n()) < n) {
    const double p[3] = {box * rng(), box * rng(), box * rng()};
    bool ok = true;
    for (std::size_t j = 0; j < s.n() && ok; ++j) {
      double r2 = 0;
      for (int a = 0; a < 3; ++a) r2 += (p[a] - s.pos[3 * j + a]) * (p[a] - s.pos[3 * j + a]);
      ok = r2 > 1.6 * 1.6;
    }
    if (!ok) continue;
    s.pos.insert(s.pos.end(), p, p + 3);
    s.species.push_back(static_cast<int>(s.n()) % num_species);
  }
  build_edges(s, cutoff, false);
  return s;
}

AtomGraph graph_of(const System& s) {
  return AtomGraph{s.n(),           s.n(),           s.species.data(),
                   s.center.size(), s.center.data(), s.neighbor.data(),
                   s.vec.data()};
}

double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}
double max_diff(const Vec& a, const Vec& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    m = std::max(m, std::abs(a[i] - b[i]));
  }
  return m;
}

// Tolerances against the host engine at the same precision (model-spec §5 for float32).
struct Tol {
  double energy_per_atom, gradient;
};
Tol tolerance(Precision p) {
  return p == Precision::kFloat64 ? Tol{1e-10, 1e-10} : Tol{1e-5, 1e-4};
}

// Emulated always, the GPU when present; $CLEBSCH_TEST_BACKENDS=cuda (or emulated) picks one.
std::vector<std::string> backends() {
  const char* only = std::getenv("CLEBSCH_TEST_BACKENDS");
  std::vector<std::string> b;
  if (!only || std::string(only) != "cuda") b.push_back("emulated");
  if (device_available() && (!only || std::string(only) != "emulated")) b.push_back("cuda");
  return b;
}

std::shared_ptr<DeviceBackend> make_backend(const std::string& name) {
  static std::map<std::string, std::shared_ptr<DeviceBackend>> cache;
  auto& b = cache[name];
  if (!b)
    b = name == "emulated" ? std::shared_ptr<DeviceBackend>(make_emulated_backend())
                           : std::shared_ptr<DeviceBackend>(make_cuda_backend(0));
  return b;
}

// fused: the radial MLP's last layer inside the convolution (CudaEngineOptions::fused_radial),
// required, so that a model falling back to the unfused form fails here; false (the engine's
// default): unfused.
std::unique_ptr<CudaEngine> engine_for(const model::Model& m, Precision p,
                                       const std::string& backend, bool deterministic = true,
                                       std::size_t edge_batch = 0, bool fused = false,
                                       bool fused_spline = true,
                                       KeptRows kept_rows = KeptRows::kAuto) {
  CudaEngineOptions o;
  o.kept_rows = kept_rows;
  o.fused_spline = fused_spline;
  o.deterministic = deterministic;
  o.edge_batch = edge_batch;
  o.fused_radial = fused;
  o.require_fused_radial = fused;
  o.backend = make_backend(backend);
  return make_cuda_engine(m, p, o);
}

void expect_close(const EngineResult& r, const EngineResult& ref, std::size_t n, Tol tol) {
  EXPECT_LE(std::abs(r.energy - ref.energy),
            tol.energy_per_atom * n * std::max(1.0, std::abs(ref.energy) / n))
      << "energy " << r.energy << " vs " << ref.energy;
  EXPECT_LE(max_diff(r.atom_energy, ref.atom_energy),
            tol.energy_per_atom * std::max(1.0, max_abs(ref.atom_energy)));
  EXPECT_LE(max_diff(r.edge_gradient, ref.edge_gradient),
            tol.gradient * std::max(1.0, max_abs(ref.edge_gradient)));
}

// model-spec §5 float32 (~1e-5 eV/atom, ~1e-4 eV/A), relative where values are large: the
// bounds of the host engine's float32 test.
void expect_within_float32_band(const EngineResult& r, const EngineResult& ref64, std::size_t n) {
  const double e_scale = std::max(1.0, max_abs(ref64.atom_energy));
  EXPECT_LE(std::abs(r.energy - ref64.energy) / n, 1e-5 * e_scale)
      << "energy " << r.energy << " vs " << ref64.energy;
  EXPECT_LE(max_diff(r.atom_energy, ref64.atom_energy), 1e-5 * e_scale);
  EXPECT_LE(max_diff(r.edge_gradient, ref64.edge_gradient),
            1e-4 * std::max(1.0, max_abs(ref64.edge_gradient)));
}

TEST(MaceCudaEngine, MatchesTheHostEngineInEveryPrecision) {
  for (const std::string& be : backends())
    for (const Case& c : mace_cases())
      for (Precision p : {Precision::kFloat64, Precision::kFloat32, Precision::kMixed}) {
        SCOPED_TRACE(be + " " + c.name + " " + to_string(p));
        // The reference is the host engine in float64 for every precision: two float32
        // evaluations can each sit anywhere inside model-spec §5's band around the float64
        // result, so float32 and mixed are held to that band (as the host engine's own
        // Float32AndMixedStayWithinSpecTolerances test is), not to each other. On the H200, a
        // ZBL-dominated cluster (E = -686,098 eV) put device and host float32 1.4e-5 apart.
        MaceEngine host(c.model, Precision::kFloat64);
        auto dev = engine_for(c.model, p, be);
        EXPECT_EQ(dev->species(), host.species());
        EXPECT_EQ(dev->num_layers(), host.num_layers());
        for (const System& s : {periodic_cell(c.model.num_species(), 11, c.model.r_max),
                                cluster(6, c.model.num_species(), 2.6, 7, c.model.r_max)}) {
          ASSERT_GT(s.center.size(), 10u);
          EngineResult ref, r;
          host.compute(graph_of(s), ref, nullptr);
          dev->compute(graph_of(s), r, nullptr);
          ASSERT_GT(max_abs(ref.edge_gradient), 1e-6);  // a meaningful comparison
          if (p == Precision::kFloat64)
            expect_close(r, ref, s.n(), tolerance(p));
          else
            expect_within_float32_band(r, ref, s.n());
        }
      }
}

// The fused radial form (CudaEngineOptions::fused_radial: no per-edge weights stored) against
// the host engine in float64: both modes, one batch and batches of a third of the edges (the
// hidden rows recomputed in the backward, dE/dh accumulated batch after batch); float32 and
// mixed within model-spec §5's band, as the unfused form is in the tests above; batches with
// every row one batch's (kept_rows kBatch) in float64, deterministic. The emulated
// backend (CI, ~10x slower than the GPU) runs batches in the deterministic mode only and skips
// mixed, whose network type is float32's.
TEST(MaceCudaEngine, TheFusedRadialFormMatchesTheHostEngine) {
  for (const std::string& be : backends())
    for (const Case& c : mace_cases()) {
      const bool full = be == "cuda";
      MaceEngine host(c.model, Precision::kFloat64);
      const System s = periodic_cell(c.model.num_species(), 11, c.model.r_max);
      EngineResult ref;
      host.compute(graph_of(s), ref, nullptr);
      ASSERT_GT(max_abs(ref.edge_gradient), 1e-6);
      for (bool det : {true, false})
        for (std::size_t batch : {std::size_t(0), s.center.size() / 3 + 1}) {
          if (!full && !det && batch > 0) continue;
          SCOPED_TRACE(be + " " + c.name + (det ? " deterministic" : " atomic") + " batch " +
                       std::to_string(batch));
          auto dev = engine_for(c.model, Precision::kFloat64, be, det, batch, true);
          EngineResult r;
          dev->compute(graph_of(s), r, nullptr);
          expect_close(r, ref, s.n(), tolerance(Precision::kFloat64));
        }
      {
        // The rows of one batch too (kept_rows kBatch): the receiver pass made again from the
        // batch's hidden rows, whose MLP activations its radial backward then reads.
        SCOPED_TRACE(be + " " + c.name + " deterministic, batch rows");
        auto dev = engine_for(c.model, Precision::kFloat64, be, true, s.center.size() / 3 + 1, true,
                              true, KeptRows::kBatch);
        EngineResult r;
        dev->compute(graph_of(s), r, nullptr);
        expect_close(r, ref, s.n(), tolerance(Precision::kFloat64));
      }
      for (Precision p : {Precision::kFloat32, Precision::kMixed}) {
        if (!full && p == Precision::kMixed) continue;
        SCOPED_TRACE(be + " " + c.name + " " + to_string(p));
        auto dev = engine_for(c.model, p, be, true, 0, true);
        EngineResult r;
        dev->compute(graph_of(s), r, nullptr);
        expect_within_float32_band(r, ref, s.n());
      }
    }
}

// The first layer in the species-factored form (CudaEngineOptions::species_factored, the
// default: species_factored_conv.h), in both its forms (CLEBSCH_SPECIES_FORM block and gemm),
// against the host engine in float64 and with the form off, on every fixture model (its radial
// MLP ends in a linear layer: the form must engage, which the kernel records show): both modes,
// one batch and batches of a third of the edges with the rows kept and made again per batch
// (kept_rows kBatch), float32 within model-spec §5's band.
TEST(MaceCudaEngine, TheSpeciesFactoredFirstLayerMatchesTheHostEngine) {
  // The form the caller chose for the other tests, set again after each case.
  const char* outer = std::getenv("CLEBSCH_SPECIES_FORM");
  const std::string outer_form = outer ? outer : "";
  auto restore_form = [&] {
    if (outer_form.empty())
      unsetenv("CLEBSCH_SPECIES_FORM");
    else
      setenv("CLEBSCH_SPECIES_FORM", outer_form.c_str(), 1);
  };
  for (const std::string& be : backends())
    for (const Case& c : mace_cases()) {
      MaceEngine host(c.model, Precision::kFloat64);
      const System s = periodic_cell(c.model.num_species(), 11, c.model.r_max);
      EngineResult ref;
      host.compute(graph_of(s), ref, nullptr);
      ASSERT_GT(max_abs(ref.edge_gradient), 1e-6);
      const std::size_t third = s.center.size() / 3 + 1;
      for (auto [det, batch, rows] :
           {std::tuple{true, std::size_t(0), KeptRows::kAuto},
            std::tuple{false, std::size_t(0), KeptRows::kAuto},
            std::tuple{true, third, KeptRows::kAuto}, std::tuple{true, third, KeptRows::kBatch}})
        for (const char* form : {"block", "gemm", ""}) {
          const bool on = *form != '\0';
          SCOPED_TRACE(be + " " + c.name + (det ? " deterministic" : " atomic") + " batch " +
                       std::to_string(batch) + (rows == KeptRows::kBatch ? " batch rows" : "") +
                       (on ? std::string(" species-factored, ") + form : " as the other layers"));
          if (on) setenv("CLEBSCH_SPECIES_FORM", form, 1);
          CudaEngineOptions o;
          o.deterministic = det, o.edge_batch = batch, o.kept_rows = rows;
          o.species_factored = on;
          // A backend of its own, so that its kernel records are this engine's.
          o.backend = be == "emulated" ? std::shared_ptr<DeviceBackend>(make_emulated_backend())
                                       : std::shared_ptr<DeviceBackend>(make_cuda_backend(0));
          auto dev = make_cuda_engine(c.model, Precision::kFloat64, o);
          o.backend->set_kernel_timing(true);
          EngineResult r;
          dev->compute(graph_of(s), r, nullptr);
          int launches = 0;
          for (const KernelTiming& k : o.backend->take_kernel_timings())
            launches += k.name.rfind("clebsch_species_conv_", 0) == 0;
          o.backend->set_kernel_timing(false);
          EXPECT_EQ(launches > 0, on) << launches << " species-factored launches";
          expect_close(r, ref, s.n(), tolerance(Precision::kFloat64));
          restore_form();
        }
      for (const char* form : {"block", "gemm"}) {
        SCOPED_TRACE(be + " " + c.name + " float32, " + form);
        setenv("CLEBSCH_SPECIES_FORM", form, 1);
        auto dev = engine_for(c.model, Precision::kFloat32, be);
        EngineResult r;
        dev->compute(graph_of(s), r, nullptr);
        expect_within_float32_band(r, ref, s.n());
        restore_form();
      }
    }
}

// mace-torch's other radial bases (radial_type gaussian, chebyshev: the host engine's, checked
// against mace-torch by the mace_arch golden tests) on the device: each fixture model with its
// Bessel basis swapped for the Gaussians mace-torch places (centres evenly from 0 to r_max,
// coeff -1/(2 spacing^2)) and for Chebyshev T_1..T_N of the raw distance, whose growth (T_8(5 A)
// ~ 5e7) the first layers of the MLPs fed by the basis are scaled down against, against the host
// engine on the same model: float64 to 1e-10, float32 within model-spec §5. The emulated backend
// (CI) runs two models in float64; the GPU every model and float32.
TEST(MaceCudaEngine, TheGaussianAndChebyshevBasesMatchTheHostEngine) {
  using Basis = model::MaceRadial::Basis;
  for (const std::string& be : backends()) {
    const bool full = be == "cuda";
    int n_cases = 0;
    for (const Case& c : mace_cases()) {
      if (!full && ++n_cases > 2) break;
      for (Basis basis : {Basis::kGaussian, Basis::kChebyshev}) {
        model::Model m = c.model;
        model::MaceRadial& rad = m.mace->radial;
        const int nb = rad.num_basis;
        rad.basis = basis;
        rad.bessel_weights.clear();
        double scale = 1;
        if (basis == Basis::kGaussian) {
          const double spacing = rad.r_max / (nb - 1);
          for (int n = 0; n < nb; ++n) rad.gaussian_centres.push_back(n * spacing);
          rad.gaussian_coeff = -0.5 / (spacing * spacing);
        } else {
          scale = 1.0 / std::cosh(nb * std::acosh(rad.r_max));  // 1 / T_nb(r_max)
        }
        for (auto& in : m.mace->interactions) {
          in.radial_mlp.layers.front().weight_scale *= scale;
          if (in.density_mlp) in.density_mlp->layers.front().weight_scale *= scale;
        }
        MaceEngine host(m, Precision::kFloat64);
        const System s = periodic_cell(m.num_species(), 11, m.r_max);
        EngineResult ref;
        host.compute(graph_of(s), ref, nullptr);
        ASSERT_GT(max_abs(ref.edge_gradient), 1e-6);
        for (Precision p : {Precision::kFloat64, Precision::kFloat32}) {
          if (!full && p != Precision::kFloat64) continue;
          SCOPED_TRACE(be + " " + c.name +
                       (basis == Basis::kGaussian ? " gaussian " : " chebyshev ") + to_string(p));
          auto dev = engine_for(m, p, be);
          EngineResult r;
          dev->compute(graph_of(s), r, nullptr);
          if (p == Precision::kFloat64)
            expect_close(r, ref, s.n(), tolerance(p));
          else
            expect_within_float32_band(r, ref, s.n());
        }
      }
    }
  }
}

// radial spline N (engine/radial_spline.h) on the device: each fixture model the mode accepts,
// tabulated coarsely (48 intervals, so that the spline model is measurably not the exact one and
// an engine that ignored the tables would fail), against the host engine's spline model:
// float64 to 1e-10 in both modes and in batches of a third of the edges, in the fused spline and
// the stored-weights forms, float32 and mixed within model-spec §5. The emulated backend (CI) runs
// two models in float64, deterministic.
TEST(MaceCudaEngine, TheRadialSplineMatchesTheHostEngine) {
  for (const std::string& be : backends()) {
    const bool full = be == "cuda";
    int n_cases = 0;
    for (const Case& c : mace_cases()) {
      model::Model m = c.model;
      try {
        tabulate_radial_functions(m, 48);
      } catch (const Error&) {
        continue;  // species-dependent radial functions: refused (test_exported_mace_spline)
      }
      if (!full && n_cases == 2) break;
      ++n_cases;
      MaceEngine host(m, Precision::kFloat64), exact(c.model, Precision::kFloat64);
      const System s = periodic_cell(m.num_species(), 11, m.r_max);
      EngineResult ref, ref_exact;
      host.compute(graph_of(s), ref, nullptr);
      exact.compute(graph_of(s), ref_exact, nullptr);
      ASSERT_GT(max_abs(ref.edge_gradient), 1e-6);
      ASSERT_GT(max_diff(ref.edge_gradient, ref_exact.edge_gradient), 1e-7) << c.name;
      // Both forms: the convolution interpolating the table (fused spline, the default) and the
      // table writing the weights it reads (stored); the emulation runs the stored form once.
      for (bool fused_spline : {true, false})
        for (bool det : {true, false})
          for (std::size_t batch : {std::size_t(0), s.center.size() / 3 + 1}) {
            if (!full && (!det || batch > 0 || (!fused_spline && n_cases > 1))) continue;
            SCOPED_TRACE(be + " " + c.name + (fused_spline ? " fused" : " stored") +
                         (det ? " deterministic" : " atomic") + " batch " + std::to_string(batch));
            auto dev = engine_for(m, Precision::kFloat64, be, det, batch, false, fused_spline);
            EngineResult r;
            dev->compute(graph_of(s), r, nullptr);
            expect_close(r, ref, s.n(), tolerance(Precision::kFloat64));
          }
      {
        // The fused spline form with every row one batch's (kept_rows kBatch): the form that
        // the largest systems run.
        SCOPED_TRACE(be + " " + c.name + " fused, batch rows");
        auto dev = engine_for(m, Precision::kFloat64, be, true, s.center.size() / 3 + 1, false,
                              true, KeptRows::kBatch);
        EngineResult r;
        dev->compute(graph_of(s), r, nullptr);
        expect_close(r, ref, s.n(), tolerance(Precision::kFloat64));
      }
      for (bool fused_spline : {true, false})
        for (Precision p : {Precision::kFloat32, Precision::kMixed}) {
          if (!full) continue;
          SCOPED_TRACE(be + " " + c.name + (fused_spline ? " fused " : " stored ") + to_string(p));
          auto dev = engine_for(m, p, be, true, 0, false, fused_spline);
          EngineResult r;
          dev->compute(graph_of(s), r, nullptr);
          expect_within_float32_band(r, ref, s.n());
        }
    }
    EXPECT_GT(n_cases, 0) << "no fixture model accepted radial spline";
  }
}

TEST(MaceCudaEngine, DeterministicModeIsBitwiseReproducibleAndAtomicModeAgrees) {
  for (const std::string& be : backends())
    for (const Case& c : mace_cases()) {
      SCOPED_TRACE(be + " " + c.name);
      const System s = periodic_cell(c.model.num_species(), 3, c.model.r_max);
      auto det = engine_for(c.model, Precision::kFloat64, be, true);
      EngineResult a, b;
      det->compute(graph_of(s), a, nullptr);
      det->compute(graph_of(s), b, nullptr);
      EXPECT_EQ(std::memcmp(a.edge_gradient.data(), b.edge_gradient.data(),
                            a.edge_gradient.size() * sizeof(double)),
                0);
      EXPECT_EQ(a.energy, b.energy);
      auto atomic = engine_for(c.model, Precision::kFloat64, be, false);
      EngineResult r;
      atomic->compute(graph_of(s), r, nullptr);
      expect_close(r, a, s.n(), tolerance(Precision::kFloat64));
    }
}

// The weight stage in batches (CudaEngineOptions::edge_batch): weights recomputed in the
// backward, grad_x accumulated batch after batch. Caps of 1 edge (every centre a batch of its
// own) and of a third of the edges (batches of several centres); both accumulation modes; the
// host engine is the reference, and the deterministic mode stays bitwise reproducible;
// float32 within model-spec §5.
TEST(MaceCudaEngine, EdgeBatchesMatchTheHostEngine) {
  for (const std::string& be : backends())
    for (const Case& c : mace_cases())
      for (bool det : {true, false}) {
        MaceEngine host(c.model, Precision::kFloat64);
        for (const System& s : {periodic_cell(c.model.num_species(), 13, c.model.r_max),
                                cluster(6, c.model.num_species(), 2.6, 5, c.model.r_max)}) {
          EngineResult ref;
          host.compute(graph_of(s), ref, nullptr);
          ASSERT_GT(max_abs(ref.edge_gradient), 1e-6);
          for (std::size_t cap : {std::size_t(1), s.center.size() / 3}) {
            SCOPED_TRACE(be + " " + c.name + (det ? " deterministic" : " atomic") + " cap " +
                         std::to_string(cap) + " of " + std::to_string(s.center.size()));
            auto dev = engine_for(c.model, Precision::kFloat64, be, det, cap);
            EngineResult r, again;
            dev->compute(graph_of(s), r, nullptr);
            expect_close(r, ref, s.n(), tolerance(Precision::kFloat64));
            if (!det) continue;
            dev->compute(graph_of(s), again, nullptr);
            EXPECT_EQ(std::memcmp(r.edge_gradient.data(), again.edge_gradient.data(),
                                  r.edge_gradient.size() * sizeof(double)),
                      0);
          }
          SCOPED_TRACE(be + " " + c.name + (det ? " deterministic" : " atomic") +
                       " float32, batches of 2 edges, " + std::to_string(s.n()) + " atoms");
          auto f32 = engine_for(c.model, Precision::kFloat32, be, det, 2);
          EngineResult r32;
          f32->compute(graph_of(s), r32, nullptr);
          expect_within_float32_band(r32, ref, s.n());
        }
      }
}

// The bytes of the ledger's buffer @p name (0 when absent).
std::size_t buffer_bytes(const EngineMemory& mem, const std::string& name) {
  for (const EngineMemory::Buffer& b : mem.device_buffers)
    if (b.name == name) return b.bytes;
  return 0;
}

// One edge batch's rows at a time (CudaEngineOptions::kept_rows kBatch: the contraction's
// inputs made again in the backward from a second receiver pass, the harmonics made per batch
// and each batch's dE/dY turned into forces at once) instead of every atom's and edge's: the
// host engine's result in float64 (every model, both accumulation modes, one batch and batches
// of a third of the edges), bitwise reproducible in deterministic mode, float32 within
// model-spec §5; and the ledger's rows of a layer's Ml, of Y and of dE/dY are one batch's, not
// every centre's and edge's.
TEST(MaceCudaEngine, RowsMadeAgainPerBatchMatchTheHostEngine) {
  for (const std::string& be : backends())
    for (const Case& c : mace_cases())
      for (bool det : {true, false}) {
        MaceEngine host(c.model, Precision::kFloat64);
        const System s = periodic_cell(c.model.num_species(), 13, c.model.r_max);
        EngineResult ref;
        host.compute(graph_of(s), ref, nullptr);
        ASSERT_GT(max_abs(ref.edge_gradient), 1e-6);
        const std::size_t caps[2] = {0, s.center.size() / 3};
        // [cap][batch rows]: the bytes of the last layer's Ml, of dE/dMl (and dE/dA), of Y and
        // dE/dY.
        std::size_t ml[2][2], gml[2][2], y[2][2];
        for (int k : {0, 1}) {
          for (int batch : {0, 1}) {
            SCOPED_TRACE(be + " " + c.name + (det ? " deterministic" : " atomic") + " cap " +
                         std::to_string(caps[k]) + " of " + std::to_string(s.center.size()) +
                         (batch ? ", batch rows" : ", all rows"));
            CudaEngineOptions o;
            o.deterministic = det, o.edge_batch = caps[k], o.backend = make_backend(be);
            o.kept_rows = batch ? KeptRows::kBatch : KeptRows::kAll;
            auto dev = make_cuda_engine(c.model, Precision::kFloat64, o);
            EngineResult r, again;
            dev->compute(graph_of(s), r, nullptr);
            expect_close(r, ref, s.n(), tolerance(Precision::kFloat64));
            if (det && batch) {
              dev->compute(graph_of(s), again, nullptr);
              EXPECT_EQ(std::memcmp(r.edge_gradient.data(), again.edge_gradient.data(),
                                    r.edge_gradient.size() * sizeof(double)),
                        0);
            }
            const EngineMemory mem = dev->memory_usage();
            const std::string last = "layer[" + std::to_string(dev->num_layers() - 1) + "].";
            ml[k][batch] = buffer_bytes(mem, last + "Ml (linear output)");
            gml[k][batch] = buffer_bytes(mem, "dE/dMl") + buffer_bytes(mem, "dE/dA");
            y[k][batch] = buffer_bytes(mem, "Y (edge harmonics)") +
                          buffer_bytes(mem, "dE/dY (all layers, G)");
          }
        }
        // Kept rows grow with the centres and edges; in batches they are one batch's, and so
        // are the node stages' scratch rows in either mode.
        EXPECT_GT(ml[0][0], 0u);
        EXPECT_GT(y[0][0], 0u);
        EXPECT_EQ(ml[0][1], ml[0][0]);
        EXPECT_EQ(ml[1][0], ml[0][0]);
        EXPECT_EQ(y[1][0], y[0][0]);
        EXPECT_LT(ml[1][1], ml[0][0]) << "Ml in batches holds every centre's rows";
        EXPECT_LT(y[1][1], y[0][0]) << "Y and dE/dY in batches hold every edge's rows";
        EXPECT_LT(gml[1][0], gml[0][0]) << "dE/dMl holds every centre's rows";
        SCOPED_TRACE(be + " " + c.name + (det ? " deterministic" : " atomic") +
                     " float32, batch rows, batches of a third of the edges");
        CudaEngineOptions o;
        o.deterministic = det, o.edge_batch = s.center.size() / 3, o.backend = make_backend(be);
        o.kept_rows = KeptRows::kBatch;
        EngineResult r32;
        make_cuda_engine(c.model, Precision::kFloat32, o)->compute(graph_of(s), r32, nullptr);
        expect_within_float32_band(r32, ref, s.n());
      }
}

// The cell with every image neighbour an explicit ghost node (one per atom and shift), owned
// by its atom through an OwnerMapExchange.
struct ImageGhosts {
  std::vector<int> species, neighbor, owner;
  AtomGraph graph(const System& s) const {
    return AtomGraph{s.n(),           species.size(),  species.data(), s.center.size(),
                     s.center.data(), neighbor.data(), s.vec.data()};
  }
};
ImageGhosts image_ghosts(const System& s) {
  ImageGhosts ig;
  ig.species = s.species;
  std::map<std::pair<int, std::array<int, 3>>, int> ghost_of;
  for (std::size_t e = 0; e < s.center.size(); ++e) {
    int nb = s.neighbor[e];
    if (s.shift[e] != std::array<int, 3>{0, 0, 0}) {
      auto it = ghost_of.find({nb, s.shift[e]});
      if (it == ghost_of.end()) {
        it = ghost_of.emplace(std::make_pair(nb, s.shift[e]), int(s.n() + ig.owner.size())).first;
        ig.owner.push_back(nb);
        ig.species.push_back(s.species[nb]);
      }
      nb = it->second;
    }
    ig.neighbor.push_back(nb);
  }
  return ig;
}

TEST(MaceCudaEngine, GhostAtomsThroughAnExchangeGiveTheNoGhostResult) {
  for (const Case& c : mace_cases()) {
    SCOPED_TRACE(c.name);
    const System s = periodic_cell(c.model.num_species(), 5, c.model.r_max);
    auto dev = engine_for(c.model, Precision::kFloat64, "emulated");
    EngineResult ref;
    dev->compute(graph_of(s), ref, nullptr);
    const ImageGhosts ig = image_ghosts(s);
    ASSERT_FALSE(ig.owner.empty());
    OwnerMapExchange exchange(s.n(), ig.owner);
    const AtomGraph g = ig.graph(s);
    EngineResult r;
    dev->compute(g, r, &exchange);
    expect_close(r, ref, s.n(), Tol{1e-12, 1e-12});
    EXPECT_EQ(exchange.forward_calls, dev->num_layers() - 1);
    EXPECT_EQ(exchange.reverse_calls, dev->num_layers() - 1);
    // Ghost rows of grad_x accumulated over edge batches before the reverse exchange.
    auto batched = engine_for(c.model, Precision::kFloat64, "emulated", true, 3);
    EngineResult rb;
    batched->compute(g, rb, &exchange);
    expect_close(rb, ref, s.n(), Tol{1e-12, 1e-12});
    // And with every row one batch's, made again in the backward.
    auto rows = engine_for(c.model, Precision::kFloat64, "emulated", true, 3, false, true,
                           KeptRows::kBatch);
    EngineResult rr;
    rows->compute(g, rr, &exchange);
    expect_close(rr, ref, s.n(), Tol{1e-12, 1e-12});
    EXPECT_THROW(dev->compute(g, r, nullptr), Error);
  }
}

TEST(MaceCudaEngine, AtomsWithoutEdgesAndRanksWithoutAtoms) {
  ASSERT_FALSE(mace_cases().empty());  // the fixture is missing: reported there
  const Case& c = mace_cases().back();
  auto dev = engine_for(c.model, Precision::kFloat64, "emulated");
  MaceEngine host(c.model);
  // Two isolated atoms: E0 (+ self-connection terms) only, no edges.
  const std::vector<int> species = {0, c.model.num_species() - 1};
  AtomGraph g{2, 2, species.data(), 0, nullptr, nullptr, nullptr};
  EngineResult r, ref;
  dev->compute(g, r, nullptr);
  host.compute(g, ref, nullptr);
  EXPECT_NEAR(r.energy, ref.energy, 1e-12 * std::max(1.0, std::abs(ref.energy)));
  EXPECT_LE(max_diff(r.atom_energy, ref.atom_energy), 1e-12);
  EXPECT_TRUE(r.edge_gradient.empty());
  // A rank that owns nothing still makes every collective exchange call; a fresh engine, so
  // that no buffer is left from an earlier call (on a GPU, an empty buffer is a null pointer).
  OwnerMapExchange exchange(0, {});
  AtomGraph empty{0, 0, nullptr, 0, nullptr, nullptr, nullptr};
  auto fresh = engine_for(c.model, Precision::kFloat64, "emulated");
  fresh->compute(empty, r, &exchange);
  EXPECT_EQ(r.energy, 0.0);
  EXPECT_EQ(exchange.forward_calls, dev->num_layers() - 1);
  EXPECT_EQ(exchange.reverse_calls, dev->num_layers() - 1);
}

TEST(MaceCudaEngine, ComputeDeviceEqualsCompute) {
  ASSERT_FALSE(mace_cases().empty());  // the fixture is missing: reported there
  const Case& c = mace_cases().front();
  const System s = periodic_cell(c.model.num_species(), 9, c.model.r_max);
  auto dev = engine_for(c.model, Precision::kFloat64, "emulated");
  EngineResult ref;
  dev->compute(graph_of(s), ref, nullptr);
  DeviceBackend& b = dev->backend();
  DeviceArray<int> sp(b), ce(b), nb(b);
  DeviceArray<double> vec(b), energy(b, 1), ae(b, s.n()), grad(b, s.vec.size());
  sp.upload(s.species), ce.upload(s.center), nb.upload(s.neighbor), vec.upload(s.vec);
  grad.poison();
  DeviceAtomGraph g{s.n(), s.n(), s.center.size(), sp.data(), ce.data(), nb.data(), vec.data()};
  dev->compute_device(g, DeviceResult{energy.data(), ae.data(), grad.data()}, nullptr, nullptr);
  EXPECT_NEAR(energy.download()[0], ref.energy, 1e-12 * std::abs(ref.energy));
  EXPECT_LE(max_diff(ae.download(), ref.atom_energy), 1e-12);
  // Edges sorted by centre: ordered on the device, into the host's orderings, so bitwise equal.
  EXPECT_EQ(max_diff(grad.download(), ref.edge_gradient), 0.0);
  {
    // Edges not sorted by centre (reversed): the host path orders them; same result.
    System rev = s;
    std::reverse(rev.center.begin(), rev.center.end());
    std::reverse(rev.neighbor.begin(), rev.neighbor.end());
    for (std::size_t e = 0; e < s.center.size(); ++e)
      for (int k = 0; k < 3; ++k) rev.vec[3 * e + k] = s.vec[3 * (s.center.size() - 1 - e) + k];
    EngineResult rref;
    dev->compute(graph_of(rev), rref, nullptr);
    DeviceArray<int> rce(b), rnb(b);
    DeviceArray<double> rvec(b), rgrad(b, rev.vec.size());
    rce.upload(rev.center), rnb.upload(rev.neighbor), rvec.upload(rev.vec);
    rgrad.poison();
    DeviceAtomGraph rg{s.n(),      s.n(),      s.center.size(), sp.data(),
                       rce.data(), rnb.data(), rvec.data()};
    dev->compute_device(rg, DeviceResult{energy.data(), ae.data(), rgrad.data()}, nullptr, nullptr);
    EXPECT_EQ(max_diff(rgrad.download(), rref.edge_gradient), 0.0);
    EXPECT_NEAR(energy.download()[0], ref.energy, 1e-12 * std::abs(ref.energy));
  }
  {
    // Every row one batch's (kept_rows kBatch): the per-batch forces go into the caller's
    // (poisoned) gradient rows, cleared first.
    auto rows = engine_for(c.model, Precision::kFloat64, "emulated", true, s.center.size() / 3,
                           false, true, KeptRows::kBatch);
    DeviceBackend& rb = rows->backend();
    DeviceArray<int> bsp(rb), bce(rb), bnb(rb);
    DeviceArray<double> bvec(rb), benergy(rb, 1), bae(rb, s.n()), bgrad(rb, s.vec.size());
    bsp.upload(s.species), bce.upload(s.center), bnb.upload(s.neighbor), bvec.upload(s.vec);
    bgrad.poison();
    DeviceAtomGraph bg{s.n(),      s.n(),      s.center.size(), bsp.data(),
                       bce.data(), bnb.data(), bvec.data()};
    rows->compute_device(bg, DeviceResult{benergy.data(), bae.data(), bgrad.data()}, nullptr,
                         nullptr);
    EXPECT_LE(max_diff(bgrad.download(), ref.edge_gradient),
              1e-10 * std::max(1.0, max_abs(ref.edge_gradient)));
    EXPECT_NEAR(benergy.download()[0], ref.energy, 1e-12 * std::abs(ref.energy));
  }
  // An out-of-range neighbour: declined on the device, the host engine's message from the host.
  {
    std::vector<int> bad_nb = s.neighbor;
    bad_nb[4] = 99;
    DeviceArray<int> bnb(b);
    bnb.upload(bad_nb);
    DeviceAtomGraph bg{s.n(), s.n(), s.center.size(), sp.data(), ce.data(), bnb.data(), vec.data()};
    try {
      dev->compute_device(bg, DeviceResult{energy.data(), ae.data(), grad.data()}, nullptr,
                          nullptr);
      ADD_FAILURE() << "no exception";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("edge 4 has neighbour 99"), std::string::npos)
          << e.what();
    }
  }
  // A vector beyond the cutoff is caught on the device with the host engine's message.
  Vec bad = s.vec;
  bad[3 * 2] = 100.0;
  vec.upload(bad);
  try {
    dev->compute_device(g, DeviceResult{energy.data(), ae.data(), grad.data()}, nullptr, nullptr);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("edge 2 "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not below the cutoff"), std::string::npos) << e.what();
  }
}

TEST(MaceCudaEngine, InvalidGraphsThrowTheHostEnginesMessages) {
  ASSERT_FALSE(mace_cases().empty());  // the fixture is missing: reported there
  const Case& c = mace_cases().front();
  const System s = periodic_cell(c.model.num_species(), 9, c.model.r_max);
  auto dev = engine_for(c.model, Precision::kFloat64, "emulated");
  MaceEngine host(c.model);
  auto message = [](Engine& e, const AtomGraph& g) {
    try {
      EngineResult r;
      e.compute(g, r, nullptr);
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string("no exception");
  };
  System bad = s;
  bad.species[1] = 7;
  EXPECT_EQ(message(*dev, graph_of(bad)), message(host, graph_of(bad)));
  bad = s;
  bad.neighbor[4] = 99;
  EXPECT_EQ(message(*dev, graph_of(bad)), message(host, graph_of(bad)));
  bad = s;
  bad.vec[0] = bad.vec[1] = bad.vec[2] = 0.01;
  EXPECT_EQ(message(*dev, graph_of(bad)), message(host, graph_of(bad)));
  EXPECT_NE(message(*dev, graph_of(bad)), "no exception");
}

TEST(MaceCudaEngine, WithoutADeviceTheFactoryNamesTheFix) {
  if (device_available()) GTEST_SKIP() << "a CUDA device is present";
  ASSERT_FALSE(mace_cases().empty());  // the fixture is missing: reported there
  try {
    make_cuda_engine(mace_cases().front().model, Precision::kFloat64);
    FAIL() << "no exception";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("device cpu"), std::string::npos) << e.what();
  }
}

// pair_style clebsch head NAME: the CUDA engine evaluates the head select_head() left in the
// model, equal to mace-torch run on that head (models.json head_goldens).
TEST(MaceCudaEngine, EachHeadMatchesMaceTorchOnThatHead) {
  for (const std::string& be : backends())
    for (const test::HeadGoldenCase& c : test::head_golden_cases()) {
      SCOPED_TRACE(be + " " + c.name + " head " + c.head);
      model::Model m = read_model(c.model_path);
      model::select_head(m, c.head);
      auto dev = engine_for(m, Precision::kFloat64, be);
      for (test::GoldenStructure s :
           test::golden_structures(SafetensorsFile::read(c.golden_path))) {
        SCOPED_TRACE(s.name);
        for (double& x : s.vectors) x = -x;  // MACE's centre minus neighbour
        const test::GoldenErrors e = test::compare_to_golden(*dev, s);
        EXPECT_LE(e.energy_rel, 1e-12);
        EXPECT_LE(e.force, 1e-10 * std::max(1.0, test::max_abs(s.forces)));
        EXPECT_LE(e.virial, 1e-10 * std::max(1.0, test::max_abs(s.virial)));
      }
    }
}

// memory_usage(): the device bytes are the live allocations of the engine's own backend, at
// least the graph's per-edge inputs and outputs, growing with the graph; the host bytes are the
// host engine's copy of the model.
TEST(MaceCudaEngine, MemoryUsageIsTheBackendsLiveAllocations) {
  ASSERT_FALSE(mace_cases().empty());  // the fixture is missing: reported there
  const Case& c = mace_cases().front();
  CudaEngineOptions o;
  o.backend = std::shared_ptr<DeviceBackend>(make_emulated_backend());
  auto dev = make_cuda_engine(c.model, Precision::kFloat64, o);
  const EngineMemory before = dev->memory_usage();
  EXPECT_GE(before.host_bytes, c.model.num_values * sizeof(double));
  const System small = cluster(6, c.model.num_species(), 2.6, 7, c.model.r_max);
  const System big = cluster(30, c.model.num_species(), 5.5, 9, c.model.r_max);
  ASSERT_GT(big.center.size(), 3 * small.center.size());
  std::size_t device[2];
  const System* order[2] = {&small, &big};
  for (int k = 0; k < 2; ++k) {
    EngineResult r;
    dev->compute(graph_of(*order[k]), r, nullptr);
    const EngineMemory m = dev->memory_usage();
    EXPECT_EQ(m.device_bytes, o.backend->allocated_bytes());
    // vectors in, dE/dvector out (float64, 3 each), centre and neighbour indices
    EXPECT_GE(m.device_bytes, order[k]->center.size() * (6 * sizeof(double) + 2 * sizeof(int)));
    device[k] = m.device_bytes;
  }
  EXPECT_GT(device[1], device[0]);
  dev.reset();
  EXPECT_EQ(o.backend->allocated_bytes(), 0u);  // everything counted was the engine's
}

// memory_usage().device_buffers, the ledger (allocation_ledger.h): every live byte is in a named
// buffer (none "unnamed"), the buffers add up to device_bytes, and each grows with what it says:
// on fresh engines (so that capacities are exact) a small and a large graph whose edge ratio is
// far from their atom ratio (either way), a "fixed" buffer keeps its size, an "atom" one grows
// with the atoms and an "edge" one with the edges (to the few rows of CSR ends). A buffer named
// after what it holds but sized by something else fails here.
TEST(MaceCudaEngine, TheDeviceLedgerNamesEveryBufferWithWhatItGrowsWith) {
  for (const Case& c : mace_cases()) {
    for (const bool spline : {false, true}) {
      SCOPED_TRACE(c.name + (spline ? " (radial spline)" : ""));
      model::Model m = c.model;
      try {
        if (spline) tabulate_radial_functions(m, 200);
      } catch (const Error&) {
        continue;  // a model the spline refuses (species-dependent distance transforms)
      }
      const System small = cluster(6, m.num_species(), 2.6, 7, m.r_max);
      // The large graph denser than the small one, or (a short cutoff) sparser: the two
      // scalings must be told apart.
      System big;
      double atoms = 0, edges = 0;
      for (const double box : {4.5, 12.0}) {
        big = cluster(40, m.num_species(), box, 9, m.r_max);
        atoms = double(big.n()) / small.n();
        edges = double(big.center.size()) / small.center.size();
        if (std::max(edges / atoms, atoms / edges) > 1.4) break;
      }
      ASSERT_GT(std::max(edges / atoms, atoms / edges), 1.4);
      std::map<std::string, std::pair<EngineMemory::Buffer, std::size_t>> seen;
      for (const System* sys : {&small, static_cast<const System*>(&big)}) {
        CudaEngineOptions o;
        o.backend = std::shared_ptr<DeviceBackend>(make_emulated_backend());
        auto dev = make_cuda_engine(m, Precision::kFloat32, o);
        EngineResult r;
        dev->compute(graph_of(*sys), r, nullptr);
        const EngineMemory mem = dev->memory_usage();
        std::size_t sum = 0;
        for (const EngineMemory::Buffer& b : mem.device_buffers) {
          EXPECT_NE(b.name, "unnamed") << b.bytes << " bytes";
          EXPECT_TRUE(b.per == "atom" || b.per == "edge" || b.per == "fixed") << b.per;
          sum += b.bytes;
          if (sys == &small)
            seen[b.name] = {b, 0};
          else if (seen.count(b.name))
            seen[b.name].second = b.bytes;
        }
        EXPECT_EQ(sum, mem.device_bytes);
        EXPECT_GE(mem.device_peak_bytes, mem.device_bytes);
      }
      for (const auto& [name, v] : seen) {
        const EngineMemory::Buffer& b = v.first;
        // 15%, and 64 bytes for rounded sizes (CSR ends, a scan's chunk sums).
        const double expect = b.per == "fixed" ? 1.0 : b.per == "atom" ? atoms : edges;
        EXPECT_NEAR(double(v.second), expect * b.bytes, 0.15 * expect * b.bytes + 64)
            << name << " (per " << b.per << "): " << b.bytes << " -> " << v.second << " bytes";
      }
    }
  }
}

// ---- The newer foundation-model architectures (models.json arch "mace_arch") ---------------
// mace-torch's RealAgnosticResidualNonLinearInteractionBlock, NonLinearBiasReadoutBlock and the
// per-structure embedding (total charge and spin), from potentials/tests/mace_arch_cases.py; the
// host engine, checked against mace-torch on them by test_exported_mace_arch_golden.cpp, is the
// reference.

struct ArchCase {
  std::string name;
  model::Model model;
  std::vector<std::pair<std::string, double>> inputs;  // the golden file's structure_inputs
};

const std::vector<ArchCase>& arch_cases() {
  static const std::vector<ArchCase> cases = [] {
    std::vector<ArchCase> out;
    for (const test::GoldenCase& c :
         test::golden_cases("mace_arch", "MACE (newer architectures)")) {
      ArchCase a{c.name, read_model(c.model_path), {}};
      const nlohmann::json gj =
          nlohmann::json::parse(SafetensorsFile::read(c.golden_path).metadata("golden_json"));
      if (gj.contains("structure_inputs"))
        for (const auto& [k, v] : gj.at("structure_inputs").items())
          a.inputs.emplace_back(k, v.get<double>());
      out.push_back(std::move(a));
    }
    EXPECT_GE(out.size(), 2u);  // MH-1-style and OMOL-style charged at least
    return out;
  }();
  return cases;
}

std::unique_ptr<CudaEngine> arch_engine(const ArchCase& c, Precision p, const std::string& be,
                                        bool deterministic = true, std::size_t edge_batch = 0,
                                        KeptRows kept_rows = KeptRows::kAuto) {
  CudaEngineOptions o;
  o.kept_rows = kept_rows;
  o.deterministic = deterministic;
  o.edge_batch = edge_batch;
  o.backend = make_backend(be);
  o.structure_inputs = c.inputs;
  return make_cuda_engine(c.model, p, o);
}

MaceEngine arch_host(const ArchCase& c, Precision p) {
  MaceEngineOptions o;
  o.structure_inputs = c.inputs;
  return MaceEngine(c.model, p, o);
}

// Forces (F[centre] += g, F[neighbour] -= g) and the virial -(G + G^T)/2, G = sum v (x) g, as
// the pair style makes them from dE/dvector.
struct Observables {
  Vec forces, virial;
};
Observables observables(const System& s, const EngineResult& r) {
  Observables o{Vec(3 * s.n(), 0.0), Vec(9, 0.0)};
  for (std::size_t k = 0; k < s.center.size(); ++k)
    for (int a = 0; a < 3; ++a) {
      o.forces[3 * s.center[k] + a] += r.edge_gradient[3 * k + a];
      o.forces[3 * s.neighbor[k] + a] -= r.edge_gradient[3 * k + a];
      for (int b = 0; b < 3; ++b) {
        o.virial[3 * a + b] -= 0.5 * s.vec[3 * k + a] * r.edge_gradient[3 * k + b];
        o.virial[3 * b + a] -= 0.5 * s.vec[3 * k + a] * r.edge_gradient[3 * k + b];
      }
    }
  return o;
}

// Largest error of @p r against @p ref over energy (per atom), atom energies, forces and virial.
struct ArchErrors {
  double energy, atom_energy, force, virial;
  double max() const { return std::max({energy, atom_energy, force, virial}); }
};
ArchErrors arch_errors(const System& s, const EngineResult& r, const EngineResult& ref) {
  const Observables o = observables(s, r), oref = observables(s, ref);
  return {std::abs(r.energy - ref.energy) / s.n(), max_diff(r.atom_energy, ref.atom_energy),
          max_diff(o.forces, oref.forces), max_diff(o.virial, oref.virial)};
}

std::vector<System> arch_systems(const model::Model& m) {
  return {periodic_cell(m.num_species(), 11, m.r_max),
          cluster(6, m.num_species(), 2.6, 7, m.r_max)};
}

// Float64 to 1e-10 (relative where values exceed 1) in both accumulation modes, with one edge
// batch and with batches of a third of the edges (the MLP input rows and weights recomputed in
// the backward, the basis gradient accumulated batch after batch).
TEST(MaceCudaEngine, NonLinearBlocksMatchTheHostEngineInFloat64) {
  for (const std::string& be : backends())
    for (const ArchCase& c : arch_cases()) {
      MaceEngine host = arch_host(c, Precision::kFloat64);
      for (const System& s : arch_systems(c.model)) {
        ASSERT_GT(s.center.size(), 10u);
        EngineResult ref;
        host.compute(graph_of(s), ref, nullptr);
        ASSERT_GT(max_abs(ref.edge_gradient), 1e-6);  // a meaningful comparison
        const Observables oref = observables(s, ref);
        for (bool det : {true, false})
          for (std::size_t batch : {std::size_t(0), s.center.size() / 3 + 1, std::size_t(1)}) {
            // Batches of one edge: every row one batch's, made again in the backward.
            const KeptRows kept = batch == 1 ? KeptRows::kBatch : KeptRows::kAuto;
            SCOPED_TRACE(be + " " + c.name + (det ? " deterministic" : " atomic") + " batch " +
                         std::to_string(batch));
            auto dev = arch_engine(c, Precision::kFloat64, be, det, batch, kept);
            EngineResult r;
            dev->compute(graph_of(s), r, nullptr);
            const ArchErrors e = arch_errors(s, r, ref);
            // Relative where the values exceed 1 (random weights make large energies).
            const double se = std::max(1.0, std::abs(ref.energy) / s.n()),
                         sa = std::max(1.0, max_abs(ref.atom_energy)),
                         sf = std::max(1.0, max_abs(oref.forces)),
                         sw = std::max(1.0, max_abs(oref.virial));
            std::cout << "  [" << be << " fp64" << (det ? "" : " atomic") << " batch " << batch
                      << "] " << c.name << " (" << s.n() << " atoms, " << s.center.size()
                      << " edges, |E|/N " << std::abs(ref.energy) / s.n() << ", max|F| "
                      << max_abs(oref.forces) << "): relative |dE|/N " << e.energy / se
                      << ", max|de_i| " << e.atom_energy / sa << ", max|dF| " << e.force / sf
                      << ", max|dW| " << e.virial / sw << "\n";
            EXPECT_LE(e.energy, 1e-10 * se);
            EXPECT_LE(e.atom_energy, 1e-10 * sa);
            EXPECT_LE(e.force, 1e-10 * sf);
            EXPECT_LE(e.virial, 1e-10 * sw);
            EXPECT_LE(max_diff(r.edge_gradient, ref.edge_gradient),
                      1e-10 * std::max(1.0, max_abs(ref.edge_gradient)));
          }
      }
    }
}

// Float32 and mixed against the host engine in float64, per quantity: within model-spec §5's
// band or twice the host engine's own error at that precision. Where the host's error is outside
// the band on any quantity, the model is ill-conditioned at that precision, and the device's
// errors need only be within 10x the host's (an order of magnitude: another summation order of an
// ill-conditioned sum). The Chebyshev fixture is such a model: mace-torch's ChebychevBasis takes
// T_n of the raw distance, T_8(6 A) ~ 1e7, and the host's fp32 forces are 2.9e-4 eV/A off; on the
// H200 the device's errors were 0.03x-6.5x the host's across the four quantities (per-atom
// energy 7.9e-5 against the host's 1.2e-5, forces 5.0e-4 against 2.9e-4, virial 9.3e-4 against
// 2.4e-3).
TEST(MaceCudaEngine, NonLinearBlocksStayWithinTheFloat32Band) {
  for (const std::string& be : backends())
    for (const ArchCase& c : arch_cases()) {
      MaceEngine host64 = arch_host(c, Precision::kFloat64);
      for (Precision p : {Precision::kFloat32, Precision::kMixed}) {
        MaceEngine host32 = arch_host(c, p);
        auto dev = arch_engine(c, p, be);
        for (const System& s : arch_systems(c.model)) {
          SCOPED_TRACE(be + " " + c.name + " " + to_string(p));
          EngineResult ref, h32, r;
          host64.compute(graph_of(s), ref, nullptr);
          host32.compute(graph_of(s), h32, nullptr);
          dev->compute(graph_of(s), r, nullptr);
          const Observables oref = observables(s, ref);
          const ArchErrors e = arch_errors(s, r, ref), eh = arch_errors(s, h32, ref);
          std::cout << "  [" << be << " " << to_string(p) << "] " << c.name << ": device |dE|/N "
                    << e.energy << ", max|de_i| " << e.atom_energy << ", max|dF| " << e.force
                    << ", max|dW| " << e.virial << "; host " << eh.energy << ", " << eh.atom_energy
                    << ", " << eh.force << ", " << eh.virial << "\n";
          const double es = std::max(1.0, max_abs(ref.atom_energy));
          const double band_e = 1e-5 * es, band_f = 1e-4 * std::max(1.0, max_abs(oref.forces)),
                       band_w = 1e-4 * std::max(1.0, max_abs(oref.virial));
          const bool ill = eh.energy > band_e || eh.atom_energy > band_e || eh.force > band_f ||
                           eh.virial > band_w;
          const double k = ill ? 10 : 2;
          EXPECT_LE(e.energy, std::max(band_e, k * eh.energy));
          EXPECT_LE(e.atom_energy, std::max(band_e, k * eh.atom_energy));
          EXPECT_LE(e.force, std::max(band_f, k * eh.force));
          EXPECT_LE(e.virial, std::max(band_w, k * eh.virial));
        }
      }
    }
}

// The device engine against mace-torch itself on the golden structures (what the host's
// MaceArchGolden test holds the host engine to).
TEST(MaceCudaEngine, NonLinearBlocksMatchMaceTorch) {
  for (const std::string& be : backends())
    for (const test::GoldenCase& gc :
         test::golden_cases("mace_arch", "MACE (newer architectures)")) {
      const auto it = std::find_if(arch_cases().begin(), arch_cases().end(),
                                   [&](const ArchCase& a) { return a.name == gc.name; });
      ASSERT_NE(it, arch_cases().end());
      auto dev = arch_engine(*it, Precision::kFloat64, be);
      for (test::GoldenStructure s :
           test::golden_structures(SafetensorsFile::read(gc.golden_path))) {
        SCOPED_TRACE(be + " " + gc.name + " " + s.name);
        for (double& x : s.vectors) x = -x;  // MACE's centre minus neighbour
        const test::GoldenErrors e = test::compare_to_golden(*dev, s);
        EXPECT_LE(e.energy_rel, 1e-12);
        EXPECT_LE(e.node_energy, 1e-12 * std::max(1.0, test::max_abs(s.node_energy)));
        EXPECT_LE(e.force, 1e-10 * std::max(1.0, test::max_abs(s.forces)));
        EXPECT_LE(e.virial, 1e-10 * std::max(1.0, test::max_abs(s.virial)));
      }
    }
}

// Ghost rows through a GhostExchange (the non-linear block's linear_res reads the local hu rows,
// whose gradient joins the exchanged one) give the no-ghost result, in one batch and several.
TEST(MaceCudaEngine, NonLinearBlocksWithGhostAtomsGiveTheNoGhostResult) {
  for (const ArchCase& c : arch_cases()) {
    SCOPED_TRACE(c.name);
    const System s = periodic_cell(c.model.num_species(), 5, c.model.r_max);
    const ImageGhosts ig = image_ghosts(s);
    ASSERT_FALSE(ig.owner.empty());
    for (std::size_t batch : {std::size_t(0), std::size_t(3), std::size_t(4)}) {
      // Batches of 4 edges with every row one batch's (made again in the backward).
      auto dev = arch_engine(c, Precision::kFloat64, "emulated", true, batch,
                             batch == 4 ? KeptRows::kBatch : KeptRows::kAuto);
      EngineResult ref, r;
      dev->compute(graph_of(s), ref, nullptr);
      OwnerMapExchange exchange(s.n(), ig.owner);
      dev->compute(ig.graph(s), r, &exchange);
      expect_close(r, ref, s.n(), Tol{1e-12, 1e-12});
      EXPECT_EQ(exchange.forward_calls, dev->num_layers() - 1);
    }
  }
}

// A model with an embedding: built without its inputs, the device engine refuses with the host
// engine's message; another charge gives the host engine's energy at that charge (the embedding
// is not a constant the device engine got from elsewhere).
TEST(MaceCudaEngine, NonLinearModelsWithAnEmbeddingUseTheirStructureInputs) {
  int with_embedding = 0;
  for (const ArchCase& c : arch_cases()) {
    if (!c.model.mace->embedding) continue;
    ++with_embedding;
    SCOPED_TRACE(c.name);
    std::string host_msg, dev_msg;
    try {
      MaceEngine host(c.model, Precision::kFloat64);
    } catch (const Error& e) {
      host_msg = e.what();
    }
    ArchCase bare{c.name, c.model, {}};
    try {
      arch_engine(bare, Precision::kFloat64, "emulated");
    } catch (const Error& e) {
      dev_msg = e.what();
    }
    EXPECT_FALSE(host_msg.empty());
    EXPECT_EQ(dev_msg, host_msg);
    ArchCase other = c;
    for (auto& [name, value] : other.inputs)
      if (name == "total_charge") value += 1;
    const System s = periodic_cell(c.model.num_species(), 11, c.model.r_max);
    EngineResult ref, r, base;
    arch_host(other, Precision::kFloat64).compute(graph_of(s), ref, nullptr);
    arch_engine(other, Precision::kFloat64, "emulated")->compute(graph_of(s), r, nullptr);
    arch_host(c, Precision::kFloat64).compute(graph_of(s), base, nullptr);
    EXPECT_GT(std::abs(ref.energy - base.energy), 1e-8);  // the charge matters
    expect_close(r, ref, s.n(), tolerance(Precision::kFloat64));
  }
  EXPECT_GE(with_embedding, 1);
}

}  // namespace
}  // namespace clebsch::cuda
