// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The backward pass of the CUDA MACE engine's layers (mace_cuda_engine_impl.h), written by hand
// and run layer by layer in reverse: the readouts' seeds; then per edge batch (its contraction's
// inputs made again first when they are not kept) the product linear, the symmetric
// contraction, the skip, the normalisation and the linear on the batch's centres, the
// convolution's fused sender pass (weights kept from the forward with one batch, computed again
// with several), the cutoff and the radial MLP, summed into dE/dY (or, batch rows, turned into
// forces per batch), dE/d(radial features) and dE/dcutoff in the geometry type; last linear_up
// and the skip to the previous layer's features, with the ghost rows' gradients returned to
// their owners.
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/engine/mace_cuda_engine_impl.h"
#include "clebsch/cuda/graph/ghost_staging.h"
#include "clebsch/cuda/templates/mace_device_args.h"

namespace clebsch::cuda::mace_cuda_detail {

template <class T, class G>
void MaceCuda<T, G>::backward_layers(GhostExchange* exchange, Stream s) {
  gh_.resize(L_ * layers_.back().dim_hidden);
  gh_.zero(s);
  for (int t = T_ - 1; t >= 0; --t) {
    // The readouts of layer t add their dE/dh to what the later layers left in gh_.
    for (Readout<T>& R : readouts_)
      if (R.layer == t) readout_backward(R, s);
    layer_backward(t, s);
    if (t > 0) backward_tail(t, exchange, s);
    phase("layer " + std::to_string(t) + " backward", s);
  }
}

template <class T, class G>
void MaceCuda<T, G>::readout_backward(Readout<T>& R, Stream s) {
  const long long L = static_cast<long long>(L_);
  const int dh = layers_[R.layer].dim_hidden, dout = R.dim_out();
  // dE/dy = scale on the first (scalar) output, 0 elsewhere.
  gy_.resize(L_ * dout);
  gy_.zero(s);
  AxpbyArgs a{};
  a.x = ones_.data(), a.y = gy_.data(), a.rows = L, a.cols = 1, a.ldx = 1, a.ldy = dout;
  a.alpha = scale_, a.beta = 0;
  gk_->axpby(dt_, dt_, a, s);
  if (!R.nonlinear) {
    R.linear.backward(*gk_, L, gy_.data(), dout, gh_.data(), dh, true, nullptr, s);
    return;
  }
  const int dz = R.linear.dim_out();
  gz_.resize(L_ * dz);
  if (R.has_mid) {
    // Through linear_2, the second activations (at z2) and linear_mid; the biases add nothing.
    gz2_.resize(L_ * dz);
    R.linear_2.backward(*gk_, L, gy_.data(), dout, gz2_.data(), dz, false, nullptr, s);
    for (const auto& act : R.acts) {
      ActArgs aa = R.act_args(act, L, true);
      aa.g = gz2_.data();
      gk_->act_backward(dt_, aa, s);
    }
    R.linear_mid.backward(*gk_, L, gz2_.data(), dz, gz_.data(), dz, false, nullptr, s);
  } else {
    R.linear_2.backward(*gk_, L, gy_.data(), dout, gz_.data(), dz, false, nullptr, s);
  }
  for (const auto& act : R.acts) {
    ActArgs aa = R.act_args(act, L);
    aa.g = gz_.data();
    gk_->act_backward(dt_, aa, s);
  }
  R.linear.backward(*gk_, L, gz_.data(), dz, gh_.data(), dh, true, nullptr, s);
}

template <class T, class G>
void MaceCuda<T, G>::node_backward(int t, const NodeBatch& nb, Stream s) {
  Layer<T>& Lp = layers_[t];
  const long long n = nb.n;
  const int dt = Lp.dim_target;
  const int* species = d_species_ + nb.r0;
  // dE/dB in B's rows: the forward's B was only the product linear's input.
  B_.resize(max_batch_centres() * Lp.dim_b);
  Lp.product_linear.backward(*gk_, n, gh_.data() + nb.r0 * Lp.dim_hidden, Lp.dim_hidden, B_.data(),
                             Lp.dim_b, false, nullptr, s);
  // dE/dA, in the layout of A: straight into dE/dMl when A is the messages themselves.
  gMl_.resize(Lp.nonlinear ? 0 : max_batch_centres() * dt);
  DeviceArray<T>& gA = Lp.own_A() ? gA_ : gMl_;
  gA.resize(max_batch_centres() * dt);
  SymConArgs sa = Lp.symcon_args(species, nb.k0, n);
  sa.B = B_.data(), sa.gA = gA.data();
  // Its floor: A and dE/dB read, dE/dA written once.
  backend_->set_timing_floor(double(sizeof(T)) * double(n) * double(2 * dt + Lp.dim_b) +
                             4.0 * double(n));
  backend_->launch(*Lp.k_symcon_bwd, grid_for(n * Lp.C), s, sa);
  if (Lp.nonlinear) return node_backward_nonlinear(t, nb, s);
  if (Lp.own_A()) Lp.skip.backward(*gk_, n, gA_.data(), dt, gMl_.data(), dt, false, species, s);
  if (Lp.density) {
    // Ml = Mlin / (1 + D): dE/dD = -<dE/dMl, Ml> / (1 + D), dE/dMlin = dE/dMl / (1 + D).
    T* gd = gdens_.data() + nb.r0;
    const T* dens = Lp.dens.data() + nb.r0;
    gk_->row_dot(dt_, RowDotArgs{gMl_.data(), Lp.Ml.data() + nb.k0 * dt, gd, n, dt, dt, dt, -1, 0},
                 s);
    gk_->scale_rows(dt_, ScaleRowsArgs{gd, dens, n, 1, 1, 1, 0, 0}, s);
    gk_->scale_rows(dt_, ScaleRowsArgs{gMl_.data(), dens, n, dt, dt, 1, 0, 0}, s);
  } else {
    gk_->axpby(dt_, dt_, GenericKernels::vector(gMl_.data(), gMl_.data(), n * dt, Lp.inv_avg, 0),
               s);
  }
  // dE/dM = linear^T dE/dMl follows in layer_backward.
}

template <class T, class G>
void MaceCuda<T, G>::layer_backward(int t, Stream s) {
  Layer<T>& Lp = layers_[t];
  DeviceBackend& b = *backend_;
  const long long E = static_cast<long long>(E_);
  ghu_.resize(t > 0 ? N_ * Lp.dim_edge : 0);
  ghu_res_.resize(Lp.nonlinear && t > 0 ? L_ * Lp.dim_edge : 0);
  gdens_.resize(Lp.density ? L_ : 0);
  // dE/dY straight into gY_ when it has the layer's type and row length (the passes add to it);
  // otherwise through a batch-sized scratch in T, converted batch by batch.
  const bool direct_gy = std::is_same_v<T, G> && Lp.dim_y == nsh_;
  // dE/d(the MLPs' input rows); the non-linear block's carry the species embeddings after the
  // radial basis, which depend on no position: only their first nb_ columns reach gE_.
  const int w_in = mlp_width(Lp, nb_);
  gef_.resize(Lp.spline ? 0 : E_ * w_in);
  const std::size_t batches = edges_.num_batches();
  // The batches add their grad_x; with no edge nothing reaches the senders (the convolution
  // rejects a pass with no output), but the node stages still run for the exchange's sake.
  if (t > 0 && (batches > 1 || E_ == 0)) ghu_.zero(s);
  // dE/d(the linear's output): dE/dMl, or the non-linear block's dE/d(linear_1(M)) in gX_.
  const int dl = Lp.dim_linear();
  Mraw_.resize(max_batch_centres() * Lp.dim_mid);
  for (std::size_t bt = 0; bt < batches; ++bt) {
    const auto [e0, r0, n] = edge_batch(bt);
    BatchWeights bw{nullptr, nullptr};
    if (keep_weights_)
      bw = {Lp.kept.raw, Lp.kept.conv};
    else if (n > 0 || !keep_rows_)
      bw = batch_weights(t, bt, wb_, wfb_, s);
    // The contraction's inputs of the batch made again from its messages when not kept.
    if (!keep_rows_) messages_forward(t, bt, bw.conv, s);
    const NodeBatch nb = node_batch(bt);
    node_backward(t, nb, s);
    if (n == 0) continue;
    // dE/dW, or in the fused form dE/dh of the MLP's last hidden rows (the spline form: dE/dr).
    gw_.resize(n * Lp.conv_width);
    ConvBuffers cb = conv_buffers(Lp, bt, bw.conv);
    // dE/dM of the batch's centres, in the messages' rows (the forward's M was only the
    // linear's input).
    Lp.linear.backward(*gk_, nb.n, Lp.nonlinear ? gX_.data() : gMl_.data(), dl, Mraw_.data(),
                       Lp.dim_mid, false, nullptr, s);
    cb.grad_out = Mraw_.data();
    cb.grad_x = t > 0 ? ghu_.data() : nullptr;
    cb.accumulate_grad_x = batches > 1;
    if (direct_gy) {
      cb.accumulate_grad_y = true;
    } else {
      gyT_.resize(n * Lp.dim_y);
      cb.grad_y = gyT_.data();
    }
    (Lp.fused || Lp.fused_spline ? cb.grad_h : cb.grad_w) = gw_.data();
    // dE/dY of every edge, summed over the layers, or of this batch, into forces right after.
    G* gy = keep_rows_ ? gY_.data() + e0 * nsh_ : gY_.data();
    if (!keep_rows_) b.memset(gy, 0, std::size_t(n) * nsh_ * sizeof(G), s);
    if (direct_gy) cb.grad_y = gy;
    if (Lp.species_conv)
      Lp.species_conv->run(*gk_, s, Pass::kBackward, cb, hu0_table_.data(), d_species_, S_);
    else
      Lp.conv->run(s, Pass::kBackward, cb);
    if (!direct_gy) {
      AxpbyArgs a{};
      a.x = gyT_.data(), a.y = gy, a.rows = n, a.cols = Lp.dim_y;
      a.ldx = Lp.dim_y, a.ldy = nsh_, a.alpha = 1, a.beta = 1;
      gk_->axpby(dt_, dg_, a, s);
    }
    if (!keep_rows_) batch_harmonics_gradient(bt, s);
    if (!apply_cutoff_) {
      MaceCutArgs c{bw.raw,          nullptr, fc_.data() + e0, gw_.data(),
                    gF_.data() + e0, n,       Lp.conv_width};
      b.launch(*k_cut_bwd_, grid_for(n), s, c);
    }
    if (Lp.fused_spline) {
      // The convolution wrote dE/dr itself.
      gk_->axpby(dt_, dg_, GenericKernels::vector(gw_.data(), gR_.data() + e0, n, 1, 1), s);
    } else if (Lp.spline) {
      // dE/dr from the table's slopes, straight into gR_ (no dE/d(radial basis)).
      MaceSplineArgs a = Lp.radial_spline.args(rl_.data() + e0, n);
      a.gy = gw_.data(), a.gR = gR_.data() + e0;
      b.launch(*k_spline_bwd_, grid_for(n * 32), s, a);
    } else if (Lp.fused) {
      Lp.radial_mlp.backward_hidden(*gk_, n, gw_.data(), gef_.data() + e0 * w_in, s);
    } else {
      Lp.radial_mlp.backward(*gk_, n, gw_.data(), gef_.data() + e0 * w_in, s);
    }
  }
  if (E_ == 0) return;
  AxpbyArgs ga{};
  ga.x = gef_.data(), ga.y = gE_.data(), ga.rows = E, ga.cols = nb_, ga.ldx = w_in, ga.ldy = nb_;
  ga.alpha = 1, ga.beta = 1;
  if (!Lp.spline) gk_->axpby(dt_, dg_, ga, s);
  if (Lp.density) {
    grho_.resize(E_);
    MaceDensityArgs d{};
    d.rho = Lp.rho.data(), d.fc = apply_cutoff_ ? nullptr : fc_.data();
    d.gdens = gdens_.data(), d.centre = edges_.centre.data(), d.grho = grho_.data();
    d.gF = apply_cutoff_ ? nullptr : gF_.data(), d.num_edges = E;
    b.launch(*k_dens_bwd_, grid_for(E), s, d);
    if (Lp.spline) {
      MaceSplineArgs a = Lp.density_spline.args(rl_.data(), E);
      a.gy = grho_.data(), a.gR = gR_.data();
      b.launch(*k_spline_bwd_, grid_for(E * 32), s, a);
    } else {
      Lp.density_mlp.backward(*gk_, E, grho_.data(), gef_.data(), s);
      gk_->axpby(dt_, dg_, ga, s);
    }
  }
}

template <class T, class G>
void MaceCuda<T, G>::batch_harmonics_gradient(std::size_t bt, Stream s) {
  MaceEdgeArgs a = batch_edge_args(bt);
  a.gY = gY_.data(), a.edge_gradient = edge_gradient_;
  backend_->launch(*k_harmonics_gradient_, grid_for(a.num_edges), s, a);
}

template <class T, class G>
void MaceCuda<T, G>::backward_tail(int t, GhostExchange* exchange, Stream s) {
  Layer<T>& Lp = layers_[t];
  const long long L = static_cast<long long>(L_);
  if (exchange) exchange_reverse_rows(*backend_, ghu_.data(), N_, Lp.dim_edge, *exchange, s);
  // The non-linear block's linear_res read the local hu rows too.
  if (Lp.nonlinear)
    gk_->axpby(dt_, dt_,
               GenericKernels::vector(ghu_res_.data(), ghu_.data(), L * Lp.dim_edge, 1, 1), s);
  gh_prev_.resize(L_ * Lp.dim_in);
  Lp.linear_up.backward(*gk_, L, ghu_.data(), Lp.dim_edge, gh_prev_.data(), Lp.dim_in, false,
                        nullptr, s);
  if (Lp.sc_on_nodes)
    Lp.skip.backward(*gk_, L, gh_.data(), Lp.dim_hidden, gh_prev_.data(), Lp.dim_in, true,
                     d_species_, s);
  std::swap(gh_, gh_prev_);
}

template void MaceCuda<double, double>::backward_layers(GhostExchange*, Stream);
template void MaceCuda<float, float>::backward_layers(GhostExchange*, Stream);
template void MaceCuda<float, double>::backward_layers(GhostExchange*, Stream);

}  // namespace clebsch::cuda::mace_cuda_detail
