// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The model reader on hand-made files: a minimal MACE and a minimal NequIP model written here
// from potentials/FORMAT.md (JSON text plus tensors, packed by SafetensorsBuilder), checked to
// decode into the expected typed description, then broken one field at a time: every class of
// error (version, missing field, JSON type, range, tensor reference, shape, irreps syntax and
// consistency between ops, gate indices, couplings, species, cutoffs, spherical harmonics,
// unreferenced tensors) must give ModelFormatError naming the file, the field's JSON path and the
// value found.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "clebsch/model/model_reader.h"
#include "clebsch/model/safetensors.h"
#include "clebsch/support/error.h"
#include "safetensors_builder.h"

namespace clebsch {
namespace {

using nlohmann::json;
using Vec = std::vector<double>;

struct Tensor {
  std::vector<std::int64_t> shape;
  Vec values;
  bool f32 = false;
};

// A model file under construction: model_json, its tensors and the container metadata.
struct File {
  json model;
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata{{"format", "clebsch-model"},
                                              {"format_version", "1.0"}};

  std::vector<std::uint8_t> bytes() const {
    test::SafetensorsBuilder b;
    for (const auto& [name, t] : tensors) {
      if (t.f32) {
        b.f32(name, t.shape, std::vector<float>(t.values.begin(), t.values.end()));
      } else {
        b.f64(name, t.shape, t.values);
      }
    }
    for (const auto& [k, v] : metadata) b.metadata(k, v);
    if (!metadata.count("model_json")) b.metadata("model_json", model.dump());
    return b.bytes();
  }
  model::Model parse() const {
    return parse_model(SafetensorsFile::parse(bytes(), "hand.safetensors"));
  }
  json& at(const std::string& pointer) { return model[json::json_pointer(pointer)]; }
  void erase(const std::string& pointer) {
    const json::json_pointer p(pointer);
    model[p.parent_pointer()].erase(p.back());
  }
};

// Deterministic, non-trivial values.
Vec values(std::size_t n, double seed) {
  Vec v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(seed + 1.7 * double(i)) * 0.8 + 0.1;
  return v;
}

std::size_t numel(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (auto d : shape) n *= std::size_t(d);
  return n;
}

// Adds every tensor the JSON references, with values(...) unless given explicitly.
void add_tensors(File& f, const json& node, const std::map<std::string, Vec>& given) {
  if (node.is_object()) {
    if (node.contains("tensor") && node.contains("shape")) {
      const std::string name = node["tensor"];
      const auto shape = node["shape"].get<std::vector<std::int64_t>>();
      auto it = given.find(name);
      f.tensors[name] = {shape,
                         it != given.end() ? it->second : values(numel(shape), f.tensors.size())};
      return;
    }
    for (const auto& [k, v] : node.items()) add_tensors(f, v, given);
  } else if (node.is_array()) {
    for (const auto& v : node) add_tensors(f, v, given);
  }
}

const double kSqrt3 = std::sqrt(3.0);

// The coupling sqrt(3) * wigner_3j(0, 1, 1) of a uvu path 0e x 1o -> 1o with one neighbour
// channel: wigner_3j(0, 1, 1)[0][j][k] = delta_jk / sqrt(3) (the invariant bilinear form of the
// real l=1 basis, Frobenius norm 1), so the coupling is the 3x3 identity.
const Vec kIdentity3 = {1, 0, 0, 0, 1, 0, 0, 0, 1};
// wigner_3j(1, 1, 0)[i][j][0] = delta_ij / sqrt(3), with path weight 1.
const Vec kDelta3 = {1 / kSqrt3, 0, 0, 0, 1 / kSqrt3, 0, 0, 0, 1 / kSqrt3};

// ---------------------------------------------------------------------------------------------
// A minimal MACE: 2 species, sh lmax 1, 2 radial functions, one residual interaction with
// 2x0e features, correlation 1, a linear readout.

const char* kMaceJson = R"json({
 "format": "clebsch-model", "format_version": "1.0", "arch": "mace",
 "source": {"file": null, "sha256": "abc123", "model_class": "test", "heads": null, "head": null},
 "units": {"energy": "eV", "length": "Angstrom", "force": "eV/Angstrom", "virial": "eV",
           "stress": "eV/Angstrom^3"},
 "model_dtype": "float64", "tensor_dtype": "float64",
 "species": [{"index": 0, "Z": 29, "symbol": "Cu"}, {"index": 1, "Z": 79, "symbol": "Au"}],
 "r_max": 4.0, "r_max_pairs": [[4.0, 4.0], [4.0, 4.0]],
 "graph": {"edge_vector": "centre_minus_neighbour"},
 "spherical_harmonics": {"lmax": 1, "irreps": "1x0e+1x1o", "normalize": true,
                         "normalization": "component"},
 "mace": {
  "model_class": "mace.modules.models.ScaleShiftMACE", "num_interactions": 1,
  "node_embedding": {"op": "linear", "irreps_in": "2x0e", "irreps_out": "2x0e",
    "weight": {"tensor": "emb.w", "shape": [4]},
    "instructions": [{"i_in": 0, "i_out": 0, "path_shape": [2, 2], "path_weight": 0.7071067811865476, "weight_offset": 0}]},
  "radial": {"basis": "bessel", "num_basis": 2, "bessel_weights": {"tensor": "rad.w", "shape": [2]},
    "prefactor": 0.7071067811865476, "r_max": 4.0, "cutoff": {"type": "polynomial", "p": 5, "r_max": 4.0},
    "apply_cutoff": true, "distance_transform": null},
  "pair_repulsion": null,
  "interactions": [{
    "class": "mace.modules.blocks.RealAgnosticResidualInteractionBlock",
    "residual": true, "density_normalization": false,
    "irreps_node_in": "2x0e", "irreps_edge_attrs": "1x0e+1x1o", "irreps_edge_feats": "2x0e",
    "irreps_edge": "2x0e", "irreps_mid": "2x0e+2x1o", "irreps_target": "2x0e+2x1o",
    "irreps_hidden_out": "2x0e",
    "linear_up": {"op": "linear", "irreps_in": "2x0e", "irreps_out": "2x0e",
      "weight": {"tensor": "i0.up.w", "shape": [4]},
      "instructions": [{"i_in": 0, "i_out": 0, "path_shape": [2, 2], "path_weight": 0.7071067811865476, "weight_offset": 0}]},
    "radial_mlp": {"op": "mlp", "layers": [
      {"weight": {"tensor": "i0.mlp.0", "shape": [2, 3]}, "bias": null, "weight_scale": 0.7071067811865476,
       "activation": {"name": "silu", "cst": 1.6791767923989418}, "out_scale": 1.0},
      {"weight": {"tensor": "i0.mlp.1", "shape": [3, 4]}, "bias": null, "weight_scale": 0.5773502691896258,
       "activation": null, "out_scale": 1.0}]},
    "conv_tp": {"op": "tensor_product", "irreps_in1": "2x0e", "irreps_in2": "1x0e+1x1o",
      "irreps_out": "2x0e+2x1o", "weight_source": "external", "weight_numel": 4, "weight": null,
      "cg_includes_path_weight": true, "cg_max_deviation_from_wigner_3j": 0.0,
      "instructions": [
        {"i_in1": 0, "i_in2": 0, "i_out": 0, "mode": "uvu", "has_weight": true, "path_weight": 1.0,
         "path_shape": [2, 1], "weight_offset": 0, "cg": {"tensor": "i0.conv.cg.0", "shape": [1, 1, 1]}},
        {"i_in1": 0, "i_in2": 1, "i_out": 1, "mode": "uvu", "has_weight": true, "path_weight": 1.7320508075688772,
         "path_shape": [2, 1], "weight_offset": 2, "cg": {"tensor": "i0.conv.cg.1", "shape": [1, 3, 3]}}]},
    "linear": {"op": "linear", "irreps_in": "2x0e+2x1o", "irreps_out": "2x0e+2x1o",
      "weight": {"tensor": "i0.lin.w", "shape": [8]},
      "instructions": [{"i_in": 0, "i_out": 0, "path_shape": [2, 2], "path_weight": 0.7071067811865476, "weight_offset": 0},
                       {"i_in": 1, "i_out": 1, "path_shape": [2, 2], "path_weight": 0.7071067811865476, "weight_offset": 4}]},
    "skip_tp": {"op": "tensor_product", "irreps_in1": "2x0e", "irreps_in2": "2x0e", "irreps_out": "2x0e",
      "weight_source": "internal", "weight_numel": 8, "weight": {"tensor": "i0.skip.w", "shape": [8]},
      "cg_includes_path_weight": true, "cg_max_deviation_from_wigner_3j": 0.0,
      "instructions": [{"i_in1": 0, "i_in2": 0, "i_out": 0, "mode": "uvw", "has_weight": true,
        "path_weight": 0.5, "path_shape": [2, 2, 2], "weight_offset": 0,
        "cg": {"tensor": "i0.skip.cg.0", "shape": [1, 1, 1]}}]},
    "skip_tp_input": "node_features_in",
    "message_normalization": {"type": "avg_num_neighbors", "avg_num_neighbors": 3.0}}],
  "products": [{
    "irreps_in": "2x0e+2x1o", "irreps_out": "2x0e", "num_features": 2, "dim_a": 4,
    "species_agnostic_weights_tiled": false,
    "contractions": [{"irrep_out": "0e", "L": 0, "mul": 2, "correlation": 1,
      "terms": [{"nu": 1, "U": {"tensor": "p0.U1", "shape": [1, 4, 1]}, "W": {"tensor": "p0.W1", "shape": [2, 1, 2]}}]}],
    "linear": {"op": "linear", "irreps_in": "2x0e", "irreps_out": "2x0e",
      "weight": {"tensor": "p0.lin.w", "shape": [4]},
      "instructions": [{"i_in": 0, "i_out": 0, "path_shape": [2, 2], "path_weight": 0.7071067811865476, "weight_offset": 0}]},
    "add_skip": true}],
  "readouts": [{"layer": 0, "type": "linear",
    "linear": {"op": "linear", "irreps_in": "2x0e", "irreps_out": "1x0e",
      "weight": {"tensor": "r0.w", "shape": [2]},
      "instructions": [{"i_in": 0, "i_out": 0, "path_shape": [2, 1], "path_weight": 0.7071067811865476, "weight_offset": 0}]}}],
  "atomic_energies": {"tensor": "e0", "shape": [2]},
  "scale_shift": {"scale": 1.5, "shift": -0.25}
 }
})json";

