// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// A dense MLP (model::Mlp, FORMAT.md §4.3: per layer z = (x W) weight_scale (+ bias), then
// optionally torch's LayerNorm (mace-torch RadialMLP), then with an activation
// a = out_scale cst phi(z)) on device rows, with its backward (vector-Jacobian product with
// respect to the input). Weights are stored scaled (weight_scale W, rounded to T once, as the
// host engine packs them).
//
// Two routes:
//   - fused (no LayerNorm, at most CLEBSCH_MLP_MAX_LAYERS layers, the backward on the tensor
//     cores: 64-wide layers on sm_80 or later, GenericKernels::mlp_chain_pays; any width up to
//     kChainMaxWidth on the SIMT kernels with CLEBSCH_MLP_SIMT=1): the layers run as one chain
//     kernel on tiles of rows (templates/mlp_chain_mma.cuh.in, the float32 forward on
//     mlp_chain.cuh.in's SIMT kernel); a wide last linear layer (a radial MLP's weights per
//     edge) is one GEMM on the chain's output. backward() makes the chain's forward again from
//     the input rows of the last forward(), so nothing but the last hidden rows (and their
//     gradient) is kept per row: those input rows must be unchanged until then;
//   - layer by layer: one GEMM and one activation kernel per layer, every pre-activation kept from
//     forward() for backward(). The route of the other MLPs (LayerNorm, other widths, GPUs before
//     sm_80) and of every MLP with CLEBSCH_MLP_LAYERWISE=1 (A/B runs). The fused route is taken
//     wherever it can run: on an H100 (run 29) the float32 MACE-MP-0 step at 10k atoms was 1.4 ms
//     faster with the chains (1.9 ms forward and backward per radial MLP of 795k edges) than layer
//     by layer; in float64 the chains' 4.8 ms matched run 28's layer by layer (4.7); and a chain
//     keeps 128 values per edge instead of 320.
// One DeviceMlp per use (MACE's radial MLP of each layer), so that its scratch is not shared.
#pragma once

#include <string>
#include <vector>

#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/model/model.h"

namespace clebsch::cuda {

template <class T>
class DeviceMlp {
 public:
  DeviceMlp() = default;
  /// @throws ModelFormatError naming @p where for inconsistent layer shapes.
  DeviceMlp(DeviceBackend& backend, const model::Mlp& mlp, const std::string& where);
  int dim_in() const { return dim_in_; }
  int dim_out() const { return dim_out_; }

  /// y[rows][dim_out] = mlp(x[rows][dim_in]) (row-major, contiguous). The fused route reads
  /// @p x again in backward(): it must stay unchanged until then.
  void forward(const GenericKernels& gk, long long rows, const T* x, T* y, Stream s);
  /// gx[rows][dim_in] = (dy/dx)^T gy, for the rows of the last forward(); @p gy is clobbered.
  /// @throws Error when no forward() (or forward_hidden()) of @p rows rows preceded it.
  void backward(const GenericKernels& gk, long long rows, T* gy, T* gx, Stream s);
  /// Whether the last layer is a plain linear map (no activation, bias or LayerNorm): the fused
  /// radial form of the convolution (TpProblem::fused_hidden) then evaluates it per edge tile.
  bool last_layer_is_linear() const;
  /// The input width of the last layer (the last hidden width).
  int dim_hidden() const { return layers_.back().h_in; }
  /// The last layer's weights, scaled: [dim_hidden()][dim_out()], and transposed.
  const T* last_weights() const { return layers_.back().w.data(); }
  const T* last_weights_t() const { return last_t_.data(); }
  /// forward() without its last layer: h[rows][dim_hidden()] is the last hidden layer's output,
  /// kept in the object's scratch (valid until the next forward) like every pre-activation.
  const T* forward_hidden(const GenericKernels& gk, long long rows, const T* x, Stream s);
  /// backward() from dE/dh of the last hidden layer (@p gh [rows][dim_hidden()], clobbered).
  void backward_hidden(const GenericKernels& gk, long long rows, T* gh, T* gx, Stream s);
  /// Values per row that forward() and backward() keep in scratch (for memory budgets).
  std::size_t scratch_per_row() const;
  /// Frees the scratch (the next forward() allocates it again for its rows).
  void release_scratch();
  /// Names the per-row scratch in the backend's ledger: "@p prefix activations" (what forward()
  /// keeps for backward(): the fused route's last hidden rows) and "@p prefix backward"
  /// (backward()'s rows), both per row.
  void name_scratch(const std::string& prefix);
  /// Whether the layers run as one fused chain kernel (see the file comment).
  bool fused_chain() const { return chain_layers_ > 0; }
  /// The widest hidden layer the fused route takes (its tiles live in shared memory).
  static constexpr int kChainMaxWidth = 256;

 private:
  struct Layer {
    int h_in, h_out;
    DeviceArray<T> w, bias;
    bool has_act = false, has_ln = false;
    int kind = 0;
    double cst = 1, out_scale = 1, ln_eps = 1e-5;
    DeviceArray<T> ln_w, ln_b;  // the LayerNorm's weight and bias [h_out]
    // per-call scratch [rows][h_out]: pre-activation, the LayerNorm's input, and (the last
    // hidden layer of forward_hidden only) the output
    DeviceArray<T> z, a, zp;
  };
  std::vector<Layer> layers_;
  DeviceArray<T> last_t_;   // the last layer's weights transposed (last_weights_t)
  DeviceArray<T> g0_, g1_;  // ping-pong rows: the forward's hidden outputs, then the backward's
  int dim_in_ = 0, dim_out_ = 0, max_hidden_ = 0;
  // The fused route: the first chain_layers_ layers in one chain kernel (chain_w_: their
  // weights, transposes and biases as MlpChainArgs packs them); with last_gemm_ the last layer
  // is a GEMM on the chain's output rows (hidden_), else the chain is every layer. x_ and rows_:
  // the input rows of the last forward, which backward() reads again.
  int chain_layers_ = 0;
  bool last_gemm_ = false;
  DeviceArray<T> chain_w_, hidden_, ghidden_;
  MlpChainArgs chain_{};
  const T* x_ = nullptr;
  long long rows_ = -1;
  // The chain of the first @p layers layers: forward x -> y, or backward (x, gy) -> gx.
  void chain_forward(const GenericKernels& gk, int layers, long long rows, const T* x, T* y,
                     Stream s) const;
  void chain_backward(const GenericKernels& gk, int layers, long long rows, const T* gy, T* gx,
                      Stream s) const;
  void build_chain(DeviceBackend& backend, const model::Mlp& mlp);
  // The layers from the first through @p last, and their backward from layer @p top down.
  void forward_layers(const GenericKernels& gk, long long rows, const T* x, T* y, std::size_t last,
                      Stream s);
  void backward_layers(const GenericKernels& gk, long long rows, std::size_t top, T* g, T* gx,
                       Stream s);
};

}  // namespace clebsch::cuda
