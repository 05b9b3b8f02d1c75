// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The model reader's parts for the blocks of mace-torch's newer foundation models (FORMAT.md
// section 5): the residual_nonlinear interaction (RealAgnosticResidualNonLinearInteractionBlock),
// the nonlinear_bias readout and the per-structure embedding. Checks that they fit the way
// mace-torch wires them: species embeddings of width C0 (the layer input's scalars) widen the
// radial and density MLP inputs to num_basis + 2 C0, linear_1 and linear_res meet at the gate's
// input, the gate's output is the target irreps, and the embedding ends in h0's scalars.
#include <string>

#include "clebsch/model/model_reader_detail.h"
#include "clebsch/support/error.h"

namespace clebsch::model_reader {

model::MaceInteraction::NonLinear parse_nonlinear_interaction(const Node& n,
                                                              model::MaceInteraction& I,
                                                              const model::Model& top,
                                                              int num_basis) {
  model::MaceInteraction::NonLinear N;
  const std::string p = n.path();
  const int S = top.num_species();
  N.irreps_nonlin = n.at("irreps_nonlin").irreps();
  const Node src = n.at("source_embedding"), tgt = n.at("target_embedding");
  N.source_embedding = parse_linear(src);
  N.target_embedding = parse_linear(tgt);
  expect_layout(src.at("irreps_in"), N.source_embedding.irreps_in, scalars(S),
                "the one-hot species, num_species x 0e,");
  expect_irreps(tgt.at("irreps_in"), N.target_embedding.irreps_in, scalars(S),
                "the one-hot species, num_species x 0e,");
  expect_layout(tgt.at("irreps_out"), N.target_embedding.irreps_out, N.source_embedding.irreps_out,
                p + ".source_embedding.irreps_out");
  const int width = num_basis + 2 * static_cast<int>(irreps_dim(N.source_embedding.irreps_out));

  const Node up = n.at("linear_up");
  I.linear_up = parse_linear(up);
  expect_layout(up.at("irreps_in"), I.linear_up.irreps_in, I.irreps_node_in, p + ".irreps_node_in");
  const Node conv = n.at("conv_tp");
  I.conv_tp = parse_tensor_product(conv, "uvu", /*external=*/true);
  const clebsch::TensorProduct& tp = I.conv_tp.descriptor;
  expect_layout(conv.at("irreps_in1"), tp.irreps_in1(), I.linear_up.irreps_out,
                p + ".linear_up.irreps_out");
  expect_irreps(conv.at("irreps_in2"), tp.irreps_in2(), top.sh_irreps,
                "spherical_harmonics.irreps");
  expect_irreps(n.at("irreps_mid"), I.irreps_mid, tp.irreps_out(), p + ".conv_tp.irreps_out");

  const Node radial = n.at("radial_mlp");
  I.radial_mlp = parse_mlp(radial, width, /*allow_layer_norm=*/true);
  if (I.radial_mlp.dim_out() != tp.weight_numel())
    radial.fail("produces " + std::to_string(I.radial_mlp.dim_out()) + " weights per edge, but " +
                p + ".conv_tp.weight_numel is " + std::to_string(tp.weight_numel()));
  const Node dens = n.at("density_mlp");
  I.density_mlp = parse_mlp(dens, width, /*allow_layer_norm=*/true);
  if (I.density_mlp->dim_out() != 1)
    dens.fail("produces " + std::to_string(I.density_mlp->dim_out()) +
              " values per edge, expected 1");
  N.alpha = n.at("density_alpha").number();
  N.beta = n.at("density_beta").number();

  const Node l1 = n.at("linear_1"), res = n.at("linear_res"), g = n.at("gate");
  N.linear_1 = parse_linear(l1);
  expect_layout(l1.at("irreps_in"), N.linear_1.irreps_in, tp.irreps_out(),
                p + ".conv_tp.irreps_out");
  expect_layout(l1.at("irreps_out"), N.linear_1.irreps_out, N.irreps_nonlin, p + ".irreps_nonlin");
  N.linear_res = parse_linear(res);
  expect_layout(res.at("irreps_in"), N.linear_res.irreps_in, I.linear_up.irreps_out,
                p + ".linear_up.irreps_out");
  expect_layout(res.at("irreps_out"), N.linear_res.irreps_out, N.irreps_nonlin,
                p + ".irreps_nonlin");
  N.gate = parse_gate(g);
  expect_layout(g.at("irreps_in"), N.gate.irreps_in, N.irreps_nonlin, p + ".irreps_nonlin");
  const Node l2 = n.at("linear_2");
  N.linear_2 = parse_linear(l2);
  expect_layout(l2.at("irreps_in"), N.linear_2.irreps_in, N.gate.irreps_out,
                g.path() + ".irreps_out");
  expect_layout(n.at("irreps_target"), I.irreps_target, N.linear_2.irreps_out,
                p + ".linear_2.irreps_out");
  const Node skip = n.at("skip");
  N.skip = parse_linear(skip);
  expect_layout(skip.at("irreps_in"), N.skip.irreps_in, I.irreps_node_in, p + ".irreps_node_in");
  expect_layout(skip.at("irreps_out"), N.skip.irreps_out, I.irreps_hidden_out,
                p + ".irreps_hidden_out");
  n.at("skip_tp_input").one_of({"node_features_in"});
  I.skip_on_node_features = true;
  I.linear = N.linear_1;  // unused by the engines; keeps irreps_out checks simple
  return N;
}

std::optional<model::Linear> parse_embedding_readout(const Node& ro, const Irreps& h0) {
  if (ro.is_null()) return std::nullopt;
  model::Linear L = parse_linear(ro);
  expect_layout(ro.at("irreps_in"), L.irreps_in, h0, "mace.node_embedding.irreps_out");
  expect_layout(ro.at("irreps_out"), L.irreps_out, Irreps("1x0e"), "one energy,");
  return L;
}

std::optional<model::MaceEmbedding> parse_mace_embedding(const Node& node, const Irreps& h0) {
  if (node.is_null()) return std::nullopt;
  model::MaceEmbedding E;
  const Node list = node.at("features");
  if (list.size() == 0) list.fail("is empty");
  int total = 0;
  for (std::size_t k = 0; k < list.size(); ++k) {
    const Node f = list[k];
    model::MaceEmbedding::Feature F;
    F.name = f.at("name").string();
    F.categorical = f.at("type").one_of({"categorical", "continuous"}) == "categorical";
    if (F.categorical) {
      F.num_classes = f.at("num_classes").index(1, 1 << 20);
      F.offset = f.at("offset").number();
      const Node tab = f.at("table");
      const std::vector<std::int64_t> shape = tab.tensor_shape();
      if (shape.size() != 2 || shape[0] != F.num_classes)
        tab.at("shape").fail("is " + shape_text(shape) + ", expected [num_classes, dim]");
      F.dim = static_cast<int>(shape[1]);
      F.table = tab.tensor(shape);
    } else {
      F.mlp = parse_mlp(f.at("mlp"), 1);
      F.dim = F.mlp.dim_out();
    }
    total += F.dim;
    E.features.push_back(std::move(F));
  }
  const Node proj = node.object("project");
  E.dim_out = static_cast<int>(irreps_dim(h0));
  if (h0.size() != 1 || h0[0].ir.l() != 0)
    node.fail("needs scalar node features h0, found " + h0.str());
  E.project = proj.at("weight").tensor({total, E.dim_out}, "[sum of feature dims, dim(h0)]");
  E.project_activation = parse_activation(proj.at("activation"));
  E.readout = parse_embedding_readout(node.at("readout"), h0);
  const Node scaled = node.at("readout_scaled");
  if (scaled.boolean()) scaled.fail("is true; only mace-torch's unscaled embedding readout exists");
  return E;
}

void parse_bias_readout(const Node& n, model::MaceReadout& R, const Irreps& h,
                        const std::string& h_what) {
  const Node l1 = n.at("linear_1"), act = n.at("activation"), mid = n.at("linear_mid"),
             l2 = n.at("linear_2");
  R.nonlinear = true;
  R.linear = parse_linear(l1);
  expect_layout(l1.at("irreps_in"), R.linear.irreps_in, h, h_what);
  R.activation = parse_scalar_activation(act);
  expect_layout(act.at("irreps_in"), R.activation->irreps_in, R.linear.irreps_out,
                l1.path() + ".irreps_out");
  R.linear_mid = parse_linear_with_bias(mid);
  expect_layout(mid.at("irreps_in"), R.linear_mid->irreps_in, R.activation->irreps_out,
                act.path() + ".irreps_out");
  expect_layout(mid.at("irreps_out"), R.linear_mid->irreps_out, R.activation->irreps_in,
                act.path() + ".irreps_in");
  R.linear_2 = parse_linear_with_bias(l2);
  expect_layout(l2.at("irreps_in"), R.linear_2->irreps_in, R.activation->irreps_out,
                act.path() + ".irreps_out");
  expect_layout(l2.at("irreps_out"), R.linear_2->irreps_out, Irreps("1x0e"), "one energy,");
}

}  // namespace clebsch::model_reader