File mace_file() {
  File f;
  f.model = json::parse(kMaceJson);
  add_tensors(f, f.model,
              {{"i0.conv.cg.0", {1.0}},
               {"i0.conv.cg.1", kIdentity3},
               {"i0.skip.cg.0", {0.5}},
               {"e0", {-3.5, -2.25}},
               {"p0.U1", {1.0, 0.0, 0.0, 0.0}}});
  return f;
}

// ---------------------------------------------------------------------------------------------
// A minimal NequIP: 2 species with per-edge-type cutoffs, type embedding width 2, two layers,
// the first with a gate over odd and even scalars (so its gather is not the identity), the
// second with a self-connection and a one-value norm_const, ZBL.

const char* kNequipJson = R"json({
 "format": "clebsch-model", "format_version": "1.0", "arch": "nequip",
 "source": {"file": null, "sha256": "def456", "model_class": "test"},
 "units": {"energy": "eV", "length": "Angstrom", "force": "eV/Angstrom", "virial": "eV",
           "stress": "eV/Angstrom^3"},
 "model_dtype": "float32", "tensor_dtype": "float64",
 "species": [{"index": 0, "Z": 29, "symbol": "Cu", "type_name": "Cu"},
             {"index": 1, "Z": 79, "symbol": "Au", "type_name": "Au"}],
 "r_max": 4.0, "r_max_pairs": [[4.0, 3.5], [3.5, 2.5]],
 "graph": {"edge_vector": "neighbour_minus_centre"},
 "spherical_harmonics": {"lmax": 1, "irreps": "1x0e+1x1o", "normalize": true,
                         "normalization": "component"},
 "nequip": {
  "model_class": "nequip.nn.graph_model.GraphModel", "num_layers": 2,
  "type_embedding": {"tensor": "emb", "shape": [2, 2]},
  "radial": {"basis": "bessel_nequip", "num_basis": 2, "bessel_weights": {"tensor": "rad.w", "shape": [2]},
    "rmax_recip": {"tensor": "rad.recip", "shape": [2, 2]}, "cutoff": {"type": "polynomial", "p": 6.0},
    "factor": 0.39269908169872414},
  "layers": [
   {"class": "nequip.nn.convnetlayer.ConvNetLayer", "irreps_in": "2x0e",
    "irreps_out": "1x0e+1x0o+1x1o", "resnet": false, "sc": null,
    "linear_1": {"op": "linear", "irreps_in": "2x0e", "irreps_out": "2x0e",
      "weight": {"tensor": "l0.lin1", "shape": [4]},
      "instructions": [{"i_in": 0, "i_out": 0, "path_shape": [2, 2], "path_weight": 0.7071067811865476, "weight_offset": 0}]},
    "norm_const": {"tensor": "l0.norm", "shape": [2]},
    "edge_mlp": {"op": "mlp", "layers": [
      {"weight": {"tensor": "l0.mlp.0", "shape": [2, 3]}, "bias": {"tensor": "l0.mlp.0.b", "shape": [3]},
       "weight_scale": 0.7071067811865476, "activation": {"name": "silu", "cst": 1.0}, "out_scale": 1.0},
      {"weight": {"tensor": "l0.mlp.1", "shape": [3, 4]}, "bias": null, "weight_scale": 0.5773502691896258,
       "activation": null, "out_scale": 1.0}]},
    "tp": {"op": "tensor_product", "irreps_in1": "2x0e", "irreps_in2": "1x0e+1x1o",
      "irreps_out": "2x0e+2x1o", "weight_source": "external", "weight_numel": 4, "weight": null,
      "cg_includes_path_weight": true, "cg_max_deviation_from_wigner_3j": 0.0,
      "instructions": [
        {"i_in1": 0, "i_in2": 0, "i_out": 0, "mode": "uvu", "has_weight": true, "path_weight": 1.0,
         "path_shape": [2, 1], "weight_offset": 0, "cg": {"tensor": "l0.tp.cg.0", "shape": [1, 1, 1]}},
        {"i_in1": 0, "i_in2": 1, "i_out": 1, "mode": "uvu", "has_weight": true, "path_weight": 1.7320508075688772,
         "path_shape": [2, 1], "weight_offset": 2, "cg": {"tensor": "l0.tp.cg.1", "shape": [1, 3, 3]}}]},
    "linear_2": {"op": "linear", "irreps_in": "2x0e+2x1o", "irreps_out": "1x0o+2x0e+1x1o",
      "weight": {"tensor": "l0.lin2", "shape": [6]},
      "instructions": [{"i_in": 0, "i_out": 1, "path_shape": [2, 2], "path_weight": 0.7071067811865476, "weight_offset": 0},
                       {"i_in": 1, "i_out": 2, "path_shape": [2, 1], "path_weight": 0.7071067811865476, "weight_offset": 4}]},
    "gate": {"op": "gate", "irreps_in": "1x0o+2x0e+1x1o", "irreps_out": "1x0e+1x0o+1x1o",
      "irreps_scalars": "1x0e+1x0o", "irreps_gates": "1x0e", "irreps_gated": "1x1o",
      "index_scalars": [1, 0], "index_gates": [2], "index_gated": [3, 4, 5],
      "act_scalars": [{"name": "silu", "cst": 1.6791767923989418}, {"name": "tanh", "cst": 1.5937334472592695}],
      "act_gates": [{"name": "sigmoid", "cst": 1.0}]}},
   {"class": "nequip.nn.convnetlayer.ConvNetLayer", "irreps_in": "1x0e+1x0o+1x1o",
    "irreps_out": "2x0e", "resnet": false,
    "sc": {"op": "tensor_product", "irreps_in1": "1x0e+1x0o+1x1o", "irreps_in2": "2x0e", "irreps_out": "2x0e",
      "weight_source": "internal", "weight_numel": 4, "weight": {"tensor": "l1.sc.w", "shape": [4]},
      "cg_includes_path_weight": true, "cg_max_deviation_from_wigner_3j": 0.0,
      "instructions": [{"i_in1": 0, "i_in2": 0, "i_out": 0, "mode": "uvw", "has_weight": true,
        "path_weight": 0.7071067811865476, "path_shape": [1, 2, 2], "weight_offset": 0,
        "cg": {"tensor": "l1.sc.cg.0", "shape": [1, 1, 1]}}]},
    "linear_1": {"op": "linear", "irreps_in": "1x0e+1x0o+1x1o", "irreps_out": "1x0e+1x0o+1x1o",
      "weight": {"tensor": "l1.lin1", "shape": [3]},
      "instructions": [{"i_in": 0, "i_out": 0, "path_shape": [1, 1], "path_weight": 1.0, "weight_offset": 0},
                       {"i_in": 1, "i_out": 1, "path_shape": [1, 1], "path_weight": 1.0, "weight_offset": 1},
                       {"i_in": 2, "i_out": 2, "path_shape": [1, 1], "path_weight": 1.0, "weight_offset": 2}]},
    "norm_const": {"tensor": "l1.norm", "shape": [1]},
    "edge_mlp": {"op": "mlp", "layers": [
      {"weight": {"tensor": "l1.mlp.0", "shape": [2, 2]}, "bias": null, "weight_scale": 0.7071067811865476,
       "activation": null, "out_scale": 1.0}]},
    "tp": {"op": "tensor_product", "irreps_in1": "1x0e+1x0o+1x1o", "irreps_in2": "1x0e+1x1o",
      "irreps_out": "1x0e+1x0e", "weight_source": "external", "weight_numel": 2, "weight": null,
      "cg_includes_path_weight": true, "cg_max_deviation_from_wigner_3j": 0.0,
      "instructions": [
        {"i_in1": 0, "i_in2": 0, "i_out": 0, "mode": "uvu", "has_weight": true, "path_weight": 1.0,
         "path_shape": [1, 1], "weight_offset": 0, "cg": {"tensor": "l1.tp.cg.0", "shape": [1, 1, 1]}},
        {"i_in1": 2, "i_in2": 1, "i_out": 1, "mode": "uvu", "has_weight": true, "path_weight": 1.0,
         "path_shape": [1, 1], "weight_offset": 1, "cg": {"tensor": "l1.tp.cg.1", "shape": [3, 3, 1]}}]},
    "linear_2": {"op": "linear", "irreps_in": "2x0e", "irreps_out": "2x0e",
      "weight": {"tensor": "l1.lin2", "shape": [4]},
      "instructions": [{"i_in": 0, "i_out": 0, "path_shape": [2, 2], "path_weight": 0.7071067811865476, "weight_offset": 0}]},
    "gate": {"op": "gate", "irreps_in": "2x0e", "irreps_out": "2x0e", "irreps_scalars": "2x0e",
      "irreps_gates": "", "irreps_gated": "", "index_scalars": [0, 1], "index_gates": [],
      "index_gated": [], "act_scalars": [{"name": "silu", "cst": 1.6791767923989418}], "act_gates": []}}],
  "readout": {"op": "mlp", "layers": [{"weight": {"tensor": "ro.w", "shape": [2, 1]}, "bias": null,
    "weight_scale": 0.7071067811865476, "activation": null, "out_scale": 1.0}]},
  "scale_shift": {"scales": {"tensor": "ss.scales", "shape": [2]}, "shifts": {"tensor": "ss.shifts", "shape": [2]}},
  "pair_potential": {"type": "zbl_nequip", "atomic_numbers": [29.0, 79.0], "qqr2exesquare": 7.1998225,
    "pzbl": 0.23, "a0": 0.4685, "c": [0.02817, 0.28022, 0.50986, 0.18175],
    "d": [-0.20162, -0.4029, -0.94229, -3.1998], "cutoff_p": 6.0}
 }
})json";

