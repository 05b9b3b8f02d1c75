// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The two kernels that carry most of the NequIP host engine's arithmetic (declared in
// nequip_engine_ops.h): the register-blocked products of the MLP chunks and the per-edge uvu
// convolution, forward and backward. They are apart from the engine so that, on x86-64 with GCC,
// they alone are compiled once per instruction set (AVX-512, AVX2, the baseline) and picked at
// load time, while the rest of the library stays portable.
#include <algorithm>
#include <cstddef>

#include "clebsch/engine/nequip_engine_ops.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
// Function multiversioning: the library stays portable (baseline x86-64) while the MLP products,
// most of the work, use the widest vectors the CPU has. The choice is made once per process, so
// results are reproducible on one machine; across machines they differ by rounding only.
// The helpers must be inlined into each clone to be compiled for its instruction set.
#define CLEBSCH_NEQUIP_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define CLEBSCH_NEQUIP_INLINE inline __attribute__((always_inline))
#else
#define CLEBSCH_NEQUIP_TARGET_CLONES
#define CLEBSCH_NEQUIP_INLINE inline
#endif

namespace clebsch::nequip_ops {
namespace {

/// Rows [r, r+RB) of C = A B: a RB x JB block of C stays in registers over the whole k loop, so
/// each B row is loaded once per RB rows and C is written once.
template <class S, int RB, int JB>
CLEBSCH_NEQUIP_INLINE void gemm_rows(int r, int k, int m, const S* A, const S* B, S* C) {
  int j0 = 0;
  for (; j0 + JB <= m; j0 += JB) {
    S acc[RB][JB] = {};
    for (int q = 0; q < k; ++q) {
      const S* b = B + static_cast<std::size_t>(q) * m + j0;
      for (int rr = 0; rr < RB; ++rr) {
        const S a = A[static_cast<std::size_t>(r + rr) * k + q];
#pragma omp simd
        for (int jj = 0; jj < JB; ++jj) acc[rr][jj] += a * b[jj];
      }
    }
    for (int rr = 0; rr < RB; ++rr)
      std::copy_n(acc[rr], JB, C + static_cast<std::size_t>(r + rr) * m + j0);
  }
  const int rem = m - j0;
  if (rem > 0) {
    S acc[RB][JB] = {};
    for (int q = 0; q < k; ++q) {
      const S* b = B + static_cast<std::size_t>(q) * m + j0;
      for (int rr = 0; rr < RB; ++rr) {
        const S a = A[static_cast<std::size_t>(r + rr) * k + q];
        for (int jj = 0; jj < rem; ++jj) acc[rr][jj] += a * b[jj];
      }
    }
    for (int rr = 0; rr < RB; ++rr)
      std::copy_n(acc[rr], rem, C + static_cast<std::size_t>(r + rr) * m + j0);
  }
}

template <class S, int JB>
CLEBSCH_NEQUIP_INLINE void gemm_blocked(int n, int k, int m, const S* A, const S* B, S* C) {
  int r = 0;
  for (; r + 4 <= n; r += 4) gemm_rows<S, 4, JB>(r, k, m, A, B, C);
  for (; r < n; ++r) gemm_rows<S, 1, JB>(r, k, m, A, B, C);
}

// The bodies of the convolution kernels, for any scalar; x1t, outt, gt and gx1t are
// component-major (index m*mul+u inside a block), so every inner loop runs over channels.
template <class S>
CLEBSCH_NEQUIP_INLINE void conv_forward_edge_body(const ConvPath<S>* paths, int num_paths,
                                                  const S* x1t, const S* y, const S* w, S* outt,
                                                  S* scratch) {
  for (int pi = 0; pi < num_paths; ++pi) {
    const ConvPath<S>& p = paths[pi];
    const int U = p.mul1;
    const S* a = x1t + p.off1;
    S* o = outt + p.off_out;
    S* wa = scratch;  // [d1][U]: w[u] a[i][u]
    for (int v = 0; v < p.mul2; ++v) {
      const S* b = y + p.off2 + v * p.d2;
      for (int i = 0; i < p.d1; ++i) {
        const S* ai = a + i * U;
        S* wai = wa + i * U;
        if (p.weight_offset >= 0) {
          const S* wv = w + p.weight_offset + v;
          const int stride = p.mul2;
#pragma omp simd
          for (int u = 0; u < U; ++u) wai[u] = wv[u * stride] * ai[u];
        } else {
          std::copy_n(ai, U, wai);
        }
      }
      for (const Coupling<S>& e : p.cg) {
        const S cy = e.c * b[e.j];
        const S* wai = wa + e.i * U;
        S* ok = o + e.k * U;
#pragma omp simd
        for (int u = 0; u < U; ++u) ok[u] += cy * wai[u];
      }
    }
  }
}

template <class S>
CLEBSCH_NEQUIP_INLINE void conv_backward_edge_body(const ConvPath<S>* paths, int num_paths,
                                                   int weight_numel, const S* x1t, const S* y,
                                                   const S* w, const S* gt, S* gx1t, S* gy, S* gw,
                                                   S* scratch) {
  // Weights of paths without couplings are not visited below but must read as zero.
  std::fill(gw, gw + weight_numel, S(0));
  for (int pi = 0; pi < num_paths; ++pi) {
    const ConvPath<S>& p = paths[pi];
    const int U = p.mul1;
    const S* a = x1t + p.off1;
    const S* g = gt + p.off_out;
    S* t = scratch;                  // [d3][U]: sum_ij P_ijk Y_j a[i][u]
    S* wg = scratch + p.d3 * U;      // [d3][U]: w[u] g[k][u]
    S* wv = scratch + 2 * p.d3 * U;  // [U]
    const bool weighted = p.weight_offset >= 0;
    for (int v = 0; v < p.mul2; ++v) {
      const S* b = y + p.off2 + v * p.d2;
      S* gb = gy + p.off2 + v * p.d2;
      for (int u = 0; u < U; ++u) wv[u] = weighted ? w[p.weight_offset + u * p.mul2 + v] : S(1);
      for (int k = 0; k < p.d3; ++k) {
        const S* gk = g + k * U;
        S* wgk = wg + k * U;
#pragma omp simd
        for (int u = 0; u < U; ++u) wgk[u] = wv[u] * gk[u];
      }
      if (weighted) std::fill(t, t + p.d3 * U, S(0));
      for (const Coupling<S>& e : p.cg) {
        const S cy = e.c * b[e.j];
        const S* ai = a + e.i * U;
        const S* wgk = wg + e.k * U;
        if (weighted) {
          S* tk = t + e.k * U;
#pragma omp simd
          for (int u = 0; u < U; ++u) tk[u] += cy * ai[u];
        }
        S dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int u = 0; u < U; ++u) dot += ai[u] * wgk[u];
        gb[e.j] += e.c * dot;
        if (gx1t) {
          S* gxi = gx1t + p.off1 + e.i * U;
#pragma omp simd
          for (int u = 0; u < U; ++u) gxi[u] += cy * wgk[u];
        }
      }
      if (weighted) {
        // gw[u] = sum_k t[k][u] g[k][u], accumulated in wv (no longer needed) over k.
        std::fill(wv, wv + U, S(0));
        for (int k = 0; k < p.d3; ++k) {
          const S* tk = t + k * U;
          const S* gk = g + k * U;
#pragma omp simd
          for (int u = 0; u < U; ++u) wv[u] += tk[u] * gk[u];
        }
        S* gwp = gw + p.weight_offset + v;
        for (int u = 0; u < U; ++u) gwp[u * p.mul2] = wv[u];
      }
    }
  }
}

}  // namespace

