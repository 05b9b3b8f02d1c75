// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The internals of the CUDA MACE engine (mace_cuda_engine.h), shared by the files of its stages:
// mace_cuda_engine.cpp (the model on the device, graph validation, the entry points and the
// evaluation's sequence), mace_cuda_engine_forward.cpp (per layer: node inputs, radial MLP and
// convolution batch by batch, linears, skip, symmetric contraction, readouts) and
// mace_cuda_engine_backward.cpp (the same in reverse, down to the per-edge gradients),
// mace_cuda_engine_nonlinear.cpp (the node stages of the non-linear interaction block and its
// MLP input rows, both passes). Each
// stage's file instantiates MaceCuda<T, G> for the three precisions. Private to kernels/engine/.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/engine/conv_runner.h"
#include "clebsch/cuda/engine/cuda_engine_base.h"
#include "clebsch/cuda/engine/species_factored_conv.h"
#include "clebsch/cuda/nn/device_gate.h"
#include "clebsch/cuda/nn/device_linear.h"
#include "clebsch/cuda/nn/device_mlp.h"
#include "clebsch/cuda/templates/mace_device_args.h"
#include "clebsch/engine/mace_engine.h"

namespace clebsch::cuda::mace_cuda_detail {

// radial spline N: a layer's table (model::RadialSpline) on the device, in T.
template <class T>
struct DeviceSpline {
  explicit DeviceSpline(DeviceBackend& b) : table(b) {}
  DeviceArray<T> table;
  double r_lo = 0, inv_h = 0;
  int intervals = 0, width = 0;

  void upload(const model::RadialSpline& s) {
    table.upload(std::vector<T>(s.values.begin(), s.values.end()));
    r_lo = s.r_lo, inv_h = s.intervals / (s.r_hi - s.r_lo);
    intervals = s.intervals, width = s.width;
  }
  /// The table at @p n lengths @p r (G); the caller sets y (forward) or gy and gR (backward).
  MaceSplineArgs args(const void* r, long long n) const {
    MaceSplineArgs a{};
    a.table = table.data(), a.r = r, a.r_lo = r_lo, a.inv_h = inv_h;
    a.intervals = intervals, a.width = width, a.num_edges = n;
    return a;
  }
};

// What a layer's node stages hold per centre, in values: kept, the contraction's inputs (Ml, A,
// X), which its backward reads; scratch, what lives only while one batch's centres are
// computed (dE/dMl, dE/dA, B and dE/dB, the gate's output, dE/dX).
struct LayerRowWidths {
  int kept = 0, scratch = 0;
};

template <class T>
struct Layer {
  explicit Layer(DeviceBackend& b)
      : src_tab(b),
        tgt_tab(b),
        xin(b),
        X(b),
        weights(b),
        radial_spline(b),
        density_spline(b),
        hu(b),
        W(b),
        Wf(b),
        rho(b),
        dedge(b),
        dens(b),
        Ml(b),
        A(b),
        Yc(b) {}
  bool sc_on_nodes = false, density = false;
  // RealAgnosticResidualNonLinearInteractionBlock (model::MaceInteraction::NonLinear, the host's
  // mace_engine_nonlinear.cpp): linear is its linear_1 and skip its (plain) skip linear; the
  // MLPs read xin (mlp_in wide) instead of the radial basis; A is linear_2's output.
  bool nonlinear = false;
  int C0 = 0, mlp_in = 0, dim_nonlin = 0;
  double alpha = 1, beta = 0;
  DeviceLinear<T> linear_res, linear_2;
  DeviceGate<T> gate;
  DeviceArray<T> src_tab, tgt_tab;  // the species embeddings of sender and centre, [S][C0]
  DeviceArray<T> xin, X;            // per call: the MLPs' input rows; the gate's input rows
  // The convolution in the fused radial form (TpProblem::fused_hidden): it reads the radial
  // MLP's last hidden rows and makes the weights per edge tile; conv_width is then the hidden
  // width, else the weight count.
  bool fused = false;
  // radial spline N in the fused spline form (CudaEngineOptions::fused_spline): the convolution
  // reads the edges' lengths and the table, and writes dE/dr; conv_width is then 1.
  bool fused_spline = false;
  int conv_width = 0;
  DeviceLinear<T> linear_up, linear, product_linear, skip;
  DeviceMlp<T> radial_mlp, density_mlp;
  std::unique_ptr<ConvRunner> conv;
  // The first layer, whose senders' features are the per-species table hu0: its convolution in
  // the species-factored form (species_factored_conv.h; fused is then set, as it reads the same
  // hidden rows and writes dE/dh), else conv.
  std::unique_ptr<SpeciesFactoredConv> species_conv;
  double inv_avg = 1;
  int dim_in = 0, dim_edge = 0, dim_mid = 0, dim_target = 0, dim_hidden = 0, dim_y = 0;
  int numel = 0, C = 0, dim_b = 0;
  DeviceArray<T> weights;  // the symmetric contraction's, [S][rows][C]
  // radial spline N: the tables stand in for radial_mlp and density_mlp (stored weights form).
  bool spline = false;
  DeviceSpline<T> radial_spline, density_spline;
  const DeviceKernel *k_symcon_fwd = nullptr, *k_symcon_bwd = nullptr;  // generated per layer
  // Per call, kept from the forward for the backward. A: the skip's output (when the skip acts
  // on the messages), the contraction's input. Ml, A, X and Yc: every centre's (edge's) rows, or
  // one batch's (kept_rows kBatch).
  DeviceArray<T> hu, W, Wf, rho, dedge, dens, Ml, A, Yc;
  // With the weights kept (one batch): what the forward's batch_weights() returned.
  struct {
    const T *raw = nullptr, *conv = nullptr;
  } kept;