File nequip_file() {
  File f;
  f.model = json::parse(kNequipJson);
  add_tensors(f, f.model,
              {{"rad.recip", {1 / 4.0, 1 / 3.5, 1 / 3.5, 1 / 2.5}},
               {"l0.tp.cg.0", {1.0}},
               {"l0.tp.cg.1", kIdentity3},
               {"l1.sc.cg.0", {0.7071067811865476}},
               {"l1.tp.cg.0", {-1.0}},  // a sign flip: any sign of wigner_3j is an export
               {"l1.tp.cg.1", kDelta3},
               {"l1.norm", {0.25}},
               {"ss.scales", {1.5, 0.5}},
               {"ss.shifts", {-3.0, -2.0}}});
  return f;
}

// ---------------------------------------------------------------------------------------------

// Parses @p f and expects a ModelFormatError whose message contains every one of @p parts.
void expect_rejected(const File& f, const std::vector<std::string>& parts) {
  try {
    f.parse();
    ADD_FAILURE() << "accepted; expected a ModelFormatError containing \"" << parts.front() << "\"";
  } catch (const ModelFormatError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model file \"hand.safetensors\""), std::string::npos) << what;
    for (const std::string& p : parts)
      EXPECT_NE(what.find(p), std::string::npos) << "missing \"" << p << "\" in: " << what;
  }
}

