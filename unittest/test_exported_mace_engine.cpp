// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Properties of the MACE host engine (mace_engine.h) on every MACE model that the CTest fixture
// `exported_models` builds with the real mace-torch (random weights: residual, non-residual and
// density blocks, correlation 1..3, ZBL, Agnesi and soft transforms, apply_cutoff off, multi-head,
// non-natural parity, species-agnostic product). References are finite differences of the
// engine's energy, symmetry, or facts read from the live Python modules (models.json `expect`),
// never the engine's own earlier output:
//   - edge_gradient is dE/dvector (central differences w.r.t. edge vectors), forces and the
//     virial are the derivatives w.r.t. positions and a symmetric strain;
//   - an isolated atom: the r -> r_max limit of a pair (the cutoff makes every radial feature,
//     TP weight and density vanish), and E0 exactly where the model has no self-connection;
//   - a single pair, two and three species, a centre with 300 neighbours, periodic images of the
//     atom itself as neighbours;
//   - ghost atoms through a GhostExchange (one rank with image ghosts, and two ranks on two
//     threads exchanging collectively) give the no-ghost energies and gradients to 1e-12, with
//     num_layers()-1 exchanges each way, also on a rank without atoms;
//   - float32 and mixed against float64 within model-spec §5;
//   - permutation of atoms and edges, rotation and inversion (energy invariant, gradients
//     rotate), the fused last layer against the recomputing path, thread counts;
//   - invalid graphs throw clebsch::Error naming the value.
// The directory of models.json is $CLEBSCH_MODELS_DIR, else the fixture's directory
// (CLEBSCH_EXPORTED_MODELS_DIR, set by the exported-models block of unittest/CMakeLists.txt); a
// missing models.json is a failure, not a skip.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "clebsch/engine/engine.h"
#include "clebsch/engine/mace_engine.h"
#include "clebsch/model/model.h"
#include "clebsch/model/model_reader.h"
#include "clebsch/support/error.h"
#include "exported_models_dir.h"
#include "owner_map_exchange.h"

namespace clebsch {
namespace {

using Vec = std::vector<double>;
using test::exported_models_dir;
using test::OwnerMapExchange;

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

struct Case {
  std::string name;
  model::Model model;
  nlohmann::json entry;
  bool has(const std::string& feature) const {
    for (const auto& f : entry.at("features"))
      if (f == feature) return true;
    return false;
  }
};

const std::vector<Case>& mace_cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> out;
    const std::string dir = exported_models_dir();
    std::ifstream in(dir + "/models.json");
    if (!in) {
      ADD_FAILURE() << dir << "/models.json is missing: run unittest/reference/"
                    << "make_exported_models.py (ctest does it through the exported_models "
                       "fixture)";
      return out;
    }
    const nlohmann::json index = nlohmann::json::parse(in);
    for (const auto& m : index.at("models"))
      if (m.at("arch") == "mace")
        out.push_back({m.at("name").get<std::string>(),
                       read_model(dir + "/" + m.at("file").get<std::string>()), m});
    EXPECT_FALSE(out.empty()) << "models.json lists no MACE model";
    return out;
  }();
  return cases;
}

// ---------------------------------------------------------------------------------------------
// Structures and graphs
// ---------------------------------------------------------------------------------------------

struct Rng {
  std::uint64_t s;
  explicit Rng(std::uint64_t seed) : s(seed) {}
  double operator()() {  // uniform in [-1, 1)
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * (2.0 / 9007199254740992.0) - 1.0;
  }
};

// Atoms, optional periodic cell (rows = lattice vectors), and a fixed edge list with integer
// image shifts, so that energies can be re-evaluated at displaced positions.
struct System {
  Vec pos;                   // [n][3]
  std::vector<int> species;  // [n]
  Vec cell = Vec(9, 0.0);
  std::vector<int> center, neighbor;
  std::vector<std::array<int, 3>> shift;
  std::size_t n() const { return species.size(); }
  std::size_t num_edges() const { return center.size(); }

  Vec vectors(const Vec& p, const Vec& c) const {
    Vec v(3 * num_edges());
    for (std::size_t e = 0; e < num_edges(); ++e)
      for (int a = 0; a < 3; ++a) {
        double image = 0;
        for (int k = 0; k < 3; ++k) image += shift[e][k] * c[3 * k + a];
        v[3 * e + a] = p[3 * neighbor[e] + a] + image - p[3 * center[e] + a];
      }
    return v;
  }
  Vec vectors() const { return vectors(pos, cell); }
};

// Every (i, j, image) with 0 < r < cutoff (images along periodic directions, as far as needed).
void build_edges(System& s, double cutoff, std::array<bool, 3> pbc) {
  int reps[3] = {0, 0, 0};
  for (int d = 0; d < 3; ++d)
    if (pbc[d]) {
      const double len =
          std::sqrt(s.cell[3 * d] * s.cell[3 * d] + s.cell[3 * d + 1] * s.cell[3 * d + 1] +
                    s.cell[3 * d + 2] * s.cell[3 * d + 2]);
      reps[d] = static_cast<int>(std::ceil(cutoff / len)) + 2;
    }
  s.center.clear();
  s.neighbor.clear();
  s.shift.clear();
  for (std::size_t i = 0; i < s.n(); ++i)
    for (std::size_t j = 0; j < s.n(); ++j)
      for (int a = -reps[0]; a <= reps[0]; ++a)
        for (int b = -reps[1]; b <= reps[1]; ++b)
          for (int c = -reps[2]; c <= reps[2]; ++c) {
            if (i == j && a == 0 && b == 0 && c == 0) continue;
            double r2 = 0;
            for (int x = 0; x < 3; ++x) {
              const double d = s.pos[3 * j + x] + a * s.cell[x] + b * s.cell[3 + x] +
                               c * s.cell[6 + x] - s.pos[3 * i + x];
              r2 += d * d;
            }
            if (r2 < cutoff * cutoff) {
              s.center.push_back(static_cast<int>(i));
              s.neighbor.push_back(static_cast<int>(j));
              s.shift.push_back({a, b, c});
            }
          }
}

