// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The stages of mace-torch's RealAgnosticResidualNonLinearInteractionBlock (the MH-0/MH-1 and
// OMOL foundation models; FORMAT.md section 5) in the CUDA MACE engine, as the host engine's
// mace_engine_nonlinear.cpp evaluates them, on the engine's mul_ir rows:
//   - the input rows of the radial and density MLPs, [e_e | source_embedding(o_sender) |
//     target_embedding(o_centre)] (mace_mlp_input, from the per-species tables; the species
//     parts carry no position dependence, so the backward keeps only the basis columns);
//   - the node forward, from the messages to the contraction's input:
//     q = linear_1(M) / (beta D + alpha), X = q + linear_res(hu), A = linear_2(gate(X));
//   - its reverse, from dE/dA to dE/dM, dE/dD and (t > 0) dE/dhu through linear_res.
// The skip (sc = skip(h), a plain linear) and the rest of the layer are the classic path's.
#include <cstddef>

#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/engine/mace_cuda_engine_impl.h"
#include "clebsch/cuda/templates/mace_device_args.h"

namespace clebsch::cuda::mace_cuda_detail {

template <class T, class G>
void MaceCuda<T, G>::mlp_input(int t, Stream s) {
  Layer<T>& Lp = layers_[t];
  const long long E = static_cast<long long>(E_);
  Lp.xin.resize(E_ * Lp.mlp_in);
  MaceMlpInputArgs a{};
  a.ef = ef_.data(), a.src = Lp.src_tab.data(), a.tgt = Lp.tgt_tab.data();
  a.species = d_species_, a.sender = edges_.sender.data(), a.centre = edges_.centre.data();
  a.x = Lp.xin.data(), a.num_edges = E, a.nb = nb_, a.c0 = Lp.C0;
  backend_->launch(*k_mlp_input_, grid_for(E * Lp.mlp_in), s, a);
}

template <class T, class G>
void MaceCuda<T, G>::node_forward_nonlinear(int t, const NodeBatch& nb, Stream s) {
  Layer<T>& Lp = layers_[t];
  const int dn = Lp.dim_nonlin, dt = Lp.dim_target, dg = Lp.gate.dim_out();
  // Ml keeps q (the backward's dE/dD reads it), X the gate's input; linear_1(M) is in Ml
  // already (messages_forward).
  T* q = Lp.Ml.data() + nb.k0 * dn;
  T* X = Lp.X.data() + nb.k0 * dn;
  ScaleRowsArgs sr{q, Lp.dens.data() + nb.r0, nb.n, dn, dn, 2, Lp.alpha, Lp.beta};
  gk_->scale_rows(dt_, sr, s);
  gk_->axpby(dt_, dt_, GenericKernels::vector(q, X, nb.n * dn, 1, 0), s);
  // hu's first L_ rows are the local atoms' (layer 0: gathered from the species table).
  Lp.linear_res.forward(*gk_, nb.n, Lp.hu.data() + nb.r0 * Lp.dim_edge, Lp.dim_edge, X, dn, true,
                        nullptr, s);
  // The gate's output is only linear_2's input: gyg_ serves as its scratch here.
  gyg_.resize(max_batch_centres() * dg);
  Lp.gate.forward(*gk_, nb.n, X, gyg_.data(), dg, s);
  Lp.linear_2.forward(*gk_, nb.n, gyg_.data(), dg, Lp.A.data() + nb.k0 * dt, dt, false, nullptr, s);
}

template <class T, class G>
void MaceCuda<T, G>::node_backward_nonlinear(int t, const NodeBatch& nb, Stream s) {
  Layer<T>& Lp = layers_[t];
  const int dn = Lp.dim_nonlin, dt = Lp.dim_target, dg = Lp.gate.dim_out();
  const long long n = nb.n;
  gyg_.resize(max_batch_centres() * dg);
  Lp.linear_2.backward(*gk_, n, gA_.data(), dt, gyg_.data(), dg, false, nullptr, s);
  gX_.resize(max_batch_centres() * dn);
  Lp.gate.backward(*gk_, n, Lp.X.data() + nb.k0 * dn, gyg_.data(), dg, gX_.data(), s);
  // Layer 0's hu rows come from the species table: no gradient to return.
  if (t > 0)
    Lp.linear_res.backward(*gk_, n, gX_.data(), dn, ghu_res_.data() + nb.r0 * Lp.dim_edge,
                           Lp.dim_edge, false, nullptr, s);
  // q = lin1 / (beta D + alpha): dE/dD = -beta <dE/dq, q> / (beta D + alpha) and
  // dE/dlin1 = dE/dq / (beta D + alpha).
  T* gd = gdens_.data() + nb.r0;
  const T* dens = Lp.dens.data() + nb.r0;
  gk_->row_dot(
      dt_, RowDotArgs{gX_.data(), Lp.Ml.data() + nb.k0 * dn, gd, n, dn, dn, dn, -Lp.beta, 0}, s);
  gk_->scale_rows(dt_, ScaleRowsArgs{gd, dens, n, 1, 1, 2, Lp.alpha, Lp.beta}, s);
  gk_->scale_rows(dt_, ScaleRowsArgs{gX_.data(), dens, n, dn, dn, 2, Lp.alpha, Lp.beta}, s);
  // dE/dM = linear_1^T dE/dlin1 (in gX_) follows in layer_backward.
}

#define CLEBSCH_INSTANTIATE(T, G)                                                      \
  template void MaceCuda<T, G>::mlp_input(int, Stream);                                \
  template void MaceCuda<T, G>::node_forward_nonlinear(int, const NodeBatch&, Stream); \
  template void MaceCuda<T, G>::node_backward_nonlinear(int, const NodeBatch&, Stream);
CLEBSCH_INSTANTIATE(double, double)
CLEBSCH_INSTANTIATE(float, float)
CLEBSCH_INSTANTIATE(float, double)
#undef CLEBSCH_INSTANTIATE

}  // namespace clebsch::cuda::mace_cuda_detail
