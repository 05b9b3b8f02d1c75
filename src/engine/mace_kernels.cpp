// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Host kernels of the MACE engine (see mace_kernels.h): the packed GEMM, the MLP, the ir_mul
// linears and the per-edge uvu convolution product with its vector-Jacobian product. The hot
// loops are written once as always-inline templates and compiled three times (AVX-512, AVX2+FMA,
// baseline x86-64) behind target attributes, so the library needs no -march flag and still runs
// vector code on whatever CPU it lands on.
#include "clebsch/engine/mace_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "clebsch/support/error.h"

#if defined(__GNUC__) || defined(__clang__)
#define CLEBSCH_INLINE __attribute__((always_inline)) inline
#define CLEBSCH_RESTRICT __restrict__
#else
#define CLEBSCH_INLINE inline
#define CLEBSCH_RESTRICT
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CLEBSCH_X86_DISPATCH 1
#define CLEBSCH_TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))
#define CLEBSCH_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define CLEBSCH_X86_DISPATCH 0
#endif

namespace clebsch::mace_detail {

// ---------------------------------------------------------------------------------------------
// Instruction-set selection
// ---------------------------------------------------------------------------------------------

namespace {

Simd detect_simd() {
  Simd best = Simd::kBaseline;
#if CLEBSCH_X86_DISPATCH
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = Simd::kAvx2;
  if (best == Simd::kAvx2 && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw"))
    best = Simd::kAvx512;
#endif
  // An override can only lower the level (for testing every code path on one machine).
  if (const char* env = std::getenv("CLEBSCH_SIMD")) {
    const std::string v(env);
    if (v == "baseline") best = Simd::kBaseline;
    if (v == "avx2" && best == Simd::kAvx512) best = Simd::kAvx2;
  }
  return best;
}

}  // namespace

namespace {
Simd& active_simd() {
  static Simd level = detect_simd();
  return level;
}
}  // namespace

Simd simd_level() { return active_simd(); }

void set_simd_level(Simd level) {
  const Simd best = detect_simd();
  if (static_cast<int>(level) > static_cast<int>(best))
    throw Error("set_simd_level: this CPU does not support " + to_string(level) + " (best: " +
                to_string(best) + ")");
  active_simd() = level;
}

std::string to_string(Simd simd) {
  switch (simd) {
    case Simd::kAvx512: return "avx512";
    case Simd::kAvx2: return "avx2";
    case Simd::kBaseline: return "baseline";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// GEMM
// ---------------------------------------------------------------------------------------------

namespace {

// Micro-kernel shapes: MR rows x NV vectors of VB bytes, chosen so that the MR*NV accumulators,
// NV loads of B and one broadcast fit the register file (32 zmm, 16 ymm, 16 xmm).
template <class T>
constexpr int kernel_panel_width(Simd s) {
  return s == Simd::kAvx512 ? 2 * 64 / int(sizeof(T))
         : s == Simd::kAvx2 ? 2 * 32 / int(sizeof(T))
                            : 2 * 16 / int(sizeof(T));
}

template <class T, int VB, int MR, int NV>
CLEBSCH_INLINE void gemm_body(const T* CLEBSCH_RESTRICT Bp, int K, int N, std::size_t M,
                              const T* A, std::size_t lda, const int* a_rows, T* C,
                              std::size_t ldc, const int* c_rows, bool accumulate) {
  typedef T V __attribute__((vector_size(VB)));
  constexpr int VL = VB / int(sizeof(T));
  constexpr int NR = VL * NV;
  const int n_panels = (N + NR - 1) / NR;
  for (std::size_t r0 = 0; r0 < M; r0 += MR) {
    const int mr = static_cast<int>(std::min<std::size_t>(MR, M - r0));
    const T* ap[MR];
    T* cp[MR];
    for (int i = 0; i < MR; ++i) {
      // Rows past M repeat the last row: computed, never stored.
      const std::size_t r = r0 + std::min(i, mr - 1);
      ap[i] = A + (a_rows ? static_cast<std::size_t>(a_rows[r]) : r) * lda;
      cp[i] = C + (c_rows ? static_cast<std::size_t>(c_rows[r]) : r) * ldc;
    }
    for (int p = 0; p < n_panels; ++p) {
      const T* bp = Bp + static_cast<std::size_t>(p) * K * NR;
      V acc[MR][NV];
      for (int i = 0; i < MR; ++i)
        for (int v = 0; v < NV; ++v) acc[i][v] = V{};
      for (int k = 0; k < K; ++k) {
        V b[NV];
        for (int v = 0; v < NV; ++v) std::memcpy(&b[v], bp + k * NR + v * VL, VB);
        for (int i = 0; i < MR; ++i) {
          const T a = ap[i][k];
          for (int v = 0; v < NV; ++v) acc[i][v] += a * b[v];
        }
      }
      const int n0 = p * NR;
      const int nc = std::min(NR, N - n0);
      if (nc == NR) {
        for (int i = 0; i < mr; ++i) {
          T* c = cp[i] + n0;
          for (int v = 0; v < NV; ++v) {
            V cur;
            if (accumulate) {
              std::memcpy(&cur, c + v * VL, VB);
              cur += acc[i][v];
            } else {
              cur = acc[i][v];
            }
            std::memcpy(c + v * VL, &cur, VB);
          }
        }
      } else {
        for (int i = 0; i < mr; ++i) {
          T tmp[NR];
          std::memcpy(tmp, acc[i], sizeof(tmp));
          T* c = cp[i] + n0;
          for (int j = 0; j < nc; ++j) c[j] = accumulate ? c[j] + tmp[j] : tmp[j];
        }
      }
    }
  }
}

#define CLEBSCH_GEMM_ARGS                                                                      \
  const T *Bp, int K, int N, std::size_t M, const T *A, std::size_t lda, const int *a_rows, \
      T *C, std::size_t ldc, const int *c_rows, bool accumulate
#define CLEBSCH_GEMM_PASS Bp, K, N, M, A, lda, a_rows, C, ldc, c_rows, accumulate

#if CLEBSCH_X86_DISPATCH
template <class T>
CLEBSCH_TARGET_AVX512 void gemm_avx512(CLEBSCH_GEMM_ARGS) {
  gemm_body<T, 64, 8, 2>(CLEBSCH_GEMM_PASS);
}
template <class T>
CLEBSCH_TARGET_AVX2 void gemm_avx2(CLEBSCH_GEMM_ARGS) {
  gemm_body<T, 32, 6, 2>(CLEBSCH_GEMM_PASS);
}
#endif
template <class T>
void gemm_baseline(CLEBSCH_GEMM_ARGS) {
  gemm_body<T, 16, 4, 2>(CLEBSCH_GEMM_PASS);
}

}  // namespace

template <class T>
PackedMatrix<T>::PackedMatrix(int K, int N, const double* B, std::size_t ldb, double scale,
                              bool transpose)
    : K_(K), N_(N), nr_(kernel_panel_width<T>(simd_level())) {
  const int n_panels = (N + nr_ - 1) / nr_;
  const std::size_t n = static_cast<std::size_t>(n_panels) * K * nr_;
  constexpr std::size_t kAlign = 64 / sizeof(T);
  storage_.assign(n + kAlign, T(0));
  const auto addr = reinterpret_cast<std::uintptr_t>(storage_.data());
  pad_ = ((64 - addr % 64) % 64) / sizeof(T);
  T* out = storage_.data() + pad_;
  for (int p = 0; p < n_panels; ++p)
    for (int k = 0; k < K; ++k)
      for (int j = 0; j < nr_; ++j) {
        const int col = p * nr_ + j;
        if (col >= N) continue;
        const double b = transpose ? B[static_cast<std::size_t>(col) * ldb + k]
                                   : B[static_cast<std::size_t>(k) * ldb + col];
        out[(static_cast<std::size_t>(p) * K + k) * nr_ + j] = static_cast<T>(scale * b);
      }
}

template <class T>
void gemm(const PackedMatrix<T>& B, std::size_t M, const T* A, std::size_t lda, const int* a_rows,
          T* C, std::size_t ldc, const int* c_rows, bool accumulate) {
  if (M == 0 || B.cols() == 0) return;
  const T* Bp = B.data();
  const int K = B.rows(), N = B.cols();
  if (K == 0) {
    if (!accumulate)
      for (std::size_t r = 0; r < M; ++r)
        std::fill_n(C + (c_rows ? static_cast<std::size_t>(c_rows[r]) : r) * ldc, N, T(0));
    return;
  }
#if CLEBSCH_X86_DISPATCH
  // The panel width fixes the kernel: the one of the level in use when B was packed (a CPU
  // that packed for a level supports it).
  if (B.panel_width() == kernel_panel_width<T>(Simd::kAvx512))
    return gemm_avx512<T>(CLEBSCH_GEMM_PASS);
  if (B.panel_width() == kernel_panel_width<T>(Simd::kAvx2))
    return gemm_avx2<T>(CLEBSCH_GEMM_PASS);
#endif
  if (B.panel_width() != kernel_panel_width<T>(Simd::kBaseline))
    throw Error("gemm: matrix packed for panel width " + std::to_string(B.panel_width()) +
                ", which this build cannot run");
  gemm_baseline<T>(CLEBSCH_GEMM_PASS);
}

template class PackedMatrix<float>;
template class PackedMatrix<double>;
template void gemm<float>(const PackedMatrix<float>&, std::size_t, const float*, std::size_t,
                          const int*, float*, std::size_t, const int*, bool);
template void gemm<double>(const PackedMatrix<double>&, std::size_t, const double*, std::size_t,
                           const int*, double*, std::size_t, const int*, bool);

// ---------------------------------------------------------------------------------------------
// Activations
// ---------------------------------------------------------------------------------------------

ScalarAct ScalarAct::from(const model::Activation& act, const std::string& where) {
  ScalarAct a;
  a.cst = act.cst;
  switch (act.kind) {
    case model::Activation::Kind::kSilu: a.kind = kSilu; break;
    case model::Activation::Kind::kTanh: a.kind = kTanh; break;
    case model::Activation::Kind::kSigmoid: a.kind = kSigmoid; break;
    case model::Activation::Kind::kAbs: a.kind = kAbs; break;
    case model::Activation::Kind::kSsp: a.kind = kSsp; break;
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
CLEBSCH_TARGET_AVX2 void activation_rows_avx2(const ScalarAct& act, T c, std::size_t n,
                                              const T* z, T* out, T* deriv) {
  activation_rows_body(act, c, n, z, out, deriv);
}
#endif

// c = cst * out_scale: the factor the whole activation output carries.
template <class T>
void activation_rows(const ScalarAct& act, T c, std::size_t n, const T* z, T* out, T* deriv) {
#if CLEBSCH_X86_DISPATCH
  switch (simd_level()) {
    case Simd::kAvx512: return activation_rows_avx512(act, c, n, z, out, deriv);
    case Simd::kAvx2: return activation_rows_avx2(act, c, n, z, out, deriv);
    default: break;
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
    layer.w = PackedMatrix<T>(src.h_in, src.h_out, src.weight.data(), src.h_out,
                              src.weight_scale);
    layer.wt = PackedMatrix<T>(src.h_out, src.h_in, src.weight.data(), src.h_out,
                               src.weight_scale, /*transpose=*/true);
    if (!src.bias.empty()) {
      if (src.bias.size() != static_cast<std::size_t>(src.h_out))
        throw ModelFormatError(w + ": bias has " + std::to_string(src.bias.size()) +
                               " values, expected " + std::to_string(src.h_out));
      layer.bias.assign(src.bias.begin(), src.bias.end());
    }
    if (src.activation) {
      layer.has_act = true;
      layer.act = ScalarAct::from(*src.activation, w);
      layer.out_scale = src.out_scale;
    }
    // Scratch per row: the pre-activation z (needed for act') and the layer output, except the
    // last layer's output, which goes to y.
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
    T* out = l == 0 ? gx : bufs[l % 2];
    const std::size_t ld_out = l == 0 ? static_cast<std::size_t>(dim_in_) : mw;
    gemm(L.wt, rows, g, ld_g, nullptr, out, ld_out, nullptr, false);
    g = out;
    ld_g = ld_out;
  }
}

template class Mlp<float>;
template class Mlp<double>;

// ---------------------------------------------------------------------------------------------
// NodeLinear
// ---------------------------------------------------------------------------------------------

namespace {

// Rows per task of a parallel node loop, and the least work (flops) worth a parallel region: a
// fork/join costs microseconds, and far more on a loaded machine, where a descheduled thread
// holds the whole team at the barrier.
constexpr std::size_t kRowBlock = 64;
constexpr double kParallelWork = 2e6;

}  // namespace

template <class T>
NodeLinear<T>::NodeLinear(const model::Linear& linear)
    : in_(linear.irreps_in), out_(linear.irreps_out), dim_in_(in_.dim()), dim_out_(out_.dim()) {
  const std::vector<int> off_in = in_.offsets(), off_out = out_.offsets();
  for (const auto& src : linear.instructions) {
    if (src.i_in < 0 || src.i_in >= static_cast<int>(in_.size()) || src.i_out < 0 ||
        src.i_out >= static_cast<int>(out_.size()))
      throw ModelFormatError("linear " + in_.str() + " -> " + out_.str() +
                             ": instruction index out of range (" + std::to_string(src.i_in) +
                             ", " + std::to_string(src.i_out) + ")");
    const MulIrrep& a = in_[src.i_in];
    const MulIrrep& b = out_[src.i_out];
    if (a.ir != b.ir || a.mul != src.mul_in || b.mul != src.mul_out)
      throw ModelFormatError("linear " + in_.str() + " -> " + out_.str() + ": instruction (" +
                             std::to_string(src.i_in) + ", " + std::to_string(src.i_out) +
                             ") joins " + std::to_string(a.mul) + "x" + a.ir.str() + " and " +
                             std::to_string(b.mul) + "x" + b.ir.str());
    const std::size_t n = static_cast<std::size_t>(src.mul_in) * src.mul_out;
    if (src.weight_offset < 0 || src.weight_offset + n > linear.weight.size())
      throw ModelFormatError("linear " + in_.str() + " -> " + out_.str() +
                             ": weight block out of range");
    Ins ins;
    ins.i_in = src.i_in;
    ins.i_out = src.i_out;
    ins.mul_in = src.mul_in;
    ins.mul_out = src.mul_out;
    ins.dim_m = a.ir.dim();
    ins.off_in = off_in[src.i_in];
    ins.off_out = off_out[src.i_out];
    const double* w = linear.weight.data() + src.weight_offset;
    ins.w = PackedMatrix<T>(src.mul_in, src.mul_out, w, src.mul_out, src.path_weight);
    ins.wt = PackedMatrix<T>(src.mul_out, src.mul_in, w, src.mul_out, src.path_weight, true);
    flops_per_row_ += 2.0 * n * ins.dim_m;
    ins_.push_back(std::move(ins));
  }
}


template <class T>
void NodeLinear<T>::run(bool transpose, std::size_t n, const T* X, std::size_t ldx, T* Y,
                        std::size_t ldy, bool accumulate, bool parallel) const {
  // Forward: X holds irreps_in rows and Y irreps_out rows; transpose: X holds cotangents of
  // irreps_out and Y receives irreps_in. Blocks of Y that no instruction writes are zeroed
  // unless accumulating; the first instruction into a block overwrites it.
  const Irreps& y_irreps = transpose ? in_ : out_;
  const std::vector<int> y_off = y_irreps.offsets();
  std::vector<char> written(y_irreps.size(), 0), first(ins_.size(), 0);
  for (std::size_t q = 0; q < ins_.size(); ++q) {
    const int yb = transpose ? ins_[q].i_in : ins_[q].i_out;
    if (!written[yb]) first[q] = 1;
    written[yb] = 1;
  }
  const std::size_t n_blocks = (n + kRowBlock - 1) / kRowBlock;
  const bool par = parallel && n_blocks > 1 && flops_per_row_ * n > kParallelWork;
#pragma omp parallel for schedule(static) if (par)
  for (std::size_t blk = 0; blk < n_blocks; ++blk) {
    const std::size_t r0 = blk * kRowBlock, m_rows = std::min(kRowBlock, n - r0);
    if (!accumulate)
      for (std::size_t b = 0; b < y_irreps.size(); ++b)
        if (!written[b])
          for (std::size_t r = r0; r < r0 + m_rows; ++r)
            std::fill_n(Y + r * ldy + y_off[b], y_irreps[b].dim(), T(0));
    for (std::size_t q = 0; q < ins_.size(); ++q) {
      const Ins& ins = ins_[q];
      const bool acc = accumulate || !first[q];
      const std::size_t xo = transpose ? ins.off_out : ins.off_in;
      const std::size_t yo = transpose ? ins.off_in : ins.off_out;
      const std::size_t xm = transpose ? ins.mul_out : ins.mul_in;
      const std::size_t ym = transpose ? ins.mul_in : ins.mul_out;
      const PackedMatrix<T>& w = transpose ? ins.wt : ins.w;
      for (int m = 0; m < ins.dim_m; ++m)
        gemm(w, m_rows, X + r0 * ldx + xo + m * xm, ldx, nullptr, Y + r0 * ldy + yo + m * ym,
             ldy, nullptr, acc);
    }
  }
}

template <class T>
void NodeLinear<T>::forward(std::size_t n, const T* X, std::size_t ldx, T* Y, std::size_t ldy,
                            bool accumulate, bool parallel) const {
  run(false, n, X, ldx, Y, ldy, accumulate, parallel);
}

template <class T>
void NodeLinear<T>::backward(std::size_t n, const T* gY, std::size_t ldy, T* gX,
                             std::size_t ldx, bool accumulate, bool parallel) const {
  run(true, n, gY, ldy, gX, ldx, accumulate, parallel);
}

template class NodeLinear<float>;
template class NodeLinear<double>;

// ---------------------------------------------------------------------------------------------
// SpeciesLinear
// ---------------------------------------------------------------------------------------------

template <class T>
SpeciesLinear<T>::SpeciesLinear(const model::TensorProduct& tp, int num_species,
                                const std::string& where)
    : in_(tp.descriptor.irreps_in1()),
      out_(tp.descriptor.irreps_out()),
      dim_in_(in_.dim()),
      dim_out_(out_.dim()),
      num_species_(num_species) {
  const TensorProduct& d = tp.descriptor;
  if (d.irreps_in2().size() != 1 || d.irreps_in2()[0].ir.l() != 0 ||
      d.irreps_in2()[0].ir.p() != 1 || d.irreps_in2()[0].mul != num_species)
    throw ModelFormatError(where + ": second input is " + d.irreps_in2().str() +
                           ", expected the one-hot species " + std::to_string(num_species) +
                           "x0e");
  if (tp.external_weights)
    throw ModelFormatError(where + ": expected internal (shared) weights");
  if (tp.weight.size() != static_cast<std::size_t>(d.weight_numel()))
    throw ModelFormatError(where + ": has " + std::to_string(tp.weight.size()) +
                           " weights, expected " + std::to_string(d.weight_numel()));
  for (std::size_t n = 0; n < d.paths().size(); ++n) {
    const TensorProductPath& p = d.paths()[n];
    const std::string w = where + ".instructions[" + std::to_string(n) + "]";
    if (p.ins.mode() != ConnectionMode::kUvw || !p.ins.has_weight())
      throw ModelFormatError(w + ": mode " + to_string(p.ins.mode()) +
                             ", expected weighted uvw");
    if (p.ir1.l() != p.ir_out.l())
      throw ModelFormatError(w + ": couples l=" + std::to_string(p.ir1.l()) + " to l=" +
                             std::to_string(p.ir_out.l()) + " through a scalar");
    if (p.cg.empty()) continue;  // a zero coupling contributes nothing
    // Coupling with a scalar: P[i,0,k] = c delta_ik, the same c for every m.
    const double c0 = p.cg.front().c;
    bool ok = static_cast<int>(p.cg.size()) == p.ir1.dim();
    for (const CgEntry& e : p.cg)
      ok = ok && e.i == e.k && e.j == 0 && std::abs(e.c - c0) <= 1e-12 * std::abs(c0);
    if (!ok)
      throw ModelFormatError(w + ": coupling with the one-hot input is not c * identity");
    Ins ins;
    ins.i_in = p.ins.i_in1();
    ins.i_out = p.ins.i_out();
    ins.mul_in = p.mul1;
    ins.mul_out = p.mul_out;
    ins.dim_m = p.ir1.dim();
    ins.off_in = p.offset1;
    ins.off_out = p.offset_out;
    const std::size_t ldb = static_cast<std::size_t>(num_species) * p.mul_out;
    for (int s = 0; s < num_species; ++s) {
      const double* B =
          tp.weight.data() + p.weight_offset + static_cast<std::size_t>(s) * p.mul_out;
      ins.w.emplace_back(p.mul1, p.mul_out, B, ldb, c0);
      ins.wt.emplace_back(p.mul_out, p.mul1, B, ldb, c0, true);
    }
    ins_.push_back(std::move(ins));
  }
}

template <class T>
void SpeciesLinear<T>::run(bool transpose, std::size_t n, const int* species, const T* X,
                           std::size_t ldx, T* Y, std::size_t ldy, bool accumulate,
                           bool parallel) const {
  const Irreps& y_irreps = transpose ? in_ : out_;
  const std::vector<int> y_off = y_irreps.offsets();
  std::vector<char> written(y_irreps.size(), 0), first(ins_.size(), 0);
  for (std::size_t q = 0; q < ins_.size(); ++q) {
    const int yb = transpose ? ins_[q].i_in : ins_[q].i_out;
    if (!written[yb]) first[q] = 1;
    written[yb] = 1;
  }
  // Rows grouped by species, cut into tasks of kRowBlock rows of one species.
  std::vector<int> order(n);
  std::vector<std::size_t> start(num_species_ + 1, 0);
  for (std::size_t r = 0; r < n; ++r) ++start[species[r] + 1];
  for (int s = 0; s < num_species_; ++s) start[s + 1] += start[s];
  {
    std::vector<std::size_t> next(start.begin(), start.end() - 1);
    for (std::size_t r = 0; r < n; ++r) order[next[species[r]]++] = static_cast<int>(r);
  }
  struct Task {
    int s;
    std::size_t begin, count;
  };
  std::vector<Task> tasks;
  for (int s = 0; s < num_species_; ++s)
    for (std::size_t b = start[s]; b < start[s + 1]; b += kRowBlock)
      tasks.push_back({s, b, std::min(kRowBlock, start[s + 1] - b)});
  double flops = 0;
  for (const Ins& ins : ins_) flops += 2.0 * ins.mul_in * ins.mul_out * ins.dim_m;
  const bool par = parallel && tasks.size() > 1 && flops * n > kParallelWork;
#pragma omp parallel for schedule(static) if (par)
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    const Task& task = tasks[t];
    const int* rows = order.data() + task.begin;
    if (!accumulate)
      for (std::size_t b = 0; b < y_irreps.size(); ++b)
        if (!written[b])
          for (std::size_t r = 0; r < task.count; ++r)
            std::fill_n(Y + rows[r] * ldy + y_off[b], y_irreps[b].dim(), T(0));
    for (std::size_t q = 0; q < ins_.size(); ++q) {
      const Ins& ins = ins_[q];
      const bool acc = accumulate || !first[q];
      const std::size_t xo = transpose ? ins.off_out : ins.off_in;
      const std::size_t yo = transpose ? ins.off_in : ins.off_out;
      const std::size_t xm = transpose ? ins.mul_out : ins.mul_in;
      const std::size_t ym = transpose ? ins.mul_in : ins.mul_out;
      const PackedMatrix<T>& w = transpose ? ins.wt[task.s] : ins.w[task.s];
      for (int m = 0; m < ins.dim_m; ++m)
        gemm(w, task.count, X + xo + m * xm, ldx, rows, Y + yo + m * ym, ldy, rows, acc);
    }
  }
}

template <class T>
void SpeciesLinear<T>::forward(std::size_t n, const int* species, const T* X, std::size_t ldx,
                               T* Y, std::size_t ldy, bool accumulate, bool parallel) const {
  run(false, n, species, X, ldx, Y, ldy, accumulate, parallel);
}

template <class T>
void SpeciesLinear<T>::backward(std::size_t n, const int* species, const T* gY, std::size_t ldy,
                                T* gX, std::size_t ldx, bool accumulate, bool parallel) const {
  run(true, n, species, gY, ldy, gX, ldx, accumulate, parallel);
}

template class SpeciesLinear<float>;
template class SpeciesLinear<double>;

// ---------------------------------------------------------------------------------------------
// ConvTp
// ---------------------------------------------------------------------------------------------

template <class T>
ConvTp<T>::ConvTp(const model::TensorProduct& tp, const std::string& where) {
  const TensorProduct& d = tp.descriptor;
  if (!tp.external_weights)
    throw ModelFormatError(where + ": expected external (per-edge) weights");
  const Irreps& in2 = d.irreps_in2();
  for (std::size_t b = 0; b < in2.size(); ++b)
    if (in2[b].mul != 1 || in2[b].ir.l() != static_cast<int>(b))
      throw ModelFormatError(where + ": second input " + in2.str() +
                             " is not one copy of each degree 0, 1, 2, ... in order (the "
                             "spherical harmonics)");
  dim_in1_ = d.dim_in1();
  dim_in2_ = d.dim_in2();
  dim_out_ = d.dim_out();
  weight_numel_ = d.weight_numel();
  for (std::size_t n = 0; n < d.paths().size(); ++n) {
    const TensorProductPath& p = d.paths()[n];
    const std::string w = where + ".instructions[" + std::to_string(n) + "]";
    if (p.ins.mode() != ConnectionMode::kUvu || !p.ins.has_weight())
      throw ModelFormatError(w + ": mode " + to_string(p.ins.mode()) +
                             ", the convolution needs weighted uvu");
    if (p.mul_out != p.mul1)
      throw ModelFormatError(w + ": uvu output multiplicity " + std::to_string(p.mul_out) +
                             " differs from the input's " + std::to_string(p.mul1));
    if (p.cg.empty()) continue;
    Ins ins;
    ins.l1 = p.ir1.l();
    ins.l2 = p.ir2.l();
    ins.l3 = p.ir_out.l();
    ins.mul = p.mul1;
    ins.d1 = p.ir1.dim();
    ins.d3 = p.ir_out.dim();
    ins.off1 = p.offset1;
    ins.off2 = p.offset2;
    ins.off3 = p.offset_out;
    ins.woff = p.weight_offset;
    std::vector<char> used(static_cast<std::size_t>(ins.d1) * ins.d3, 0);
    for (const CgEntry& e : p.cg) {
      ins.cg.push_back({e.i, e.j, e.k, static_cast<T>(e.c)});
      used[static_cast<std::size_t>(e.i) * ins.d3 + e.k] = 1;
    }
    ins.k_ptr.assign(1, 0);
    for (int k = 0; k < ins.d3; ++k) {
      for (int i = 0; i < ins.d1; ++i)
        if (used[static_cast<std::size_t>(i) * ins.d3 + k]) ins.k_i.push_back(i);
      ins.k_ptr.push_back(static_cast<int>(ins.k_i.size()));
    }
    ins.i_ptr.assign(1, 0);
    for (int i = 0; i < ins.d1; ++i) {
      for (int k = 0; k < ins.d3; ++k)
        if (used[static_cast<std::size_t>(i) * ins.d3 + k]) ins.i_k.push_back(k);
      ins.i_ptr.push_back(static_cast<int>(ins.i_k.size()));
    }
    macs_ += static_cast<double>(ins.mul) * ins.d1 * (ins.d3 + 1);
    ins_.push_back(std::move(ins));
  }
}

namespace {

constexpr int kMaxDim = 2 * kMaxL + 1;

// a[i][k] = sum_j P[i,j,k] y[j]: the coupling with this edge's harmonics folded in.
template <class T, class Ins>
CLEBSCH_INLINE void fold_harmonics(const Ins& ins, const T* y, T* a) {
  std::fill_n(a, ins.d1 * ins.d3, T(0));
  for (const auto& e : ins.cg) a[e.i * ins.d3 + e.k] += e.c * y[ins.off2 + e.j];
}

// Unaligned vector load/store (the vector is never passed by value, so no ABI question arises).
template <class V, class T>
CLEBSCH_INLINE void load(V& v, const T* p) {
  std::memcpy(&v, p, sizeof(V));
}
template <class V, class T>
CLEBSCH_INLINE void store(T* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}

// The edge kernels work on VL channels at a time (V: a GCC vector of VL lanes, or T itself for
// the channels left over), with every operand of an instruction (x[i], g[k], w) in registers or
// L1, so each coupling costs one fused multiply-add per lane.
template <class T, class V, class Ins>
CLEBSCH_INLINE void forward_lanes(const Ins& ins, const T* a, int u, const T* CLEBSCH_RESTRICT xb,
                                  const T* CLEBSCH_RESTRICT wb, T* CLEBSCH_RESTRICT ob) {
  const int C = ins.mul, d1 = ins.d1, d3 = ins.d3;
  V wx[kMaxDim], w, o;
  load(w, wb + u);
  for (int i = 0; i < d1; ++i) {
    load(wx[i], xb + i * C + u);
    wx[i] *= w;
  }
  for (int k = 0; k < d3; ++k) {
    load(o, ob + k * C + u);
    for (int q = ins.k_ptr[k]; q < ins.k_ptr[k + 1]; ++q) {
      const int i = ins.k_i[q];
      o += a[i * d3 + k] * wx[i];
    }
    store(ob + k * C + u, o);
  }
}

template <class T, class V, class Ins>
CLEBSCH_INLINE void backward_lanes(const Ins& ins, const T* a, int u, const T* CLEBSCH_RESTRICT xb,
                                   const T* CLEBSCH_RESTRICT wb, const T* CLEBSCH_RESTRICT gb,
                                   T* CLEBSCH_RESTRICT gxb, T* CLEBSCH_RESTRICT gwb, V* S) {
  const int C = ins.mul, d1 = ins.d1, d3 = ins.d3;
  V x[kMaxDim], g[kMaxDim], w;
  load(w, wb + u);
  for (int i = 0; i < d1; ++i) load(x[i], xb + i * C + u);
  for (int k = 0; k < d3; ++k) load(g[k], gb + k * C + u);
  // dE/dw[u] = sum_k g[k][u] sum_i a[i][k] x[i][u]
  V gw = V{} + T(0);
  for (int k = 0; k < d3; ++k) {
    V t = V{} + T(0);
    for (int q = ins.k_ptr[k]; q < ins.k_ptr[k + 1]; ++q) {
      const int i = ins.k_i[q];
      t += a[i * d3 + k] * x[i];
    }
    gw += g[k] * t;
  }
  store(gwb + u, gw);
  for (int i = 0; i < d1; ++i) {
    const V wx = w * x[i];
    V t = V{} + T(0);
    for (int q = ins.i_ptr[i]; q < ins.i_ptr[i + 1]; ++q) {
      const int k = ins.i_k[q];
      // S[i][k] = sum_u w[u] x[i][u] g[k][u] (lane-wise here, summed over lanes at the end):
      // contracted with P it gives dE/dY.
      S[i * d3 + k] += wx * g[k];
      t += a[i * d3 + k] * g[k];
    }
    // dE/dx[i][u] = w[u] sum_k a[i][k] g[k][u]
    if (gxb) {
      V cur;
      load(cur, gxb + i * C + u);
      cur += w * t;
      store(gxb + i * C + u, cur);
    }
  }
}

// Fixed-shape versions for d1 = 2l1+1 and d3 = 2l3+1 known at compile time (l <= 3, every
// instruction of MACE's usual models): the loops unroll, x, g, w and the S accumulators live in
// registers, and a zero coupling costs one wasted multiply-add instead of an index lookup.
template <class T, class V, int D1, int D3>
CLEBSCH_INLINE void forward_fixed_lanes(const T* a, int C, int u, const T* CLEBSCH_RESTRICT xb,
                                        const T* CLEBSCH_RESTRICT wb, T* CLEBSCH_RESTRICT ob) {
  V w, wx[D1];
  load(w, wb + u);
  for (int i = 0; i < D1; ++i) {
    load(wx[i], xb + i * C + u);
    wx[i] *= w;
  }
  for (int k = 0; k < D3; ++k) {
    V o;
    load(o, ob + k * C + u);
    for (int i = 0; i < D1; ++i) o += a[i * D3 + k] * wx[i];
    store(ob + k * C + u, o);
  }
}

template <class T, int VB, int D1, int D3>
CLEBSCH_INLINE void forward_fixed(const T* a, int C, const T* xb, const T* wb, T* ob) {
  typedef T V __attribute__((vector_size(VB)));
  constexpr int VL = VB / int(sizeof(T));
  int u = 0;
  for (; u + VL <= C; u += VL) forward_fixed_lanes<T, V, D1, D3>(a, C, u, xb, wb, ob);
  for (; u < C; ++u) forward_fixed_lanes<T, T, D1, D3>(a, C, u, xb, wb, ob);
}

template <class T, class V, int D1, int D3>
CLEBSCH_INLINE void backward_fixed_lanes(const T* a, int C, int u, const T* CLEBSCH_RESTRICT xb,
                                         const T* CLEBSCH_RESTRICT wb,
                                         const T* CLEBSCH_RESTRICT gb, T* CLEBSCH_RESTRICT gxb,
                                         T* CLEBSCH_RESTRICT gwb, V* S) {
  V w, x[D1], g[D3];
  load(w, wb + u);
  for (int i = 0; i < D1; ++i) load(x[i], xb + i * C + u);
  for (int k = 0; k < D3; ++k) load(g[k], gb + k * C + u);
  V gw = V{} + T(0);
  for (int k = 0; k < D3; ++k) {
    V t = V{} + T(0);
    for (int i = 0; i < D1; ++i) t += a[i * D3 + k] * x[i];
    gw += g[k] * t;
  }
  store(gwb + u, gw);
  for (int i = 0; i < D1; ++i) {
    const V wx = w * x[i];
    V t = V{} + T(0);
    for (int k = 0; k < D3; ++k) {
      S[i * D3 + k] += wx * g[k];
      t += a[i * D3 + k] * g[k];
    }
    if (gxb) {
      V cur;
      load(cur, gxb + i * C + u);
      cur += w * t;
      store(gxb + i * C + u, cur);
    }
  }
}

template <class T, int VB, int D1, int D3>
CLEBSCH_INLINE void backward_fixed(const T* a, int C, const T* xb, const T* wb, const T* gb,
                                   T* gxb, T* gwb, T* S_out) {
  typedef T V __attribute__((vector_size(VB)));
  constexpr int VL = VB / int(sizeof(T));
  V Sv[D1 * D3];
  T Ss[D1 * D3];
  for (int p = 0; p < D1 * D3; ++p) {
    Sv[p] = V{} + T(0);
    Ss[p] = T(0);
  }
  int u = 0;
  for (; u + VL <= C; u += VL)
    backward_fixed_lanes<T, V, D1, D3>(a, C, u, xb, wb, gb, gxb, gwb, Sv);
  for (; u < C; ++u) backward_fixed_lanes<T, T, D1, D3>(a, C, u, xb, wb, gb, gxb, gwb, Ss);
  for (int p = 0; p < D1 * D3; ++p) {
    T sum = Ss[p];
    for (int l = 0; l < VL; ++l) sum += Sv[p][l];
    S_out[p] = sum;
  }
}

#define CLEBSCH_FIXED_SHAPES(X)                                                           \
  X(1, 1) X(1, 3) X(1, 5) X(1, 7) X(3, 1) X(3, 3) X(3, 5) X(3, 7) X(5, 1) X(5, 3) X(5, 5) \
  X(5, 7) X(7, 1) X(7, 3) X(7, 5) X(7, 7)

template <class T, int VB, class Ins>
CLEBSCH_INLINE void conv_forward_body(const std::vector<Ins>& list, const T* CLEBSCH_RESTRICT x,
                                      const T* CLEBSCH_RESTRICT y, const T* CLEBSCH_RESTRICT w,
                                      T* CLEBSCH_RESTRICT out) {
  typedef T V __attribute__((vector_size(VB)));
  constexpr int VL = VB / int(sizeof(T));
  T a[kMaxDim * kMaxDim];
  for (const Ins& ins : list) {
    fold_harmonics(ins, y, a);
    const T* xb = x + ins.off1;
    const T* wb = w + ins.woff;
    T* ob = out + ins.off3;
    switch (ins.d1 * 32 + ins.d3) {
#define CLEBSCH_CASE(A, B)                                  \
  case A * 32 + B:                                          \
    forward_fixed<T, VB, A, B>(a, ins.mul, xb, wb, ob); \
    continue;
      CLEBSCH_FIXED_SHAPES(CLEBSCH_CASE)
#undef CLEBSCH_CASE
      default:
        break;
    }
    int u = 0;
    for (; u + VL <= ins.mul; u += VL) forward_lanes<T, V>(ins, a, u, xb, wb, ob);
    for (; u < ins.mul; ++u) forward_lanes<T, T>(ins, a, u, xb, wb, ob);
  }
}

template <class T, int VB, class Ins>
CLEBSCH_INLINE void conv_backward_body(const std::vector<Ins>& list, const T* CLEBSCH_RESTRICT x,
                                       const T* CLEBSCH_RESTRICT y, const T* CLEBSCH_RESTRICT w,
                                       const T* CLEBSCH_RESTRICT g, T* CLEBSCH_RESTRICT gx,
                                       T* CLEBSCH_RESTRICT gy, T* CLEBSCH_RESTRICT gw) {
  typedef T V __attribute__((vector_size(VB)));
  constexpr int VL = VB / int(sizeof(T));
  T a[kMaxDim * kMaxDim];
  V Sv[kMaxDim * kMaxDim];
  T Ss[kMaxDim * kMaxDim];
  for (const Ins& ins : list) {
    const int n = ins.d1 * ins.d3;
    fold_harmonics(ins, y, a);
    const T* xb = x + ins.off1;
    const T* wb = w + ins.woff;
    const T* gb = g + ins.off3;
    T* gxb = gx ? gx + ins.off1 : nullptr;
    T* gwb = gw + ins.woff;
    bool done = true;
    switch (ins.d1 * 32 + ins.d3) {
#define CLEBSCH_CASE(A, B)                                                  \
  case A * 32 + B:                                                          \
    backward_fixed<T, VB, A, B>(a, ins.mul, xb, wb, gb, gxb, gwb, Ss); \
    break;
      CLEBSCH_FIXED_SHAPES(CLEBSCH_CASE)
#undef CLEBSCH_CASE
      default:
        done = false;
    }
    if (!done) {
      for (int p = 0; p < n; ++p) {
        Sv[p] = V{} + T(0);
        Ss[p] = T(0);
      }
      int u = 0;
      for (; u + VL <= ins.mul; u += VL)
        backward_lanes<T, V>(ins, a, u, xb, wb, gb, gxb, gwb, Sv);
      for (; u < ins.mul; ++u) backward_lanes<T, T>(ins, a, u, xb, wb, gb, gxb, gwb, Ss);
      for (int p = 0; p < n; ++p)
        for (int l = 0; l < VL; ++l) Ss[p] += Sv[p][l];
    }
    for (const auto& e : ins.cg) gy[ins.off2 + e.j] += e.c * Ss[e.i * ins.d3 + e.k];
  }
}

#define CLEBSCH_CONV_FWD_ARGS \
  const std::vector<Ins>&list, const T *x, const T *y, const T *w, T *out
#define CLEBSCH_CONV_BWD_ARGS                                                                  \
  const std::vector<Ins>&list, const T *x, const T *y, const T *w, const T *g, T *gx, T *gy, \
      T *gw

#if CLEBSCH_X86_DISPATCH
template <class T, class Ins>
CLEBSCH_TARGET_AVX512 void conv_forward_avx512(CLEBSCH_CONV_FWD_ARGS) {
  conv_forward_body<T, 64>(list, x, y, w, out);
}
template <class T, class Ins>
CLEBSCH_TARGET_AVX2 void conv_forward_avx2(CLEBSCH_CONV_FWD_ARGS) {
  conv_forward_body<T, 32>(list, x, y, w, out);
}
template <class T, class Ins>
CLEBSCH_TARGET_AVX512 void conv_backward_avx512(CLEBSCH_CONV_BWD_ARGS) {
  conv_backward_body<T, 64>(list, x, y, w, g, gx, gy, gw);
}
template <class T, class Ins>
CLEBSCH_TARGET_AVX2 void conv_backward_avx2(CLEBSCH_CONV_BWD_ARGS) {
  conv_backward_body<T, 32>(list, x, y, w, g, gx, gy, gw);
}
#endif

}  // namespace

template <class T>
void ConvTp<T>::forward(const T* x, const T* y, const T* w, T* out) const {
#if CLEBSCH_X86_DISPATCH
  switch (simd_level()) {
    case Simd::kAvx512: return conv_forward_avx512<T, Ins>(ins_, x, y, w, out);
    case Simd::kAvx2: return conv_forward_avx2<T, Ins>(ins_, x, y, w, out);
    default: break;
  }
#endif
  conv_forward_body<T, 16>(ins_, x, y, w, out);
}

template <class T>
void ConvTp<T>::backward(const T* x, const T* y, const T* w, const T* g, T* gx, T* gy,
                         T* gw) const {
#if CLEBSCH_X86_DISPATCH
  switch (simd_level()) {
    case Simd::kAvx512: return conv_backward_avx512<T, Ins>(ins_, x, y, w, g, gx, gy, gw);
    case Simd::kAvx2: return conv_backward_avx2<T, Ins>(ins_, x, y, w, g, gx, gy, gw);
    default: break;
  }
#endif
  conv_backward_body<T, 16>(ins_, x, y, w, g, gx, gy, gw);
}

template class ConvTp<float>;
template class ConvTp<double>;

// ---------------------------------------------------------------------------------------------
// Layout conversion
// ---------------------------------------------------------------------------------------------

template <class T>
void mul_ir_to_ir_mul(const Irreps& irreps, const T* in, T* out) {
  int off = 0;
  for (const MulIrrep& b : irreps) {
    const int d = b.ir.dim();
    for (int u = 0; u < b.mul; ++u)
      for (int m = 0; m < d; ++m) out[off + m * b.mul + u] = in[off + u * d + m];
    off += b.mul * d;
  }
}

template <class T>
void ir_mul_to_mul_ir(const Irreps& irreps, const T* in, T* out) {
  int off = 0;
  for (const MulIrrep& b : irreps) {
    const int d = b.ir.dim();
    for (int u = 0; u < b.mul; ++u)
      for (int m = 0; m < d; ++m) out[off + u * d + m] = in[off + m * b.mul + u];
    off += b.mul * d;
  }
}

template void mul_ir_to_ir_mul<float>(const Irreps&, const float*, float*);
template void mul_ir_to_ir_mul<double>(const Irreps&, const double*, double*);
template void ir_mul_to_mul_ir<float>(const Irreps&, const float*, float*);
template void ir_mul_to_mul_ir<double>(const Irreps&, const double*, double*);

}  // namespace clebsch::mace_detail