// A random cluster: n atoms in a box, at least dmin apart, species cycled.
System cluster(int n, int num_species, double box, double dmin, std::uint64_t seed, double cutoff) {
  Rng rng(seed);
  System s;
  while (static_cast<int>(s.n()) < n) {
    const double p[3] = {box * rng(), box * rng(), box * rng()};
    bool ok = true;
    for (std::size_t j = 0; j < s.n() && ok; ++j) {
      double r2 = 0;
      for (int a = 0; a < 3; ++a) r2 += (p[a] - s.pos[3 * j + a]) * (p[a] - s.pos[3 * j + a]);
      ok = r2 > dmin * dmin;
    }
    if (!ok) continue;
    s.pos.insert(s.pos.end(), p, p + 3);
    s.species.push_back(static_cast<int>(s.n()) % num_species);
  }
  build_edges(s, cutoff, {false, false, false});
  return s;
}

// A small periodic cell (one length below the cutoff, so atoms see their own images).
System periodic_cell(int num_species, std::uint64_t seed, double cutoff) {
  Rng rng(seed);
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
  build_edges(s, cutoff, {true, true, true});
  return s;
}

AtomGraph graph_of(const System& s, const Vec& vec) {
  return AtomGraph{s.n(),         s.n(),           s.species.data(),
                   s.num_edges(), s.center.data(), s.neighbor.data(),
                   vec.data()};
}

EngineResult run(Engine& engine, const System& s, const Vec& vec) {
  EngineResult r;
  engine.compute(graph_of(s, vec), r, nullptr);
  return r;
}

Vec forces_of(const System& s, const EngineResult& r) {
  Vec f(3 * s.n(), 0.0);
  for (std::size_t e = 0; e < s.num_edges(); ++e)
    for (int a = 0; a < 3; ++a) {
      f[3 * s.center[e] + a] += r.edge_gradient[3 * e + a];
      f[3 * s.neighbor[e] + a] -= r.edge_gradient[3 * e + a];
    }
  return f;
}

// W = -(G + G^T)/2 with G = sum_e vector_e (x) dE/dvector_e.
std::array<double, 9> virial_of(const Vec& vec, const EngineResult& r) {
  std::array<double, 9> G{};
  for (std::size_t e = 0; e < vec.size() / 3; ++e)
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) G[3 * a + b] += vec[3 * e + a] * r.edge_gradient[3 * e + b];
  std::array<double, 9> W{};
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) W[3 * a + b] = -0.5 * (G[3 * a + b] + G[3 * b + a]);
  return W;
}

double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

