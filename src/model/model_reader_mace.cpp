// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The model reader's MACE section (potentials/FORMAT.md section 5). Parses each block with the op
// parsers and checks that the blocks fit together the way MACE wires them: node embedding from
// the one-hot species, per interaction linear_up -> conv_tp (with the spherical harmonics and
// the radial MLP's per-edge weights) -> linear -> normalisation -> skip_tp, the product basis
// reading the interaction's target irreps, each layer's output feeding the next, readouts ending
// in one scalar, and ZBL and distance transforms sized per species.
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>

#include "clebsch/model/model_reader_detail.h"
#include "clebsch/support/error.h"

namespace clebsch::model_reader {
namespace {

// Two values that come from the same Python float.
bool same_value(double a, double b) {
  return std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b));
}

std::vector<double> positive_list(const Node& node, int n) {
  std::vector<double> v = node.numbers(n);
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!(v[i] > 0)) node[i].fail("expected a number > 0, found " + node[i].found());
  return v;
}

// Atomic numbers of the species, one per species, each that species' Z (ZBL needs Z > 0).
std::vector<double> species_atomic_numbers(const Node& node, const model::Model& top) {
  const int S = top.num_species();
  if (node.size() != static_cast<std::size_t>(S))
    node.fail("has " + std::to_string(node.size()) + " entries, expected one per species (" +
              std::to_string(S) + ")");
  std::vector<double> z;
  for (int s = 0; s < S; ++s) {
    const Node e = node[s];
    const double v = e.number();
    if (v != std::floor(v) || v < 1 || v > 118)
      e.fail("expected an atomic number 1..118, found " + e.found());
    if (top.species[s].Z != 0 && static_cast<int>(v) != top.species[s].Z)
      e.fail("is " + number_text(v) + ", but species[" + std::to_string(s) +
             "] has Z = " + std::to_string(top.species[s].Z));
    z.push_back(v);
  }
  return z;
}

model::MaceRadial parse_radial(const Node& rad, const model::Model& top) {
  model::MaceRadial r;
  const std::string basis = rad.at("basis").one_of({"bessel", "gaussian", "chebyshev"});
  r.num_basis = rad.at("num_basis").index(1, static_cast<int>(kMaxIrrepsDim));
  if (basis == "bessel") {
    r.bessel_weights = rad.at("bessel_weights").tensor({r.num_basis}, "[num_basis]");
    r.prefactor = rad.at("prefactor").number();
  } else if (basis == "gaussian") {
    r.basis = model::MaceRadial::Basis::kGaussian;
    r.gaussian_centres = rad.at("gaussian_centres").tensor({r.num_basis}, "[num_basis]");
    r.gaussian_coeff = rad.at("gaussian_coeff").number();
  } else {
    r.basis = model::MaceRadial::Basis::kChebyshev;
  }
  const Node rmax = rad.at("r_max");
  r.r_max = rmax.positive();
  if (!same_value(r.r_max, top.r_max))
    rmax.fail("is " + number_text(r.r_max) + ", but the model's r_max is " +
              number_text(top.r_max));
  const Node cutoff = rad.object("cutoff");
  cutoff.at("type").one_of({"polynomial"});
  r.cutoff_p = cutoff.at("p").positive();
  const Node crmax = cutoff.at("r_max");
  if (!same_value(crmax.positive(), r.r_max))
    crmax.fail("is " + crmax.found() + ", but the basis r_max is " + number_text(r.r_max) +
               " (MACE uses one r_max for both)");
  r.apply_cutoff = rad.at("apply_cutoff").boolean();
  const Node dt = rad.at("distance_transform");
  if (!dt.is_null()) {
    const std::string type = dt.at("type").one_of({"agnesi", "soft"});
    const int S = top.num_species();
    if (type == "agnesi") {
      model::MaceRadial::Agnesi a;
      a.q = dt.at("q").number();
      a.p = dt.at("p").number();
      a.a = dt.at("a").number();
      a.covalent_radii = positive_list(dt.at("covalent_radii"), S);
      r.agnesi = std::move(a);
    } else {
      model::MaceRadial::Soft s;
      s.alpha = dt.at("alpha").number();
      s.covalent_radii = positive_list(dt.at("covalent_radii"), S);
      r.soft = std::move(s);
    }
  }
  return r;
}

std::optional<model::MaceZbl> parse_zbl(const Node& node, const model::Model& top) {
  if (node.is_null()) return std::nullopt;
  node.at("type").one_of({"zbl_mace"});
  model::MaceZbl z;
  z.p = node.at("p").positive();
  z.a_exp = node.at("a_exp").number();
  z.a_prefactor = node.at("a_prefactor").number();
  const std::vector<double> c = node.at("c").numbers(4), e = node.at("exponents").numbers(4);
  std::copy(c.begin(), c.end(), z.c.begin());
  std::copy(e.begin(), e.end(), z.exponents.begin());
  z.coulomb = node.at("coulomb").number();
  z.bohr = node.at("bohr").positive();
  z.atomic_numbers = species_atomic_numbers(node.at("atomic_numbers"), top);
  z.covalent_radii = positive_list(node.at("covalent_radii"), top.num_species());
  return z;
}

