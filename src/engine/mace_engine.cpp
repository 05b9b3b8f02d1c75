// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The MACE host engine (see mace_engine.h): MaceEngine picks the implementation of its
// precision, and MaceImpl::compute is the sequence of one evaluation: validate the graph, build
// the orderings and the edge geometry, the forward pass through every layer, the energies, the
// backward pass layer by layer in reverse, and the final dE/dvector. The stages themselves are
// defined in the mace_engine_*.cpp files (mace_engine_impl.h lists them).
#include "clebsch/engine/mace_engine.h"

#include <omp.h>

#include <memory>

#include "clebsch/engine/held_bytes.h"
#include "clebsch/engine/mace_engine_impl.h"
#include "clebsch/support/error.h"

namespace clebsch {

namespace mace_detail {

template <class T, class G>
void MaceImpl<T, G>::compute(const AtomGraph& g, EngineResult& result, GhostExchange* exchange) {
  validate(g, exchange);
  N_ = g.num_nodes;
  L_ = g.num_local;
  E_ = g.num_edges;
  species_ = g.species;
  build_orderings(g);
  edge_geometry(g);
  hu_.resize(T_);
  A_.resize(T_);
  dens_.resize(T_);
  Ml_.resize(T_);
  Xg_.resize(T_);
  readout_z_.resize(readouts_.size());
  readout_z2_.resize(readouts_.size());
  energy_acc_.assign(L_, 0.0);
  const int nb = radial_.num_basis();
  gY_.assign(E_ * nsh_, G(0));
  gE_.assign(E_ * nb, G(0));
  gF_.assign(radial_.apply_cutoff() ? 0 : E_, G(0));
  gR_.assign(spline_ ? E_ : 0, G(0));

  // Forward through every layer but the last.
  for (int t = 0; t + 1 < T_; ++t) {
    prepare_layer(t, exchange);
    layer_forward(t);
  }
  // The last layer: fused forward and backward when the per-thread sender buffers fit the
  // budget, else forward now and backward (recomputing the MLP) below.
  const int last = T_ - 1;
  const LayerPlan<T>& Ll = layers_[last];
  prepare_layer(last, exchange);
  const bool need_hu = last > 0;
  const double fused_bytes =
      need_hu ? static_cast<double>(omp_get_max_threads()) * N_ * Ll.dim_edge * sizeof(T) : 0.0;
  const bool fused =
      options_.fuse_last_layer && fused_bytes <= static_cast<double>(options_.fusion_memory_budget);
  gh_.assign(L_ * Ll.dim_hidden, T(0));
  if (fused && Ll.nonlinear && last > 0) ghu_res_.assign(L_ * Ll.dim_edge, T(0));
  if (fused)
    fused_last_layer(need_hu);
  else
    layer_forward(last);

  result.atom_energy.resize(L_);
  result.energy = 0;
  for (std::size_t i = 0; i < L_; ++i) {
    const double e = e0_[species_[i]] + scale_ * (zbl_atom_[i] + energy_acc_[i]) + shift_;
    result.atom_energy[i] = e;
    result.energy += e;
  }

  // Backward, layer by layer.
  for (int t = last; t >= 0; --t) {
    const bool hu_gradient = t > 0;
    if (!(t == last && fused)) {
      if (layers_[t].nonlinear && t > 0) ghu_res_.assign(L_ * layers_[t].dim_edge, T(0));
      layer_node_backward(t);
      if (hu_gradient) ghu_.resize(N_ * layers_[t].dim_edge);
      edge_backward(t, hu_gradient ? ghu_.data() : nullptr);
    }
    if (hu_gradient) backward_tail(t, exchange);
  }

  result.edge_gradient.resize(3 * E_);
  final_gradient(g, result);
}

template <class T, class G>
std::size_t MaceImpl<T, G>::buffer_bytes() const {
  using engine_detail::sum_held_bytes;
  return sum_held_bytes(perm_, centre_, sender_, centre_ptr_, by_sender_, sender_ptr_,
                        centre_tasks_, sender_tasks_, Y_, ef_, fc_, gY_, gE_, gF_, zbl_atom_,
                        energy_acc_, hu_, A_, dens_, Ml_, readout_z_, readout_z2_, Xg_, ghu_res_,
                        h_, sc_, gh_, gh_prev_, gMraw_, gdens_, ghu_, ghu_private_);
}

#define CLEBSCH_INSTANTIATE(T, G)                                                         \
  template void MaceImpl<T, G>::compute(const AtomGraph&, EngineResult&, GhostExchange*); \
  template std::size_t MaceImpl<T, G>::buffer_bytes() const;
CLEBSCH_MACE_PRECISIONS(CLEBSCH_INSTANTIATE)
#undef CLEBSCH_INSTANTIATE

}  // namespace mace_detail

using mace_detail::MaceImpl;

// ---------------------------------------------------------------------------------------------
// MaceEngine
// ---------------------------------------------------------------------------------------------

MaceEngine::MaceEngine(const model::Model& model, Precision precision,
                       const MaceEngineOptions& options) {
  if (model.arch != model::Arch::kMace || !model.mace)
    throw Error("MaceEngine needs a MACE model (arch mace)");
  switch (precision) {
    case Precision::kFloat64:
      impl_ = std::make_unique<MaceImpl<double, double>>(model, options);
      break;
    case Precision::kFloat32:
      impl_ = std::make_unique<MaceImpl<float, float>>(model, options);
      break;
    case Precision::kMixed:
      impl_ = std::make_unique<MaceImpl<float, double>>(model, options);
      break;
  }
  if (!impl_) throw Error("MaceEngine: unknown precision");
  impl_->precision = precision;
  impl_->model_bytes = model.num_values * (precision == Precision::kFloat64 ? 8 : 4);
}

MaceEngine::~MaceEngine() = default;
MaceEngine::MaceEngine(MaceEngine&&) noexcept = default;
MaceEngine& MaceEngine::operator=(MaceEngine&&) noexcept = default;

const std::vector<std::string>& MaceEngine::species() const { return impl_->species_names; }
double MaceEngine::r_max() const { return impl_->r_max; }
double MaceEngine::r_max(int a, int b) const {
  if (a < 0 || b < 0 || a >= impl_->num_species || b >= impl_->num_species)
    throw Error("r_max: species pair (" + std::to_string(a) + ", " + std::to_string(b) +
                ") out of range 0.." + std::to_string(impl_->num_species - 1));
  return impl_->r_max_pairs[static_cast<std::size_t>(a) * impl_->num_species + b];
}
int MaceEngine::num_layers() const { return impl_->num_layers; }
int MaceEngine::exchange_width() const { return impl_->exchange_width; }
Precision MaceEngine::precision() const { return impl_->precision; }

void MaceEngine::compute(const AtomGraph& graph, EngineResult& result, GhostExchange* exchange) {
  impl_->compute(graph, result, exchange);
}
EngineMemory MaceEngine::memory_usage() const {
  EngineMemory m;
  m.host_bytes = impl_->model_bytes + impl_->buffer_bytes();
  return m;
}

}  // namespace clebsch