double max_diff(const Vec& a, const Vec& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

double r_cut(const Case& c) { return c.model.r_max; }

// Central-difference tolerances: h^2 truncation and eps/h rounding are both ~1e-10 relative.
constexpr double kFdStep = 1e-5;
constexpr double kFdTolerance = 1e-7;  // relative to max(1, largest gradient)

// ---------------------------------------------------------------------------------------------
// Gradients
// ---------------------------------------------------------------------------------------------

TEST(MaceEngine, EdgeGradientIsFiniteDifferenceOfEnergy) {
  for (const Case& c : mace_cases()) {
    SCOPED_TRACE(c.name);
    MaceEngine engine(c.model);
    const System s = cluster(6, c.model.num_species(), 2.6, 1.6, 7, r_cut(c));
    ASSERT_GT(s.num_edges(), 10u);
    const Vec vec = s.vectors();
    const EngineResult r = run(engine, s, vec);
    const double scale = std::max(1.0, max_abs(r.edge_gradient));
    double worst = 0;
    for (std::size_t k = 0; k < vec.size(); ++k) {
      Vec vp = vec, vm = vec;
      vp[k] += kFdStep;
      vm[k] -= kFdStep;
      const double fd = (run(engine, s, vp).energy - run(engine, s, vm).energy) / (2 * kFdStep);
      worst = std::max(worst, std::abs(fd - r.edge_gradient[k]));
    }
    EXPECT_LE(worst, kFdTolerance * scale) << "max |dE/dv| = " << scale;
  }
}

TEST(MaceEngine, ForcesAndVirialAreDerivativesOfPositionsAndStrain) {
  for (const Case& c : mace_cases()) {
    SCOPED_TRACE(c.name);
    MaceEngine engine(c.model);
    const System s = periodic_cell(c.model.num_species(), 11, r_cut(c));
    const EngineResult r = run(engine, s, s.vectors());
    const Vec f = forces_of(s, r);
    const double fscale = std::max(1.0, max_abs(f));
    for (std::size_t k = 0; k < s.pos.size(); ++k) {
      Vec pp = s.pos, pm = s.pos;
      pp[k] += kFdStep;
      pm[k] -= kFdStep;
      const double fd = -(run(engine, s, s.vectors(pp, s.cell)).energy -
                          run(engine, s, s.vectors(pm, s.cell)).energy) /
                        (2 * kFdStep);
      EXPECT_NEAR(f[k], fd, kFdTolerance * fscale) << "force component " << k;
    }
    // W_ab = -dE/d(eps_ab) for the symmetric strain x -> (1 + eps) x of positions and cell.
    const std::array<double, 9> W = virial_of(s.vectors(), r);
    double wscale = 1;
    for (double w : W) wscale = std::max(wscale, std::abs(w));
    for (int a = 0; a < 3; ++a)
      for (int b = a; b < 3; ++b) {
        auto strained = [&](double eps) {
          double F[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
          F[3 * a + b] += eps / (a == b ? 1 : 2);
          F[3 * b + a] += a == b ? 0 : eps / 2;
          Vec p(s.pos.size()), cl(9);
          for (std::size_t i = 0; i < s.n(); ++i)
            for (int x = 0; x < 3; ++x)
              for (int y = 0; y < 3; ++y) p[3 * i + x] += F[3 * x + y] * s.pos[3 * i + y];
          for (int k = 0; k < 3; ++k)
            for (int x = 0; x < 3; ++x)
              for (int y = 0; y < 3; ++y) cl[3 * k + x] += F[3 * x + y] * s.cell[3 * k + y];
          return run(engine, s, s.vectors(p, cl)).energy;
        };
        const double fd = -(strained(kFdStep) - strained(-kFdStep)) / (2 * kFdStep);
        EXPECT_NEAR(W[3 * a + b], fd, kFdTolerance * wscale) << "virial " << a << b;
      }
  }
}

// ---------------------------------------------------------------------------------------------
// Edge cases
// ---------------------------------------------------------------------------------------------

TEST(MaceEngine, IsolatedAtomIsTheLimitOfAPairAtTheCutoff) {
  for (const Case& c : mace_cases()) {
    SCOPED_TRACE(c.name);
    MaceEngine engine(c.model);
    const int S = c.model.num_species();
    Vec e_iso(S);
    for (int s = 0; s < S; ++s) {
      System one;
      one.pos = {0.3, -0.2, 0.1};
      one.species = {s};
      const EngineResult r = run(engine, one, Vec());
      ASSERT_EQ(r.atom_energy.size(), 1u);
      EXPECT_TRUE(r.edge_gradient.empty());
      EXPECT_EQ(r.energy, r.atom_energy[0]);
      e_iso[s] = r.energy;
      // Without a self-connection nothing reaches the readouts: e = E0 (models.json, read from
      // the live module), scale 1 and shift 0 for the plain MACE class.
      if (c.has("plain_MACE_class") && c.has("nonresidual")) {
        const double e0 = c.entry.at("expect").at("atomic_energies").at(s).get<double>();
        EXPECT_NEAR(r.energy, e0, 1e-14 * std::abs(e0));
      }
    }
    // A pair just inside the cutoff: every radial feature carries the envelope (1 - r/r_max)^3
    // or the cutoff factor, the ZBL cutoff (covalent radii) is far shorter, so the pair energy
    // tends to the sum of the isolated ones.
    for (int a = 0; a < S; ++a)
      for (int b = 0; b < S; ++b) {
        System pair;
        const double d = r_cut(c) * (1 - 1e-5);
        pair.pos = {0, 0, 0, d * 0.6, d * 0.8, 0};
        pair.species = {a, b};
        pair.center = {0, 1};
        pair.neighbor = {1, 0};
        pair.shift = {{{0, 0, 0}}, {{0, 0, 0}}};
        const EngineResult r = run(engine, pair, pair.vectors());
        EXPECT_NEAR(r.energy, e_iso[a] + e_iso[b], 1e-9 * std::max(1.0, std::abs(r.energy)))
            << "species " << a << ", " << b;
      }
  }
}

TEST(MaceEngine, SinglePairObeysNewtonsThirdLawAndSwapSymmetry) {
  for (const Case& c : mace_cases()) {
    SCOPED_TRACE(c.name);
    MaceEngine engine(c.model);
    for (int a = 0; a < c.model.num_species(); ++a) {
      System pair;
      pair.pos = {0.1, 0.2, -0.3, 1.3, 1.9, 0.4};
      pair.species = {a, (a + 1) % c.model.num_species()};
      pair.center = {0, 1};
      pair.neighbor = {1, 0};
      pair.shift = {{{0, 0, 0}}, {{0, 0, 0}}};
      const EngineResult r = run(engine, pair, pair.vectors());
      const Vec f = forces_of(pair, r);
      for (int k = 0; k < 3; ++k) EXPECT_NEAR(f[k], -f[3 + k], 1e-12 * std::max(1.0, max_abs(f)));
      // Central force: parallel to the bond.
      const Vec v = pair.vectors();
      const double cross[3] = {f[1] * v[2] - f[2] * v[1], f[2] * v[0] - f[0] * v[2],
                               f[0] * v[1] - f[1] * v[0]};
      const double len = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
      for (double x : cross) EXPECT_NEAR(x, 0.0, 1e-12 * len * std::max(1.0, max_abs(f)));
      // The same pair with the atoms listed the other way round.
      System swapped = pair;
      swapped.pos = {1.3, 1.9, 0.4, 0.1, 0.2, -0.3};
      swapped.species = {pair.species[1], pair.species[0]};
      const EngineResult rs = run(engine, swapped, swapped.vectors());
      EXPECT_NEAR(rs.energy, r.energy, 1e-13 * std::abs(r.energy));
      EXPECT_NEAR(rs.atom_energy[0], r.atom_energy[1], 1e-13 * std::abs(r.energy));
    }
  }
}

TEST(MaceEngine, CentreWithThreeHundredNeighbours) {
  for (const Case& c : mace_cases()) {
    SCOPED_TRACE(c.name);
    // Atom 0 at the origin, 300 neighbours inside the cutoff sphere (1.2 A from it at least,
    // 0.6 A apart); edges between atom 0 and each neighbour (both ways) and between a few
    // neighbour pairs. The energies are large here (hundreds of eV: rounding noise eps*|E|/h),
    // and the ZBL term is steep, so the differences use the 4-point stencil (truncation O(h^4))
    // with a larger step.
    Rng rng(99);
    System s;
    s.pos = {0, 0, 0};
    s.species = {0};
    const double rc = r_cut(c);
    while (s.n() < 301) {
      const double p[3] = {rc * rng(), rc * rng(), rc * rng()};
      const double r = std::sqrt(p[0] * p[0] + p[1] * p[1] + p[2] * p[2]);
      if (r > 0.97 * rc || r < 1.2) continue;
      bool ok = true;
      for (std::size_t j = 1; j < s.n() && ok; ++j) {
        double r2 = 0;
        for (int a = 0; a < 3; ++a) r2 += (p[a] - s.pos[3 * j + a]) * (p[a] - s.pos[3 * j + a]);
        ok = r2 > 0.36;
      }
      if (!ok) continue;
      s.pos.insert(s.pos.end(), p, p + 3);
      s.species.push_back(static_cast<int>(s.n()) % c.model.num_species());
    }
    for (int j = 1; j <= 300; ++j) {
      s.center.push_back(0);
      s.neighbor.push_back(j);
      s.center.push_back(j);
      s.neighbor.push_back(0);
    }
    for (int j = 1; j <= 300; j += 37)
      for (int k = 1; k <= 300; ++k) {
        double r2 = 0;
        for (int a = 0; a < 3; ++a)
          r2 += (s.pos[3 * j + a] - s.pos[3 * k + a]) * (s.pos[3 * j + a] - s.pos[3 * k + a]);
        if (k != j && r2 < 0.8 * rc * rc) {
          s.center.push_back(j);
          s.neighbor.push_back(k);
          break;
        }
      }
    s.shift.assign(s.center.size(), {0, 0, 0});
    MaceEngine engine(c.model);
    const Vec vec = s.vectors();
    const EngineResult r = run(engine, s, vec);
    const double scale = std::max(1.0, max_abs(r.edge_gradient));
    for (std::size_t e = 0; e < s.num_edges(); e += 97)
      for (int a = 0; a < 3; ++a) {
        const std::size_t k = 3 * e + a;
        auto energy_at = [&](double dx) {
          Vec v = vec;
          v[k] += dx;
          return run(engine, s, v).energy;
        };
        const double h = 1e-4;
        const double fd =
            (8 * (energy_at(h) - energy_at(-h)) - (energy_at(2 * h) - energy_at(-2 * h))) /
            (12 * h);
        EXPECT_NEAR(r.edge_gradient[k], fd, kFdTolerance * scale) << "edge " << e;
      }
    // The recomputing path agrees (its tasks split this centre's edges differently).
    MaceEngineOptions options;
    options.fuse_last_layer = false;
    MaceEngine unfused(c.model, Precision::kFloat64, options);
    const EngineResult u = run(unfused, s, vec);
    EXPECT_NEAR(u.energy, r.energy, 1e-12 * std::abs(r.energy));
    EXPECT_LE(max_diff(u.edge_gradient, r.edge_gradient), 1e-12 * scale);
  }
}

TEST(MaceEngine, PeriodicImagesOfTheAtomItselfAreNeighbours) {
  for (const Case& c : mace_cases()) {
    SCOPED_TRACE(c.name);
    MaceEngine engine(c.model);
    // One atom in a cell shorter than the cutoff: every edge joins the atom to its own image.
    System s;
    s.cell = {2.4, 0, 0, 0.3, 2.6, 0, 0.2, -0.1, 2.5};
    s.pos = {0.1, 0.2, 0.3};
    s.species = {c.model.num_species() - 1};
    build_edges(s, r_cut(c), {true, true, true});
    ASSERT_GT(s.num_edges(), 20u);
    for (std::size_t e = 0; e < s.num_edges(); ++e) ASSERT_EQ(s.center[e], s.neighbor[e]);
    const EngineResult r = run(engine, s, s.vectors());
    // Translating the only atom moves nothing: zero force. The virial is the strain derivative.
    const Vec f = forces_of(s, r);
    EXPECT_LE(max_abs(f), 1e-12 * std::max(1.0, max_abs(r.edge_gradient)));
    const std::array<double, 9> W = virial_of(s.vectors(), r);
    double wscale = 1;
    for (double w : W) wscale = std::max(wscale, std::abs(w));
    for (int a = 0; a < 3; ++a) {
      auto strained = [&](double eps) {
        Vec cl = s.cell;
        for (int k = 0; k < 3; ++k) cl[3 * k + a] *= 1 + eps;
        Vec p = s.pos;
        p[a] *= 1 + eps;
        return run(engine, s, s.vectors(p, cl)).energy;
      };
      const double fd = -(strained(kFdStep) - strained(-kFdStep)) / (2 * kFdStep);
      EXPECT_NEAR(W[4 * a], fd, kFdTolerance * wscale) << "virial " << a << a;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Ghost atoms
// ---------------------------------------------------------------------------------------------

// The periodic system with every image neighbour turned into an explicit ghost node.
struct GhostGraph {
  std::vector<int> species, center, neighbor, owner;
  Vec vec;
};

GhostGraph with_ghosts(const System& s) {
  GhostGraph g;
  g.species = s.species;
  std::map<std::pair<int, std::array<int, 3>>, int> ghost_of;
  for (std::size_t e = 0; e < s.num_edges(); ++e) {
    int nb = s.neighbor[e];
    if (s.shift[e] != std::array<int, 3>{0, 0, 0}) {
      const auto key = std::make_pair(nb, s.shift[e]);
      auto it = ghost_of.find(key);
      if (it == ghost_of.end()) {
        it = ghost_of.emplace(key, static_cast<int>(s.n() + g.owner.size())).first;
        g.owner.push_back(nb);
        g.species.push_back(s.species[nb]);
      }
      nb = it->second;
    }
    g.center.push_back(s.center[e]);
    g.neighbor.push_back(nb);
  }
  g.vec = s.vectors();
  return g;
}

TEST(MaceEngine, GhostAtomsOnOneRankGiveTheNoGhostResult) {
  for (const Case& c : mace_cases()) {
    SCOPED_TRACE(c.name);
    const System s = periodic_cell(c.model.num_species(), 5, r_cut(c));
    for (Precision p : {Precision::kFloat64, Precision::kMixed}) {
      MaceEngine engine(c.model, p);
      const EngineResult ref = run(engine, s, s.vectors());
      const GhostGraph g = with_ghosts(s);
      ASSERT_FALSE(g.owner.empty());
      OwnerMapExchange exchange(s.n(), g.owner);
      AtomGraph ag{s.n(),           g.species.size(),  g.species.data(), g.center.size(),
                   g.center.data(), g.neighbor.data(), g.vec.data()};
      EngineResult r;
      engine.compute(ag, r, &exchange);
      const double tol = p == Precision::kFloat64 ? 1e-12 : 1e-5;
      EXPECT_NEAR(r.energy, ref.energy, tol * std::abs(ref.energy));
      EXPECT_LE(max_diff(r.atom_energy, ref.atom_energy), tol * max_abs(ref.atom_energy));
      EXPECT_LE(max_diff(r.edge_gradient, ref.edge_gradient),
                tol * std::max(1.0, max_abs(ref.edge_gradient)));
      EXPECT_EQ(exchange.forward_calls, engine.num_layers() - 1);
      EXPECT_EQ(exchange.reverse_calls, engine.num_layers() - 1);
      // Without an exchange the ghosts cannot be filled.
      EXPECT_THROW(engine.compute(ag, r, nullptr), Error);
    }
  }
}

// Collective exchange between ranks running on threads of this process. Each rank publishes
// its buffer, all meet at a barrier, each fills its own ghost rows (forward) or collects the
// contributions of every ghost copy of its own atoms (reverse), and all meet again.
class World {
 public:
  struct Ghost {
    int rank, row;  // owner
  };
  World(int n_ranks, std::vector<std::size_t> num_local, std::vector<std::vector<Ghost>> ghosts)
      : n_(n_ranks),
        num_local_(std::move(num_local)),
        ghosts_(std::move(ghosts)),
        buffers_(n_ranks, nullptr) {}

  class Rank : public GhostExchange {
   public:
    Rank(World& w, int r) : w_(w), r_(r) {}
    void forward(double* f, int width) override { w_.forward(r_, f, width); }
    void forward(float* f, int width) override { w_.forward(r_, f, width); }
    void reverse(double* g, int width) override { w_.reverse(r_, g, width); }
    void reverse(float* g, int width) override { w_.reverse(r_, g, width); }

   private:
    World& w_;
    int r_;
  };

 private:
  void barrier() {
    std::unique_lock<std::mutex> lock(m_);
    const long gen = generation_;
    if (++waiting_ == n_) {
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    // A rank that skipped a collective call would leave the others here forever.
    if (!cv_.wait_for(lock, std::chrono::seconds(120), [&] { return generation_ != gen; }))
      throw Error("exchange barrier timed out: ranks made different exchange calls");
  }
  template <class T>
  void forward(int r, T* f, int width) {
    buffers_[r] = f;
    barrier();
    for (std::size_t g = 0; g < ghosts_[r].size(); ++g) {
      const Ghost& o = ghosts_[r][g];
      const T* src =
          static_cast<const T*>(buffers_[o.rank]) + static_cast<std::size_t>(o.row) * width;
      std::copy_n(src, width, f + (num_local_[r] + g) * width);
    }
    barrier();
  }
  template <class T>
  void reverse(int r, T* x, int width) {
    buffers_[r] = x;
    barrier();
    for (int q = 0; q < n_; ++q)
      for (std::size_t g = 0; g < ghosts_[q].size(); ++g)
        if (ghosts_[q][g].rank == r) {
          const T* src = static_cast<const T*>(buffers_[q]) + (num_local_[q] + g) * width;
          T* dst = x + static_cast<std::size_t>(ghosts_[q][g].row) * width;
          for (int k = 0; k < width; ++k) dst[k] += src[k];
        }
    barrier();
    std::fill(x + num_local_[r] * width, x + (num_local_[r] + ghosts_[r].size()) * width, T(0));
    barrier();
  }

  int n_;
  std::vector<std::size_t> num_local_;
  std::vector<std::vector<Ghost>> ghosts_;
  std::vector<void*> buffers_;
  std::mutex m_;
  std::condition_variable cv_;
  int waiting_ = 0;
  long generation_ = 0;
};

TEST(MaceEngine, GhostAtomsAcrossRanksGiveTheNoGhostResult) {
  for (const Case& c : mace_cases()) {
    SCOPED_TRACE(c.name);
    const System s = periodic_cell(c.model.num_species(), 9, r_cut(c));
    MaceEngine serial(c.model);
    const EngineResult ref = run(serial, s, s.vectors());
    const Vec vec = s.vectors();
    // Rank 0 owns atoms {0, 2}, rank 1 owns {1, 3}, rank 2 owns nothing (it still takes part
    // in every exchange). A rank's nodes: its atoms, then ghosts for every (atom, image) its
    // edges reach that it does not own at zero shift.
    const int n_ranks = 3;
    const int owner_rank[4] = {0, 1, 0, 1};
    struct RankGraph {
      std::vector<int> local, species, center, neighbor, edge_id;
      std::vector<World::Ghost> ghosts;
      Vec vec;
    };
    std::vector<RankGraph> rg(n_ranks);
    std::vector<int> row_in_rank(4);
    for (int i = 0; i < 4; ++i) {
      RankGraph& g = rg[owner_rank[i]];
      row_in_rank[i] = static_cast<int>(g.local.size());
      g.local.push_back(i);
      g.species.push_back(s.species[i]);
    }
    for (int r = 0; r < n_ranks; ++r) {
      RankGraph& g = rg[r];
      std::map<std::pair<int, std::array<int, 3>>, int> ghost_of;
      for (std::size_t e = 0; e < s.num_edges(); ++e) {
        if (owner_rank[s.center[e]] != r) continue;
        const int j = s.neighbor[e];
        int node;
        if (owner_rank[j] == r && s.shift[e] == std::array<int, 3>{0, 0, 0}) {
          node = row_in_rank[j];
        } else {
          const auto key = std::make_pair(j, s.shift[e]);
          auto it = ghost_of.find(key);
          if (it == ghost_of.end()) {
            it = ghost_of.emplace(key, static_cast<int>(g.local.size() + g.ghosts.size())).first;
            g.ghosts.push_back({owner_rank[j], row_in_rank[j]});
            g.species.push_back(s.species[j]);
          }
          node = it->second;
        }
        g.center.push_back(row_in_rank[s.center[e]]);
        g.neighbor.push_back(node);
        g.edge_id.push_back(static_cast<int>(e));
        g.vec.insert(g.vec.end(), vec.begin() + 3 * e, vec.begin() + 3 * e + 3);
      }
    }
    std::vector<std::size_t> num_local;
    std::vector<std::vector<World::Ghost>> ghosts;
    for (const auto& g : rg) {
      num_local.push_back(g.local.size());
      ghosts.push_back(g.ghosts);
    }
    World world(n_ranks, num_local, ghosts);
    std::vector<EngineResult> results(n_ranks);
    std::vector<std::string> errors(n_ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < n_ranks; ++r)
      threads.emplace_back([&, r] {
        try {
          MaceEngine engine(c.model);
          World::Rank exchange(world, r);
          const RankGraph& g = rg[r];
          AtomGraph ag{g.local.size(),  g.species.size(),  g.species.data(), g.center.size(),
                       g.center.data(), g.neighbor.data(), g.vec.data()};
          engine.compute(ag, results[r], &exchange);
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n_ranks; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
    double energy = 0;
    Vec gradient(vec.size(), 0.0);
    for (int r = 0; r < n_ranks; ++r) {
      energy += results[r].energy;
      for (std::size_t i = 0; i < rg[r].local.size(); ++i)
        EXPECT_NEAR(results[r].atom_energy[i], ref.atom_energy[rg[r].local[i]],
                    1e-12 * max_abs(ref.atom_energy));
      for (std::size_t k = 0; k < rg[r].edge_id.size(); ++k)
        for (int a = 0; a < 3; ++a)
          gradient[3 * rg[r].edge_id[k] + a] = results[r].edge_gradient[3 * k + a];
    }
    EXPECT_NEAR(energy, ref.energy, 1e-12 * std::abs(ref.energy));
    EXPECT_LE(max_diff(gradient, ref.edge_gradient),
              1e-12 * std::max(1.0, max_abs(ref.edge_gradient)));
  }
}

TEST(MaceEngine, EmptyGraphsWork) {
  for (const Case& c : mace_cases()) {
    SCOPED_TRACE(c.name);
    MaceEngine engine(c.model);
    AtomGraph empty;
    EngineResult r;
    r.atom_energy = {1, 2};
    r.edge_gradient = {3};
    engine.compute(empty, r, nullptr);
    EXPECT_EQ(r.energy, 0.0);
    EXPECT_TRUE(r.atom_energy.empty());
    EXPECT_TRUE(r.edge_gradient.empty());
    // No atoms but an exchange: the collective calls are still made.
    OwnerMapExchange exchange(0, {});
    engine.compute(empty, r, &exchange);
    EXPECT_EQ(exchange.forward_calls, engine.num_layers() - 1);
    EXPECT_EQ(exchange.reverse_calls, engine.num_layers() - 1);
  }
}

// ---------------------------------------------------------------------------------------------
// Precision, symmetry, determinism
// ---------------------------------------------------------------------------------------------

TEST(MaceEngine, Float32AndMixedStayWithinSpecTolerances) {
  for (const Case& c : mace_cases()) {
    SCOPED_TRACE(c.name);
    const System s = cluster(12, c.model.num_species(), 4.0, 1.8, 3, r_cut(c));
    MaceEngine e64(c.model, Precision::kFloat64);
    const EngineResult ref = run(e64, s, s.vectors());
    const Vec f_ref = forces_of(s, ref);
    for (Precision p : {Precision::kFloat32, Precision::kMixed}) {
      SCOPED_TRACE(to_string(p));
      MaceEngine engine(c.model, p);
      EXPECT_EQ(engine.precision(), p);
      const EngineResult r = run(engine, s, s.vectors());
      // model-spec §5 float32: ~1e-5 eV/atom, ~1e-4 eV/A (relative where values are large).
      const double e_scale = std::max(1.0, max_abs(ref.atom_energy));
      EXPECT_LE(std::abs(r.energy - ref.energy) / s.n(), 1e-5 * e_scale);
      EXPECT_LE(max_diff(r.atom_energy, ref.atom_energy), 1e-5 * e_scale);
      EXPECT_LE(max_diff(forces_of(s, r), f_ref), 1e-4 * std::max(1.0, max_abs(f_ref)));
    }
  }
}

TEST(MaceEngine, PermutingAtomsAndEdgesPermutesTheResult) {
  for (const Case& c : mace_cases()) {
    SCOPED_TRACE(c.name);
    MaceEngine engine(c.model);
    const System s = periodic_cell(c.model.num_species(), 13, r_cut(c));
    const EngineResult ref = run(engine, s, s.vectors());
    const int n = static_cast<int>(s.n());
    std::vector<int> atom_perm(n);  // new index of old atom i
    for (int i = 0; i < n; ++i) atom_perm[i] = (i * 3 + 1) % n;
    const std::size_t E = s.num_edges();
    std::vector<std::size_t> edge_old(E);  // old edge at new position k
    for (std::size_t k = 0; k < E; ++k) edge_old[k] = (k * 7 + 5) % E;
    ASSERT_EQ(std::__gcd(static_cast<std::size_t>(7), E), 1u) << "edge permutation not bijective";
    System p = s;
    for (int i = 0; i < n; ++i) {
      for (int a = 0; a < 3; ++a) p.pos[3 * atom_perm[i] + a] = s.pos[3 * i + a];
      p.species[atom_perm[i]] = s.species[i];
    }
    for (std::size_t k = 0; k < E; ++k) {
      p.center[k] = atom_perm[s.center[edge_old[k]]];
      p.neighbor[k] = atom_perm[s.neighbor[edge_old[k]]];
      p.shift[k] = s.shift[edge_old[k]];
    }
    const EngineResult r = run(engine, p, p.vectors());
    EXPECT_NEAR(r.energy, ref.energy, 1e-12 * std::abs(ref.energy));
    for (int i = 0; i < n; ++i)
      EXPECT_NEAR(r.atom_energy[atom_perm[i]], ref.atom_energy[i],
                  1e-12 * max_abs(ref.atom_energy));
    const double g = std::max(1.0, max_abs(ref.edge_gradient));
    for (std::size_t k = 0; k < E; ++k)
      for (int a = 0; a < 3; ++a)
        EXPECT_NEAR(r.edge_gradient[3 * k + a], ref.edge_gradient[3 * edge_old[k] + a], 1e-12 * g);
  }
}

TEST(MaceEngine, EnergyIsInvariantAndGradientsRotateUnderO3) {
  // A proper rotation, and the same composed with the inversion.
  const double ax[3] = {0.3, -0.5, 0.81};
  const double n = std::sqrt(ax[0] * ax[0] + ax[1] * ax[1] + ax[2] * ax[2]);
  const double u[3] = {ax[0] / n, ax[1] / n, ax[2] / n}, th = 1.1;
  const double cs = std::cos(th), sn = std::sin(th);
  double R[9];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) R[3 * i + j] = (i == j ? cs : 0) + (1 - cs) * u[i] * u[j];
  R[1] -= sn * u[2];
  R[2] += sn * u[1];
  R[3] += sn * u[2];
  R[5] -= sn * u[0];
  R[6] -= sn * u[1];
  R[7] += sn * u[0];
  for (const Case& c : mace_cases()) {
    SCOPED_TRACE(c.name);
    MaceEngine engine(c.model);
    const System s = cluster(8, c.model.num_species(), 3.5, 1.7, 17, r_cut(c));
    const Vec vec = s.vectors();
    const EngineResult ref = run(engine, s, vec);
    for (double sign : {1.0, -1.0}) {
      Vec rv(vec.size());
      for (std::size_t e = 0; e < vec.size() / 3; ++e)
        for (int i = 0; i < 3; ++i) {
          double x = 0;
          for (int j = 0; j < 3; ++j) x += sign * R[3 * i + j] * vec[3 * e + j];
          rv[3 * e + i] = x;
        }
      const EngineResult r = run(engine, s, rv);
      EXPECT_NEAR(r.energy, ref.energy, 1e-12 * std::abs(ref.energy)) << "det " << sign;
      const double g = std::max(1.0, max_abs(ref.edge_gradient));
      for (std::size_t e = 0; e < vec.size() / 3; ++e)
        for (int i = 0; i < 3; ++i) {
          double x = 0;
          for (int j = 0; j < 3; ++j) x += sign * R[3 * i + j] * ref.edge_gradient[3 * e + j];
          EXPECT_NEAR(r.edge_gradient[3 * e + i], x, 1e-11 * g) << "det " << sign;
        }
    }
  }
}

TEST(MaceEngine, FusedLastLayerAndThreadCountsAgree) {
  for (const Case& c : mace_cases()) {
    SCOPED_TRACE(c.name);
    const System s = cluster(40, c.model.num_species(), 7.0, 1.6, 23, r_cut(c));
    MaceEngine fused(c.model);
    MaceEngineOptions options;
    options.fuse_last_layer = false;
    MaceEngine unfused(c.model, Precision::kFloat64, options);
    const Vec vec = s.vectors();
    const EngineResult a = run(fused, s, vec);
    const EngineResult b = run(unfused, s, vec);
    const double g = std::max(1.0, max_abs(a.edge_gradient));
    EXPECT_NEAR(a.energy, b.energy, 1e-12 * std::abs(a.energy));
    EXPECT_LE(max_diff(a.edge_gradient, b.edge_gradient), 1e-12 * g);
    // Repeated calls reuse buffers: identical results.
    const EngineResult a2 = run(fused, s, vec);
    EXPECT_EQ(a2.energy, a.energy);
    EXPECT_EQ(a2.edge_gradient, a.edge_gradient);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const EngineResult one = run(fused, s, vec);
    omp_set_num_threads(saved);
    EXPECT_NEAR(one.energy, a.energy, 1e-12 * std::abs(a.energy));
    EXPECT_LE(max_diff(one.edge_gradient, a.edge_gradient), 1e-12 * g);
  }
}

// ---------------------------------------------------------------------------------------------
// Model properties and errors
// ---------------------------------------------------------------------------------------------

TEST(MaceEngine, ReportsTheModelsProperties) {
  for (const Case& c : mace_cases()) {
    SCOPED_TRACE(c.name);
    MaceEngine engine(c.model);
    const auto& expect = c.entry.at("expect");
    EXPECT_EQ(engine.num_layers(), expect.at("num_interactions").get<int>());
    EXPECT_DOUBLE_EQ(engine.r_max(), expect.at("r_max").get<double>());
    ASSERT_EQ(engine.species().size(), expect.at("species_Z").size());
    for (std::size_t s = 0; s < engine.species().size(); ++s)
      EXPECT_EQ(engine.species()[s], c.model.species[s].symbol);
    EXPECT_DOUBLE_EQ(engine.r_max(0, c.model.num_species() - 1), engine.r_max());
    EXPECT_THROW(engine.r_max(0, c.model.num_species()), Error);
    EXPECT_EQ(engine.exchange_width() > 0, engine.num_layers() > 1);
  }
}

// memory_usage(): the model's values in the network type before any call; after a call at least
// the per-edge harmonics and radial basis with their gradients (what mace_engine.h says it keeps
// per edge), growing with the graph and kept (not grown again) for a smaller one.
TEST(MaceEngine, MemoryUsageGrowsWithTheGraphAndCountsThePerEdgeData) {
  for (const Case& c : mace_cases()) {
    SCOPED_TRACE(c.name);
    MaceEngine engine(c.model, Precision::kFloat64);
    const EngineMemory empty = engine.memory_usage();
    EXPECT_EQ(empty.device_bytes, 0u);
    EXPECT_GE(empty.host_bytes, c.model.num_values * sizeof(double));
    const System small = cluster(6, c.model.num_species(), 2.6, 1.6, 7, c.model.r_max);
    const System big = cluster(40, c.model.num_species(), 6.0, 1.6, 8, c.model.r_max);
    ASSERT_GT(big.num_edges(), 3 * small.num_edges());
    const std::size_t nsh = (c.model.sh_lmax + 1) * (c.model.sh_lmax + 1);
    const std::size_t nb = c.model.mace->radial.num_basis;
    std::size_t held[3];
    const System* order[3] = {&small, &big, &small};
    for (int k = 0; k < 3; ++k) {
      run(engine, *order[k], order[k]->vectors());
      held[k] = engine.memory_usage().host_bytes;
      EXPECT_GE(held[k] - empty.host_bytes,
                order[k]->num_edges() * (2 * nsh + 2 * nb) * sizeof(double));
    }
    EXPECT_GT(held[1], held[0]);
    EXPECT_EQ(held[2], held[1]);  // buffers keep their capacity
  }
}

void expect_error(Engine& engine, const AtomGraph& g, GhostExchange* x, const std::string& what) {
  EngineResult r;
  try {
    engine.compute(g, r, x);
    ADD_FAILURE() << "expected an Error mentioning \"" << what << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(MaceEngine, RejectsInvalidGraphsNamingTheValue) {
  ASSERT_FALSE(mace_cases().empty());
  const Case& c = mace_cases().front();
  MaceEngine engine(c.model);
  const double rc = r_cut(c);
  std::vector<int> species = {0, 0, 0};
  std::vector<int> center = {0, 1}, neighbor = {1, 0};
  Vec vec = {1.5, 0, 0, -1.5, 0, 0};
  auto graph = [&] {
    return AtomGraph{3,         3, species.data(), center.size(), center.data(), neighbor.data(),
                     vec.data()};
  };
  species[2] = 7;
  expect_error(engine, graph(), nullptr, "species 7");
  species[2] = -1;
  expect_error(engine, graph(), nullptr, "species -1");
  species[2] = 0;
  center[1] = 3;
  expect_error(engine, graph(), nullptr, "centre 3");
  center[1] = 1;
  neighbor[1] = 5;
  expect_error(engine, graph(), nullptr, "neighbour 5");
  neighbor[1] = 0;
  vec[0] = rc;
  expect_error(engine, graph(), nullptr, "cutoff");
  vec[0] = 0.05;
  expect_error(engine, graph(), nullptr, "minimum");
  vec[0] = std::nan("");
  expect_error(engine, graph(), nullptr, "non-finite");
  vec[0] = 1.5;
  AtomGraph ghosts = graph();
  ghosts.num_local = 2;
  expect_error(engine, ghosts, nullptr, "GhostExchange");
  AtomGraph bad = graph();
  bad.num_local = 4;
  expect_error(engine, bad, nullptr, "num_local");
  // A ghost cannot be a centre.
  center[1] = 2;
  AtomGraph ghost_centre = graph();
  ghost_centre.num_local = 2;
  OwnerMapExchange exchange(2, {0});
  expect_error(engine, ghost_centre, &exchange, "centre 2");
}

TEST(MaceEngine, RejectsNonMaceModels) {
  model::Model m;
  m.arch = model::Arch::kNequip;
  EXPECT_THROW(MaceEngine engine(m), Error);
}

}  // namespace
}  // namespace clebsch