// The four interaction classes of FORMAT.md 5 and what they imply: (residual, density).
bool interaction_class(const std::string& cls, bool* residual, bool* density) {
  const std::string name = cls.substr(cls.rfind('.') == std::string::npos ? 0 : cls.rfind('.') + 1);
  const struct {
    const char* name;
    bool residual, density;
  } classes[] = {{"RealAgnosticInteractionBlock", false, false},
                 {"RealAgnosticResidualInteractionBlock", true, false},
                 {"RealAgnosticDensityInteractionBlock", false, true},
                 {"RealAgnosticDensityResidualInteractionBlock", true, true}};
  for (const auto& c : classes)
    if (name == c.name) {
      *residual = c.residual;
      *density = c.density;
      return true;
    }
  return false;
}

model::MaceInteraction parse_interaction(const Node& n, const model::Model& top, int num_basis,
                                         const Irreps& h_in, const std::string& h_in_what) {
  model::MaceInteraction I;
  const int S = top.num_species();
  const Node cls = n.at("class");
  I.cls = cls.string();
  bool residual = false, density = false;
  if (auto kind = n.optional("kind")) {
    kind->one_of({"residual_nonlinear"});
    I.residual = n.at("residual").boolean();
    I.density_normalization = n.at("density_normalization").boolean();
    if (!I.residual || !I.density_normalization)
      n.at("residual").fail("must be true with density_normalization for kind residual_nonlinear");
    const Node node_in = n.at("irreps_node_in");
    I.irreps_node_in = node_in.irreps();
    expect_layout(node_in, I.irreps_node_in, h_in, h_in_what);
    I.irreps_edge_attrs = n.at("irreps_edge_attrs").irreps();
    I.irreps_edge_feats = n.at("irreps_edge_feats").irreps();
    I.irreps_edge = n.at("irreps_edge").irreps();
    I.irreps_mid = n.at("irreps_mid").irreps();
    I.irreps_target = n.at("irreps_target").irreps();
    I.irreps_hidden_out = n.at("irreps_hidden_out").irreps();
    I.nonlinear = parse_nonlinear_interaction(n, I, top, num_basis);
    return I;
  }
  if (!interaction_class(I.cls, &residual, &density))
    cls.fail("is \"" + I.cls +
             "\", expected one of the RealAgnostic[Density][Residual]"
             "InteractionBlock classes");
  const Node res = n.at("residual"), den = n.at("density_normalization");
  I.residual = res.boolean();
  I.density_normalization = den.boolean();
  if (I.residual != residual) res.fail("disagrees with class \"" + I.cls + "\"");
  if (I.density_normalization != density) den.fail("disagrees with class \"" + I.cls + "\"");
  const std::string p = n.path();

  const Node node_in = n.at("irreps_node_in");
  I.irreps_node_in = node_in.irreps();
  expect_layout(node_in, I.irreps_node_in, h_in, h_in_what);
  const Node edge_attrs = n.at("irreps_edge_attrs");
  I.irreps_edge_attrs = edge_attrs.irreps();
  expect_irreps(edge_attrs, I.irreps_edge_attrs, top.sh_irreps, "spherical_harmonics.irreps");
  const Node edge_feats = n.at("irreps_edge_feats");
  I.irreps_edge_feats = edge_feats.irreps();
  expect_layout(edge_feats, I.irreps_edge_feats, scalars(num_basis),
                "the radial embedding, num_basis x 0e,");
  I.irreps_edge = n.at("irreps_edge").irreps();
  const Node mid = n.at("irreps_mid"), target = n.at("irreps_target"),
             hidden = n.at("irreps_hidden_out");
  I.irreps_mid = mid.irreps();
  I.irreps_target = target.irreps();
  I.irreps_hidden_out = hidden.irreps();

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
  expect_irreps(mid, I.irreps_mid, tp.irreps_out(), p + ".conv_tp.irreps_out");

  const Node radial = n.at("radial_mlp");
  I.radial_mlp = parse_mlp(radial, num_basis);
  if (I.radial_mlp.dim_out() != tp.weight_numel())
    radial.fail("produces " + std::to_string(I.radial_mlp.dim_out()) + " weights per edge, but " +
                p + ".conv_tp.weight_numel is " + std::to_string(tp.weight_numel()));

  const Node lin = n.at("linear");
  I.linear = parse_linear(lin);
  expect_layout(lin.at("irreps_in"), I.linear.irreps_in, tp.irreps_out(),
                p + ".conv_tp.irreps_out");
  expect_layout(target, I.irreps_target, I.linear.irreps_out, p + ".linear.irreps_out");

  const Node skip = n.at("skip_tp");
  I.skip_tp = parse_tensor_product(skip, "uvw", /*external=*/false);
  const clebsch::TensorProduct& sk = I.skip_tp.descriptor;
  expect_layout(skip.at("irreps_in2"), sk.irreps_in2(), scalars(S),
                "the one-hot species, num_species x 0e,");
  const Node input = n.at("skip_tp_input");
  const std::string in = input.one_of({"node_features_in", "message"});
  I.skip_on_node_features = in == "node_features_in";
  if (I.skip_on_node_features != I.residual)
    input.fail(
        std::string("is \"") + in + "\", but a " + (I.residual ? "" : "non-") +
        "residual block applies skip_tp to " +
        (I.residual ? "the node features (\"node_features_in\")" : "the message (\"message\")"));
  if (I.residual) {
    expect_layout(skip.at("irreps_in1"), sk.irreps_in1(), I.irreps_node_in, p + ".irreps_node_in");
    expect_layout(skip.at("irreps_out"), sk.irreps_out(), I.irreps_hidden_out,
                  p + ".irreps_hidden_out");
  } else {
    expect_layout(skip.at("irreps_in1"), sk.irreps_in1(), I.irreps_target, p + ".irreps_target");
    expect_layout(skip.at("irreps_out"), sk.irreps_out(), I.irreps_target, p + ".irreps_target");
  }

  const Node norm = n.object("message_normalization");
  const Node type = norm.at("type");
  const bool by_density = type.one_of({"avg_num_neighbors", "density"}) == "density";
  if (by_density != I.density_normalization)
    type.fail("is \"" + type.string() + "\", but density_normalization is " +
              (I.density_normalization ? "true" : "false"));
  if (by_density) {
    const Node mlp = norm.at("density_mlp");
    I.density_mlp = parse_mlp(mlp, num_basis);
    if (I.density_mlp->dim_out() != 1)
      mlp.fail("produces " + std::to_string(I.density_mlp->dim_out()) +
               " values per edge, expected 1");
  } else {
    I.avg_num_neighbors = norm.at("avg_num_neighbors").positive();
  }
  return I;
}