  /// The width of the linear's output rows Ml: the target irreps, or the non-linear block's
  /// linear_1 output.
  int dim_linear() const { return nonlinear ? dim_nonlin : dim_target; }
  /// Whether the contraction reads rows of its own, A (the skip's output, linear_2's in the
  /// non-linear block), rather than Ml (the skip acting on nodes).
  bool own_A() const { return !(sc_on_nodes && !nonlinear); }
  LayerRowWidths row_widths() const {
    LayerRowWidths w;
    w.kept = dim_linear() + (own_A() ? dim_target : 0) + (nonlinear ? dim_nonlin : 0);
    w.scratch =
        dim_b + (own_A() ? dim_target : 0) + (nonlinear ? gate.dim_out() + dim_nonlin : dim_target);
    return w;
  }
  /// The contraction's input from row @p k0 of the kept rows.
  const T* contraction_input(std::size_t k0) const {
    return (own_A() ? A.data() : Ml.data()) + k0 * dim_target;
  }
  /// The symmetric contraction on @p rows rows from row @p k0 of its input, for either pass;
  /// the caller sets B (and gA for the backward).
  SymConArgs symcon_args(const int* species, std::size_t k0, long long rows) const {
    SymConArgs sa{};
    sa.A = contraction_input(k0), sa.species = species, sa.weights = weights.data();
    sa.rows = rows;
    return sa;
  }
};

template <class T>
struct Readout {
  explicit Readout(DeviceBackend& b) : z(b), a(b), z2(b), a2(b), bias_mid(b), bias_2(b) {}
  int layer = 0;
  bool nonlinear = false;
  // NonLinearBiasReadoutBlock: linear_2(act(linear_mid(act(linear(h))) + bias_mid)) + bias_2
  // (the host's ReadoutPlan::has_mid), the same activations twice.
  bool has_mid = false;
  DeviceLinear<T> linear, linear_2, linear_mid;
  struct Act {
    int c0, c1, kind;
    double cst;
  };
  std::vector<Act> acts;
  DeviceArray<T> z, a, z2, a2, bias_mid, bias_2;

