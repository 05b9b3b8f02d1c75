// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// ConvTp of the MACE host kernels (mace_kernels.h): the uvu convolution tensor product of one
// edge and its vector-Jacobian product, on ir_mul rows. Per instruction the coupling is first
// folded with the edge's harmonics (a[i][k] = sum_j P[i,j,k] Y[j]), so that what remains per
// channel u is a small d1 x d3 matrix applied to x[sender] and contracted with the cotangent;
// the channel loop runs a vector of channels at a time. One kernel serves every instruction,
// walking the folded coupling either densely, for the shapes of l <= 3 known at compile time, or
// through the instruction's index lists of the (i, k) that occur.
#include "clebsch/engine/mace_kernels.h"

#include <algorithm>
#include <cstring>

#include "clebsch/engine/mace_kernels_simd.h"
#include "clebsch/support/error.h"

namespace clebsch::mace_detail {

namespace {

// Per outer index o < n_outer, the inner indices n < n_inner with used[o * so + n * si], in
// increasing order (compressed rows: ptr[o]..ptr[o+1] index idx).
void index_lists(const std::vector<char>& used, int n_outer, int n_inner, std::size_t so,
                 std::size_t si, std::vector<int>& ptr, std::vector<int>& idx) {
  ptr.assign(1, 0);
  for (int o = 0; o < n_outer; ++o) {
    for (int n = 0; n < n_inner; ++n)
      if (used[static_cast<std::size_t>(o) * so + static_cast<std::size_t>(n) * si])
        idx.push_back(n);
    ptr.push_back(static_cast<int>(idx.size()));
  }
}

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

// How the edge kernels walk the folded coupling a[i][k] (d1 x d3): for each k the positions
// q in [i_begin(k), i_end(k)) of the i that couple to it (i = i_at(q)), and for each i those of
// its k. Dense is for d1 = 2l1+1 and d3 = 2l3+1 known at compile time (l <= 3: every instruction
// of MACE's usual models): the loops unroll, x, g, w and the S accumulators live in registers,
// and a zero coupling costs one wasted multiply-add instead of an index lookup.
template <int D1, int D3>
struct DenseCoupling {
  static constexpr int kMaxD1 = D1, kMaxD3 = D3;
  CLEBSCH_INLINE int d1() const { return D1; }
  CLEBSCH_INLINE int d3() const { return D3; }
  CLEBSCH_INLINE int i_begin(int) const { return 0; }
  CLEBSCH_INLINE int i_end(int) const { return D1; }
  CLEBSCH_INLINE int i_at(int q) const { return q; }
  CLEBSCH_INLINE int k_begin(int) const { return 0; }
  CLEBSCH_INLINE int k_end(int) const { return D3; }
  CLEBSCH_INLINE int k_at(int q) const { return q; }
};

// Any other shape: only the (i, k) that occur, from the instruction's index lists.
template <class Ins>
struct SparseCoupling {
  static constexpr int kMaxD1 = kMaxDim, kMaxD3 = kMaxDim;
  const Ins& ins;
  CLEBSCH_INLINE int d1() const { return ins.d1; }
  CLEBSCH_INLINE int d3() const { return ins.d3; }
  CLEBSCH_INLINE int i_begin(int k) const { return ins.k_ptr[k]; }
  CLEBSCH_INLINE int i_end(int k) const { return ins.k_ptr[k + 1]; }
  CLEBSCH_INLINE int i_at(int q) const { return ins.k_i[q]; }
  CLEBSCH_INLINE int k_begin(int i) const { return ins.i_ptr[i]; }
  CLEBSCH_INLINE int k_end(int i) const { return ins.i_ptr[i + 1]; }
  CLEBSCH_INLINE int k_at(int q) const { return ins.i_k[q]; }
};

// The edge kernels work on VL channels at a time (V: a GCC vector of VL lanes, or T itself for
// the channels left over), with every operand of an instruction (x[i], g[k], w) in registers or
// L1, so each coupling costs one fused multiply-add per lane.
template <class T, class V, class Coupling>
CLEBSCH_INLINE void forward_lanes(const Coupling& cp, const T* a, int C, int u,
                                  const T* CLEBSCH_RESTRICT xb, const T* CLEBSCH_RESTRICT wb,
                                  T* CLEBSCH_RESTRICT ob) {
  const int d1 = cp.d1(), d3 = cp.d3();
  V wx[Coupling::kMaxD1], w, o;
  load(w, wb + u);
  for (int i = 0; i < d1; ++i) {
    load(wx[i], xb + i * C + u);
    wx[i] *= w;
  }
  for (int k = 0; k < d3; ++k) {
    load(o, ob + k * C + u);
    for (int q = cp.i_begin(k); q < cp.i_end(k); ++q) {
      const int i = cp.i_at(q);
      o += a[i * d3 + k] * wx[i];
    }
    store(ob + k * C + u, o);
  }
}

template <class T, class V, class Coupling>
CLEBSCH_INLINE void backward_lanes(const Coupling& cp, const T* a, int C, int u,
                                   const T* CLEBSCH_RESTRICT xb, const T* CLEBSCH_RESTRICT wb,
                                   const T* CLEBSCH_RESTRICT gb, T* CLEBSCH_RESTRICT gxb,
                                   T* CLEBSCH_RESTRICT gwb, V* S) {
  const int d1 = cp.d1(), d3 = cp.d3();
  V x[Coupling::kMaxD1], g[Coupling::kMaxD3], w;
  load(w, wb + u);
  for (int i = 0; i < d1; ++i) load(x[i], xb + i * C + u);
  for (int k = 0; k < d3; ++k) load(g[k], gb + k * C + u);
  // dE/dw[u] = sum_k g[k][u] sum_i a[i][k] x[i][u]
  V gw = V{} + T(0);
  for (int k = 0; k < d3; ++k) {
    V t = V{} + T(0);
    for (int q = cp.i_begin(k); q < cp.i_end(k); ++q) {
      const int i = cp.i_at(q);
      t += a[i * d3 + k] * x[i];
    }
    gw += g[k] * t;
  }
  store(gwb + u, gw);
  for (int i = 0; i < d1; ++i) {
    const V wx = w * x[i];
    V t = V{} + T(0);
    for (int q = cp.k_begin(i); q < cp.k_end(i); ++q) {
      const int k = cp.k_at(q);
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

// One instruction over its C channels: whole vectors of VB bytes, then the channels left over.
template <class T, int VB, class Coupling>
CLEBSCH_INLINE void forward_channels(const Coupling& cp, const T* a, int C, const T* xb,
                                     const T* wb, T* ob) {
  typedef T V __attribute__((vector_size(VB)));
  constexpr int VL = VB / int(sizeof(T));
  int u = 0;
  for (; u + VL <= C; u += VL) forward_lanes<T, V>(cp, a, C, u, xb, wb, ob);
  for (; u < C; ++u) forward_lanes<T, T>(cp, a, C, u, xb, wb, ob);
}

// As forward_channels; S_out[i][k] receives sum_u w[u] x[i][u] g[k][u].
template <class T, int VB, class Coupling>
CLEBSCH_INLINE void backward_channels(const Coupling& cp, const T* a, int C, const T* xb,
                                      const T* wb, const T* gb, T* gxb, T* gwb, T* S_out) {
  typedef T V __attribute__((vector_size(VB)));
  constexpr int VL = VB / int(sizeof(T));
  const int n = cp.d1() * cp.d3();
  V Sv[Coupling::kMaxD1 * Coupling::kMaxD3];
  T Ss[Coupling::kMaxD1 * Coupling::kMaxD3];
  for (int p = 0; p < n; ++p) {
    Sv[p] = V{} + T(0);
    Ss[p] = T(0);
  }
  int u = 0;
  for (; u + VL <= C; u += VL) backward_lanes<T, V>(cp, a, C, u, xb, wb, gb, gxb, gwb, Sv);
  for (; u < C; ++u) backward_lanes<T, T>(cp, a, C, u, xb, wb, gb, gxb, gwb, Ss);
  for (int p = 0; p < n; ++p) {
    T sum = Ss[p];
    for (int l = 0; l < VL; ++l) sum += Sv[p][l];
    S_out[p] = sum;
  }
}

// The shapes (d1, d3) with a dense kernel, keyed d1 * 32 + d3 in the switches below.
// clang-format off
#define CLEBSCH_FIXED_SHAPES(X)     \
  X(1, 1) X(1, 3) X(1, 5) X(1, 7)   \
  X(3, 1) X(3, 3) X(3, 5) X(3, 7)   \
  X(5, 1) X(5, 3) X(5, 5) X(5, 7)   \
  X(7, 1) X(7, 3) X(7, 5) X(7, 7)
// clang-format on

template <class T, int VB, class Ins>
CLEBSCH_INLINE void conv_forward_body(const std::vector<Ins>& list, const T* CLEBSCH_RESTRICT x,
                                      const T* CLEBSCH_RESTRICT y, const T* CLEBSCH_RESTRICT w,
                                      T* CLEBSCH_RESTRICT out) {
  T a[kMaxDim * kMaxDim];
  for (const Ins& ins : list) {
    fold_harmonics(ins, y, a);
    const T* xb = x + ins.off1;
    const T* wb = w + ins.woff;
    T* ob = out + ins.off3;
    switch (ins.d1 * 32 + ins.d3) {
#define CLEBSCH_CASE(A, B)                                                  \
  case A * 32 + B:                                                          \
    forward_channels<T, VB>(DenseCoupling<A, B>{}, a, ins.mul, xb, wb, ob); \
    break;
      CLEBSCH_FIXED_SHAPES(CLEBSCH_CASE)
#undef CLEBSCH_CASE
      default:
        forward_channels<T, VB>(SparseCoupling<Ins>{ins}, a, ins.mul, xb, wb, ob);
    }
  }
}

template <class T, int VB, class Ins>
CLEBSCH_INLINE void conv_backward_body(const std::vector<Ins>& list, const T* CLEBSCH_RESTRICT x,
                                       const T* CLEBSCH_RESTRICT y, const T* CLEBSCH_RESTRICT w,
                                       const T* CLEBSCH_RESTRICT g, T* CLEBSCH_RESTRICT gx,
                                       T* CLEBSCH_RESTRICT gy, T* CLEBSCH_RESTRICT gw) {
  T a[kMaxDim * kMaxDim];
  T S[kMaxDim * kMaxDim];
  for (const Ins& ins : list) {
    fold_harmonics(ins, y, a);
    const T* xb = x + ins.off1;
    const T* wb = w + ins.woff;
    const T* gb = g + ins.off3;
    T* gxb = gx ? gx + ins.off1 : nullptr;
    T* gwb = gw + ins.woff;
    switch (ins.d1 * 32 + ins.d3) {
#define CLEBSCH_CASE(A, B)                                                                \
  case A * 32 + B:                                                                        \
    backward_channels<T, VB>(DenseCoupling<A, B>{}, a, ins.mul, xb, wb, gb, gxb, gwb, S); \
    break;
      CLEBSCH_FIXED_SHAPES(CLEBSCH_CASE)
#undef CLEBSCH_CASE
      default:
        backward_channels<T, VB>(SparseCoupling<Ins>{ins}, a, ins.mul, xb, wb, gb, gxb, gwb, S);
    }
    for (const auto& e : ins.cg) gy[ins.off2 + e.j] += e.c * S[e.i * ins.d3 + e.k];
  }
}

#define CLEBSCH_CONV_FWD_ARGS \
  const std::vector<Ins>&list, const T *x, const T *y, const T *w, T *out
#define CLEBSCH_CONV_BWD_ARGS \
  const std::vector<Ins>&list, const T *x, const T *y, const T *w, const T *g, T *gx, T *gy, T *gw

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
    index_lists(used, ins.d3, ins.d1, 1, ins.d3, ins.k_ptr, ins.k_i);
    index_lists(used, ins.d1, ins.d3, ins.d3, 1, ins.i_ptr, ins.i_k);
    macs_ += static_cast<double>(ins.mul) * ins.d1 * (ins.d3 + 1);
    ins_.push_back(std::move(ins));
  }
}

template <class T>
void ConvTp<T>::forward(const T* x, const T* y, const T* w, T* out) const {
#if CLEBSCH_X86_DISPATCH
  switch (simd_level()) {
    case Simd::kAvx512:
      return conv_forward_avx512<T, Ins>(ins_, x, y, w, out);
    case Simd::kAvx2:
      return conv_forward_avx2<T, Ins>(ins_, x, y, w, out);
    default:
      break;
  }
#endif
  conv_forward_body<T, 16>(ins_, x, y, w, out);
}

template <class T>
void ConvTp<T>::backward(const T* x, const T* y, const T* w, const T* g, T* gx, T* gy,
                         T* gw) const {
#if CLEBSCH_X86_DISPATCH
  switch (simd_level()) {
    case Simd::kAvx512:
      return conv_backward_avx512<T, Ins>(ins_, x, y, w, g, gx, gy, gw);
    case Simd::kAvx2:
      return conv_backward_avx2<T, Ins>(ins_, x, y, w, g, gx, gy, gw);
    default:
      break;
  }
#endif
  conv_backward_body<T, 16>(ins_, x, y, w, g, gx, gy, gw);
}

template class ConvTp<float>;
template class ConvTp<double>;

}  // namespace clebsch::mace_detail
