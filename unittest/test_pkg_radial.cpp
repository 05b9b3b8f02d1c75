// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Radial functions (radial.h) against the real mace-torch and nequip modules
// (reference/pkg_radial.py): MACE RadialEmbeddingBlock (Bessel, polynomial cutoff, Agnesi,
// apply_cutoff on/off, perturbed buffers) and ZBLBasis; NequIP EdgeLengthNormalizer (global and
// per-edge-type) -> BesselEdgeLengthEncoding -> ApplyFactor, and its ZBL. Every object is built
// from the buffers the modules hold; values and autograd d/dr must agree to 1e-12 (float64).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "clebsch/nn/radial.h"
#include "reference_data.h"

namespace clebsch {
namespace {

using test::flat;
using test::load_reference;
using test::max_rel_error;

constexpr double kTolerance = 1e-12;  // float64, relative to the largest reference entry
constexpr double kFloatTolerance = 1e-5;

std::vector<int> ints(const nlohmann::json& j) {
  std::vector<int> v;
  for (const auto& e : j) v.push_back(e.get<int>());
  return v;
}

struct Worst {
  double value = 0;
  double operator()(double e) {
    value = std::max(value, e);
    return e;
  }
};

TEST(PkgRadial, MaceRadialEmbeddingMatchesMaceTorch) {
  const auto ref = load_reference("pkg_radial_mace");
  const std::vector<int> z = ints(ref.at("atomic_numbers"));
  Worst wf, wd, wc;
  for (const auto& c : ref.at("radial")) {
    const std::string transform = c.at("distance_transform");
    const bool apply = c.at("apply_cutoff");
    SCOPED_TRACE(transform + (apply ? " apply_cutoff" : " no apply_cutoff") + " r_max " +
                 std::to_string(c.at("r_max").get<double>()));
    std::optional<AgnesiTransform> tr;
    if (transform == "Agnesi")
      tr.emplace(c.at("agnesi_q").get<double>(), c.at("agnesi_p").get<double>(),
                 c.at("agnesi_a").get<double>(), flat(c.at("covalent_radii")), z);
    const MaceRadialEmbedding emb(
        BesselBasis(flat(c.at("bessel_weights")), c.at("prefactor").get<double>()),
        PolynomialCutoff(c.at("cutoff_r_max").get<double>(), c.at("cutoff_p").get<double>()), tr,
        apply);
    const auto r = flat(c.at("r"));
    const auto species = ints(c.at("species"));
    std::vector<int> su, sv;  // MACE: sender u = edge_index[0], receiver v = edge_index[1]
    for (int s : ints(c.at("sender"))) su.push_back(species[s]);
    for (int v : ints(c.at("receiver"))) sv.push_back(species[v]);
    const std::size_t ne = r.size(), nb = emb.num_basis();
    std::vector<double> f(ne * nb), d(ne * nb), cut(ne), dcut(ne);
    emb.forward(ne, r.data(), su.data(), sv.data(), f.data(), d.data(), cut.data(), dcut.data());
    EXPECT_LT(wf(max_rel_error(f, flat(c.at("feats")))), kTolerance);
    EXPECT_LT(wd(max_rel_error(d, flat(c.at("dfeats_dr")))), kTolerance);
    if (c.contains("cutoff")) {  // returned by MACE only without apply_cutoff
      EXPECT_FALSE(apply);
      EXPECT_LT(wc(max_rel_error(cut, flat(c.at("cutoff")))), kTolerance);
      EXPECT_LT(wc(max_rel_error(dcut, flat(c.at("dcutoff_dr")))), kTolerance);
    }
    // Float evaluation of the same buffers.
    std::vector<float> rf(r.begin(), r.end()), ff(ne * nb);
    emb.forward(ne, rf.data(), su.data(), sv.data(), ff.data(), nullptr, nullptr, nullptr);
    EXPECT_LT(max_rel_error(std::vector<double>(ff.begin(), ff.end()), flat(c.at("feats"))),
              kFloatTolerance);
  }
  std::cout << "MACE RadialEmbeddingBlock, max relative error: feats " << wf.value << ", d/dr "
            << wd.value << ", cutoff (and d/dr) " << wc.value << "\n";
}

TEST(PkgRadial, MaceZblMatchesZblBasis) {
  const auto ref = load_reference("pkg_radial_mace");
  const std::vector<int> z = ints(ref.at("atomic_numbers"));
  Worst we, wg;
  for (const auto& c : ref.at("zbl")) {
    const auto cc = flat(c.at("c"));
    const MaceZbl zbl(z, flat(c.at("covalent_radii")), {cc[0], cc[1], cc[2], cc[3]},
                      c.at("a_exp").get<double>(), c.at("a_prefactor").get<double>(),
                      c.at("p").get<double>());
    const auto r = flat(c.at("r"));
    const auto species = ints(c.at("species"));
    const auto sender = ints(c.at("sender")), receiver = ints(c.at("receiver"));
    std::vector<int> su, sv;
    for (int s : sender) su.push_back(species[s]);
    for (int v : receiver) sv.push_back(species[v]);
    std::vector<double> e(r.size()), de(r.size()), node(species.size(), 0.0);
    zbl.forward(r.size(), r.data(), su.data(), sv.data(), e.data(), de.data());
    for (std::size_t k = 0; k < r.size(); ++k) node[receiver[k]] += e[k];  // MACE: at the receiver
    EXPECT_LT(we(max_rel_error(node, flat(c.at("node_energy")))), kTolerance);
    EXPECT_LT(wg(max_rel_error(de, flat(c.at("grad_r")))), kTolerance);
  }
  std::cout << "MACE ZBLBasis, max relative error: node energies " << we.value << ", dE/dr "
            << wg.value << "\n";
}

TEST(PkgRadial, NequipEdgeEmbeddingAndZblMatchNequip) {
  const auto ref = load_reference("pkg_radial_nequip");
  Worst wx, wf, wd, wc, we, wg;
  for (const auto& c : ref.at("cases")) {
    const auto recip = flat(c.at("rmax_recip"));
    SCOPED_TRACE("r_max " + std::to_string(c.at("r_max").get<double>()) +
                 (recip.size() > 1 ? " per-edge-type" : ""));
    const NequipEdgeLength len(c.at("num_types").get<int>(), recip);
    const NequipRadialEmbedding emb(
        len, NequipBessel(flat(c.at("bessel_weights")), c.at("factor").get<double>()),
        c.at("p").get<double>());
    const NequipZbl zbl(flat(c.at("zbl_atomic_numbers")), c.at("zbl_qqr2exesquare").get<double>(),
                        len, c.at("zbl_p").get<double>());
    const auto r = flat(c.at("r"));
    const auto types = ints(c.at("atom_types"));
    const auto center = ints(c.at("center")), neighbor = ints(c.at("neighbor"));
    std::vector<int> tc, tn;  // NequIP: centre = edge_index[0], neighbour = edge_index[1]
    for (int i : center) tc.push_back(types[i]);
    for (int j : neighbor) tn.push_back(types[j]);
    const std::size_t ne = r.size(), nb = emb.num_basis();
    std::vector<double> x(ne);
    for (std::size_t k = 0; k < ne; ++k) x[k] = len(r[k], tc[k], tn[k]);
    EXPECT_LT(wx(max_rel_error(x, flat(c.at("norm_length")))), kTolerance);
    std::vector<double> f(ne * nb), d(ne * nb), cut(ne), dcut(ne);
    emb.forward(ne, r.data(), tc.data(), tn.data(), f.data(), d.data(), cut.data(), dcut.data());
    EXPECT_LT(wf(max_rel_error(f, flat(c.at("feats")))), kTolerance);
    EXPECT_LT(wd(max_rel_error(d, flat(c.at("dfeats_dr")))), kTolerance);
    EXPECT_LT(wc(max_rel_error(cut, flat(c.at("cutoff")))), kTolerance);
    EXPECT_LT(wc(max_rel_error(dcut, flat(c.at("dcutoff_dr")))), kTolerance);
    std::vector<double> e(ne), de(ne), node(types.size(), 0.0);
    zbl.forward(ne, r.data(), tc.data(), tn.data(), e.data(), de.data());
    for (std::size_t k = 0; k < ne; ++k) node[center[k]] += e[k];  // NequIP: at the centre
    EXPECT_LT(we(max_rel_error(node, flat(c.at("node_energy")))), kTolerance);
    EXPECT_LT(wg(max_rel_error(de, flat(c.at("zbl_grad_r")))), kTolerance);
  }
  std::cout << "NequIP, max relative error: x " << wx.value << ", edge embedding " << wf.value
            << ", d/dr " << wd.value << ", cutoff (and d/dr) " << wc.value << ", ZBL energies "
            << we.value << ", ZBL dE/dr " << wg.value << "\n";
}

}  // namespace
}  // namespace clebsch