  /// The width of the readout's output (its first value is the energy).
  int dim_out() const { return (nonlinear ? linear_2 : linear).dim_out(); }
  /// The activation @p act on @p rows rows of z (row stride linear.dim_out()), for either pass;
  /// the caller sets the output (a) or the gradient (g).
  ActArgs act_args(const Act& act, long long rows, bool mid = false) {
    ActArgs aa{};
    aa.z = mid ? z2.data() : z.data(), aa.rows = rows, aa.ld = linear.dim_out(), aa.c0 = act.c0,
    aa.c1 = act.c1;
    aa.kind = act.kind, aa.cst = act.cst, aa.out_scale = 1;
    return aa;
  }
};

template <class T, class G>
class MaceCuda final : public CudaEngineBase<MaceEngine> {
 public:
  MaceCuda(const model::Model& model, Precision precision, const CudaEngineOptions& options);

  std::vector<std::pair<std::string, double>> phase_seconds() const override { return phases_; }

  void compute(const AtomGraph& graph, EngineResult& result, GhostExchange* exchange) override;
  void compute_device(const DeviceAtomGraph& graph, const DeviceResult& result,
                      GhostExchange* exchange, Stream stream) override;

 private:
  // Entry points and sequence (mace_cuda_engine.cpp).
  void validate_indices(std::size_t num_local, std::size_t num_nodes, std::size_t num_edges,
                        const int* species, const int* center, const int* neighbor,
                        GhostExchange* exchange) const;
  void validate_vectors(std::size_t num_edges, const int* species, const int* center,
                        const int* neighbor, const double* vector) const;
  void drop_kept_weights() override;
  // The per-call buffers' names in the backend's ledger (constructor).
  void name_buffers();
  // mace embedding_specs: adds the structure's row to the species' h0 rows and its readout to E0.
  void add_structure_embedding(const model::Mace& m, const CudaEngineOptions& options,
                               DeviceArray<T>& h0);
  // The evaluation on device inputs; writes atom energies and graph-order edge gradients.
  void run(const int* d_species, const double* d_vector, double* atom_energy, double* edge_gradient,
           GhostExchange* exchange, Stream s);

  // The node stages run batch by batch of the weight stage, on the batch's centres [r0, r0 + n);
  // k0 is the row of its first centre in the layers' kept contraction inputs (r0 while they
  // are kept for every centre, else 0: they hold one batch's); the scratch rows (B_, gA_,
  // gMl_, gyg_, gX_) hold one batch's, from row 0.
  struct NodeBatch {
    std::size_t r0, k0;
    long long n;
  };
  NodeBatch node_batch(std::size_t b) const {
    const std::size_t r0 = edges_.batch_centre[b];
    return {r0, keep_rows_ ? r0 : 0, static_cast<long long>(batch_centres(b))};
  }
  /// The rows of the layers' kept contraction inputs.
  std::size_t kept_centres() const { return keep_rows_ ? L_ : max_batch_centres(); }

  // Forward (mace_cuda_engine_forward.cpp): every layer and its readouts, into energy_acc_.
  void forward_layers(GhostExchange* exchange, Stream s);
  void prepare_layer(int t, GhostExchange* exchange, Stream s);
  void layer_forward(int t, Stream s);
  // Batch bt's receiver pass with its radial input @p w, the linear and the node stages up to
  // the contraction's input (also the backward's, when the rows are not kept).
  void messages_forward(int t, std::size_t bt, const T* w, Stream s);
  void contraction_input_forward(int t, const NodeBatch& nb, Stream s);
  // The contraction, the product linear and the skip: the batch's rows of h^t.
  void node_forward(int t, const NodeBatch& nb, Stream s);
  // One readout of the layer just computed: its energy added to energy_acc_.
  void readout_forward(Readout<T>& R, Stream s);

  // Backward (mace_cuda_engine_backward.cpp): from the energies to gY_, gE_ and gF_.
  void backward_layers(GhostExchange* exchange, Stream s);
  // One readout of the layer: its dE/dh added to gh_.
  void readout_backward(Readout<T>& R, Stream s);
  // Per batch: the node stages' reverse from dE/dh^t (node_backward) down to dE/dM, then the
  // sender pass and the radial stage's backward.
  void layer_backward(int t, Stream s);
  void node_backward(int t, const NodeBatch& nb, Stream s);
  void backward_tail(int t, GhostExchange* exchange, Stream s);

