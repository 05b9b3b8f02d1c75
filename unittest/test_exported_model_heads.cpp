// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Run-time head selection (clebsch/model/model_heads.h) on the multi-head MACE model of the
// CTest fixture `exported_models`, built with the real mace-torch (two heads, float64). The
// references are mace-torch's own: its outputs on each head (models.json head_goldens, golden
// files evaluated by mace-torch with that head) and the head names the builder gave the model
// (hyperparameters.heads). The host engine built after select_head() must equal mace-torch on
// that head to model-spec §5 (energies 1e-12 relative, forces and virial 1e-10), and the heads'
// energies must differ (so a selection that changed nothing would fail); an unknown name throws
// Error naming the heads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "clebsch/engine/mace_engine.h"
#include "clebsch/model/model.h"
#include "clebsch/model/model_heads.h"
#include "clebsch/model/model_reader.h"
#include "clebsch/model/safetensors.h"
#include "clebsch/support/error.h"
#include "exported_golden.h"

namespace clebsch {
namespace {

using test::compare_to_golden;
using test::GoldenErrors;
using test::GoldenStructure;
using test::head_golden_cases;
using test::HeadGoldenCase;
using test::max_abs;

// MACE's golden vectors are centre minus neighbour image; the engine wants the opposite.
std::vector<GoldenStructure> mace_structures(const std::string& golden_path) {
  std::vector<GoldenStructure> out = test::golden_structures(SafetensorsFile::read(golden_path));
  for (GoldenStructure& s : out)
    for (double& x : s.vectors) x = -x;
  return out;
}

TEST(ModelHeads, TheFileHoldsEveryHeadOfTheMaceTorchModel) {
  for (const HeadGoldenCase& c : head_golden_cases()) {
    SCOPED_TRACE(c.name);
    const model::Model m = read_model(c.model_path);
    EXPECT_EQ(model::head_names(m), c.heads);
    EXPECT_EQ(model::active_head(m), c.default_head);  // read_model leaves the default active
    EXPECT_NE(model::describe_heads(m).find("(default " + c.default_head + ")"), std::string::npos);
  }
}

TEST(ModelHeads, EachHeadMatchesMaceTorchOnThatHead) {
  std::map<std::string, std::map<std::string, double>> energy;  // structure -> head -> E
  for (const HeadGoldenCase& c : head_golden_cases()) {
    SCOPED_TRACE(c.name + " head " + c.head);
    model::Model m = read_model(c.model_path);
    model::select_head(m, c.head);
    EXPECT_EQ(model::active_head(m), c.head);
    MaceEngine engine(m, Precision::kFloat64);
    for (const GoldenStructure& s : mace_structures(c.golden_path)) {
      SCOPED_TRACE(s.name);
      const GoldenErrors e = compare_to_golden(engine, s);
      EXPECT_LE(e.energy_rel, 1e-12);
      EXPECT_LE(e.node_energy, 1e-12 * std::max(1.0, max_abs(s.node_energy)));
      EXPECT_LE(e.force, 1e-10 * std::max(1.0, max_abs(s.forces)));
      EXPECT_LE(e.virial, 1e-10 * std::max(1.0, max_abs(s.virial)));
      energy[c.name + "/" + s.name][c.head] = s.energy[0];
    }
  }
  // mace-torch's heads disagree, so each comparison above tells the heads apart.
  for (const auto& [structure, by_head] : energy) {
    ASSERT_GE(by_head.size(), 2u) << structure;
    EXPECT_GT(std::abs(by_head.begin()->second - by_head.rbegin()->second), 1e-3) << structure;
  }
}

TEST(ModelHeads, SelectingTheDefaultAgainRestoresIt) {
  for (const HeadGoldenCase& c : head_golden_cases()) {
    model::Model m = read_model(c.model_path);
    const std::vector<double> e0 = m.mace->atomic_energies;
    const double scale = m.mace->scale;
    model::select_head(m, c.head);
    model::select_head(m, "");  // the pair style's "no head keyword"
    EXPECT_EQ(model::active_head(m), c.default_head);
    EXPECT_EQ(m.mace->atomic_energies, e0);
    EXPECT_EQ(m.mace->scale, scale);
  }
}

TEST(ModelHeads, AnUnknownHeadThrowsNamingTheHeads) {
  for (const HeadGoldenCase& c : head_golden_cases()) {
    model::Model m = read_model(c.model_path);
    try {
      model::select_head(m, "no_such_head");
      ADD_FAILURE() << "no exception";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("\"no_such_head\" is not a head of the model"), std::string::npos)
          << what;
      for (const std::string& h : c.heads) EXPECT_NE(what.find(h), std::string::npos) << what;
    }
    EXPECT_EQ(model::active_head(m), c.default_head);  // unchanged by the failed selection
  }
}

}  // namespace
}  // namespace clebsch