TEST(ModelReader, DecodesHandMadeMace) {
  const model::Model m = mace_file().parse();
  EXPECT_EQ(m.arch, model::Arch::kMace);
  EXPECT_EQ(m.format_version, "1.0");
  EXPECT_EQ(m.source_sha256, "abc123");
  ASSERT_EQ(m.num_species(), 2);
  EXPECT_EQ(m.species[1].symbol, "Au");
  EXPECT_EQ(m.species[1].Z, 79);
  EXPECT_EQ(m.r_max, 4.0);
  EXPECT_EQ(m.r_max_pairs, Vec(4, 4.0));
  EXPECT_EQ(m.edge_vector, model::EdgeVector::kCentreMinusNeighbour);
  EXPECT_EQ(m.sh_lmax, 1);
  EXPECT_EQ(m.sh_irreps, Irreps("1x0e+1x1o"));
  ASSERT_TRUE(m.mace && !m.nequip);
  const model::Mace& mace = *m.mace;
  EXPECT_EQ(mace.radial.num_basis, 2);
  EXPECT_EQ(mace.radial.cutoff_p, 5.0);
  EXPECT_FALSE(mace.radial.agnesi || mace.radial.soft || mace.pair_repulsion);
  ASSERT_EQ(mace.interactions.size(), 1u);
  const model::MaceInteraction& I = mace.interactions[0];
  EXPECT_TRUE(I.residual && I.skip_on_node_features && !I.density_normalization);
  EXPECT_EQ(I.avg_num_neighbors, 3.0);
  EXPECT_EQ(I.radial_mlp.dim_in(), 2);
  EXPECT_EQ(I.radial_mlp.dim_out(), 4);
  ASSERT_TRUE(I.radial_mlp.layers[0].activation);
  EXPECT_EQ(I.radial_mlp.layers[0].activation->kind, model::Activation::Kind::kSilu);
  EXPECT_FALSE(I.radial_mlp.layers[1].activation);
  // conv_tp: exported couplings, per-edge weights, path 1 = the identity coupling as given.
  const TensorProduct& conv = I.conv_tp.descriptor;
  EXPECT_TRUE(I.conv_tp.external_weights);
  EXPECT_FALSE(conv.shared_weights());
  EXPECT_TRUE(conv.explicit_couplings());
  EXPECT_EQ(conv.weight_numel(), 4);
  ASSERT_EQ(conv.paths().size(), 2u);
  ASSERT_EQ(conv.paths()[1].cg.size(), 3u);
  for (int m3 = 0; m3 < 3; ++m3) {
    EXPECT_EQ(conv.paths()[1].cg[m3].j, m3);
    EXPECT_EQ(conv.paths()[1].cg[m3].k, m3);
    EXPECT_EQ(conv.paths()[1].cg[m3].c, 1.0);
  }
  EXPECT_EQ(conv.paths()[1].weight_offset, 2);
  EXPECT_TRUE(I.conv_tp.weight.empty());
  EXPECT_EQ(I.skip_tp.weight.size(), 8u);
  EXPECT_TRUE(I.skip_tp.descriptor.shared_weights());
  EXPECT_EQ(I.skip_tp.descriptor.paths()[0].cg[0].c, 0.5);
  ASSERT_EQ(I.linear.instructions.size(), 2u);
  EXPECT_EQ(I.linear.instructions[1].weight_offset, 4);
  EXPECT_EQ(I.linear.instructions[1].mul_out, 2);
  const model::MaceProduct& P = mace.products[0];
  EXPECT_EQ(P.contraction.num_features, 2);
  EXPECT_EQ(P.contraction.dim_a, 4);
  ASSERT_EQ(P.contraction.contractions[0].terms.size(), 1u);
  EXPECT_EQ(P.contraction.contractions[0].terms[0].K, 1);
  EXPECT_EQ(P.contraction.contractions[0].terms[0].U, (Vec{1, 0, 0, 0}));
  EXPECT_EQ(P.contraction.contractions[0].terms[0].W.size(), 4u);
  EXPECT_TRUE(P.add_skip);
  ASSERT_EQ(mace.readouts.size(), 1u);
  EXPECT_FALSE(mace.readouts[0].nonlinear);
  EXPECT_EQ(mace.atomic_energies, (Vec{-3.5, -2.25}));
  EXPECT_EQ(mace.scale, 1.5);
  EXPECT_EQ(mace.shift, -0.25);
}

