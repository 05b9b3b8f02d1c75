// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The activations and the dense MLP of the MACE host kernels (mace_kernels.h): the radial and
// density MLPs run on batches of edges, so their activations are applied to whole rows with an
// exp that vectorises (the C library's is scalar), and the forward pass keeps in its scratch
// exactly what the backward pass needs (the activation derivative in place of the
// pre-activation).
#include "clebsch/engine/mace_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "clebsch/engine/mace_kernels_simd.h"
#include "clebsch/support/error.h"

namespace clebsch::mace_detail {

// ---------------------------------------------------------------------------------------------
// Activations
// ---------------------------------------------------------------------------------------------

ScalarAct ScalarAct::from(const model::Activation& act, const std::string& where) {
  ScalarAct a;
  a.cst = act.cst;
  switch (act.kind) {
    case model::Activation::Kind::kSilu:
      a.kind = kSilu;
      break;
    case model::Activation::Kind::kTanh:
      a.kind = kTanh;
      break;
    case model::Activation::Kind::kSigmoid:
      a.kind = kSigmoid;
      break;
    case model::Activation::Kind::kAbs:
      a.kind = kAbs;
      break;
    case model::Activation::Kind::kSsp:
      a.kind = kSsp;
      break;
    default:
      throw ModelFormatError(where + ": unknown activation \"" + act.name +
                             "\" (expected silu, tanh, sigmoid, abs or ssp)");
  }
  if (!std::isfinite(act.cst))
    throw ModelFormatError(where + ": activation constant is not finite");
  return a;
}

template <class T>
T ScalarAct::value(T x) const {
  T d;
  return value_and_derivative(x, &d);
}

template <class T>
T ScalarAct::value_and_derivative(T x, T* derivative) const {
  const T c = static_cast<T>(cst);
  switch (kind) {
    case kSilu: {
      const T s = T(1) / (T(1) + std::exp(-x));
      *derivative = c * (s * (T(1) + x * (T(1) - s)));
      return c * (x * s);
    }
    case kTanh: {
      const T t = std::tanh(x);
      *derivative = c * (T(1) - t * t);
      return c * t;
    }
    case kSigmoid: {
      const T s = T(1) / (T(1) + std::exp(-x));
      *derivative = c * (s * (T(1) - s));
      return c * s;
    }
    case kAbs:
      *derivative = x > T(0) ? c : (x < T(0) ? -c : T(0));
      return c * std::abs(x);
    case kSsp: {
      // log(1 + e^x) - log 2, written to neither overflow nor lose precision for large |x|.
      const T s = T(1) / (T(1) + std::exp(-x));
      *derivative = c * s;
      const T softplus = x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
      return c * (softplus - static_cast<T>(0.69314718055994530942));
    }
  }
  *derivative = T(0);
  return T(0);
}

template float ScalarAct::value<float>(float) const;
template double ScalarAct::value<double>(double) const;
template float ScalarAct::value_and_derivative<float>(float, float*) const;
template double ScalarAct::value_and_derivative<double>(double, double*) const;

// ---------------------------------------------------------------------------------------------
// Vectorisable exp and activation rows
// ---------------------------------------------------------------------------------------------

namespace {

template <class T>
struct ExpConstants;
template <>
struct ExpConstants<double> {
  using Int = std::int64_t;
  static constexpr double kLo = -708.0, kHi = 709.0;
  static constexpr double kShifter = 6755399441055744.0;  // 1.5 * 2^52
  static constexpr double kLog2e = 1.4426950408889634;
  static constexpr double kLn2Hi = 6.93147180369123816490e-01;  // fdlibm's split of ln 2
  static constexpr double kLn2Lo = 1.90821492927058770002e-10;
  static constexpr int kMantissa = 52;
};
template <>
struct ExpConstants<float> {
  using Int = std::int32_t;
  static constexpr float kLo = -87.0f, kHi = 88.0f;
  static constexpr float kShifter = 12582912.0f;  // 1.5 * 2^23
  static constexpr float kLog2e = 1.44269504f;
  static constexpr float kLn2Hi = 0.693145751953125f;
  static constexpr float kLn2Lo = 1.428606765330187045e-06f;
  static constexpr int kMantissa = 23;
};

// exp(x) to about 1 ulp, written without calls or branches so that loops over it vectorise (the
// C library's exp is scalar): x = n ln2 + r with |r| <= ln2/2, exp(r) by its Taylor series
// (degree 13 in double, 7 in float: truncation below half an ulp), 2^n added to the exponent
// bits. The argument is clamped to the normal range ([-708, 709] in double), which only matters
// where the activations below are already saturated.
template <class T>
CLEBSCH_INLINE T exp_vec(T x) {
  using C = ExpConstants<T>;
  using Int = typename C::Int;
  x = x < T(C::kLo) ? T(C::kLo) : (x > T(C::kHi) ? T(C::kHi) : x);
  const T t = x * T(C::kLog2e) + T(C::kShifter);
  const T n = t - T(C::kShifter);
  T r = x - n * T(C::kLn2Hi);
  r = r - n * T(C::kLn2Lo);
  T p;
  if constexpr (sizeof(T) == 8) {
    p = T(1.0 / 6227020800.0);
    p = p * r + T(1.0 / 479001600.0);
    p = p * r + T(1.0 / 39916800.0);
    p = p * r + T(1.0 / 3628800.0);
    p = p * r + T(1.0 / 362880.0);
    p = p * r + T(1.0 / 40320.0);
    p = p * r + T(1.0 / 5040.0);
    p = p * r + T(1.0 / 720.0);
    p = p * r + T(1.0 / 120.0);
    p = p * r + T(1.0 / 24.0);
    p = p * r + T(1.0 / 6.0);
    p = p * r + T(0.5);
  } else {
    p = T(1.0 / 5040.0);
    p = p * r + T(1.0 / 720.0);
    p = p * r + T(1.0 / 120.0);
    p = p * r + T(1.0 / 24.0);
    p = p * r + T(1.0 / 6.0);
    p = p * r + T(0.5);
  }
  p = p * r + T(1);
  p = p * r + T(1);
  const T shifter = T(C::kShifter);
  Int ti, ts, pi;
  std::memcpy(&ti, &t, sizeof(T));
  std::memcpy(&ts, &shifter, sizeof(T));
  std::memcpy(&pi, &p, sizeof(T));
  pi += (ti - ts) << C::kMantissa;
  T out;
  std::memcpy(&out, &pi, sizeof(T));
  return out;
}

// out[i] = c * phi(z[i]) and deriv[i] = c * phi'(z[i]) (deriv may be z itself).
template <class T>
CLEBSCH_INLINE void activation_rows_body(const ScalarAct& act, T c, std::size_t n, const T* z,
                                         T* out, T* deriv) {
  switch (act.kind) {
    case ScalarAct::kSilu:
      for (std::size_t i = 0; i < n; ++i) {
        const T x = z[i];
        const T s = T(1) / (T(1) + exp_vec(-x));
        out[i] = c * (x * s);
        deriv[i] = c * (s * (T(1) + x * (T(1) - s)));
      }
      return;
    case ScalarAct::kSigmoid:
      for (std::size_t i = 0; i < n; ++i) {
        const T s = T(1) / (T(1) + exp_vec(-z[i]));
        out[i] = c * s;
        deriv[i] = c * (s * (T(1) - s));
      }
      return;
    default: {
      const T scale = c / static_cast<T>(act.cst);
      for (std::size_t i = 0; i < n; ++i) {
        T d;
        const T v = act.value_and_derivative(z[i], &d);
        out[i] = scale * v;
        deriv[i] = scale * d;
      }
    }
  }
}

#if CLEBSCH_X86_DISPATCH
template <class T>
CLEBSCH_TARGET_AVX512 void activation_rows_avx512(const ScalarAct& act, T c, std::size_t n,
                                                  const T* z, T* out, T* deriv) {
  activation_rows_body(act, c, n, z, out, deriv);
}
template <class T>
CLEBSCH_TARGET_AVX2 void activation_rows_avx2(const ScalarAct& act, T c, std::size_t n, const T* z,
                                              T* out, T* deriv) {
  activation_rows_body(act, c, n, z, out, deriv);
}
#endif

// c = cst * out_scale: the factor the whole activation output carries.
template <class T>
void activation_rows(const ScalarAct& act, T c, std::size_t n, const T* z, T* out, T* deriv) {
#if CLEBSCH_X86_DISPATCH
  switch (simd_level()) {
    case Simd::kAvx512:
      return activation_rows_avx512(act, c, n, z, out, deriv);
    case Simd::kAvx2:
      return activation_rows_avx2(act, c, n, z, out, deriv);
    default:
      break;
  }
#endif
  activation_rows_body(act, c, n, z, out, deriv);
}

}  // namespace

template <class T>
T exp_approx(T x) {
  return exp_vec(x);
}
template float exp_approx<float>(float);
template double exp_approx<double>(double);

// ---------------------------------------------------------------------------------------------
// Mlp
// ---------------------------------------------------------------------------------------------

template <class T>
Mlp<T>::Mlp(const model::Mlp& mlp, const std::string& where) {
  if (mlp.layers.empty()) throw ModelFormatError(where + ": MLP has no layers");
  dim_in_ = mlp.layers.front().h_in;
  int prev = dim_in_;
  std::size_t offset = 0;
  for (std::size_t l = 0; l < mlp.layers.size(); ++l) {
    const auto& src = mlp.layers[l];
    const std::string w = where + ".layers[" + std::to_string(l) + "]";
    if (src.h_in != prev || src.h_out < 1)
      throw ModelFormatError(w + ": layer maps " + std::to_string(src.h_in) + " -> " +
                             std::to_string(src.h_out) + ", previous layer gives " +
                             std::to_string(prev));
    if (src.weight.size() != static_cast<std::size_t>(src.h_in) * src.h_out)
      throw ModelFormatError(w + ": weight has " + std::to_string(src.weight.size()) +
                             " values, expected " + std::to_string(src.h_in * src.h_out));
    Layer layer;
    layer.h_in = src.h_in;
    layer.h_out = src.h_out;
    layer.w = PackedMatrix<T>(src.h_in, src.h_out, src.weight.data(), src.h_out, src.weight_scale);
    layer.wt = PackedMatrix<T>(src.h_out, src.h_in, src.weight.data(), src.h_out, src.weight_scale,
                               /*transpose=*/true);
    if (!src.bias.empty()) {
      if (src.bias.size() != static_cast<std::size_t>(src.h_out))
        throw ModelFormatError(w + ": bias has " + std::to_string(src.bias.size()) +
                               " values, expected " + std::to_string(src.h_out));
      layer.bias.assign(src.bias.begin(), src.bias.end());
    }
    if (src.layer_norm) {
      if (src.layer_norm->weight.size() != static_cast<std::size_t>(src.h_out) ||
          src.layer_norm->bias.size() != static_cast<std::size_t>(src.h_out))
        throw ModelFormatError(w + ": layer_norm has the wrong width");
      layer.has_ln = true;
      layer.ln_w.assign(src.layer_norm->weight.begin(), src.layer_norm->weight.end());
      layer.ln_b.assign(src.layer_norm->bias.begin(), src.layer_norm->bias.end());
      layer.ln_eps = static_cast<T>(src.layer_norm->eps);
    }
    if (src.activation) {
      layer.has_act = true;
      layer.act = ScalarAct::from(*src.activation, w);
      layer.out_scale = src.out_scale;
    }
    // Scratch per row: the pre-activation z (needed for act') and the layer output, except the
    // last layer's output, which goes to y.
    layer.ln_offset = offset;
    if (layer.has_ln) offset += src.h_out + 1;
    layer.z_offset = offset;
    if (layer.has_act) offset += src.h_out;
    layer.a_offset = offset;
    if (l + 1 < mlp.layers.size()) offset += src.h_out;
    max_width_ = std::max({max_width_, src.h_in, src.h_out});
    macs_ += static_cast<double>(src.h_in) * src.h_out;
    prev = src.h_out;
    layers_.push_back(std::move(layer));
  }
  dim_out_ = prev;
  scratch_per_row_ = offset;
}

template <class T>
void Mlp<T>::forward(std::size_t rows, const T* x, T* y, T* scratch) const {
  const std::size_t ld = scratch_per_row_;
  const T* in = x;
  std::size_t ld_in = dim_in_;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    const bool last = l + 1 == layers_.size();
    T* out = last ? y : scratch + L.a_offset;
    const std::size_t ld_out = last ? static_cast<std::size_t>(dim_out_) : ld;
    T* z = L.has_act ? scratch + L.z_offset : out;
    const std::size_t ld_z = L.has_act ? ld : ld_out;
    gemm(L.w, rows, in, ld_in, nullptr, z, ld_z, nullptr, false);
    if (!L.bias.empty())
      for (std::size_t r = 0; r < rows; ++r)
        for (int j = 0; j < L.h_out; ++j) z[r * ld_z + j] += L.bias[j];
    if (L.has_ln)
      for (std::size_t r = 0; r < rows; ++r) {
        // torch LayerNorm: biased variance; keep xhat and 1/std for the backward.
        T* zr = z + r * ld_z;
        T* xhat = scratch + r * ld + L.ln_offset;
        T mean = T(0), var = T(0);
        for (int j = 0; j < L.h_out; ++j) mean += zr[j];
        mean /= static_cast<T>(L.h_out);
        for (int j = 0; j < L.h_out; ++j) var += (zr[j] - mean) * (zr[j] - mean);
        var /= static_cast<T>(L.h_out);
        const T inv = T(1) / std::sqrt(var + L.ln_eps);
        for (int j = 0; j < L.h_out; ++j) {
          xhat[j] = (zr[j] - mean) * inv;
          zr[j] = xhat[j] * L.ln_w[j] + L.ln_b[j];
        }
        xhat[L.h_out] = inv;
      }
    if (L.has_act) {
      // The derivative replaces z in the scratch: it is all the backward pass needs.
      const T c = static_cast<T>(L.out_scale * L.act.cst);
      for (std::size_t r = 0; r < rows; ++r)
        activation_rows(L.act, c, L.h_out, z + r * ld_z, out + r * ld_out, z + r * ld_z);
    }
    in = out;
    ld_in = ld_out;
  }
}

