// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The exported models' golden data (FORMAT.md §7) as engine graphs, for the test_exported_*_golden
// suites: the models of one architecture that the CTest fixture `exported_models`
// (unittest/reference/make_exported_models.py) lists in models.json with a golden file, each
// golden structure as the edge list and reference values the exporter stored, and the errors of
// an engine evaluated on that edge list. models.json is read from exported_models_dir(); a
// missing models.json is a failure, not a skip.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "clebsch/engine/engine.h"
#include "clebsch/model/safetensors.h"
#include "exported_models_dir.h"

namespace clebsch::test {

/// One exported model with golden data.
struct GoldenCase {
  std::string name, model_path, golden_path;
};

/// The models of models.json whose arch is `arch` ("mace", "nequip") and that have golden data;
/// none is a test failure. @param label the architecture's name in failure messages ("MACE").
inline std::vector<GoldenCase> golden_cases(const std::string& arch, const std::string& label) {
  const std::string dir = exported_models_dir();
  std::ifstream in(dir + "/models.json");
  if (!in) {
    ADD_FAILURE() << dir << "/models.json is missing: run unittest/reference/"
                  << "make_exported_models.py (ctest does it through the exported_models fixture)";
    return {};
  }
  const nlohmann::json index = nlohmann::json::parse(in);
  std::vector<GoldenCase> out;
  for (const auto& m : index.at("models"))
    if (m.at("arch") == arch && !m.at("golden").is_null())
      out.push_back({m.at("name").get<std::string>(), dir + "/" + m.at("file").get<std::string>(),
                     dir + "/" + m.at("golden").get<std::string>()});
  EXPECT_FALSE(out.empty()) << "models.json lists no " << label << " model with golden data";
  return out;
}

/// One head of a multi-head model with mace-torch's golden data on that head (models.json
/// head_goldens), and the model's heads as the builder made them (hyperparameters.heads).
struct HeadGoldenCase {
  std::string name, model_path, head, golden_path, default_head;
  std::vector<std::string> heads;
};

/// Every head of every multi-head model of models.json; none is a test failure.
inline std::vector<HeadGoldenCase> head_golden_cases() {
  const std::string dir = exported_models_dir();
  std::ifstream in(dir + "/models.json");
  if (!in) {
    ADD_FAILURE() << dir << "/models.json is missing (exported_models fixture)";
    return {};
  }
  const nlohmann::json index = nlohmann::json::parse(in);
  std::vector<HeadGoldenCase> out;
  for (const auto& m : index.at("models")) {
    if (!m.contains("head_goldens")) continue;
    for (const auto& [head, file] : m.at("head_goldens").items())
      out.push_back({m.at("name").get<std::string>(), dir + "/" + m.at("file").get<std::string>(),
                     head, dir + "/" + file.get<std::string>(), m.at("head").get<std::string>(),
                     m.at("hyperparameters").at("heads").get<std::vector<std::string>>()});
  }
  EXPECT_GE(out.size(), 2u) << "models.json lists no multi-head model with per-head golden data";
  return out;
}

/// One golden structure: the exporter's edge list (vectors as stored, in the exporting package's
/// sign convention) and its reference energy [1], node energies [N], forces [N][3], virial [3][3].
struct GoldenStructure {
  std::string name;
  std::size_t n_atoms = 0, n_edges = 0;
  std::vector<int> species, center, neighbor;
  std::vector<double> vectors, energy, node_energy, forces, virial;
};

inline std::vector<int> to_int(const std::vector<double>& v) {
  std::vector<int> out;
  for (double x : v) out.push_back(static_cast<int>(std::lround(x)));
  return out;
}

inline std::vector<GoldenStructure> golden_structures(const SafetensorsFile& golden) {
  const nlohmann::json gj = nlohmann::json::parse(golden.metadata("golden_json"));
  std::vector<GoldenStructure> out;
  for (const auto& s : gj.at("structures")) {
    GoldenStructure st;
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

inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

/// Largest errors of an engine against a golden structure (absolute but for the energy).
struct GoldenErrors {
  double energy_rel = 0, node_energy = 0, force = 0, virial = 0;
};

/// Evaluates `engine` on the structure's edge list. Forces are assembled from edge_gradient
/// (F[centre] += g, F[neighbour] -= g); the virial is the symmetric-strain derivative
/// -(G + G^T)/2 with G = sum_e vector_e (x) dE/dvector_e, the same whichever sign convention the
/// vector and gradient share.
inline GoldenErrors compare_to_golden(Engine& engine, const GoldenStructure& s) {
  AtomGraph g;
  g.num_local = g.num_nodes = s.n_atoms;
  g.species = s.species.data();
  g.num_edges = s.n_edges;
  g.center = s.center.data();
  g.neighbor = s.neighbor.data();
  g.vector = s.vectors.data();
  EngineResult r;
  engine.compute(g, r, nullptr);
  GoldenErrors e;
  e.energy_rel = std::abs(r.energy - s.energy[0]) / std::abs(s.energy[0]);
  for (std::size_t i = 0; i < s.n_atoms; ++i)
    e.node_energy = std::max(e.node_energy, std::abs(r.atom_energy[i] - s.node_energy[i]));
  std::vector<double> f(3 * s.n_atoms, 0.0);
  double G[3][3] = {};
  for (std::size_t k = 0; k < s.n_edges; ++k)
    for (int a = 0; a < 3; ++a) {
      f[3 * s.center[k] + a] += r.edge_gradient[3 * k + a];
      f[3 * s.neighbor[k] + a] -= r.edge_gradient[3 * k + a];
      for (int b = 0; b < 3; ++b) G[a][b] += s.vectors[3 * k + a] * r.edge_gradient[3 * k + b];
    }
  for (std::size_t q = 0; q < f.size(); ++q)
    e.force = std::max(e.force, std::abs(f[q] - s.forces[q]));
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b)
      e.virial = std::max(e.virial, std::abs(-0.5 * (G[a][b] + G[b][a]) - s.virial[3 * a + b]));
  return e;
}

}  // namespace clebsch::test