TEST(ModelReader, DecodesHandMadeNequip) {
  const model::Model m = nequip_file().parse();
  ASSERT_TRUE(m.nequip && !m.mace);
  EXPECT_EQ(m.arch, model::Arch::kNequip);
  EXPECT_EQ(m.edge_vector, model::EdgeVector::kNeighbourMinusCentre);
  EXPECT_EQ(m.model_dtype, "float32");
  EXPECT_EQ(m.species[0].type_name, "Cu");
  EXPECT_EQ(m.r_max_pairs, (Vec{4.0, 3.5, 3.5, 2.5}));
  const model::Nequip& nq = *m.nequip;
  EXPECT_EQ(nq.embedding_dim, 2);
  EXPECT_EQ(nq.type_embedding.size(), 4u);
  EXPECT_EQ(nq.radial.rmax_recip[3], 1 / 2.5);
  EXPECT_EQ(nq.radial.cutoff_p, 6.0);
  ASSERT_EQ(nq.layers.size(), 2u);
  const model::NequipLayer& L0 = nq.layers[0];
  EXPECT_FALSE(L0.sc);
  EXPECT_EQ(L0.edge_mlp.layers[0].bias.size(), 3u);
  // The gate: scalars 0e (input 1) and 0o (input 0), gate 0e (input 2), gated 1o (3..5).
  EXPECT_EQ(L0.gate.index_scalars, (std::vector<int>{1, 0}));
  EXPECT_EQ(L0.gate.index_gates, (std::vector<int>{2}));
  EXPECT_EQ(L0.gate.index_gated, (std::vector<int>{3, 4, 5}));
  ASSERT_EQ(L0.gate.act_scalars.size(), 2u);
  EXPECT_EQ(L0.gate.act_scalars[1]->kind, model::Activation::Kind::kTanh);
  EXPECT_EQ(L0.gate.act_gates[0]->kind, model::Activation::Kind::kSigmoid);
  const model::NequipLayer& L1 = nq.layers[1];
  ASSERT_TRUE(L1.sc);
  EXPECT_EQ(L1.sc->weight.size(), 4u);
  EXPECT_EQ(L1.norm_const, (Vec{0.25, 0.25}));  // [1] broadcast to every species
  // The sign-flipped coupling is kept as exported.
  EXPECT_EQ(L1.tp.descriptor.paths()[0].cg[0].c, -1.0);
  EXPECT_EQ(L1.tp.descriptor.paths()[1].cg.size(), 3u);
  EXPECT_EQ(nq.readout.dim_in(), 2);
  EXPECT_EQ(nq.scales, (Vec{1.5, 0.5}));
  EXPECT_EQ(nq.shifts, (Vec{-3.0, -2.0}));
  ASSERT_TRUE(nq.pair_potential);
  EXPECT_EQ(nq.pair_potential->atomic_numbers, (Vec{29, 79}));
}

TEST(ModelReader, ReadsFromDiskAndNamesMissingFiles) {
  const std::string path = ::testing::TempDir() + "/clebsch_reader_hand.safetensors";
  const auto bytes = mace_file().bytes();
  FILE* out = std::fopen(path.c_str(), "wb");
  ASSERT_NE(out, nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), out);
  std::fclose(out);
  EXPECT_EQ(read_model(path).num_species(), 2);
  try {
    read_model(path + ".missing");
    ADD_FAILURE() << "accepted a missing file";
  } catch (const ModelFormatError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ".missing"), std::string::npos) << e.what();
  }
}

// --- versions and container metadata ---------------------------------------------------------

TEST(ModelReader, RejectsUnknownMajorVersionNamingBoth) {
  File f = mace_file();
  f.metadata["format_version"] = "2.0";
  f.at("/format_version") = "2.0";
  // The message names the version this reader writes; the multi-head export made that 1.1.
  expect_rejected(f, {"format_version 2.0", "this reader understands 1.x (1.1)"});
  f.metadata["format_version"] = "0.9";
  expect_rejected(f, {"format_version 0.9", "1.x (1.1)"});
}

TEST(ModelReader, AcceptsNewerMinorAndIgnoresUnknownFields) {
  File f = mace_file();
  f.metadata["format_version"] = "1.7";
  f.at("/format_version") = "1.7";
  f.at("/some_future_field") = {{"x", 1}};
  f.at("/mace/interactions/0/conv_tp/future_option") = true;
  EXPECT_EQ(f.parse().format_version, "1.7");
}

TEST(ModelReader, RejectsWrongFormatAndMalformedVersions) {
  File f = mace_file();
  f.metadata["format"] = "clebsch-golden";
  expect_rejected(f, {"not a Clebsch model file", "\"clebsch-golden\""});
  f = mace_file();
  f.metadata.erase("format");
  expect_rejected(f, {"no \"format\" entry"});
  f = mace_file();
  f.metadata["format_version"] = "one";
  expect_rejected(f, {"format_version is \"one\"", "MAJOR.MINOR"});
  f = mace_file();
  f.at("/format_version") = "1.1";
  expect_rejected(f, {"format_version: is \"1.1\" but __metadata__.format_version is \"1.0\""});
  f = mace_file();
  f.metadata["model_json"] = "{\"format\": ";
  expect_rejected(f, {"model_json is not valid JSON"});
  f = mace_file();
  f.metadata["model_json"] = "[1, 2]";
  expect_rejected(f, {"model_json: is not a JSON object"});
  f = mace_file();
  f.at("/tensor_dtype") = "float32";
  expect_rejected(f, {"tensor_dtype: expected one of \"float64\", found \"float32\""});
  f = mace_file();
  f.at("/units/energy") = "kcal/mol";
  expect_rejected(f, {"units.energy: expected one of \"eV\", found \"kcal/mol\""});
}

// --- fields and JSON types ---------------------------------------------------------------------

TEST(ModelReader, NamesMissingFieldsByJsonPath) {
  File f = mace_file();
  f.erase("/mace/interactions/0/conv_tp/instructions/1/i_in1");
  expect_rejected(
      f, {"mace.interactions[0].conv_tp.instructions[1]: missing required field \"i_in1\""});
  f = mace_file();
  f.erase("/mace/products");
  expect_rejected(f, {"mace: missing required field \"products\""});
  f = mace_file();
  f.erase("/r_max_pairs");
  expect_rejected(f, {"model_json: missing required field \"r_max_pairs\""});
  f = nequip_file();
  f.erase("/nequip/layers/1/gate/index_gated");
  expect_rejected(f, {"nequip.layers[1].gate: missing required field \"index_gated\""});
}

