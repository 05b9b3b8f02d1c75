// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// DeviceMlp (see device_mlp.h).
#include "clebsch/cuda/nn/device_mlp.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "clebsch/cuda/device/mlp_mma_fragments.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda {

template <class T>
DeviceMlp<T>::DeviceMlp(DeviceBackend& backend, const model::Mlp& mlp, const std::string& where)
    : g0_(backend), g1_(backend), chain_w_(backend), hidden_(backend), ghidden_(backend) {
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
  build_chain(backend, mlp);
}

namespace {

bool layerwise_requested() {
  const char* e = std::getenv("CLEBSCH_MLP_LAYERWISE");
  return e && *e && std::strcmp(e, "0") != 0;
}

}  // namespace

template <class T>
void DeviceMlp<T>::build_chain(DeviceBackend& backend, const model::Mlp& mlp) {
  const int n = static_cast<int>(layers_.size());
  if (layerwise_requested() || n > CLEBSCH_MLP_MAX_LAYERS) return;
  for (const Layer& L : layers_)
    if (L.has_ln) return;
  // A wide plain last layer (a radial MLP's weights per edge: thousands of columns) is a GEMM
  // on the chain's output; anything else must fit the chain's tiles.
  last_gemm_ = n >= 2 && last_layer_is_linear();
  const int layers = last_gemm_ ? n - 1 : n;
  int max_width = dim_in_;
  for (int l = 0; l < layers; ++l) max_width = std::max(max_width, layers_[l].h_out);
  if (max_width > kChainMaxWidth) {
    last_gemm_ = false;
    return;
  }
  MlpChainArgs& a = chain_;
  a = MlpChainArgs{};
  a.num_layers = layers, a.max_width = max_width;
  // Packed as the host packs them: weight_scale W rounded to T once; the transpose from the
  // same rounded values, so that forward and backward use one set of weights.
  std::vector<T> w;
  long long z = 2LL * max_width;
  for (int l = 0; l < layers; ++l) {
    const auto& src = mlp.layers[l];
    a.dims[l] = src.h_in;
    // Every matrix and bias at a multiple of 4 values: the kernel's vector loads of 4 columns.
    const auto align4 = [&w] { w.resize((w.size() + 3) / 4 * 4, T(0)); };
    align4();
    a.w_off[l] = static_cast<long long>(w.size());
    for (double v : src.weight) w.push_back(static_cast<T>(src.weight_scale * v));
    align4();
    a.wt_off[l] = static_cast<long long>(w.size());
    for (int j = 0; j < src.h_out; ++j)
      for (int i = 0; i < src.h_in; ++i)
        w.push_back(w[static_cast<std::size_t>(a.w_off[l] + i * src.h_out + j)]);
    a.b_off[l] = -1;
    if (!src.bias.empty()) {
      align4();
      a.b_off[l] = static_cast<long long>(w.size());
      for (double v : src.bias) w.push_back(static_cast<T>(v));
    }
    a.act[l] = layers_[l].has_act ? layers_[l].kind : -1;
    a.cst[l] = layers_[l].cst, a.out_scale[l] = layers_[l].out_scale;
    a.z_off[l] = z;
    z += src.h_out;
  }
  a.dims[layers] = layers_[layers - 1].h_out;
  append_mlp_mma_fragments(a, w);
  // The chain pays where its backward runs on the tensor cores: the SIMT chain's backward lost
  // to layer by layer on an H100 (run 28: 2.6 ms against ~1.5 in float32, ~7 against ~2.5 in
  // float64), so other shapes and GPUs before sm_80 run layer by layer unless CLEBSCH_MLP_SIMT=1.
  if (!GenericKernels::mlp_chain_pays(a, backend.limits(), backend.emulated())) {
    last_gemm_ = false;
    return;
  }
  const DType t = dtype_of<T>();
  if (GenericKernels::mlp_shared_bytes(t, a, true) >
      static_cast<unsigned>(backend.limits().max_shared_per_block)) {
    last_gemm_ = false;
    return;
  }
  chain_w_.upload(w);
  chain_layers_ = layers;
}

template <class T>
void DeviceMlp<T>::chain_forward(const GenericKernels& gk, int layers, long long rows, const T* x,
                                 T* y, Stream s) const {
  MlpChainArgs a = chain_;
  a.num_layers = layers;
  a.x = x, a.y = y, a.w = chain_w_.data();
  a.rows = rows, a.ldx = dim_in_, a.ldy = a.dims[layers];
  gk.mlp_forward(dtype_of<T>(), a, s);
}

