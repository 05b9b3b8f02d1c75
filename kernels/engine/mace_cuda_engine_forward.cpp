// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The forward pass of the CUDA MACE engine's layers (mace_cuda_engine_impl.h), layer by layer:
// the edge features of the nodes (layer 0 from the per-species tables, later layers through
// linear_up with the ghost rows exchanged), the density; then edge batch by edge batch the
// radial MLP (or table), the receiver pass of the convolution, the linear, the normalisation and
// skip, the symmetric contraction and the product linear on the batch's centres; last the
// readouts, whose energies add up in energy_acc_. A layer keeps what its backward reads (its
// node features, its weights with one edge batch, its contraction's inputs unless they are made
// again per batch: kept_rows).
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
  if (Lp.dim_y != nsh_ && keep_rows_) {  // else batch by batch (batch_harmonics)
    Lp.Yc.resize(E_ * Lp.dim_y);
    AxpbyArgs a{};
    a.x = Y_.data(), a.y = Lp.Yc.data(), a.rows = E, a.cols = Lp.dim_y, a.ldx = nsh_;
    a.ldy = Lp.dim_y, a.alpha = 1;
    gk_->axpby(dt_, dt_, a, s);
  } else if (Lp.dim_y != nsh_) {
    Lp.Yc.resize(max_batch_edges() * Lp.dim_y);
  }
  // One batch's centres at a time through the convolution and the node stages: M and the
  // scratch rows hold one batch's, the contraction's inputs every centre's or one batch's
  // (kept_centres), and h^t every centre's (prepare_layer(t) has consumed h^{t-1}).
  Mraw_.resize(max_batch_centres() * Lp.dim_mid);
  Lp.Ml.resize(kept_centres() * Lp.dim_linear());
  Lp.A.resize(Lp.own_A() ? kept_centres() * Lp.dim_target : 0);
  Lp.X.resize(Lp.nonlinear ? kept_centres() * Lp.dim_nonlin : 0);
  B_.resize(max_batch_centres() * Lp.dim_b);
  h_.resize(L_ * Lp.dim_hidden);
  for (std::size_t bt = 0; bt < edges_.num_batches(); ++bt) {
    // One batch: the weights stay in the layer for its backward.
    const BatchWeights bw =
        keep_weights_ ? batch_weights(t, bt, Lp.W, Lp.Wf, s) : batch_weights(t, bt, wb_, wfb_, s);
    if (keep_weights_) Lp.kept.raw = bw.raw, Lp.kept.conv = bw.conv;
    messages_forward(t, bt, bw.conv, s);
    node_forward(t, node_batch(bt), s);
  }
  for (Readout<T>& R : readouts_)
    if (R.layer == t) readout_forward(R, s);
}

template <class T, class G>
void MaceCuda<T, G>::messages_forward(int t, std::size_t bt, const T* w, Stream s) {
  Layer<T>& Lp = layers_[t];
  if (!keep_rows_) batch_harmonics(t, bt, s);
  ConvBuffers cb = conv_buffers(Lp, bt, w);
  cb.out = Mraw_.data();
  if (Lp.species_conv)
    Lp.species_conv->run(*gk_, s, Pass::kForward, cb, hu0_table_.data(), d_species_, S_);
  else
    Lp.conv->run(s, Pass::kForward, cb);
  const NodeBatch nb = node_batch(bt);
  const int dl = Lp.dim_linear();
  Lp.linear.forward(*gk_, nb.n, Mraw_.data(), Lp.dim_mid, Lp.Ml.data() + nb.k0 * dl, dl, false,
                    nullptr, s);
  contraction_input_forward(t, nb, s);
}

template <class T, class G>
void MaceCuda<T, G>::batch_harmonics(int t, std::size_t bt, Stream s) {
  Layer<T>& Lp = layers_[t];
  MaceEdgeArgs a = batch_edge_args(bt);
  if (a.num_edges == 0) return;
  a.Y = Y_.data();
  backend_->launch(*k_harmonics_, grid_for(a.num_edges), s, a);
  if (Lp.dim_y == nsh_) return;
  AxpbyArgs c{};
  c.x = Y_.data(), c.y = Lp.Yc.data(), c.rows = a.num_edges, c.cols = Lp.dim_y, c.ldx = nsh_;
  c.ldy = Lp.dim_y, c.alpha = 1;
  gk_->axpby(dt_, dt_, c, s);
}

template <class T, class G>
void MaceCuda<T, G>::contraction_input_forward(int t, const NodeBatch& nb, Stream s) {
  Layer<T>& Lp = layers_[t];
  if (Lp.nonlinear) return node_forward_nonlinear(t, nb, s);
  const int dt = Lp.dim_target;
  T* ml = Lp.Ml.data() + nb.k0 * dt;
  if (Lp.density)
    gk_->scale_rows(dt_, ScaleRowsArgs{ml, Lp.dens.data() + nb.r0, nb.n, dt, dt, 1, 0, 0}, s);
  else
    gk_->axpby(dt_, dt_, GenericKernels::vector(ml, ml, nb.n * dt, Lp.inv_avg, 0), s);
  if (Lp.own_A())
    Lp.skip.forward(*gk_, nb.n, ml, dt, Lp.A.data() + nb.k0 * dt, dt, false, d_species_ + nb.r0, s);
}

template <class T, class G>
void MaceCuda<T, G>::node_forward(int t, const NodeBatch& nb, Stream s) {
  Layer<T>& Lp = layers_[t];
  const int dh = Lp.dim_hidden;
  // The generated kernel writes every output of B: no zeroing.
  SymConArgs sa = Lp.symcon_args(d_species_ + nb.r0, nb.k0, nb.n);
  sa.B = B_.data();
  // Its floor: A read and B written once (the species' weights, a few KB, left out).
  backend_->set_timing_floor(double(sizeof(T)) * double(nb.n) * double(Lp.dim_target + Lp.dim_b) +
                             4.0 * double(nb.n));
  backend_->launch(*Lp.k_symcon_fwd, grid_for(nb.n * Lp.C), s, sa);
  T* h = h_.data() + nb.r0 * dh;
  Lp.product_linear.forward(*gk_, nb.n, B_.data(), Lp.dim_b, h, dh, false, nullptr, s);
  if (Lp.sc_on_nodes)
    gk_->axpby(dt_, dt_, GenericKernels::vector(sc_.data() + nb.r0 * dh, h, nb.n * dh, 1, 1), s);
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
