// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The fused convolution against e3nn as MACE and NequIP run it (reference/ref_convolution.py):
// o3.TensorProduct on gathered sender rows, index_add into receivers, and PyTorch autograd for
// the backward and double backward; float64, on graphs with empty rows and repeated edges.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "clebsch/o3/convolution.h"
#include "reference_data.h"

namespace clebsch {
namespace {

using test::flat;
using test::load_reference;
using test::max_rel_error;
using Vec = std::vector<double>;

constexpr double kTol = 1e-12;  // float64, relative to the largest reference entry

const nlohmann::json& find_case(const std::string& name) {
  static const nlohmann::json data = load_reference("convolution");
  for (const auto& c : data.at("cases"))
    if (c.at("name") == name) return c;
  throw std::runtime_error("reference case " + name + " is missing from convolution.json");
}

class E3nnConvolution : public ::testing::TestWithParam<std::string> {};

TEST_P(E3nnConvolution, ForwardBackwardAndDoubleBackwardMatchAutograd) {
  const auto& c = find_case(GetParam());
  std::vector<Instruction> ins;
  for (const auto& i : c.at("instructions"))
    ins.emplace_back(i[0].get<int>(), i[1].get<int>(), i[2].get<int>(), i[3].get<std::string>(),
                     i[4].get<bool>(), i[5].get<double>());
  TensorProductOptions options;
  options.shared_weights = false;
  const TensorProduct tp(Irreps(c.at("irreps_in1").get<std::string>()),
                         Irreps(c.at("irreps_in2").get<std::string>()),
                         Irreps(c.at("irreps_out").get<std::string>()), ins, options);
  ASSERT_EQ(tp.weight_numel(), c.at("weight_numel").get<int>());
  const EdgeIndex edges(c.at("num_senders").get<int>(), c.at("num_receivers").get<int>(),
                        c.at("sender").get<std::vector<int>>(),
                        c.at("receiver").get<std::vector<int>>());

  const Vec x = flat(c["x"]), Y = flat(c["Y"]), W = flat(c["W"]), g = flat(c["grad_out"]);
  const Vec dx = flat(c["dx"]), dY = flat(c["dY"]), dW = flat(c["dW"]);
  ASSERT_EQ(x.size(), std::size_t(edges.num_senders()) * tp.dim_in1());
  ASSERT_EQ(Y.size(), std::size_t(edges.num_edges()) * tp.dim_in2());
  ASSERT_EQ(g.size(), std::size_t(edges.num_receivers()) * tp.dim_out());

  Vec out(g.size());
  convolution_forward<double>(tp, edges, x.data(), Y.data(), W.data(), out.data());
  Vec gx(x.size()), gY(Y.size()), gW(W.size());
  convolution_backward<double>(tp, edges, x.data(), Y.data(), W.data(), g.data(), gx.data(),
                               gY.data(), gW.data());
  Vec ddx(x.size()), ddY(Y.size()), ddW(W.size()), ddg(g.size());
  convolution_double_backward<double>(tp, edges, x.data(), Y.data(), W.data(), g.data(), dx.data(),
                                      dY.data(), dW.data(), ddx.data(), ddY.data(), ddW.data(),
                                      ddg.data());

  const std::vector<std::pair<const char*, const Vec*>> checks = {
      {"out", &out},  {"grad_x", &gx}, {"grad_Y", &gY}, {"grad_W", &gW},
      {"dd_x", &ddx}, {"dd_Y", &ddY},  {"dd_W", &ddW},  {"dd_grad_out", &ddg}};
  for (const auto& [key, ours] : checks) {
    const double err = max_rel_error(*ours, flat(c[key]));
    EXPECT_LT(err, kTol) << GetParam() << " " << key;
    std::cout << "[ e3nn ] " << GetParam() << " " << key << " max rel error " << err << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, E3nnConvolution, ::testing::Values("mace", "nequip", "uvw"));

}  // namespace
}  // namespace clebsch