template <class T>
void DeviceMlp<T>::chain_backward(const GenericKernels& gk, int layers, long long rows, const T* gy,
                                  T* gx, Stream s) const {
  if (!x_ || rows != rows_)
    throw Error("DeviceMlp: backward of " + std::to_string(rows) +
                " rows without a forward of the same rows");
  MlpChainArgs a = chain_;
  a.num_layers = layers;
  a.x = x_, a.gy = gy, a.gx = gx, a.w = chain_w_.data();
  a.rows = rows, a.ldx = dim_in_, a.ldy = a.dims[layers];
  gk.mlp_backward(dtype_of<T>(), a, s);
}

template <class T>
void DeviceMlp<T>::name_scratch(const std::string& prefix) {
  for (Layer& L : layers_)
    for (DeviceArray<T>* a : {&L.z, &L.a, &L.zp})
      a->name(prefix + " activations", BufferScale::kEdge);
  g0_.name(prefix + " backward", BufferScale::kEdge);
  g1_.name(prefix + " backward", BufferScale::kEdge);
  hidden_.name(prefix + " activations", BufferScale::kEdge);
  ghidden_.name(prefix + " backward", BufferScale::kEdge);
}

template <class T>
void DeviceMlp<T>::forward(const GenericKernels& gk, long long rows, const T* x, T* y, Stream s) {
  if (fused_chain()) {
    x_ = x, rows_ = rows;
    if (!last_gemm_) return chain_forward(gk, chain_layers_, rows, x, y, s);
    const Layer& L = layers_.back();
    hidden_.resize(rows * L.h_in);
    chain_forward(gk, chain_layers_, rows, x, hidden_.data(), s);
    return gk.gemm(dtype_of<T>(),
                   GenericKernels::dense(hidden_.data(), L.w.data(), y, rows, L.h_out, L.h_in), s);
  }
  g0_.resize(rows * max_hidden_);
  g1_.resize(rows * max_hidden_);
  forward_layers(gk, rows, x, y, layers_.size() - 1, s);
}

template <class T>
const T* DeviceMlp<T>::forward_hidden(const GenericKernels& gk, long long rows, const T* x,
                                      Stream s) {
  if (layers_.size() < 2) throw Error("DeviceMlp::forward_hidden: the MLP has no hidden layer");
  if (fused_chain() && last_gemm_) {
    x_ = x, rows_ = rows;
    hidden_.resize(rows * dim_hidden());
    chain_forward(gk, chain_layers_, rows, x, hidden_.data(), s);
    return hidden_.data();
  }
  g0_.resize(rows * max_hidden_);
  g1_.resize(rows * max_hidden_);
  forward_layers(gk, rows, x, nullptr, layers_.size() - 2, s);
  return layers_[layers_.size() - 2].a.data();
}

template <class T>
void DeviceMlp<T>::backward_hidden(const GenericKernels& gk, long long rows, T* gh, T* gx,
                                   Stream s) {
  if (fused_chain() && last_gemm_) return chain_backward(gk, chain_layers_, rows, gh, gx, s);
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
  if (fused_chain()) {
    if (!last_gemm_) return chain_backward(gk, chain_layers_, rows, gy, gx, s);
    // dE/dh = gy W^T: B(k = j, n = i) = W[i][j].
    const Layer& L = layers_.back();
    ghidden_.resize(rows * L.h_in);
    GemmArgs gg = GenericKernels::dense(gy, L.w.data(), ghidden_.data(), rows, L.h_in, L.h_out);
    gg.ldb = 1, gg.b_col = L.h_out;
    gk.gemm(dtype_of<T>(), gg, s);
    return chain_backward(gk, chain_layers_, rows, ghidden_.data(), gx, s);
  }
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
  // The fused route: the chain's output rows and their gradient, where the last layer is a GEMM.
  if (fused_chain()) return last_gemm_ ? 2 * static_cast<std::size_t>(dim_hidden()) : 0;
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
  g0_.release(), g1_.release(), hidden_.release(), ghidden_.release();
  x_ = nullptr, rows_ = -1;
}

template class DeviceMlp<float>;
template class DeviceMlp<double>;

}  // namespace clebsch::cuda