  // The non-linear interaction block (mace_cuda_engine_nonlinear.cpp): the MLPs' input rows of
  // layer t (xin), its node forward from linear_1(M) in Ml to A, and the reverse from dE/dA
  // (gA_) to dE/dlinear_1(M) (gX_), gdens_ and (t > 0) ghu_res_, the gradient of the local hu
  // rows through linear_res.
  void mlp_input(int t, Stream s);
  void node_forward_nonlinear(int t, const NodeBatch& nb, Stream s);
  void node_backward_nonlinear(int t, const NodeBatch& nb, Stream s);
  // The rows layer Lp's radial and density MLPs read, from edge e0 on, and their width.
  const T* mlp_rows(const Layer<T>& Lp, std::size_t e0) const {
    return Lp.nonlinear ? Lp.xin.data() + e0 * Lp.mlp_in : ef_.data() + e0 * nb_;
  }
  static int mlp_width(const Layer<T>& Lp, int nb) { return Lp.nonlinear ? Lp.mlp_in : nb; }

  // The radial stage of batch @p b of layer t: the MLP's output (the weights, into wb; in the
  // fused form its last hidden rows, in the MLP's scratch) as raw and, cut by the cutoff when
  // the model asks (into wfb), as the convolution's input.
  struct BatchWeights {
    const T *raw, *conv;
  };
  BatchWeights batch_weights(int t, std::size_t b, DeviceArray<T>& wb, DeviceArray<T>& wfb,
                             Stream s) {
    Layer<T>& Lp = layers_[t];
    const EdgeBatch eb = edge_batch(b);
    const T* raw;
    if (Lp.fused_spline) return {nullptr, nullptr};  // the convolution interpolates the table
    if (Lp.spline) {
      wb.resize(eb.n * Lp.numel);
      MaceSplineArgs a = Lp.radial_spline.args(rl_.data() + eb.e0, eb.n);
      a.y = wb.data();
      backend_->launch(*k_spline_fwd_, grid_for(eb.n * 32), s, a);
      raw = wb.data();
    } else if (Lp.fused) {
      raw = Lp.radial_mlp.forward_hidden(*gk_, eb.n, mlp_rows(Lp, eb.e0), s);
    } else {
      wb.resize(eb.n * Lp.numel);
      Lp.radial_mlp.forward(*gk_, eb.n, mlp_rows(Lp, eb.e0), wb.data(), s);
      raw = wb.data();
    }
    if (apply_cutoff_) return {raw, raw};
    // The cutoff scales each edge's weights; in the fused form, equally, its hidden row.
    wfb.resize(eb.n * Lp.conv_width);
    MaceCutArgs c{raw, wfb.data(), fc_.data() + eb.e0, nullptr, nullptr, eb.n, Lp.conv_width};
    backend_->launch(*k_cut_fwd_, grid_for(eb.n * Lp.conv_width), s, c);
    return {raw, wfb.data()};
  }
  // Layer Lp's convolution of batch @p batch with its radial input @p w (weights, or hidden
  // rows in the fused form).
  ConvBuffers conv_buffers(const Layer<T>& Lp, std::size_t batch, const T* w) const {
    const T* y = Lp.dim_y == nsh_ ? Y_.data() : Lp.Yc.data();
    ConvBuffers cb = batch_conv(batch, Lp.hu.data(), y, keep_rows_ ? Lp.dim_y : 0, w);
    if (Lp.fused) {
      cb.h = cb.w, cb.w = nullptr;
      cb.w4 = Lp.radial_mlp.last_weights(), cb.w4t = Lp.radial_mlp.last_weights_t();
    } else if (Lp.fused_spline) {
      cb.h = spline_lengths() + edge_batch(batch).e0, cb.w = nullptr;
      cb.w4 = Lp.radial_spline.table.data();
    }
    return cb;
  }
  // kept_rows kBatch: the harmonics of batch bt (and layer t's cut copy) in Y_'s (Yc's) first
  // rows, and the batch's dE/dY (gY_'s first rows) added to the edges' gradient.
  void batch_harmonics(int t, std::size_t bt, Stream s);
  void batch_harmonics_gradient(std::size_t bt, Stream s);
  MaceEdgeArgs batch_edge_args(std::size_t bt) const {
    const EdgeBatch eb = edge_batch(bt);
    MaceEdgeArgs a{};
    a.vector = d_vector_, a.perm = edges_.perm.data() + eb.e0, a.num_edges = eb.n;
    return a;
  }
  // The edges' lengths in T, as the fused spline form reads them.
  const T* spline_lengths() const {
    if constexpr (std::is_same_v<T, G>)
      return rl_.data();
    else
      return rlT_.data();
  }