CLEBSCH_NEQUIP_TARGET_CLONES
void gemm_nn(int n, int k, int m, const double* A, const double* B, double* C) {
  gemm_blocked<double, 8>(n, k, m, A, B, C);
}

CLEBSCH_NEQUIP_TARGET_CLONES
void gemm_nn(int n, int k, int m, const float* A, const float* B, float* C) {
  gemm_blocked<float, 16>(n, k, m, A, B, C);
}

// The convolution kernels vectorise over channels; they are the rest of the per-edge work.
CLEBSCH_NEQUIP_TARGET_CLONES
void conv_forward_edge(const ConvPath<double>* paths, int num_paths, const double* x1t,
                       const double* y, const double* w, double* outt, double* scratch) {
  conv_forward_edge_body(paths, num_paths, x1t, y, w, outt, scratch);
}

CLEBSCH_NEQUIP_TARGET_CLONES
void conv_forward_edge(const ConvPath<float>* paths, int num_paths, const float* x1t,
                       const float* y, const float* w, float* outt, float* scratch) {
  conv_forward_edge_body(paths, num_paths, x1t, y, w, outt, scratch);
}

CLEBSCH_NEQUIP_TARGET_CLONES
void conv_backward_edge(const ConvPath<double>* paths, int num_paths, int weight_numel,
                        const double* x1t, const double* y, const double* w, const double* gt,
                        double* gx1t, double* gy, double* gw, double* scratch) {
  conv_backward_edge_body(paths, num_paths, weight_numel, x1t, y, w, gt, gx1t, gy, gw, scratch);
}

CLEBSCH_NEQUIP_TARGET_CLONES
void conv_backward_edge(const ConvPath<float>* paths, int num_paths, int weight_numel,
                        const float* x1t, const float* y, const float* w, const float* gt,
                        float* gx1t, float* gy, float* gw, float* scratch) {
  conv_backward_edge_body(paths, num_paths, weight_numel, x1t, y, w, gt, gx1t, gy, gw, scratch);
}

}  // namespace clebsch::nequip_ops