TEST(ModelReader, TurnsJsonTypeErrorsIntoMessagesWithPathAndValue) {
  File f = mace_file();
  f.at("/mace/interactions/0/conv_tp/instructions/1/i_in1") = "abc";
  expect_rejected(f, {"mace.interactions[0].conv_tp.instructions[1].i_in1: expected an integer, "
                      "found a string \"abc\""});
  f = mace_file();
  f.at("/mace/interactions/0/conv_tp/instructions/1/i_in1") = 0.0;  // a float is not an index
  expect_rejected(f, {"instructions[1].i_in1: expected an integer, found a number 0.0"});
  f = mace_file();
  f.at("/mace/interactions/0/residual") = 1;
  expect_rejected(f, {"mace.interactions[0].residual: expected true or false, found an integer 1"});
  f = mace_file();
  f.at("/r_max") = "4.0";
  expect_rejected(f, {"r_max: expected a number, found a string \"4.0\""});
  f = mace_file();
  f.at("/mace/interactions") = {{"a", 1}};
  expect_rejected(f, {"mace.interactions: expected an array, found an object"});
  f = mace_file();
  f.at("/mace/radial") = json::array();
  expect_rejected(f, {"mace.radial: expected an object, found an array []"});
  f = nequip_file();
  f.at("/nequip/layers/0/gate/act_scalars/1/name") = "relu";
  expect_rejected(
      f, {"nequip.layers[0].gate.act_scalars[1].name: expected one of \"silu\"", "found \"relu\""});
  f = mace_file();
  f.at("/mace/interactions/0/conv_tp/instructions/0/weight_offset") = 18446744073709551615ull;
  expect_rejected(f, {"instructions[0].weight_offset: expected an integer in [0, 1073741824], "
                      "found 18446744073709551615"});
}

TEST(ModelReader, RejectsIndicesOutOfRange) {
  File f = mace_file();
  f.at("/mace/interactions/0/conv_tp/instructions/1/i_in2") = 2;
  expect_rejected(
      f,
      {"conv_tp.instructions[1].i_in2: is 2, out of range: irreps_in2 \"1x0e+1x1o\" has 2 blocks"});
  f = mace_file();
  f.at("/mace/interactions/0/linear/instructions/0/i_out") = -1;
  expect_rejected(f, {"mace.interactions[0].linear.instructions[0].i_out: is -1, out of range"});
  f = mace_file();
  f.at("/mace/readouts/0/layer") = 1;
  expect_rejected(f, {"mace.readouts[0].layer: expected an integer in [0, 0], found 1"});
  f = nequip_file();
  f.at("/nequip/layers/0/gate/index_gated/2") = 6;
  expect_rejected(f,
                  {"nequip.layers[0].gate.index_gated[2]: expected an integer in [0, 5], found 6"});
}

// --- tensors ------------------------------------------------------------------------------------

TEST(ModelReader, ChecksTensorReferences) {
  File f = mace_file();
  f.at("/mace/atomic_energies/tensor") = "nope";
  f.tensors.erase("e0");
  expect_rejected(
      f, {"mace.atomic_energies.tensor: references tensor \"nope\", which the file does not hold"});
  f = mace_file();
  f.tensors["e0"].shape = {2, 1};
  expect_rejected(
      f, {"mace.atomic_energies.shape: is [2] but tensor \"e0\" has shape [2, 1] in the file"});
  f = mace_file();
  f.tensors["e0"] = {{3}, {1, 2, 3}};
  f.at("/mace/atomic_energies/shape") = {3};
  expect_rejected(f, {"mace.atomic_energies.shape: is [3], expected [2] ([num_species])"});
  f = mace_file();
  f.tensors["i0.up.w"].f32 = true;
  expect_rejected(
      f, {"mace.interactions[0].linear_up.weight.tensor: tensor \"i0.up.w\" is stored as F32"});
  f = mace_file();
  f.tensors["i0.lin.w"].values[5] = std::nan("");
  expect_rejected(f, {"mace.interactions[0].linear.weight: tensor \"i0.lin.w\" holds the "
                      "non-finite value nan at flat index 5"});
  f = mace_file();
  f.tensors["stray"] = {{1}, {0.0}};
  expect_rejected(f, {"tensor \"stray\" is not referenced by model_json"});
  f = mace_file();
  f.at("/mace/atomic_energies") = 3.0;
  expect_rejected(f, {"mace.atomic_energies: expected a tensor reference", "found 3.0"});
}

TEST(ModelReader, ChecksShapesImpliedByTheOps) {
  // Weight count of a linear: ref and tensor agree, but the instructions need 8.
  File f = mace_file();
  f.tensors["i0.lin.w"] = {{6}, values(6, 1)};
  f.at("/mace/interactions/0/linear/weight/shape") = {6};
  expect_rejected(f, {"mace.interactions[0].linear.weight.shape: is [6], expected [8]"});
  // A path shape that is not the blocks' multiplicities.
  f = mace_file();
  f.at("/mace/interactions/0/linear_up/instructions/0/path_shape") = {2, 3};
  expect_rejected(f, {"linear_up.instructions[0].path_shape: is [2, 3], expected [2, 2]"});
  // Weight offsets must tile the weights in order.
  f = mace_file();
  f.at("/mace/interactions/0/conv_tp/instructions/1/weight_offset") = 1;
  expect_rejected(f, {"conv_tp.instructions[1].weight_offset: is 1, expected 2"});
  // weight_numel must be what the instructions use.
  f = mace_file();
  f.at("/mace/interactions/0/conv_tp/weight_numel") = 5;
  expect_rejected(f, {"conv_tp.weight_numel: is 5, but the instructions use 4 weights"});
  // A coupling tensor of the wrong size for its irreps.
  f = mace_file();
  f.tensors["i0.conv.cg.1"] = {{1, 3, 1}, {1, 0, 0}};
  f.at("/mace/interactions/0/conv_tp/instructions/1/cg/shape") = {1, 3, 1};
  expect_rejected(f, {"conv_tp.instructions[1].cg.shape: is [1, 3, 1], expected [1, 3, 3]"});
  // Symmetric contraction: W is [num_species, K, num_features].
  f = mace_file();
  f.tensors["p0.W1"] = {{1, 1, 2}, {1, 2}};
  f.at("/mace/products/0/contractions/0/terms/0/W/shape") = {1, 1, 2};
  expect_rejected(
      f, {"mace.products[0].contractions[0].terms[0].W.shape: is [1, 1, 2], expected [2, 1, 2]"});
  // MLP chain: the second layer must read the first one's width.
  f = nequip_file();
  f.tensors["l0.mlp.1"] = {{2, 4}, values(8, 2)};
  f.at("/nequip/layers/0/edge_mlp/layers/1/weight/shape") = {2, 4};
  expect_rejected(f, {"nequip.layers[0].edge_mlp.layers[1].weight.shape: is [2, 4], but the "
                      "layer's input has width 3"});
}

