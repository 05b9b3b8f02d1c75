// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// A dense MLP (model::Mlp, FORMAT.md §4.3: per layer z = (x W) weight_scale (+ bias), then
// optionally torch's LayerNorm (mace-torch RadialMLP), then with an activation
// a = out_scale cst phi(z)) on device rows, with its backward (vector-Jacobian
// product with respect to the input). Weights are stored scaled (weight_scale W, rounded to T
// once, as the host engine packs them). forward() keeps every layer's pre-activation in the
// object's own scratch for the next backward() of the same rows: one DeviceMlp per use (MACE's
// radial MLP of each layer) so that scratch is not shared.
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

  /// y[rows][dim_out] = mlp(x[rows][dim_in]) (row-major, contiguous).
  void forward(const GenericKernels& gk, long long rows, const T* x, T* y, Stream s);
  /// gx[rows][dim_in] = (dy/dx)^T gy, for the rows of the last forward(); @p gy is clobbered.
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
  /// keeps for backward()) and "@p prefix backward" (backward()'s ping-pong), both per row.
  void name_scratch(const std::string& prefix);

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
  // The layers from the first through @p last, and their backward from layer @p top down.
  void forward_layers(const GenericKernels& gk, long long rows, const T* x, T* y, std::size_t last,
                      Stream s);
  void backward_layers(const GenericKernels& gk, long long rows, std::size_t top, T* g, T* gx,
                       Stream s);
};

}  // namespace clebsch::cuda
