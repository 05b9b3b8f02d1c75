// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The NequIP host engine (nequip_engine.h): the model converted once into the ops of
// nequip_engine_ops.h in the network scalar, with every shape, mode and activation checked
// against what the engine supports, the per-thread scratch sized from it, and compute()'s
// sequence of stages: graph validation, the edge orderings, the forward pass
// (nequip_engine_forward.cpp) and the backward pass (nequip_engine_backward.cpp). The types they
// share are in nequip_engine_impl.h; the hot kernels in nequip_engine_kernels.cpp.
#include "clebsch/engine/nequip_engine.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "clebsch/engine/held_bytes.h"
#include "clebsch/engine/nequip_engine_impl.h"
#include "clebsch/support/error.h"

namespace clebsch {

using nequip_ops::format_number;

NequipEngine::Impl::Impl(const model::Model& model, Precision precision) : precision_(precision) {
  if (model.arch != model::Arch::kNequip || !model.nequip)
    throw Error("NequipEngine: the model's arch is " +
                std::string(model.arch == model::Arch::kMace ? "mace" : "unknown") +
                ", expected nequip");
  if (model.edge_vector != model::EdgeVector::kNeighbourMinusCentre)
    throw Error(
        "NequipEngine: the model's graph.edge_vector is centre_minus_neighbour; NequIP "
        "models use neighbour_minus_centre");
  num_species_ = model.num_species();
  if (num_species_ < 1) throw Error("NequipEngine: the model has no species");
  for (const auto& s : model.species) species_names_.push_back(s.symbol);
  const std::size_t s2 = static_cast<std::size_t>(num_species_) * num_species_;
  if (model.r_max_pairs.size() != s2)
    throw Error("NequipEngine: r_max_pairs has " + std::to_string(model.r_max_pairs.size()) +
                " entries, expected " + std::to_string(s2));
  r_max_pairs_ = model.r_max_pairs;
  r_max_ = 0;
  for (double r : r_max_pairs_) {
    if (!(std::isfinite(r) && r > 0))
      throw Error("NequipEngine: r_max_pairs holds " + format_number(r) +
                  ", expected finite positive cutoffs");
    r_max_ = std::max(r_max_, r);
  }
  num_layers_ = static_cast<int>(model.nequip->layers.size());
}

namespace nequip_detail {

template <class S, class G>
NequipImpl<S, G>::NequipImpl(const model::Model& model, Precision precision)
    : Impl(model, precision), radial_(make_radial(model)) {
  const model::Nequip& nq = *model.nequip;
  const int ns = num_species_;
  sh_lmax_ = model.sh_lmax;
  num_sh_ = (sh_lmax_ + 1) * (sh_lmax_ + 1);
  if (model.sh_irreps.dim() != num_sh_)
    throw Error("NequipEngine: spherical_harmonics.irreps " + model.sh_irreps.str() +
                " has dimension " + std::to_string(model.sh_irreps.dim()) + ", lmax " +
                std::to_string(sh_lmax_) + " needs " + std::to_string(num_sh_));
  num_basis_ = radial_.num_basis();

  // Type embedding: the initial features and the second input of the self-connections.
  embedding_dim_ = nq.embedding_dim;
  if (embedding_dim_ < 1 ||
      nq.type_embedding.size() != static_cast<std::size_t>(ns) * embedding_dim_)
    throw Error("NequipEngine: type_embedding has " + std::to_string(nq.type_embedding.size()) +
                " values, expected " + std::to_string(ns) + " x " + std::to_string(embedding_dim_));
  type_embedding_.assign(nq.type_embedding.begin(), nq.type_embedding.end());

  if (nq.layers.empty()) throw Error("NequipEngine: the model has no convolution layers");
  int dim_prev = embedding_dim_;
  for (std::size_t k = 0; k < nq.layers.size(); ++k) {
    layers_.push_back(make_layer(nq.layers[k], static_cast<int>(k), dim_prev, model));
    if (k + 1 < nq.layers.size()) exchange_width_ = std::max(exchange_width_, dim_prev);
  }

  readout_ = MlpOp<S>(nq.readout, "readout");
  if (readout_.dim_in() != dim_prev || readout_.dim_out() != 1)
    throw Error("NequipEngine: the readout maps " + std::to_string(readout_.dim_in()) + " -> " +
                std::to_string(readout_.dim_out()) + " values, expected " +
                std::to_string(dim_prev) + " -> 1");
  scales_ = per_species(nq.scales, "scale_shift.scales");
  shifts_ = per_species(nq.shifts, "scale_shift.shifts");

  if (nq.pair_potential) {
    const model::NequipZbl& z = *nq.pair_potential;
    if (z.atomic_numbers.size() != static_cast<std::size_t>(ns))
      throw Error("NequipEngine: pair_potential.atomic_numbers has " +
                  std::to_string(z.atomic_numbers.size()) + " entries, expected " +
                  std::to_string(ns));
    Zbl zbl;
    zbl.num_species = ns;
    zbl.qq = z.qqr2exesquare;
    zbl.c = z.c;
    zbl.d = z.d;
    zbl.cutoff = PolynomialCutoff(1.0, z.cutoff_p);
    for (int a = 0; a < ns; ++a)
      for (int b = 0; b < ns; ++b) {
        const double za = z.atomic_numbers[a], zb = z.atomic_numbers[b];
        zbl.screening.push_back((std::pow(za, z.pzbl) + std::pow(zb, z.pzbl)) / z.a0);
        zbl.zz.push_back(za * zb);
      }
    zbl_ = std::move(zbl);
  }

  // Scratch sizes.
  for (const Layer<S>& L : layers_) {
    max_mlp_in_ = std::max(max_mlp_in_, L.edge_mlp.dim_in());
    max_mlp_out_ = std::max(max_mlp_out_, L.edge_mlp.dim_out());
    max_mlp_scratch_ = std::max(max_mlp_scratch_, L.edge_mlp.scratch_per_row());
    max_mlp_width_ = std::max(max_mlp_width_, L.edge_mlp.max_width());
    max_dim_x_ = std::max(max_dim_x_, L.dim_x);
    max_dim_mid_ = std::max(max_dim_mid_, L.dim_mid);
    max_tp_scratch_ = std::max(max_tp_scratch_, L.tp.scratch_size());
  }
  max_mlp_in_ = std::max(max_mlp_in_, readout_.dim_in());
  max_mlp_out_ = std::max(max_mlp_out_, readout_.dim_out());
  max_mlp_scratch_ = std::max(max_mlp_scratch_, readout_.scratch_per_row());
  max_mlp_width_ = std::max(max_mlp_width_, readout_.max_width());
}

template <class S, class G>
NequipRadialEmbedding NequipImpl<S, G>::make_radial(const model::Model& model) {
  const model::NequipRadial& r = model.nequip->radial;
  const int ns = model.num_species();
  if (r.rmax_recip.size() != static_cast<std::size_t>(ns) * ns)
    throw Error("NequipEngine: radial.rmax_recip has " + std::to_string(r.rmax_recip.size()) +
                " entries, expected " + std::to_string(ns) + " x " + std::to_string(ns));
  if (static_cast<int>(r.bessel_weights.size()) != r.num_basis)
    throw Error("NequipEngine: radial.num_basis is " + std::to_string(r.num_basis) +
                " but bessel_weights has " + std::to_string(r.bessel_weights.size()) + " entries");
  return NequipRadialEmbedding(NequipEdgeLength(ns, r.rmax_recip),
                               NequipBessel(r.bessel_weights, r.factor), r.cutoff_p);
}

template <class S, class G>
std::vector<S> NequipImpl<S, G>::per_species(const std::vector<double>& v,
                                             const std::string& what) const {
  const std::size_t ns = static_cast<std::size_t>(num_species_);
  if (v.size() != ns && v.size() != 1)
    throw Error("NequipEngine: " + what + " has " + std::to_string(v.size()) +
                " entries, expected 1 or " + std::to_string(ns));
  std::vector<S> out(ns);
  for (std::size_t s = 0; s < ns; ++s) out[s] = static_cast<S>(v[v.size() == 1 ? 0 : s]);
  return out;
}

template <class S, class G>
Layer<S> NequipImpl<S, G>::make_layer(const model::NequipLayer& m, int k, int& dim_prev,
                                      const model::Model& model) const {
  const std::string where = "layer " + std::to_string(k);
  Layer<S> L;
  L.resnet = m.resnet;
  L.dim_in = m.irreps_in.dim();
  if (L.dim_in != dim_prev)
    throw Error("NequipEngine: " + where + " expects irreps_in " + m.irreps_in.str() +
                " (dimension " + std::to_string(L.dim_in) + "), the previous stage gives " +
                std::to_string(dim_prev) + " values");
  L.linear_1 = LinearOp<S>(m.linear_1, where + " linear_1");
  if (L.linear_1.dim_in() != L.dim_in)
    throw Error("NequipEngine: " + where + " linear_1 takes " + m.linear_1.irreps_in.str() +
                ", the layer input is " + m.irreps_in.str());
  L.dim_x = L.linear_1.dim_out();
  L.norm_const = per_species(m.norm_const, where + " norm_const");
  L.edge_mlp = MlpOp<S>(m.edge_mlp, where + " edge_mlp");
  if (L.edge_mlp.dim_in() != num_basis_)
    throw Error("NequipEngine: " + where + " edge_mlp takes " +
                std::to_string(L.edge_mlp.dim_in()) + " inputs, the radial basis has " +
                std::to_string(num_basis_));
  L.tp = ConvTp<S>(m.tp, where + " tp");
  if (L.tp.dim_in1() != L.dim_x || L.tp.dim_in2() != num_sh_)
    throw Error("NequipEngine: " + where + " tp takes " + m.tp.descriptor.irreps_in1().str() +
                " x " + m.tp.descriptor.irreps_in2().str() + ", the features are " +
                m.linear_1.irreps_out.str() + " and the spherical harmonics " +
                model.sh_irreps.str());
  if (L.tp.weight_numel() != L.edge_mlp.dim_out())
    throw Error("NequipEngine: " + where + " tp needs " + std::to_string(L.tp.weight_numel()) +
                " weights per edge, edge_mlp gives " + std::to_string(L.edge_mlp.dim_out()));
  L.dim_mid = L.tp.dim_out();
  L.linear_2 = LinearOp<S>(m.linear_2, where + " linear_2");
  if (L.linear_2.dim_in() != L.dim_mid)
    throw Error("NequipEngine: " + where + " linear_2 takes " + m.linear_2.irreps_in.str() +
                ", tp gives " + m.tp.descriptor.irreps_out().str());
  L.dim_y = L.linear_2.dim_out();
  if (m.sc) {
    L.sc.emplace(*m.sc, model.nequip->type_embedding, num_species_, embedding_dim_, where + " sc");
    if (L.sc->dim_in1() != L.dim_in || L.sc->dim_out() != L.dim_y)
      throw Error("NequipEngine: " + where + " sc maps " + m.sc->descriptor.irreps_in1().str() +
                  " -> " + m.sc->descriptor.irreps_out().str() + ", the layer has " +
                  m.irreps_in.str() + " -> " + m.linear_2.irreps_out.str());
  }
  L.gate = GateOp<S>(m.gate, where + " gate");
  if (L.gate.dim_in() != L.dim_y)
    throw Error("NequipEngine: " + where + " gate takes " + m.gate.irreps_in.str() +
                ", linear_2 gives " + m.linear_2.irreps_out.str());
  L.dim_out = L.gate.dim_out();
  if (L.resnet && L.dim_out != L.dim_in)
    throw Error("NequipEngine: " + where + " has resnet but maps " + m.irreps_in.str() + " to " +
                m.gate.irreps_out.str());
  dim_prev = L.dim_out;
  return L;
}

template <class S, class G>
void NequipImpl<S, G>::ensure_workspaces() {
  const int nt = std::max(1, omp_get_max_threads());
  if (static_cast<int>(ws_.size()) >= nt) return;
  ws_.resize(nt);
  const int chunk = std::max(kEdgeChunk, kNodeChunk);
  for (Workspace<S>& w : ws_) {
    w.rows_in.assign(static_cast<std::size_t>(chunk) * max_mlp_in_, S(0));
    w.mlp.assign(static_cast<std::size_t>(chunk) * max_mlp_scratch_, S(0));
    w.grad_w.assign(static_cast<std::size_t>(chunk) * max_mlp_out_, S(0));
    w.grad_in.assign(static_cast<std::size_t>(chunk) * max_mlp_in_, S(0));
    w.mlp_grad.assign(2 * static_cast<std::size_t>(chunk) * max_mlp_width_, S(0));
    w.grad_x.assign(max_dim_x_, S(0));
    w.grad_y.assign(num_sh_, S(0));
    w.row.assign(std::max(max_dim_x_, max_dim_mid_), S(0));
    w.message.assign(max_dim_mid_, S(0));
    w.tp.assign(max_tp_scratch_, S(0));
  }
}

template <class S, class G>
void NequipImpl<S, G>::compute(const AtomGraph& g, EngineResult& result, GhostExchange* exchange) {
  validate(g, exchange);
  ensure_workspaces();
  const std::size_t nl = g.num_local, nn = g.num_nodes, ne = g.num_edges;
  result.atom_energy.assign(nl, 0.0);
  result.edge_gradient.assign(3 * ne, 0.0);
  result.energy = 0;
  // No early return for an empty rank: its exchanges must still take part (see forward_layer).

  by_center_.build(nl, ne, g.center);
  by_neighbor_.build(nn, ne, g.neighbor);
  forward(g, result, exchange);
  backward(g, result, exchange);
}

// The forward and backward passes are instantiated in their own files.
template <class S, class G>
std::size_t NequipImpl<S, G>::buffer_bytes() const {
  using engine_detail::held_bytes;
  using engine_detail::sum_held_bytes;
  std::size_t bytes = held_bytes(ws_);
  for (const Workspace<S>& w : ws_)
    bytes += sum_held_bytes(w.rows_in, w.mlp, w.grad_w, w.grad_in, w.mlp_grad, w.grad_x, w.grad_y,
                            w.row, w.message, w.tp);
  return bytes + sum_held_bytes(sh_, emb_, zbl_edge_, grad_sh_, grad_emb_, x_, y_, h_, h_next_,
                                message_, grad_h_, grad_h_in_, grad_y_, grad_message_);
}

template class NequipImpl<double, double>;
template class NequipImpl<float, double>;
template class NequipImpl<float, float>;

}  // namespace nequip_detail

// ---------------------------------------------------------------------------------------------

using nequip_detail::NequipImpl;

NequipEngine::NequipEngine(const model::Model& model, Precision precision) {
  switch (precision) {
    case Precision::kFloat64:
      impl_ = std::make_unique<NequipImpl<double, double>>(model, precision);
      break;
    case Precision::kMixed:
      impl_ = std::make_unique<NequipImpl<float, double>>(model, precision);
      break;
    case Precision::kFloat32:
      impl_ = std::make_unique<NequipImpl<float, float>>(model, precision);
      break;
    default:
      throw Error("NequipEngine: unknown precision " + std::to_string(static_cast<int>(precision)));
  }
  impl_->model_bytes_ = model.num_values * (precision == Precision::kFloat64 ? 8 : 4);
}

NequipEngine::~NequipEngine() = default;
NequipEngine::NequipEngine(NequipEngine&&) noexcept = default;
NequipEngine& NequipEngine::operator=(NequipEngine&&) noexcept = default;

const std::vector<std::string>& NequipEngine::species() const { return impl_->species_names_; }
double NequipEngine::r_max() const { return impl_->r_max_; }
double NequipEngine::r_max(int species_a, int species_b) const {
  const int ns = impl_->num_species_;
  if (species_a < 0 || species_a >= ns || species_b < 0 || species_b >= ns)
    throw Error("NequipEngine::r_max: species pair (" + std::to_string(species_a) + ", " +
                std::to_string(species_b) + ") is out of range [0, " + std::to_string(ns) + ")");
  return impl_->r_max_pairs_[static_cast<std::size_t>(species_a) * ns + species_b];
}
int NequipEngine::num_layers() const { return impl_->num_layers_; }
int NequipEngine::exchange_width() const { return impl_->exchange_width_; }
Precision NequipEngine::precision() const { return impl_->precision_; }

void NequipEngine::compute(const AtomGraph& graph, EngineResult& result, GhostExchange* exchange) {
  impl_->compute(graph, result, exchange);
}

EngineMemory NequipEngine::memory_usage() const {
  EngineMemory m;
  m.host_bytes = impl_->model_bytes_ + impl_->buffer_bytes();
  return m;
}

}  // namespace clebsch