// --- irreps -------------------------------------------------------------------------------------

TEST(ModelReader, RejectsMalformedIrreps) {
  File f = mace_file();
  f.at("/mace/interactions/0/irreps_target") = "2x0e+2x1q";
  expect_rejected(f, {"mace.interactions[0].irreps_target: not a valid irreps string", "2x1q"});
  f = mace_file();
  f.at("/mace/interactions/0/irreps_edge") = "2x13e";
  expect_rejected(f, {"mace.interactions[0].irreps_edge: not a valid irreps string", "l=13"});
  f = mace_file();
  f.at("/mace/interactions/0/irreps_edge") = "999999999x0e";
  expect_rejected(
      f,
      {"irreps_edge: irreps \"999999999x0e\" have dimension 999999999, more than the supported"});
}

TEST(ModelReader, ChecksIrrepsConsistencyBetweenOps) {
  // linear_up now outputs 3x0e (self-consistent), which is not conv_tp's first input.
  File f = mace_file();
  f.at("/mace/interactions/0/linear_up/irreps_out") = "3x0e";
  f.at("/mace/interactions/0/linear_up/instructions/0/path_shape") = {2, 3};
  f.at("/mace/interactions/0/linear_up/weight/shape") = {6};
  f.tensors["i0.up.w"] = {{6}, values(6, 3)};
  expect_rejected(f, {"mace.interactions[0].conv_tp.irreps_in1: is \"2x0e\", which does not match "
                      "mace.interactions[0].linear_up.irreps_out \"3x0e\""});
  // Same layout, other block split: accepted (the memory is the same).
  f = mace_file();
  f.at("/mace/interactions/0/linear_up/irreps_out") = "1x0e+1x0e";
  f.at("/mace/interactions/0/linear_up/instructions") = json::parse(
      R"([{"i_in": 0, "i_out": 0, "path_shape": [2, 1], "path_weight": 0.7, "weight_offset": 0},
          {"i_in": 0, "i_out": 1, "path_shape": [2, 1], "path_weight": 0.7, "weight_offset": 2}])");
  EXPECT_NO_THROW(f.parse());
  // irreps_mid is conv_tp's output, block by block.
  f = mace_file();
  f.at("/mace/interactions/0/irreps_mid") = "2x0e+2x1e";
  expect_rejected(f, {"mace.interactions[0].irreps_mid: is \"2x0e+2x1e\", expected "
                      "mace.interactions[0].conv_tp.irreps_out \"2x0e+2x1o\""});
  // The conv TP's weights come from the radial MLP, one per weight.
  f = mace_file();
  f.tensors["i0.mlp.1"] = {{3, 5}, values(15, 4)};
  f.at("/mace/interactions/0/radial_mlp/layers/1/weight/shape") = {3, 5};
  expect_rejected(f, {"mace.interactions[0].radial_mlp: produces 5 weights per edge, but "
                      "mace.interactions[0].conv_tp.weight_numel is 4"});
  // The conv TP's second input is the spherical harmonics.
  f = mace_file();
  f.at("/mace/interactions/0/conv_tp/irreps_in2") = "1x0e+1x1e";
  f.at("/mace/interactions/0/irreps_edge_attrs") = "1x0e+1x1e";
  expect_rejected(
      f,
      {"irreps_edge_attrs: is \"1x0e+1x1e\", expected spherical_harmonics.irreps \"1x0e+1x1o\""});
  // The product reads irreps_target.
  f = mace_file();
  f.at("/mace/products/0/irreps_in") = "2x0e+2x1e";
  expect_rejected(f, {"mace.products[0].irreps_in: is \"2x0e+2x1e\", expected "
                      "mace.interactions[0].irreps_target"});
  // The readout ends in one energy.
  f = mace_file();
  f.at("/mace/readouts/0/linear/irreps_out") = "2x0e";
  f.at("/mace/readouts/0/linear/instructions/0/path_shape") = {2, 2};
  f.at("/mace/readouts/0/linear/weight/shape") = {4};
  f.tensors["r0.w"] = {{4}, values(4, 5)};
  expect_rejected(f, {"mace.readouts[0].linear.irreps_out: is \"2x0e\", which does not match one "
                      "energy, \"1x0e\""});
  // The skip of a residual block reads the node features.
  f = mace_file();
  f.at("/mace/interactions/0/skip_tp_input") = "message";
  expect_rejected(f, {"mace.interactions[0].skip_tp_input: is \"message\", but a residual block"});
  // Class and flags agree.
  f = mace_file();
  f.at("/mace/interactions/0/class") = "mace.modules.blocks.RealAgnosticInteractionBlock";
  expect_rejected(f, {"mace.interactions[0].residual: disagrees with class"});
  // A linear joins equal irreps only.
  f = mace_file();
  f.at("/mace/interactions/0/linear/instructions/1/i_out") = 0;
  expect_rejected(f, {"mace.interactions[0].linear.instructions[1]: joins input block 1 (1o) to "
                      "output block 0 (0e)"});
  // NequIP: the gate's output is the layer's output; tp modes are what the engines expect.
  f = nequip_file();
  f.at("/nequip/layers/0/irreps_out") = "1x0e+1x0e+1x1o";
  expect_rejected(f, {"nequip.layers[0].irreps_out: is \"1x0e+1x0e+1x1o\", which does not match "
                      "nequip.layers[0].gate.irreps_out"});
  f = nequip_file();
  f.at("/nequip/layers/0/tp/instructions/0/mode") = "uvw";
  expect_rejected(f, {"nequip.layers[0].tp.instructions[0].mode: is \"uvw\", expected \"uvu\""});
  f = nequip_file();
  f.at("/nequip/layers/1/sc/irreps_in2") = "3x0e";
  expect_rejected(
      f, {"nequip.layers[1].sc.instructions[0].path_shape: is [1, 2, 2], expected [1, 3, 2]"});
}