model::MaceProduct parse_product(const Node& n, const model::MaceInteraction& I,
                                 const std::string& inter_path) {
  model::MaceProduct P;
  P.contraction = parse_symmetric_contraction(n);
  expect_irreps(n.at("irreps_in"), P.contraction.irreps_in, I.irreps_target,
                inter_path + ".irreps_target");
  const Node lin = n.at("linear");
  P.linear = parse_linear(lin);
  expect_layout(lin.at("irreps_in"), P.linear.irreps_in, P.contraction.irreps_out,
                n.path() + ".irreps_out");
  expect_layout(lin.at("irreps_out"), P.linear.irreps_out, I.irreps_hidden_out,
                inter_path + ".irreps_hidden_out");
  const Node skip = n.at("add_skip");
  P.add_skip = skip.boolean();
  if (P.add_skip && !I.residual)
    skip.fail("is true, but " + inter_path + " is not residual and computes no skip");
  if (auto tiled = n.optional("species_agnostic_weights_tiled")) tiled->boolean();
  return P;
}

model::MaceReadout parse_readout(const Node& n, const std::vector<model::MaceProduct>& products) {
  model::MaceReadout R;
  R.layer = n.at("layer").index(0, static_cast<int>(products.size()) - 1);
  const Irreps& h = products[R.layer].linear.irreps_out;
  const std::string h_what = "mace.products[" + std::to_string(R.layer) + "].linear.irreps_out";
  const Irreps energy("1x0e");
  const std::string type = n.at("type").one_of({"linear", "nonlinear", "nonlinear_bias"});
  if (type == "nonlinear_bias") {
    parse_bias_readout(n, R, h, h_what);
    return R;
  }
  R.nonlinear = type == "nonlinear";
  if (!R.nonlinear) {
    const Node lin = n.at("linear");
    R.linear = parse_linear(lin);
    expect_layout(lin.at("irreps_in"), R.linear.irreps_in, h, h_what);
    expect_layout(lin.at("irreps_out"), R.linear.irreps_out, energy, "one energy,");
    return R;
  }
  const Node l1 = n.at("linear_1"), act = n.at("activation"), l2 = n.at("linear_2");
  R.linear = parse_linear(l1);
  expect_layout(l1.at("irreps_in"), R.linear.irreps_in, h, h_what);
  R.activation = parse_scalar_activation(act);
  expect_layout(act.at("irreps_in"), R.activation->irreps_in, R.linear.irreps_out,
                l1.path() + ".irreps_out");
  R.linear_2 = parse_linear(l2);
  expect_layout(l2.at("irreps_in"), R.linear_2->irreps_in, R.activation->irreps_out,
                act.path() + ".irreps_out");
  expect_layout(l2.at("irreps_out"), R.linear_2->irreps_out, energy, "one energy,");
  return R;
}