template <class T>
void Mlp<T>::backward(std::size_t rows, const T* scratch, T* gy, T* gx, T* work) const {
  const std::size_t ld = scratch_per_row_;
  const std::size_t mw = static_cast<std::size_t>(max_width_);
  T* g = gy;
  std::size_t ld_g = dim_out_;
  T* bufs[2] = {work, work + rows * mw};
  for (std::size_t l = layers_.size(); l-- > 0;) {
    const Layer& L = layers_[l];
    if (L.has_act)
      for (std::size_t r = 0; r < rows; ++r) {
        const T* d = scratch + r * ld + L.z_offset;
        T* gr = g + r * ld_g;
        for (int j = 0; j < L.h_out; ++j) gr[j] *= d[j];
      }
    if (L.has_ln)
      for (std::size_t r = 0; r < rows; ++r) {
        // dz = (1/std) (gx - mean(gx) - xhat mean(gx xhat)), gx = g * ln weight.
        const T* xhat = scratch + r * ld + L.ln_offset;
        T* gr = g + r * ld_g;
        T m1 = T(0), m2 = T(0);
        for (int j = 0; j < L.h_out; ++j) {
          gr[j] *= L.ln_w[j];
          m1 += gr[j];
          m2 += gr[j] * xhat[j];
        }
        m1 /= static_cast<T>(L.h_out);
        m2 /= static_cast<T>(L.h_out);
        const T inv = xhat[L.h_out];
        for (int j = 0; j < L.h_out; ++j) gr[j] = inv * (gr[j] - m1 - xhat[j] * m2);
      }
    T* out = l == 0 ? gx : bufs[l % 2];
    const std::size_t ld_out = l == 0 ? static_cast<std::size_t>(dim_in_) : mw;
    gemm(L.wt, rows, g, ld_g, nullptr, out, ld_out, nullptr, false);
    g = out;
    ld_g = ld_out;
  }
}

template class Mlp<float>;
template class Mlp<double>;

}  // namespace clebsch::mace_detail
