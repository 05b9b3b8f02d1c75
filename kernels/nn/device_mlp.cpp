// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// DeviceMlp (see device_mlp.h).
#include "clebsch/cuda/nn/device_mlp.h"

#include <algorithm>

#include "clebsch/support/error.h"

namespace clebsch::cuda {

template <class T>
DeviceMlp<T>::DeviceMlp(DeviceBackend& backend, const model::Mlp& mlp, const std::string& where)
    : g0_(backend), g1_(backend) {
  if (mlp.layers.empty()) throw ModelFormatError(where + ": MLP has no layers");
  dim_in_ = mlp.layers.front().h_in;
  int prev = dim_in_;
  for (std::size_t l = 0; l < mlp.layers.size(); ++l) {
    const auto& src = mlp.layers[l];
    const std::string w = where + ".layers[" + std::to_string(l) + "]";
    if (src.h_in != prev || src.h_out < 1 ||
        src.weight.size() != static_cast<std::size_t>(src.h_in) * src.h_out)
      throw ModelFormatError(w + ": layer maps " + std::to_string(src.h_in) + " -> " +
                             std::to_string(src.h_out) + " with " +
                             std::to_string(src.weight.size()) + " weights, previous layer gives " +
                             std::to_string(prev));
    Layer L;
    L.h_in = src.h_in, L.h_out = src.h_out;
    std::vector<T> ws(src.weight.size());
    for (std::size_t k = 0; k < ws.size(); ++k)
      ws[k] = static_cast<T>(src.weight_scale * src.weight[k]);
    L.w = DeviceArray<T>(backend);
    L.w.upload(ws);
    L.bias = DeviceArray<T>(backend);
    if (!src.bias.empty()) {
      if (src.bias.size() != static_cast<std::size_t>(src.h_out))
        throw ModelFormatError(w + ": bias has " + std::to_string(src.bias.size()) +
                               " values, expected " + std::to_string(src.h_out));
      L.bias.upload(std::vector<T>(src.bias.begin(), src.bias.end()));
    }
    L.ln_w = DeviceArray<T>(backend);
    L.ln_b = DeviceArray<T>(backend);
    L.zp = DeviceArray<T>(backend);
    if (src.layer_norm) {
      // mace-torch's RadialMLP (the non-linear interaction block's): Linear, LayerNorm, SiLU.
      const auto& ln = *src.layer_norm;
      if (ln.weight.size() != static_cast<std::size_t>(src.h_out) ||
          ln.bias.size() != static_cast<std::size_t>(src.h_out))
        throw ModelFormatError(w + ": layer_norm has the wrong width");
      L.has_ln = true;
      L.ln_eps = ln.eps;
      L.ln_w.upload(std::vector<T>(ln.weight.begin(), ln.weight.end()));
      L.ln_b.upload(std::vector<T>(ln.bias.begin(), ln.bias.end()));
    }
    if (src.activation) {
      L.has_act = true;
      L.kind = static_cast<int>(src.activation->kind);
      L.cst = src.activation->cst;
      L.out_scale = src.out_scale;
    }
    L.z = DeviceArray<T>(backend);
    L.a = DeviceArray<T>(backend);
    prev = src.h_out;
    layers_.push_back(std::move(L));
  }
  dim_out_ = prev;
  if (last_layer_is_linear()) {
    const auto& src = mlp.layers.back();
    std::vector<T> t(src.weight.size());
    for (int i = 0; i < src.h_in; ++i)
      for (int j = 0; j < src.h_out; ++j)
        t[static_cast<std::size_t>(j) * src.h_in + i] = static_cast<T>(
            src.weight_scale * src.weight[static_cast<std::size_t>(i) * src.h_out + j]);
    last_t_ = DeviceArray<T>(backend);
    last_t_.upload(t);
  }
  // The backward's intermediate gradients are the inputs of layers 1..n-1 (the hidden widths);
  // the first layer's goes to the caller's gx and the output width is never stored here: for
  // MACE's radial MLP that width (thousands of weights per edge) would dominate device memory.
  for (std::size_t l = 1; l < layers_.size(); ++l)
    max_hidden_ = std::max(max_hidden_, layers_[l].h_in);
}

template <class T>
void DeviceMlp<T>::name_scratch(const std::string& prefix) {
  for (Layer& L : layers_)
    for (DeviceArray<T>* a : {&L.z, &L.a, &L.zp})
      a->name(prefix + " activations", BufferScale::kEdge);
  g0_.name(prefix + " backward", BufferScale::kEdge);
  g1_.name(prefix + " backward", BufferScale::kEdge);
}

template <class T>
void DeviceMlp<T>::forward(const GenericKernels& gk, long long rows, const T* x, T* y, Stream s) {
  g0_.resize(rows * max_hidden_);
  g1_.resize(rows * max_hidden_);
  forward_layers(gk, rows, x, y, layers_.size() - 1, s);
}

template <class T>
const T* DeviceMlp<T>::forward_hidden(const GenericKernels& gk, long long rows, const T* x,
                                      Stream s) {
  if (layers_.size() < 2) throw Error("DeviceMlp::forward_hidden: the MLP has no hidden layer");
  g0_.resize(rows * max_hidden_);
  g1_.resize(rows * max_hidden_);
  forward_layers(gk, rows, x, nullptr, layers_.size() - 2, s);
  return layers_[layers_.size() - 2].a.data();
}

template <class T>
void DeviceMlp<T>::backward_hidden(const GenericKernels& gk, long long rows, T* gh, T* gx,
                                   Stream s) {
  g0_.resize(rows * max_hidden_);
  g1_.resize(rows * max_hidden_);
  backward_layers(gk, rows, layers_.size() - 2, gh, gx, s);
}

template <class T>
bool DeviceMlp<T>::last_layer_is_linear() const {
  return layers_.size() >= 2 && !layers_.back().has_act && !layers_.back().has_ln &&
         layers_.back().bias.size() == 0;
}

template <class T>
void DeviceMlp<T>::forward_layers(const GenericKernels& gk, long long rows, const T* x, T* y,
                                  std::size_t top, Stream s) {
  const T* in = x;
  // The backward reads only the pre-activations (and the LayerNorms' inputs): a hidden layer's
  // output is the next layer's input and no more, so the outputs alternate between the
  // backward's ping-pong rows (free until the backward) instead of one array per layer (for a
  // MACE radial MLP [64, 64, 64], 3 x 64 values per edge and layer that nothing read again).
  // Only forward_hidden's last output, which the fused convolution reads, is kept (in a).
  T* bufs[2] = {g0_.data(), g1_.data()};
  for (std::size_t l = 0; l <= top; ++l) {
    Layer& L = layers_[l];
    // y null: the last layer run (the hidden one) keeps its output in scratch.
    const bool last = l == top && y;
    // Pre-activations are kept for the backward only where there is an activation, the
    // LayerNorm's input only where there is one.
    if (L.has_act) L.z.resize(rows * L.h_out);
    if (L.has_ln) L.zp.resize(rows * L.h_out);
    T* out = last ? y : l == top ? (L.a.resize(rows * L.h_out), L.a.data()) : bufs[l % 2];
    // Without an activation the GEMM writes the output directly (plus bias in place).
    T* z = L.has_act ? L.z.data() : out;
    T* zg = L.has_ln ? L.zp.data() : z;
    gk.gemm(dtype_of<T>(), GenericKernels::dense(in, L.w.data(), zg, rows, L.h_out, L.h_in), s);
    // The activation kernel adds the bias when it reads the GEMM's output itself; else the
    // bias is added here (broadcast: ldx 0), before the LayerNorm or as the layer's last step.
    const bool act_adds_bias = L.has_act && !L.has_ln;
    if (L.bias.size() && !act_adds_bias) {
      AxpbyArgs b{};
      b.x = L.bias.data(), b.y = zg, b.rows = rows, b.cols = L.h_out, b.ldx = 0;
      b.ldy = L.h_out, b.alpha = 1, b.beta = 1;
      gk.axpby(dtype_of<T>(), dtype_of<T>(), b, s);
    }
    if (L.has_ln) {
      LayerNormArgs n{};
      n.x = zg, n.y = z, n.w = L.ln_w.data(), n.b = L.ln_b.data();
      n.rows = rows, n.cols = L.h_out, n.ld = L.h_out, n.eps = L.ln_eps;
      gk.layer_norm_forward(dtype_of<T>(), n, s);
    }
    if (L.has_act) {
      ActArgs a{};
      a.z = z, a.a = out, a.g = nullptr;
      a.bias = act_adds_bias && L.bias.size() ? L.bias.data() : nullptr;
      a.rows = rows, a.ld = L.h_out, a.c0 = 0, a.c1 = L.h_out;
      a.kind = L.kind, a.cst = L.cst, a.out_scale = L.out_scale;
      gk.act_forward(dtype_of<T>(), a, s);
    }
    in = out;
  }
}

template <class T>
void DeviceMlp<T>::backward(const GenericKernels& gk, long long rows, T* gy, T* gx, Stream s) {
  g0_.resize(rows * max_hidden_);
  g1_.resize(rows * max_hidden_);
  backward_layers(gk, rows, layers_.size() - 1, gy, gx, s);
}

template <class T>
void DeviceMlp<T>::backward_layers(const GenericKernels& gk, long long rows, std::size_t top, T* g,
                                   T* gx, Stream s) {
  T* bufs[2] = {g0_.data(), g1_.data()};
  for (std::size_t l = top + 1; l-- > 0;) {
    Layer& L = layers_[l];
    if (L.has_act) {
      ActArgs a{};
      a.z = L.z.data(), a.g = g;
      a.rows = rows, a.ld = L.h_out, a.c0 = 0, a.c1 = L.h_out;
      a.kind = L.kind, a.cst = L.cst, a.out_scale = L.out_scale;
      gk.act_backward(dtype_of<T>(), a, s);
    }
    if (L.has_ln) {
      LayerNormArgs n{};
      n.x = L.zp.data(), n.g = g, n.w = L.ln_w.data(), n.b = L.ln_b.data();
      n.rows = rows, n.cols = L.h_out, n.ld = L.h_out, n.eps = L.ln_eps;
      gk.layer_norm_backward(dtype_of<T>(), n, s);
    }
    T* out = l == 0 ? gx : bufs[l % 2];
    // gx = g W^T: B(k = j, n = i) = W[i][j].
    GemmArgs gg = GenericKernels::dense(g, L.w.data(), out, rows, L.h_in, L.h_out);
    gg.ldb = 1, gg.b_col = L.h_out;
    gk.gemm(dtype_of<T>(), gg, s);
    g = out;
  }
}

template <class T>
std::size_t DeviceMlp<T>::scratch_per_row() const {
  // The ping-pong rows, the pre-activations and LayerNorm inputs, and forward_hidden's output.
  std::size_t n = 2 * static_cast<std::size_t>(max_hidden_);
  for (const Layer& L : layers_)
    n += static_cast<std::size_t>(L.h_out) * ((L.has_act ? 1 : 0) + (L.has_ln ? 1 : 0));
  if (layers_.size() >= 2) n += static_cast<std::size_t>(layers_.back().h_in);
  return n;
}

template <class T>
void DeviceMlp<T>::release_scratch() {
  for (Layer& L : layers_) L.z.release(), L.a.release(), L.zp.release();
  g0_.release(), g1_.release();
}

template class DeviceMlp<float>;
template class DeviceMlp<double>;

}  // namespace clebsch::cuda