// FORMAT.md §5 heads (1.1): every head's readouts, E0, scale/shift and embedding readout, then
// the default head in the fields the engines read. A 1.0 file has one head, the top-level fields.
void parse_heads(const Node& node, model::Mace& m, int S) {
  const std::optional<Node> list = node.optional("heads");
  if (!list) {
    m.heads.push_back({"Default", m.readouts, m.atomic_energies, m.scale, m.shift,
                       m.embedding ? m.embedding->readout : std::nullopt});
    return;
  }
  if (list->size() == 0) list->fail("is empty; a model has at least one head");
  std::set<std::string> names;
  for (std::size_t k = 0; k < list->size(); ++k) {
    const Node h = (*list)[k];
    model::MaceHead H;
    const Node name = h.at("name");
    H.name = name.string();
    if (H.name.empty()) name.fail("is empty");
    if (!names.insert(H.name).second) name.fail("\"" + H.name + "\" names two heads");
    const Node readouts = h.at("readouts");
    if (readouts.size() == 0) readouts.fail("is empty; a head needs at least one readout");
    for (std::size_t r = 0; r < readouts.size(); ++r)
      H.readouts.push_back(parse_readout(readouts[r], m.products));
    H.atomic_energies = h.at("atomic_energies").tensor({S}, "[num_species]");
    const Node ss = h.object("scale_shift");
    H.scale = ss.at("scale").number();
    H.shift = ss.at("shift").number();
    // A model with an embedding names each head's block of its readout (null: no readout).
    if (m.embedding)
      H.embedding_readout =
          parse_embedding_readout(h.at("embedding_readout"), m.node_embedding.irreps_out);
    m.heads.push_back(std::move(H));
  }
  const Node dflt = node.at("default_head");
  const std::string name = dflt.string();
  m.default_head = -1;
  std::string known;
  for (std::size_t k = 0; k < m.heads.size(); ++k) {
    if (m.heads[k].name == name) m.default_head = static_cast<int>(k);
    known += (known.empty() ? "" : ", ") + m.heads[k].name;
  }
  if (m.default_head < 0) dflt.fail("is \"" + name + "\", not one of the heads: " + known);
  const model::MaceHead& d = m.heads[m.default_head];
  m.head = m.default_head;
  m.readouts = d.readouts;
  m.atomic_energies = d.atomic_energies;
  m.scale = d.scale;
  m.shift = d.shift;
  if (m.embedding) m.embedding->readout = d.embedding_readout;
}

}  // namespace

model::Mace parse_mace(const Node& node, const model::Model& top) {
  model::Mace m;
  const int S = top.num_species();
  const int T = architecture_depth(node, "num_interactions");

  m.radial = parse_radial(node.object("radial"), top);
  m.pair_repulsion = parse_zbl(node.at("pair_repulsion"), top);

  const Node emb = node.at("node_embedding");
  m.node_embedding = parse_linear(emb);
  expect_layout(emb.at("irreps_in"), m.node_embedding.irreps_in, scalars(S),
                "the one-hot species, num_species x 0e,");

  const Node inters = node.at("interactions"), prods = node.at("products");
  expect_count(inters, T, "blocks", "num_interactions");
  expect_count(prods, T, "blocks", "num_interactions");
  Irreps h = m.node_embedding.irreps_out;
  std::string h_what = "mace.node_embedding.irreps_out";
  for (int t = 0; t < T; ++t) {
    m.interactions.push_back(parse_interaction(inters[t], top, m.radial.num_basis, h, h_what));
    m.products.push_back(parse_product(prods[t], m.interactions.back(), inters[t].path()));
    h = m.products.back().linear.irreps_out;
    h_what = prods[t].path() + ".linear.irreps_out";
  }

  const Node readouts = node.at("readouts");
  if (readouts.size() == 0) readouts.fail("is empty; the model needs at least one readout");
  for (std::size_t r = 0; r < readouts.size(); ++r)
    m.readouts.push_back(parse_readout(readouts[r], m.products));

  m.atomic_energies = node.at("atomic_energies").tensor({S}, "[num_species]");
  const Node ss = node.object("scale_shift");
  m.scale = ss.at("scale").number();
  m.shift = ss.at("shift").number();
  if (auto emb = node.optional("embedding"))
    m.embedding = parse_mace_embedding(*emb, m.node_embedding.irreps_out);
  parse_heads(node, m, S);
  return m;
}

}  // namespace clebsch::model_reader
