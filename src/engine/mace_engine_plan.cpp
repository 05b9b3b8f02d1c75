// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The model plan of the MACE host engine: MaceImpl's constructor checks that every op of the
// model fits the next (irreps, widths, modes; a mismatch throws naming the op and both values)
// and packs the weights into the kernels of mace_kernels.h, in the network type T. Layer 0
// reads only the species embedding, so its inputs (linear_up and the residual self-connection
// of each species' embedding) are tabulated here once per species.
#include <algorithm>
#include <cmath>
#include <memory>

#include "clebsch/engine/mace_engine_impl.h"
#include "clebsch/support/error.h"

namespace clebsch::mace_detail {

namespace {

double contraction_flops(const SymmetricContraction& sc, std::size_t n) {
  return 2.0 * n * sc.num_channels() * static_cast<double>(sc.num_pairs() + sc.num_monomials());
}

// Builds the library's SymmetricContraction from the model's description.
std::unique_ptr<SymmetricContraction> make_contraction(const model::SymmetricContraction& m,
                                                       int num_species, const std::string& where) {
  std::vector<ContractionTensors> cts;
  for (std::size_t c = 0; c < m.contractions.size(); ++c) {
    const auto& con = m.contractions[c];
    ContractionTensors ct{con.irrep_out, {}, {}};
    std::vector<const model::SymmetricContraction::Term*> by_nu(con.terms.size(), nullptr);
    for (const auto& term : con.terms) {
      if (term.nu < 1 || term.nu > static_cast<int>(con.terms.size()) || by_nu[term.nu - 1])
        throw ModelFormatError(where + ".contractions[" + std::to_string(c) +
                               "]: terms must hold nu = 1.." + std::to_string(con.terms.size()) +
                               " once each, found nu = " + std::to_string(term.nu));
      by_nu[term.nu - 1] = &term;
    }
    for (const auto* term : by_nu) {
      ct.U.push_back(DenseTensor{term->u_shape, term->U});
      ct.W.push_back(DenseTensor{{num_species, term->K, m.num_features}, term->W});
    }
    cts.push_back(std::move(ct));
  }
  auto sc = std::make_unique<SymmetricContraction>(m.irreps_in, std::move(cts));
  if (sc->num_elements() != num_species)
    throw ModelFormatError(where + ": weights for " + std::to_string(sc->num_elements()) +
                           " species, the model has " + std::to_string(num_species));
  return sc;
}

void check_equal(const Irreps& a, const Irreps& b, const std::string& what) {
  if (a != b) throw ModelFormatError(what + ": " + a.str() + " vs " + b.str());
}

}  // namespace

// The tables of radial spline N, when tabulate_radial_functions made them: checked against the
// layer's weight count (a table of another model would index past its rows).
template <class T, class G>
void MaceImpl<T, G>::plan_splines(const model::MaceInteraction& in, const std::string& w,
                                  LayerPlan<T>& L) {
  if (!in.radial_spline) return;
  const auto check = [&](const model::RadialSpline& s, int width, const std::string& what) {
    if (s.width != width || s.intervals < 1 ||
        s.values.size() != static_cast<std::size_t>(s.intervals + 1) * 2 * s.width)
      throw ModelFormatError(w + "." + what + ": a table of width " + std::to_string(s.width) +
                             " for " + std::to_string(width) + " outputs");
  };
  check(*in.radial_spline, static_cast<int>(L.conv.weight_numel()), "radial_spline");
  L.radial_spline.emplace(*in.radial_spline);
  if (L.density) {
    if (!in.density_spline) throw ModelFormatError(w + ": a radial spline but no density spline");
    check(*in.density_spline, 1, "density_spline");
    L.density_spline.emplace(*in.density_spline);
  }
  spline_ = true;
}

template <class T, class G>
MaceImpl<T, G>::MaceImpl(const model::Model& model, const MaceEngineOptions& options)
    : options_(options), radial_(model.mace->radial, model.species) {
  const model::Mace& m = *model.mace;
  S_ = model.num_species();
  for (const auto& s : model.species) species_names.push_back(s.symbol);
  r_max = model.r_max;
  r_max_pairs = model.r_max_pairs;
  if (r_max_pairs.size() != static_cast<std::size_t>(S_) * S_)
    throw ModelFormatError("r_max_pairs has " + std::to_string(r_max_pairs.size()) +
                           " entries for " + std::to_string(S_) + " species");
  num_species = S_;
  lmax_ = model.sh_lmax;
  nsh_ = (lmax_ + 1) * (lmax_ + 1);
  if (m.pair_repulsion) zbl_.emplace(*m.pair_repulsion, S_);
  if (m.interactions.empty() || m.interactions.size() != m.products.size())
    throw ModelFormatError("mace: " + std::to_string(m.interactions.size()) + " interactions and " +
                           std::to_string(m.products.size()) +
                           " products (need the same number, at least one)");
  T_ = static_cast<int>(m.interactions.size());
  num_layers = T_;
  if (static_cast<int>(m.atomic_energies.size()) != S_)
    throw ModelFormatError("mace.atomic_energies has " + std::to_string(m.atomic_energies.size()) +
                           " entries for " + std::to_string(S_) + " species");
  e0_ = m.atomic_energies;
  scale_ = m.scale;
  shift_ = m.shift;

  const std::string scalars = std::to_string(S_) + "x0e";
  check_equal(m.node_embedding.irreps_in, Irreps(scalars), "mace.node_embedding input");
  NodeLinear<T> embedding(m.node_embedding);
  Irreps h_irreps = m.node_embedding.irreps_out;

  for (int t = 0; t < T_; ++t) {
    const model::MaceInteraction& in = m.interactions[t];
    const model::MaceProduct& pr = m.products[t];
    const std::string w = "mace.interactions[" + std::to_string(t) + "]";
    LayerPlan<T> L;
    if (in.nonlinear) {
      plan_nonlinear(in, h_irreps, w, L);
    } else {
      check_equal(in.linear_up.irreps_in, h_irreps, w + ".linear_up input vs node features");
      L.linear_up = NodeLinear<T>(in.linear_up);
      L.conv = ConvTp<T>(in.conv_tp, w + ".conv_tp");
      check_equal(in.conv_tp.descriptor.irreps_in1(), in.linear_up.irreps_out,
                  w + ".conv_tp input vs linear_up output");
      if (L.conv.dim_in2() > nsh_)
        throw ModelFormatError(w + ".conv_tp: edge attributes " +
                               in.conv_tp.descriptor.irreps_in2().str() + " exceed lmax " +
                               std::to_string(lmax_));
      L.radial_mlp = Mlp<T>(in.radial_mlp, w + ".radial_mlp");
      if (L.radial_mlp.dim_in() != radial_.num_basis() ||
          L.radial_mlp.dim_out() != L.conv.weight_numel())
        throw ModelFormatError(w + ".radial_mlp maps " + std::to_string(L.radial_mlp.dim_in()) +
                               " -> " + std::to_string(L.radial_mlp.dim_out()) + ", expected " +
                               std::to_string(radial_.num_basis()) + " -> " +
                               std::to_string(L.conv.weight_numel()));
      check_equal(in.linear.irreps_in, in.conv_tp.descriptor.irreps_out(),
                  w + ".linear input vs conv_tp output");
      L.linear = NodeLinear<T>(in.linear);
      L.density = in.density_normalization;
      if (L.density) {
        if (!in.density_mlp) throw ModelFormatError(w + ": density normalisation without an MLP");
        L.density_mlp = Mlp<T>(*in.density_mlp, w + ".density_mlp");
        if (L.density_mlp.dim_in() != radial_.num_basis() || L.density_mlp.dim_out() != 1)
          throw ModelFormatError(w + ".density_mlp maps " + std::to_string(L.density_mlp.dim_in()) +
                                 " -> " + std::to_string(L.density_mlp.dim_out()) + ", expected " +
                                 std::to_string(radial_.num_basis()) + " -> 1");
      } else {
        if (!(std::isfinite(in.avg_num_neighbors) && in.avg_num_neighbors > 0))
          throw ModelFormatError(w + ": avg_num_neighbors " + fmt(in.avg_num_neighbors) +
                                 " is not positive");
        L.inv_avg = static_cast<T>(1.0 / in.avg_num_neighbors);
      }
      L.skip = SpeciesLinear<T>(in.skip_tp, S_, w + ".skip_tp");
      L.sc_on_nodes = in.skip_on_node_features;
      const Irreps& A_irreps = in.linear.irreps_out;
      if (L.sc_on_nodes) {
        check_equal(in.skip_tp.descriptor.irreps_in1(), h_irreps, w + ".skip_tp input");
        if (!pr.add_skip)
          throw ModelFormatError("mace.products[" + std::to_string(t) +
                                 "]: residual interaction but add_skip is false");
      } else {
        check_equal(in.skip_tp.descriptor.irreps_in1(), A_irreps, w + ".skip_tp input");
        check_equal(in.skip_tp.descriptor.irreps_out(), A_irreps, w + ".skip_tp output");
        if (pr.add_skip)
          throw ModelFormatError("mace.products[" + std::to_string(t) +
                                 "]: add_skip without a residual interaction");
      }
      L.mlp_in = radial_.num_basis();
      plan_splines(in, w, L);
    }
    if (L.sc_on_nodes && !pr.add_skip)
      throw ModelFormatError("mace.products[" + std::to_string(t) +
                             "]: residual interaction but add_skip is false");
    const Irreps& A_irreps =
        in.nonlinear ? in.nonlinear->linear_2.irreps_out : in.linear.irreps_out;
    const std::string pw = "mace.products[" + std::to_string(t) + "]";
    L.contraction = make_contraction(pr.contraction, S_, pw + ".contraction");
    check_equal(L.contraction->irreps_in(), A_irreps, pw + ".contraction input");
    L.target = A_irreps;
    L.C = L.contraction->num_channels();
    L.D = L.contraction->dim_a();
    L.b_irreps = L.contraction->irreps_out();
    L.dim_b = L.b_irreps.dim();
    check_equal(pr.linear.irreps_in, L.b_irreps, pw + ".linear input");
    L.product_linear = NodeLinear<T>(pr.linear);
    if (L.sc_on_nodes)
      check_equal(in.nonlinear ? in.nonlinear->skip.irreps_out : in.skip_tp.descriptor.irreps_out(),
                  pr.linear.irreps_out, w + ".skip output vs product output");
    L.dim_in = h_irreps.dim();
    L.dim_edge = in.linear_up.irreps_out.dim();
    L.dim_mid = in.conv_tp.descriptor.irreps_out().dim();
    L.dim_target = A_irreps.dim();
    L.dim_hidden = pr.linear.irreps_out.dim();
    h_irreps = pr.linear.irreps_out;
    L.edge_flops = L.radial_spline ? 2 * (4.0 * L.conv.weight_numel() + L.conv.macs())
                                   : 2 * (L.radial_mlp.macs_per_row() + L.conv.macs() +
                                          (L.density ? L.density_mlp.macs_per_row() : 0.0));
    L.node_flops = L.linear.flops_per_row() + L.product_linear.flops_per_row() +
                   L.linear_up.flops_per_row() + L.skip.flops_per_row() +
                   L.skip_linear.flops_per_row() + L.linear_res.flops_per_row() +
                   L.linear_2.flops_per_row() + contraction_flops(*L.contraction, 1);
    if (t > 0) exchange_width = std::max(exchange_width, L.dim_edge);
    layers_.push_back(std::move(L));
  }

  for (std::size_t r = 0; r < m.readouts.size(); ++r) {
    const model::MaceReadout& src = m.readouts[r];
    const std::string w = "mace.readouts[" + std::to_string(r) + "]";
    if (src.layer < 0 || src.layer >= T_)
      throw ModelFormatError(w + ": reads layer " + std::to_string(src.layer) + " of " +
                             std::to_string(T_));
    ReadoutPlan<T> R;
    R.layer = src.layer;
    R.nonlinear = src.nonlinear;
    const Irreps h_t = m.products[src.layer].linear.irreps_out;
    check_equal(src.linear.irreps_in, h_t, w + " input");
    R.linear = NodeLinear<T>(src.linear);
    const NodeLinear<T>* last = &R.linear;
    if (src.nonlinear) {
      if (!src.activation || !src.linear_2)
        throw ModelFormatError(w + ": non-linear readout without activation or linear_2");
      check_equal(src.activation->irreps_in, src.linear.irreps_out, w + ".activation input");
      check_equal(src.linear_2->irreps_in, src.linear.irreps_out, w + ".linear_2 input");
      const std::vector<int> off = src.linear.irreps_out.offsets();
      for (std::size_t b = 0; b < src.activation->acts.size(); ++b) {
        if (src.activation->acts[b] && src.linear.irreps_out[b].ir.l() != 0)
          throw ModelFormatError(w + ".activation: activation on a non-scalar block");
        R.acts.push_back(src.activation->acts[b] ? std::optional<ScalarAct>(ScalarAct::from(
                                                       *src.activation->acts[b], w + ".activation"))
                                                 : std::nullopt);
      }
      if (R.acts.size() != src.linear.irreps_out.size())
        throw ModelFormatError(w + ".activation: " + std::to_string(R.acts.size()) +
                               " activations for " + src.linear.irreps_out.str());
      R.act_offsets = off;
      R.linear_2 = NodeLinear<T>(*src.linear_2);
      last = &R.linear_2;
      if (src.linear_mid) {
        // Biases are added by the engine; scalar-only rows have the file's layout in ir_mul.
        for (const model::Linear* lin : {&*src.linear_mid, &*src.linear_2})
          for (const auto& b : lin->irreps_out)
            if (b.ir.l() != 0)
              throw ModelFormatError(w + ": bias readout with non-scalar " + lin->irreps_out.str());
        check_equal(src.linear_mid->irreps_in, src.linear.irreps_out, w + ".linear_mid input");
        check_equal(src.linear_mid->irreps_out, src.linear.irreps_out, w + ".linear_mid output");
        R.has_mid = true;
        R.linear_mid = NodeLinear<T>(*src.linear_mid);
        R.bias_mid.assign(src.linear_mid->bias.begin(), src.linear_mid->bias.end());
        R.bias_2.assign(src.linear_2->bias.begin(), src.linear_2->bias.end());
        R.bias_mid.resize(src.linear_mid->irreps_out.dim(), T(0));
        R.bias_2.resize(src.linear_2->irreps_out.dim(), T(0));
      } else if (!src.linear_2->bias.empty()) {
        throw ModelFormatError(w + ": linear_2 bias without linear_mid");
      }
    }
    if (last->irreps_out().dim() < 1 || last->irreps_out()[0].ir.l() != 0)
      throw ModelFormatError(w + ": output " + last->irreps_out().str() +
                             " does not start with a scalar");
    readouts_.push_back(std::move(R));
  }

  // Layer 0 reads the embedding of the species only: tabulate its inputs per species.
  {
    std::vector<T> onehot(static_cast<std::size_t>(S_) * S_, T(0));
    std::vector<int> sp(S_);
    for (int s = 0; s < S_; ++s) {
      onehot[static_cast<std::size_t>(s) * S_ + s] = T(1);
      sp[s] = s;
    }
    const LayerPlan<T>& L0 = layers_[0];
    std::vector<T> h0_table(static_cast<std::size_t>(S_) * L0.dim_in);
    embedding.forward(S_, onehot.data(), S_, h0_table.data(), L0.dim_in, false, false);
    if (m.embedding) plan_embedding(m, options, h0_table.data());
    hu0_table_.resize(static_cast<std::size_t>(S_) * L0.dim_edge);
    L0.linear_up.forward(S_, h0_table.data(), L0.dim_in, hu0_table_.data(), L0.dim_edge, false,
                         false);
    if (L0.sc_on_nodes) {
      sc0_table_.resize(static_cast<std::size_t>(S_) * L0.dim_hidden);
      if (L0.nonlinear)
        L0.skip_linear.forward(S_, h0_table.data(), L0.dim_in, sc0_table_.data(), L0.dim_hidden,
                               false, false);
      else
        L0.skip.forward(S_, sp.data(), h0_table.data(), L0.dim_in, sc0_table_.data(), L0.dim_hidden,
                        false);
    }
  }
}

#define CLEBSCH_INSTANTIATE(T, G) \
  template MaceImpl<T, G>::MaceImpl(const model::Model&, const MaceEngineOptions&);
CLEBSCH_MACE_PRECISIONS(CLEBSCH_INSTANTIATE)
#undef CLEBSCH_INSTANTIATE

}  // namespace clebsch::mace_detail
