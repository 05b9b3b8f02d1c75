// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The model reader's NequIP section (potentials/FORMAT.md section 6). Parses each layer with the
// op parsers and checks that the layers fit together the way NequIP wires them: the type
// embedding is both the first features and the self-connection's second input, per layer
// linear_1 -> tp (with the spherical harmonics and the edge MLP's per-edge weights) -> linear_2
// (+ sc) -> gate, each gate's output feeding the next layer, a scalar readout, per-type
// scale/shift, per-edge-type cutoffs consistent with r_max_pairs, and ZBL sized per species.
#include <algorithm>
#include <cmath>

#include "clebsch/model/model_reader_detail.h"
#include "clebsch/support/error.h"

namespace clebsch::model_reader {
namespace {

model::NequipRadial parse_radial(const Node& rad, const model::Model& top) {
  model::NequipRadial r;
  const int S = top.num_species();
  rad.at("basis").one_of({"bessel_nequip"});
  r.num_basis = rad.at("num_basis").index(1, static_cast<int>(kMaxIrrepsDim));
  r.bessel_weights = rad.at("bessel_weights").tensor({r.num_basis}, "[num_basis]");
  const Node recip = rad.at("rmax_recip");
  r.rmax_recip = recip.tensor({S, S}, "[num_species, num_species]");
  // 1/cutoff per (centre, neighbour) species: the same cutoffs as r_max_pairs (which the
  // exporter derives from it), so the neighbour list and the radial basis agree.
  for (int i = 0; i < S; ++i)
    for (int j = 0; j < S; ++j) {
      const double v = r.rmax_recip[i * S + j], pair = top.r_max_pairs[i * S + j];
      if (!(v > 0))
        recip.fail("entry [" + std::to_string(i) + "][" + std::to_string(j) + "] is " +
                   number_text(v) + ", expected 1/cutoff > 0");
      if (std::abs(v * pair - 1) > 1e-9)
        recip.fail("entry [" + std::to_string(i) + "][" + std::to_string(j) + "] is " +
                   number_text(v) + ", but r_max_pairs[" + std::to_string(i) + "][" +
                   std::to_string(j) + "] is " + number_text(pair) + " (expected its reciprocal)");
    }
  const Node cutoff = rad.object("cutoff");
  cutoff.at("type").one_of({"polynomial"});
  r.cutoff_p = cutoff.at("p").positive();
  r.factor = rad.at("factor").number();
  return r;
}

std::optional<model::NequipZbl> parse_zbl(const Node& node, const model::Model& top) {
  if (node.is_null()) return std::nullopt;
  node.at("type").one_of({"zbl_nequip"});
  model::NequipZbl z;
  const int S = top.num_species();
  const Node zs = node.at("atomic_numbers");
  if (zs.size() != static_cast<std::size_t>(S))
    zs.fail("has " + std::to_string(zs.size()) + " entries, expected one per species (" +
            std::to_string(S) + ")");
  for (int s = 0; s < S; ++s) {
    const Node e = zs[s];
    const double v = e.number();
    if (v != std::floor(v) || v < 1 || v > 118)
      e.fail("expected an atomic number 1..118, found " + e.found());
    if (top.species[s].Z != 0 && static_cast<int>(v) != top.species[s].Z)
      e.fail("is " + number_text(v) + ", but species[" + std::to_string(s) +
             "] has Z = " + std::to_string(top.species[s].Z));
    z.atomic_numbers.push_back(v);
  }
  z.qqr2exesquare = node.at("qqr2exesquare").number();
  z.pzbl = node.at("pzbl").number();
  z.a0 = node.at("a0").positive();
  const std::vector<double> c = node.at("c").numbers(4), d = node.at("d").numbers(4);
  std::copy(c.begin(), c.end(), z.c.begin());
  std::copy(d.begin(), d.end(), z.d.begin());
  z.cutoff_p = node.at("cutoff_p").positive();
  return z;
}

model::NequipLayer parse_layer(const Node& n, const model::Model& top, int num_basis,
                               int embedding_dim, const Irreps& h_in,
                               const std::string& h_in_what) {
  model::NequipLayer L;
  const int S = top.num_species();
  const std::string p = n.path();
  L.cls = n.at("class").string();
  const Node in = n.at("irreps_in"), out = n.at("irreps_out");
  L.irreps_in = in.irreps();
  L.irreps_out = out.irreps();
  expect_layout(in, L.irreps_in, h_in, h_in_what);
  L.resnet = n.at("resnet").boolean();
  if (L.resnet) expect_layout(out, L.irreps_out, L.irreps_in, p + ".irreps_in (resnet adds them)");

  const Node l1 = n.at("linear_1");
  L.linear_1 = parse_linear(l1);
  expect_layout(l1.at("irreps_in"), L.linear_1.irreps_in, L.irreps_in, p + ".irreps_in");

  const Node nc = n.at("norm_const");
  const std::vector<std::int64_t> nc_shape = nc.tensor_shape();
  if (nc_shape == std::vector<std::int64_t>{1} && S != 1) {
    L.norm_const.assign(S, nc.tensor({1})[0]);  // one constant for every species: broadcast
  } else {
    L.norm_const = nc.tensor({S}, "[num_species], or [1] for all");
  }

  const Node tpn = n.at("tp");
  L.tp = parse_tensor_product(tpn, "uvu", /*external=*/true);
  const clebsch::TensorProduct& tp = L.tp.descriptor;
  expect_layout(tpn.at("irreps_in1"), tp.irreps_in1(), L.linear_1.irreps_out,
                p + ".linear_1.irreps_out");
  expect_irreps(tpn.at("irreps_in2"), tp.irreps_in2(), top.sh_irreps, "spherical_harmonics.irreps");

  const Node mlp = n.at("edge_mlp");
  L.edge_mlp = parse_mlp(mlp, num_basis);
  if (L.edge_mlp.dim_out() != tp.weight_numel())
    mlp.fail("produces " + std::to_string(L.edge_mlp.dim_out()) + " weights per edge, but " + p +
             ".tp.weight_numel is " + std::to_string(tp.weight_numel()));

  const Node l2 = n.at("linear_2");
  L.linear_2 = parse_linear(l2);
  expect_layout(l2.at("irreps_in"), L.linear_2.irreps_in, tp.irreps_out(), p + ".tp.irreps_out");

  const Node sc = n.at("sc");
  if (!sc.is_null()) {
    L.sc = parse_tensor_product(sc, "uvw", /*external=*/false);
    const clebsch::TensorProduct& s = L.sc->descriptor;
    expect_layout(sc.at("irreps_in1"), s.irreps_in1(), L.irreps_in, p + ".irreps_in");
    expect_layout(sc.at("irreps_in2"), s.irreps_in2(), scalars(embedding_dim),
                  "the type embedding, embedding_dim x 0e,");
    expect_layout(sc.at("irreps_out"), s.irreps_out(), L.linear_2.irreps_out,
                  p + ".linear_2.irreps_out");
  }

  const Node gate = n.at("gate");
  L.gate = parse_gate(gate);
  expect_layout(gate.at("irreps_in"), L.gate.irreps_in, L.linear_2.irreps_out,
                p + ".linear_2.irreps_out");
  expect_layout(out, L.irreps_out, L.gate.irreps_out, p + ".gate.irreps_out");
  return L;
}

}  // namespace

model::Nequip parse_nequip(const Node& node, const model::Model& top) {
  model::Nequip m;
  const int S = top.num_species();
  const int K = architecture_depth(node, "num_layers");

  const Node emb = node.at("type_embedding");
  const std::vector<std::int64_t> emb_shape = emb.tensor_shape();
  if (emb_shape.size() != 2 || emb_shape[0] != S || emb_shape[1] > kMaxIrrepsDim)
    emb.at("shape").fail(
        "is " + shape_text(emb_shape) +
        ", expected [num_species, embedding_dim] with num_species = " + std::to_string(S));
  m.embedding_dim = static_cast<int>(emb_shape[1]);
  m.type_embedding = emb.tensor(emb_shape);

  m.radial = parse_radial(node.object("radial"), top);

  const Node layers = node.at("layers");
  expect_count(layers, K, "layers", "num_layers");
  Irreps h = scalars(m.embedding_dim);
  std::string h_what = "the type embedding, embedding_dim x 0e,";
  for (int k = 0; k < K; ++k) {
    m.layers.push_back(parse_layer(layers[k], top, m.radial.num_basis, m.embedding_dim, h, h_what));
    h = m.layers.back().irreps_out;
    h_what = layers[k].path() + ".irreps_out";
  }
  // The readout reads the last layer's features, which must be plain scalars.
  for (const MulIrrep& b : h)
    if (b.ir != Irrep(0, 1))
      layers[K - 1]
          .at("irreps_out")
          .fail("is \"" + h.str() +
                "\"; the readout needs scalars (0e) "
                "only");
  const Node readout = node.at("readout");
  m.readout = parse_mlp(readout, static_cast<int>(irreps_dim(h)));
  if (m.readout.dim_out() != 1)
    readout.fail("produces " + std::to_string(m.readout.dim_out()) +
                 " values per atom, expected 1");

  const Node ss = node.object("scale_shift");
  m.scales = ss.at("scales").tensor({S}, "[num_species]");
  m.shifts = ss.at("shifts").tensor({S}, "[num_species]");
  m.pair_potential = parse_zbl(node.at("pair_potential"), top);
  return m;
}

}  // namespace clebsch::model_reader
