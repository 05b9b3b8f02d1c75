// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The forward pass of the CUDA MACE engine's layers (mace_cuda_engine_impl.h), layer by layer:
// the edge features of the nodes (layer 0 from the per-species tables, later layers through
// linear_up with the ghost rows exchanged), the density, the radial MLP and the receiver pass of
// the convolution batch by batch, the linear, the normalisation and skip, the symmetric
// contraction, the product linear and the readouts, whose energies add up in energy_acc_. A
// layer keeps what its backward reads (its node rows, weights with one edge batch, activations).
#include <cstddef>
#include <string>

#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/engine/mace_cuda_engine_impl.h"
#include "clebsch/cuda/graph/ghost_staging.h"
#include "clebsch/cuda/templates/mace_device_args.h"

namespace clebsch::cuda::mace_cuda_detail {

template <class T, class G>
void MaceCuda<T, G>::forward_layers(GhostExchange* exchange, Stream s) {
  for (int t = 0; t < T_; ++t) {
    prepare_layer(t, exchange, s);
    layer_forward(t, s);
    phase("layer " + std::to_string(t) + " forward", s);
  }
}

template <class T, class G>
void MaceCuda<T, G>::prepare_layer(int t, GhostExchange* exchange, Stream s) {
  Layer<T>& Lp = layers_[t];
  const long long N = static_cast<long long>(N_), L = static_cast<long long>(L_);
  Lp.hu.resize(N_ * Lp.dim_edge);
  if (t == 0) {
    AxpbyArgs a{};
    a.x = hu0_table_.data(), a.y = Lp.hu.data(), a.x_rows = d_species_;
    a.rows = N, a.cols = Lp.dim_edge, a.ldx = Lp.dim_edge, a.ldy = Lp.dim_edge, a.alpha = 1;
    gk_->axpby(dt_, dt_, a, s);
  } else {
    Lp.linear_up.forward(*gk_, L, h_.data(), Lp.dim_in, Lp.hu.data(), Lp.dim_edge, false, nullptr,
                         s);
    if (exchange) exchange_forward_rows(*backend_, Lp.hu.data(), L_, N_, Lp.dim_edge, *exchange, s);
  }
  if (Lp.sc_on_nodes) {
    sc_.resize(L_ * Lp.dim_hidden);
    if (t == 0) {
      AxpbyArgs a{};
      a.x = sc0_table_.data(), a.y = sc_.data(), a.x_rows = d_species_;
      a.rows = L, a.cols = Lp.dim_hidden, a.ldx = Lp.dim_hidden, a.ldy = Lp.dim_hidden;
      a.alpha = 1;
      gk_->axpby(dt_, dt_, a, s);
    } else {
      Lp.skip.forward(*gk_, L, h_.data(), Lp.dim_in, sc_.data(), Lp.dim_hidden, false, d_species_,
                      s);
    }
  }
}

template <class T, class G>
void MaceCuda<T, G>::layer_forward(int t, Stream s) {
  Layer<T>& Lp = layers_[t];
  DeviceBackend& b = *backend_;
  const long long E = static_cast<long long>(E_), L = static_cast<long long>(L_);
  if (Lp.nonlinear) mlp_input(t, s);
  if (Lp.density) {
    Lp.rho.resize(E_), Lp.dedge.resize(E_), Lp.dens.resize(L_);
    if (Lp.spline) {
      MaceSplineArgs a = Lp.density_spline.args(rl_.data(), E);
      a.y = Lp.rho.data();
      b.launch(*k_spline_fwd_, grid_for(E * 32), s, a);
    } else {
      Lp.density_mlp.forward(*gk_, E, mlp_rows(Lp, 0), Lp.rho.data(), s);
    }
    MaceDensityArgs d{};
    d.rho = Lp.rho.data(), d.fc = apply_cutoff_ ? nullptr : fc_.data(), d.d = Lp.dedge.data();
    d.num_edges = E;
    b.launch(*k_dens_fwd_, grid_for(E), s, d);
    gk_->segment_sum(
        dt_, dt_,
        SegmentSumArgs{Lp.dedge.data(), Lp.dens.data(), edges_.centre_ptr.data(), L, 1, 0, 0}, s);
  }
  if (Lp.dim_y != nsh_) {
    Lp.Yc.resize(E_ * Lp.dim_y);
    AxpbyArgs a{};
    a.x = Y_.data(), a.y = Lp.Yc.data(), a.rows = E, a.cols = Lp.dim_y, a.ldx = nsh_;
    a.ldy = Lp.dim_y, a.alpha = 1;
    gk_->axpby(dt_, dt_, a, s);
  }
  // The messages of one batch's centres at a time, each batch's rows through the linear (Ml
  // holds every centre's output).
  Mraw_.resize(max_batch_centres() * Lp.dim_mid);
  const int dl = Lp.nonlinear ? Lp.dim_nonlin : Lp.dim_target;
  Lp.Ml.resize(L_ * dl);
  for (std::size_t bt = 0; bt < edges_.num_batches(); ++bt) {
    // One batch: the weights stay in the layer for its backward.
    const BatchWeights bw =
        keep_weights_ ? batch_weights(t, bt, Lp.W, Lp.Wf, s) : batch_weights(t, bt, wb_, wfb_, s);
    if (keep_weights_) Lp.kept.raw = bw.raw, Lp.kept.conv = bw.conv;
    ConvBuffers cb = conv_buffers(Lp, bt, bw.conv);
    cb.out = Mraw_.data();
    Lp.conv->run(s, Pass::kForward, cb);
    const std::size_t r0 = edges_.batch_centre[bt];
    Lp.linear.forward(*gk_, static_cast<long long>(batch_centres(bt)), Mraw_.data(), Lp.dim_mid,
                      Lp.Ml.data() + r0 * dl, dl, false, nullptr, s);
  }
  node_forward(t, s);
}

template <class T, class G>
void MaceCuda<T, G>::node_forward(int t, Stream s) {
  Layer<T>& Lp = layers_[t];
  DeviceBackend& b = *backend_;
  const long long L = static_cast<long long>(L_);
  const int dt = Lp.dim_target;
  if (Lp.nonlinear) {
    node_forward_nonlinear(t, s);
  } else {
    // Ml = linear(M), made batch by batch in layer_forward.
    if (Lp.density)
      gk_->scale_rows(dt_, ScaleRowsArgs{Lp.Ml.data(), Lp.dens.data(), L, dt, dt, 1, 0, 0}, s);
    else
      gk_->axpby(dt_, dt_,
                 GenericKernels::vector(Lp.Ml.data(), Lp.Ml.data(), L * dt, Lp.inv_avg, 0), s);
    if (!Lp.sc_on_nodes) {
      Lp.A.resize(L_ * dt);
      Lp.skip.forward(*gk_, L, Lp.Ml.data(), dt, Lp.A.data(), dt, false, d_species_, s);
    }
  }
  // The generated kernel writes every output of B: no zeroing.
  B_.resize(L_ * Lp.dim_b);
  SymConArgs sa = Lp.symcon_args(d_species_, L);
  sa.B = B_.data();
  // Its floor: A read and B written once (the species' weights, a few KB, left out).
  b.set_timing_floor(double(sizeof(T)) * double(L) * double(dt + Lp.dim_b) + 4.0 * double(L));
  b.launch(*Lp.k_symcon_fwd, grid_for(L * Lp.C), s, sa);
  // h^t replaces h^{t-1}, which prepare_layer(t) has consumed.
  h_.resize(L_ * Lp.dim_hidden);
  Lp.product_linear.forward(*gk_, L, B_.data(), Lp.dim_b, h_.data(), Lp.dim_hidden, false, nullptr,
                            s);
  if (Lp.sc_on_nodes)
    gk_->axpby(dt_, dt_, GenericKernels::vector(sc_.data(), h_.data(), L * Lp.dim_hidden, 1, 1), s);
  for (Readout<T>& R : readouts_)
    if (R.layer == t) readout_forward(R, s);
}

template <class T, class G>
void MaceCuda<T, G>::readout_forward(Readout<T>& R, Stream s) {
  const long long L = static_cast<long long>(L_);
  const int dh = layers_[R.layer].dim_hidden, dout = R.dim_out();
  gy_.resize(L_ * dout);
  if (!R.nonlinear) {
    R.linear.forward(*gk_, L, h_.data(), dh, gy_.data(), dout, false, nullptr, s);
  } else {
    const int dz = R.linear.dim_out();
    R.z.resize(L_ * dz), R.a.resize(L_ * dz);
    R.linear.forward(*gk_, L, h_.data(), dh, R.z.data(), dz, false, nullptr, s);
    gk_->axpby(dt_, dt_, GenericKernels::vector(R.z.data(), R.a.data(), L * dz, 1, 0), s);
    for (const auto& act : R.acts) {
      ActArgs a = R.act_args(act, L);
      a.a = R.a.data();
      gk_->act_forward(dt_, a, s);
    }
    const T* last = R.a.data();
    if (R.has_mid) {
      // The bias readout: z2 = linear_mid(a) + bias_mid (kept for the backward), a2 = act(z2).
      R.z2.resize(L_ * dz), R.a2.resize(L_ * dz);
      R.linear_mid.forward(*gk_, L, R.a.data(), dz, R.z2.data(), dz, false, nullptr, s);
      AxpbyArgs bm{};
      bm.x = R.bias_mid.data(), bm.y = R.z2.data(), bm.rows = L, bm.cols = dz, bm.ldx = 0;
      bm.ldy = dz, bm.alpha = 1, bm.beta = 1;
      gk_->axpby(dt_, dt_, bm, s);
      gk_->axpby(dt_, dt_, GenericKernels::vector(R.z2.data(), R.a2.data(), L * dz, 1, 0), s);
      for (const auto& act : R.acts) {
        ActArgs a = R.act_args(act, L, true);
        a.a = R.a2.data();
        gk_->act_forward(dt_, a, s);
      }
      last = R.a2.data();
    }
    R.linear_2.forward(*gk_, L, last, dz, gy_.data(), dout, false, nullptr, s);
  }
  AxpbyArgs a{};
  a.x = gy_.data(), a.y = energy_acc_.data(), a.rows = L, a.cols = 1, a.ldx = dout, a.ldy = 1;
  a.alpha = 1, a.beta = 1;
  gk_->axpby(dt_, DType::kFloat64, a, s);
  if (R.has_mid) {
    // linear_2's bias on the energy output (its first value; ldx 0 broadcasts it).
    a.x = R.bias_2.data(), a.ldx = 0;
    gk_->axpby(dt_, DType::kFloat64, a, s);
  }
}

template void MaceCuda<double, double>::forward_layers(GhostExchange*, Stream);
template void MaceCuda<float, float>::forward_layers(GhostExchange*, Stream);
template void MaceCuda<float, double>::forward_layers(GhostExchange*, Stream);

}  // namespace clebsch::cuda::mace_cuda_detail