TEST(ModelReader, ChecksSelectionRulesAndCouplings) {
  // 0e x 1o -> 1e breaks parity; the TensorProduct rules apply to exported instructions too.
  File f = mace_file();
  f.at("/mace/interactions/0/conv_tp/irreps_out") = "2x0e+2x1e";
  expect_rejected(f,
                  {"mace.interactions[0].conv_tp.instructions: instruction 1", "parity violated"});
  // A coupling that is not a multiple of wigner_3j is not equivariant.
  f = mace_file();
  f.tensors["i0.conv.cg.1"].values[1] = 0.5;
  expect_rejected(
      f, {"conv_tp.instructions[1].cg: the coupling is not a multiple of wigner_3j(0, 1, 1)"});
  // A multiple of the wrong size: the coupling includes path_weight.
  f = mace_file();
  for (double& v : f.tensors["i0.conv.cg.1"].values) v *= 2;
  expect_rejected(
      f, {"conv_tp.instructions[1].cg: the coupling is", "but path_weight is 1.7320508075688772"});
  // Either sign is an export (e3nn 0.4.4 and 0.6 differ for odd l1+l2+l3).
  f = mace_file();
  for (double& v : f.tensors["i0.conv.cg.1"].values) v = -v;
  EXPECT_NO_THROW(f.parse());
}

TEST(ModelReader, CrossChecksGateIndicesWithE3nnGate) {
  File f = nequip_file();
  f.at("/nequip/layers/0/gate/index_scalars") = {0, 1};
  expect_rejected(
      f, {"nequip.layers[0].gate.index_scalars[0]: is 0, but e3nn's Gate reads input 1 there"});
  f = nequip_file();
  f.at("/nequip/layers/0/gate/irreps_in") = "2x0e+1x0o+1x1o";
  expect_rejected(f, {"nequip.layers[0].gate.irreps_in: is \"2x0e+1x0o+1x1o\", which does not "
                      "match e3nn's Gate input"});
  // An odd scalar needs an odd or even activation: silu is neither.
  f = nequip_file();
  f.at("/nequip/layers/0/gate/act_scalars/1") = {{"name", "silu"}, {"cst", 1.0}};
  expect_rejected(
      f, {"nequip.layers[0].gate.act_scalars[1]: activation \"silu\" is neither even nor odd"});
  // abs is even: 0o -> 0e, which changes the output irreps.
  f = nequip_file();
  f.at("/nequip/layers/0/gate/act_scalars/1") = {{"name", "abs"}, {"cst", 1.0}};
  expect_rejected(f, {"nequip.layers[0].gate.irreps_out: is \"1x0e+1x0o+1x1o\", which does not "
                      "match e3nn's Gate output",
                      "\"1x0e+1x0e+1x1o\""});
  f = nequip_file();
  f.at("/nequip/layers/0/gate/irreps_gates") = "2x0e";
  expect_rejected(f, {"nequip.layers[0].gate.irreps_gates: has 2 gates for 1 gated irreps"});
}

// --- species, cutoffs, spherical harmonics --------------------------------------------------

TEST(ModelReader, ChecksSpecies) {
  File f = mace_file();
  f.at("/species/1/symbol") = "Cu";
  f.at("/species/1/Z") = 0;
  expect_rejected(f, {"species[1].symbol: \"Cu\" names two species"});
  f = mace_file();
  f.at("/species/1/Z") = 200;
  expect_rejected(f, {"species[1].Z: expected an integer in [0, 118], found 200"});
  f = mace_file();
  f.at("/species/0/symbol") = "Ag";
  expect_rejected(f, {"species[0].symbol: is \"Ag\", but Z = 29 is Cu"});
  f = mace_file();
  f.at("/species/1/index") = 0;
  expect_rejected(f, {"species[1].index: expected an integer in [1, 1], found 0"});
  f = mace_file();
  f.at("/species") = json::array();
  expect_rejected(f, {"species: the model has no species"});
  // A third species without its one-hot column: the node embedding no longer fits.
  f = mace_file();
  f.at("/species").push_back({{"index", 2}, {"Z", 8}, {"symbol", "O"}});
  f.at("/r_max_pairs") = json::parse("[[4,4,4],[4,4,4],[4,4,4]]");
  expect_rejected(
      f, {"mace.node_embedding.irreps_in: is \"2x0e\", which does not match the one-hot species"});
  // ZBL's atomic numbers are the species'.
  f = nequip_file();
  f.at("/nequip/pair_potential/atomic_numbers/1") = 47.0;
  expect_rejected(f, {"nequip.pair_potential.atomic_numbers[1]: is 47, but species[1] has Z = 79"});
}

TEST(ModelReader, ChecksCutoffs) {
  File f = mace_file();
  f.at("/r_max_pairs") = json::parse("[[4.0, 4.0]]");
  expect_rejected(f, {"r_max_pairs: has 1 rows, expected one per species (2)"});
  f = mace_file();
  f.at("/r_max_pairs/0/1") = 4.5;
  expect_rejected(f, {"r_max_pairs[0][1]: is 4.5, larger than r_max = 4"});
  f = mace_file();
  f.at("/r_max_pairs/1/0") = 3.0;
  expect_rejected(f, {"r_max_pairs[1][0]: is 3, but a MACE model has the one cutoff r_max = 4"});
  f = mace_file();
  f.at("/r_max") = -1.0;
  expect_rejected(f, {"r_max: expected a number > 0, found -1"});
  f = mace_file();
  f.at("/mace/radial/cutoff/r_max") = 5.0;
  expect_rejected(f, {"mace.radial.cutoff.r_max: is 5.0, but the basis r_max is 4"});
  f = nequip_file();
  f.tensors["rad.recip"].values[1] = 1 / 3.0;
  expect_rejected(f, {"nequip.radial.rmax_recip: entry [0][1] is 0.33333333333333331, but "
                      "r_max_pairs[0][1] is 3.5"});
}

TEST(ModelReader, ChecksSphericalHarmonics) {
  File f = mace_file();
  f.at("/spherical_harmonics/lmax") = 2;
  expect_rejected(
      f,
      {"spherical_harmonics.irreps: is \"1x0e+1x1o\", expected the spherical harmonics l = 0..2"});
  f = mace_file();
  f.at("/spherical_harmonics/irreps") = "1x0e+2x1o";
  expect_rejected(f, {"spherical_harmonics.irreps: is \"1x0e+2x1o\""});
  f = mace_file();
  f.at("/spherical_harmonics/normalization") = "norm";
  expect_rejected(
      f, {"spherical_harmonics.normalization: expected one of \"component\", found \"norm\""});
  f = mace_file();
  f.at("/spherical_harmonics/lmax") = 13;
  expect_rejected(f, {"spherical_harmonics.lmax: expected an integer in [0, 12], found 13"});
}

TEST(ModelReader, RejectsTruncatedAndCorruptContainers) {
  auto bytes = mace_file().bytes();
  bytes.resize(bytes.size() - 3);
  try {
    parse_model(SafetensorsFile::parse(bytes, "cut.safetensors"));
    ADD_FAILURE() << "accepted a truncated file";
  } catch (const ModelFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("cut.safetensors"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace clebsch
