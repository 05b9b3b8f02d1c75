// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The MACE host engine against the real mace-torch on the architectures of mace-torch's newer
// foundation models (models.json entries with arch "mace_arch", made by the exported_models
// fixture from potentials/tests/mace_arch_cases.py: an MH-1-style model with
// RealAgnosticResidualNonLinearInteractionBlock, NonLinearBiasReadoutBlock, narrower edge
// irreps, the species-agnostic product and two heads; an OMOL-style charged model with an
// embedding of total charge and spin and its readout; one-layer models on mace-torch's
// Gaussian and Chebyshev radial bases). Float64 must equal mace-torch as the
// classic models do (test_exported_mace_golden.cpp: energy 1e-12 relative, per-atom energies
// 1e-12, forces and virial 1e-10), on both last-layer paths; the per-structure inputs come from
// the golden file's structure_inputs, and a model that needs one refuses to run without it.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "clebsch/engine/mace_engine.h"
#include "clebsch/model/model_reader.h"
#include "clebsch/model/safetensors.h"
#include "clebsch/support/error.h"
#include "exported_golden.h"

namespace clebsch {
namespace {

using test::GoldenErrors;
using test::GoldenStructure;
using test::max_abs;

MaceEngineOptions options_from(const nlohmann::json& gj, bool fuse) {
  MaceEngineOptions o;
  o.fuse_last_layer = fuse;
  if (gj.contains("structure_inputs"))
    for (const auto& [k, v] : gj.at("structure_inputs").items())
      o.structure_inputs.emplace_back(k, v.get<double>());
  return o;
}

TEST(MaceArchGolden, Float64MatchesMaceTorchOnBothLastLayerPaths) {
  const auto cases = test::golden_cases("mace_arch", "MACE (newer architectures)");
  EXPECT_EQ(cases.size(), 4u);  // MH-1-style, OMOL-style charged, Gaussian and Chebyshev bases
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const model::Model m = read_model(c.model_path);
    const SafetensorsFile golden = SafetensorsFile::read(c.golden_path);
    const nlohmann::json gj = nlohmann::json::parse(golden.metadata("golden_json"));
    std::vector<GoldenStructure> structures = test::golden_structures(golden);
    for (GoldenStructure& s : structures)
      for (double& x : s.vectors) x = -x;  // MACE stores centre minus neighbour
    for (bool fuse : {true, false}) {
      MaceEngine engine(m, Precision::kFloat64, options_from(gj, fuse));
      for (const GoldenStructure& s : structures) {
        SCOPED_TRACE(s.name + (fuse ? " fused" : " recomputing"));
        const GoldenErrors e = test::compare_to_golden(engine, s);
        std::cout << "  [fp64" << (fuse ? "" : ", recomputing") << "] " << c.name << "/" << s.name
                  << ": |dE|/|E| " << e.energy_rel << ", max|de_i| " << e.node_energy
                  << " eV, max|dF| " << e.force << " eV/A, max|dW| " << e.virial << " eV\n";
        EXPECT_LE(e.energy_rel, 1e-12);
        EXPECT_LE(e.node_energy, 1e-12 * std::max(1.0, max_abs(s.node_energy)));
        EXPECT_LE(e.force, 1e-10 * std::max(1.0, max_abs(s.forces)));
        EXPECT_LE(e.virial, 1e-10 * std::max(1.0, max_abs(s.virial)));
      }
    }
  }
}

TEST(MaceArchGolden, MissingOrOutOfRangeStructureInputIsRefusedByName) {
  int with_embedding = 0;
  for (const auto& c : test::golden_cases("mace_arch", "MACE (newer architectures)")) {
    const model::Model m = read_model(c.model_path);
    if (!m.mace->embedding) continue;
    ++with_embedding;
    try {
      MaceEngine engine(m, Precision::kFloat64);
      ADD_FAILURE() << c.name << ": built without total_charge";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("total_charge"), std::string::npos) << e.what();
    }
    MaceEngineOptions o;
    o.structure_inputs = {{"total_charge", 1e6}, {"total_spin", 1}};
    try {
      MaceEngine engine(m, Precision::kFloat64, o);
      ADD_FAILURE() << c.name << ": built with total_charge 1e6";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("outside"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(with_embedding, 1);
}

}  // namespace
}  // namespace clebsch
