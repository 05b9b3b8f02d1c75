// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// TensorProduct against the real e3nn 0.6 o3.TensorProduct (reference/ref_tensor_product.py):
// the derived normalisation coefficients, path shapes and weight counts, and in float64 the
// forward, the autograd backward and the autograd double backward on random rows, for MACE's
// uvu layout, NequIP's, FullyConnectedTensorProduct (every normalisation variant, shared and
// per-row weights), ElementwiseTensorProduct and explicit mixed-mode instructions.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "clebsch/o3/tensor_product.h"
#include "reference_data.h"

namespace clebsch {
namespace {

using test::flat;
using test::load_reference;
using test::max_rel_error;
using Vec = std::vector<double>;

constexpr double kTol = 1e-12;  // float64, relative to the largest reference entry

const nlohmann::json& find_case(const std::string& name) {
  static const nlohmann::json data = load_reference("tensor_product");
  for (const auto& c : data.at("cases"))
    if (c.at("name") == name) return c;
  throw std::runtime_error("reference case " + name + " is missing from tensor_product.json");
}

TensorProduct make_tp(const nlohmann::json& c) {
  std::vector<Instruction> ins;
  for (const auto& i : c.at("instructions"))
    ins.emplace_back(i[0].get<int>(), i[1].get<int>(), i[2].get<int>(), i[3].get<std::string>(),
                     i[4].get<bool>(), i[5].get<double>());
  TensorProductOptions o;
  const std::string irrep_norm = c.at("irrep_normalization"),
                    path_norm = c.at("path_normalization");
  o.irrep_normalization = irrep_norm == "component" ? IrrepNormalization::kComponent
                          : irrep_norm == "norm"    ? IrrepNormalization::kNorm
                                                    : IrrepNormalization::kNone;
  o.path_normalization = path_norm == "element" ? PathNormalization::kElement
                         : path_norm == "path"  ? PathNormalization::kPath
                                                : PathNormalization::kNone;
  o.in1_var = c.at("in1_var").get<Vec>();
  o.in2_var = c.at("in2_var").get<Vec>();
  o.out_var = c.at("out_var").get<Vec>();
  o.shared_weights = c.at("shared_weights");
  return TensorProduct(Irreps(c.at("irreps_in1").get<std::string>()),
                       Irreps(c.at("irreps_in2").get<std::string>()),
                       Irreps(c.at("irreps_out").get<std::string>()), ins, o);
}

class E3nnTensorProduct : public ::testing::TestWithParam<std::string> {};

TEST_P(E3nnTensorProduct, DerivesTheSameCoefficientsAndWeightLayout) {
  const auto& c = find_case(GetParam());
  const TensorProduct tp = make_tp(c);
  EXPECT_EQ(tp.weight_numel(), c.at("weight_numel").get<int>());
  const Vec coefficients = c.at("coefficients");
  ASSERT_EQ(tp.paths().size(), coefficients.size());
  for (std::size_t k = 0; k < coefficients.size(); ++k) {
    EXPECT_NEAR(tp.paths()[k].coefficient, coefficients[k], 1e-15 * coefficients[k]) << k;
    EXPECT_EQ(tp.paths()[k].path_shape, c.at("path_shapes")[k].get<std::vector<int>>()) << k;
  }
}

TEST_P(E3nnTensorProduct, ForwardBackwardAndDoubleBackwardMatchAutograd) {
  const auto& c = find_case(GetParam());
  const TensorProduct tp = make_tp(c);
  const int B = c.at("batch");
  const Vec x1 = flat(c["x1"]), x2 = flat(c["x2"]), w = flat(c["w"]), g = flat(c["grad_out"]);
  const Vec dx1 = flat(c["dx1"]), dx2 = flat(c["dx2"]), dw = flat(c["dw"]);
  ASSERT_EQ(x1.size(), std::size_t(B) * tp.dim_in1());
  ASSERT_EQ(x2.size(), std::size_t(B) * tp.dim_in2());
  ASSERT_EQ(w.size(), std::size_t(tp.weight_numel()) * (tp.shared_weights() ? 1 : B));

  Vec out(g.size());
  tensor_product_forward<double>(tp, B, x1.data(), x2.data(), w.data(), out.data());
  Vec gx1(x1.size()), gx2(x2.size()), gw(w.size());
  tensor_product_backward<double>(tp, B, x1.data(), x2.data(), w.data(), g.data(), gx1.data(),
                                  gx2.data(), gw.data());
  Vec ddx1(x1.size()), ddx2(x2.size()), ddw(w.size()), ddg(g.size());
  tensor_product_double_backward<double>(tp, B, x1.data(), x2.data(), w.data(), g.data(),
                                         dx1.data(), dx2.data(), dw.data(), ddx1.data(),
                                         ddx2.data(), ddw.data(), ddg.data());

  const std::vector<std::pair<const char*, const Vec*>> checks = {
      {"out", &out},    {"grad_x1", &gx1}, {"grad_x2", &gx2}, {"grad_w", &gw},
      {"dd_x1", &ddx1}, {"dd_x2", &ddx2},  {"dd_w", &ddw},    {"dd_grad_out", &ddg}};
  for (const auto& [key, ours] : checks) {
    const Vec ref = flat(c[key]);
    const double err = max_rel_error(*ours, ref);
    EXPECT_LT(err, kTol) << GetParam() << " " << key;
    std::cout << "[ e3nn ] " << GetParam() << " " << key << " max rel error " << err << "\n";
  }
}

// An exporter reads e3nn's tp.instructions, whose path_weight is the derived coefficient
// sqrt(alpha), not the constructor's path_weight. Rebuilding with irrep/path normalisation 'none'
// and path_weight = coefficient^2 must reproduce the module.
TEST_P(E3nnTensorProduct, RebuildsFromExportedCoefficients) {
  const auto& c = find_case(GetParam());
  const Vec coefficients = c.at("coefficients");
  std::vector<Instruction> ins;
  for (std::size_t k = 0; k < coefficients.size(); ++k) {
    const auto& i = c.at("instructions")[k];
    ins.emplace_back(i[0].get<int>(), i[1].get<int>(), i[2].get<int>(), i[3].get<std::string>(),
                     i[4].get<bool>(), coefficients[k] * coefficients[k]);
  }
  TensorProductOptions o;
  o.irrep_normalization = IrrepNormalization::kNone;
  o.path_normalization = PathNormalization::kNone;
  o.shared_weights = c.at("shared_weights");
  const TensorProduct tp(Irreps(c.at("irreps_in1").get<std::string>()),
                         Irreps(c.at("irreps_in2").get<std::string>()),
                         Irreps(c.at("irreps_out").get<std::string>()), ins, o);
  const int B = c.at("batch");
  const Vec x1 = flat(c["x1"]), x2 = flat(c["x2"]), w = flat(c["w"]), ref = flat(c["out"]);
  Vec out(ref.size());
  tensor_product_forward<double>(tp, B, x1.data(), x2.data(), w.data(), out.data());
  EXPECT_LT(max_rel_error(out, ref), kTol);
}

INSTANTIATE_TEST_SUITE_P(Cases, E3nnTensorProduct,
                         ::testing::Values("mace_uvu", "nequip_uvu", "fctp_component_element",
                                           "fctp_norm_element", "fctp_component_path",
                                           "fctp_norm_path", "fctp_none_none", "fctp_per_row",
                                           "elementwise_uuu", "explicit_shared", "explicit_per_row",
                                           "explicit_vars_element", "explicit_vars_path"));

}  // namespace
}  // namespace clebsch
