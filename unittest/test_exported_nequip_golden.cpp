// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The NequIP host engine against the real nequip: every NequIP model that the CTest fixture
// `exported_models` (unittest/reference/make_exported_models.py) builds from scratch with random
// weights, exports and evaluates with nequip in float64 (its golden file, FORMAT.md §7) is read
// with read_model() and evaluated by NequipEngine on nequip's own edge list. In float64 the
// energy, per-atom energies, forces (assembled from edge_gradient) and virial must equal
// nequip's to model-spec §5 (|dE|/|E| <= 1e-12, |dF| <= 1e-10 eV/A, |dW| <= 1e-10 eV); float32
// and mixed precision must stay within the float32 targets of §5. The directory of models.json
// is $CLEBSCH_MODELS_DIR, else the macro CLEBSCH_EXPORTED_MODELS_DIR (set by the CMake block of
// the exported_models fixture), else <build>/unittest/models. A missing models.json is a
// failure, not a skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine.h"
#include "error.h"
#include "model.h"
#include "model_reader.h"
#include "nequip_engine.h"
#include "safetensors.h"

namespace clebsch {
namespace {

using Vec = std::vector<double>;

std::string models_dir() {
  if (const char* env = std::getenv("CLEBSCH_MODELS_DIR")) return env;
#ifdef CLEBSCH_EXPORTED_MODELS_DIR
  return CLEBSCH_EXPORTED_MODELS_DIR;
#else
  // <build>/unittest/reference -> <build>/unittest/models (the reference directory may not exist).
  const std::string ref = CLEBSCH_REFERENCE_DIR;
  return ref.substr(0, ref.find_last_of('/')) + "/models";
#endif
}

struct Case {
  std::string name, model_path, golden_path;
};

std::vector<Case> nequip_cases() {
  const std::string dir = models_dir();
  std::ifstream in(dir + "/models.json");
  if (!in) {
    ADD_FAILURE() << dir << "/models.json is missing: run unittest/reference/"
                  << "make_exported_models.py (ctest does it through the exported_models fixture)";
    return {};
  }
  const nlohmann::json index = nlohmann::json::parse(in);
  std::vector<Case> out;
  for (const auto& m : index.at("models"))
    if (m.at("arch") == "nequip" && !m.at("golden").is_null())
      out.push_back({m.at("name").get<std::string>(), dir + "/" + m.at("file").get<std::string>(),
                     dir + "/" + m.at("golden").get<std::string>()});
  EXPECT_FALSE(out.empty()) << "models.json lists no NequIP model with golden data";
  return out;
}

struct Structure {
  std::string name;
  std::size_t n_atoms = 0, n_edges = 0;
  std::vector<int> species, center, neighbor;
  Vec vectors, energy, node_energy, forces, virial;
};

std::vector<int> to_int(const Vec& v) {
  std::vector<int> out;
  for (double x : v) out.push_back(static_cast<int>(std::lround(x)));
  return out;
}

std::vector<Structure> golden_structures(const SafetensorsFile& golden) {
  const nlohmann::json gj = nlohmann::json::parse(golden.metadata("golden_json"));
  std::vector<Structure> out;
  for (const auto& s : gj.at("structures")) {
    Structure st;
    st.name = s.at("name").get<std::string>();
    st.n_atoms = s.at("n_atoms").get<std::size_t>();
    st.n_edges = s.at("n_edges").get<std::size_t>();
    const auto N = static_cast<std::int64_t>(st.n_atoms), E = static_cast<std::int64_t>(st.n_edges);
    const auto t = [&](const std::string& key, std::vector<std::int64_t> shape) {
      return golden.to_double(st.name + "." + key, shape);
    };
    st.species = to_int(t("species", {N}));
    st.center = to_int(t("edge_centre", {E}));
    st.neighbor = to_int(t("edge_neighbour", {E}));
    st.vectors = t("edge_vectors", {E, 3});
    st.energy = t("energy", {1});
    st.node_energy = t("node_energy", {N});
    st.forces = t("forces", {N, 3});
    st.virial = t("virial", {3, 3});
    out.push_back(std::move(st));
  }
  return out;
}

struct Errors {
  double energy_rel = 0, node_energy = 0, force = 0, virial = 0;
};

Errors compare(Engine& engine, const Structure& s) {
  AtomGraph g;
  g.num_local = g.num_nodes = s.n_atoms;
  g.species = s.species.data();
  g.num_edges = s.n_edges;
  g.center = s.center.data();
  g.neighbor = s.neighbor.data();
  g.vector = s.vectors.data();
  EngineResult r;
  engine.compute(g, r, nullptr);
  Errors e;
  e.energy_rel = std::abs(r.energy - s.energy[0]) / std::abs(s.energy[0]);
  for (std::size_t i = 0; i < s.n_atoms; ++i)
    e.node_energy = std::max(e.node_energy, std::abs(r.atom_energy[i] - s.node_energy[i]));
  Vec f(3 * s.n_atoms, 0.0);
  double G[3][3] = {};
  for (std::size_t k = 0; k < s.n_edges; ++k)
    for (int a = 0; a < 3; ++a) {
      f[3 * s.center[k] + a] += r.edge_gradient[3 * k + a];
      f[3 * s.neighbor[k] + a] -= r.edge_gradient[3 * k + a];
      for (int b = 0; b < 3; ++b) G[a][b] += s.vectors[3 * k + a] * r.edge_gradient[3 * k + b];
    }
  for (std::size_t q = 0; q < f.size(); ++q)
    e.force = std::max(e.force, std::abs(f[q] - s.forces[q]));
  // The golden virial is nequip's symmetric-strain derivative: -(G + G^T)/2.
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b)
      e.virial = std::max(e.virial, std::abs(-0.5 * (G[a][b] + G[b][a]) - s.virial[3 * a + b]));
  return e;
}

double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

TEST(NequipGolden, Float64MatchesNequip) {
  for (const Case& c : nequip_cases()) {
    SCOPED_TRACE(c.name);
    const model::Model m = read_model(c.model_path);
    const SafetensorsFile golden = SafetensorsFile::read(c.golden_path);
    const nlohmann::json gj = nlohmann::json::parse(golden.metadata("golden_json"));
    EXPECT_EQ(gj.at("model_sha256").get<std::string>(), m.source_sha256);
    NequipEngine engine(m, Precision::kFloat64);
    for (const Structure& s : golden_structures(golden)) {
      SCOPED_TRACE(s.name);
      const Errors e = compare(engine, s);
      std::cout << "  [fp64] " << c.name << "/" << s.name << ": |dE|/|E| " << e.energy_rel
                << ", max|de_i| " << e.node_energy << " eV, max|dF| " << e.force
                << " eV/A, max|dW| " << e.virial << " eV  (E = " << s.energy[0]
                << " eV, max|F| = " << max_abs(s.forces) << ")\n";
      EXPECT_LE(e.energy_rel, 1e-12);
      EXPECT_LE(e.node_energy, 1e-12 * std::max(1.0, max_abs(s.node_energy)));
      EXPECT_LE(e.force, 1e-10);
      EXPECT_LE(e.virial, 1e-10);
    }
  }
}

TEST(NequipGolden, Float32AndMixedStayWithinSpecTolerances) {
  for (const Case& c : nequip_cases()) {
    SCOPED_TRACE(c.name);
    const model::Model m = read_model(c.model_path);
    const SafetensorsFile golden = SafetensorsFile::read(c.golden_path);
    for (Precision p : {Precision::kMixed, Precision::kFloat32}) {
      NequipEngine engine(m, p);
      for (const Structure& s : golden_structures(golden)) {
        SCOPED_TRACE(s.name + " " + to_string(p));
        const Errors e = compare(engine, s);
        const double per_atom = e.energy_rel * std::abs(s.energy[0]) / s.n_atoms;
        std::cout << "  [" << to_string(p) << "] " << c.name << "/" << s.name << ": |dE|/atom "
                  << per_atom << " eV, max|de_i| " << e.node_energy << " eV, max|dF| " << e.force
                  << " eV/A, max|dW| " << e.virial << " eV\n";
        // model-spec §5 float32: ~1e-5 eV/atom energy, ~1e-4..1e-3 eV/A forces.
        EXPECT_LE(per_atom, 1e-5 * std::max(1.0, max_abs(s.node_energy)));
        EXPECT_LE(e.node_energy, 1e-5 * std::max(1.0, max_abs(s.node_energy)));
        EXPECT_LE(e.force, 1e-4 * std::max(1.0, max_abs(s.forces)));
        EXPECT_LE(e.virial, 1e-4 * std::max(1.0, max_abs(s.virial)));
      }
    }
  }
}

}  // namespace
}  // namespace clebsch