  // Profiling (CudaEngineOptions::profile): ends the current phase.
  void phase(const std::string& name, Stream s) {
    backend_->end_timing_phase(name);  // kernel timing's label (kernel_timing.h); no-op when off
    if (!profile_) return;
    backend_->synchronize(s);
    const auto now = std::chrono::steady_clock::now();
    phases_.emplace_back(name, std::chrono::duration<double>(now - mark_).count());
    mark_ = now;
  }
  void start_phases() {
    phases_.clear();
    mark_ = std::chrono::steady_clock::now();
  }
  bool profile_ = false;
  std::vector<std::pair<std::string, double>> phases_;
  std::chrono::steady_clock::time_point mark_;

  std::unique_ptr<DeviceModule> module_;
  const DeviceKernel *k_geometry_, *k_gradient_, *k_cut_fwd_, *k_cut_bwd_, *k_dens_fwd_,
      *k_dens_bwd_, *k_energy_, *k_spline_fwd_, *k_spline_bwd_, *k_mlp_input_, *k_harmonics_,
      *k_harmonics_gradient_;
  DType dt_ = dtype_of<T>(), dg_ = dtype_of<G>();

  // --- model ---
  int S_ = 0, T_ = 0, nsh_ = 0, nb_ = 0;
  bool apply_cutoff_ = true, zbl_ = false;
  double scale_ = 1, shift_ = 0;
  std::vector<double> r_max_pairs_;
  std::vector<Layer<T>> layers_;
  std::vector<Readout<T>> readouts_;
  DeviceArray<T> hu0_table_, sc0_table_;
  DeviceArray<double> e0_, d_r_max_pairs_;

  // --- per call ---
  DeviceArray<T> wb_, wfb_;  // several batches: one batch's weights (and cut weights)
  DeviceArray<int> species_buf_, centre_buf_, neighbour_buf_;
  DeviceArray<double> vector_buf_, zbl_edge_, zbl_atom_, energy_acc_, atom_energy_, edge_grad_;
  DeviceArray<unsigned long long> status_;
  // Mraw_ (the messages, the layer's widest rows) and B_ (the contraction's output) are each one
  // stage's input in the forward; the backward writes their gradients into the same rows.
  // Both hold one edge batch's centres (the node stages run batch by batch behind the
  // convolution, and their backward batch by batch before the sender pass).
  // Y_ and gY_ hold every edge's rows, or one batch's (keep_rows_ false).
  DeviceArray<T> Y_, ef_, fc_, h_, h_prev_, sc_, Mraw_, B_, ones_;
  const double* d_vector_ = nullptr;  // the call's edge vectors (graph order)
  double* edge_gradient_ = nullptr;   // the call's dE/dvector (graph order)
  DeviceArray<T> gh_, gh_prev_, gA_, gMl_, gdens_, ghu_, gyT_, gw_, gef_, grho_, gy_, gz_;
  // The non-linear block's: dE/d(gate output), dE/d(gate input), dE/d(local hu) through
  // linear_res (added to ghu_ in backward_tail), dE/d(readout's middle activations).
  DeviceArray<T> gyg_, gX_, ghu_res_, gz2_;
  DeviceArray<G> gY_, gE_, gF_;
  bool spline_ = false;     // the layers' radial functions are tables (radial spline N)
  DeviceArray<G> rl_, gR_;  // spline mode: per edge (internal order), length and dE/dlength
  DeviceArray<T> rlT_;      // the lengths in T, when T is not G (the fused spline form)
};

}  // namespace clebsch::cuda::mace_cuda_detail
