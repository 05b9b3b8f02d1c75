// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The packed GEMM of the MACE host kernels (mace_kernels.h) and the choice of instruction set
// every kernel runs with: the best the CPU supports, lowered on request (CLEBSCH_SIMD, or
// set_simd_level for tests). Constant weights are packed once into column panels as wide as the
// level's micro-kernel, so the panel width of a packed matrix says which compiled kernel
// multiplies by it.
#include "clebsch/engine/mace_kernels.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "clebsch/engine/mace_kernels_simd.h"
#include "clebsch/support/error.h"

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

Simd& active_simd() {
  static Simd level = detect_simd();
  return level;
}

}  // namespace

Simd simd_level() { return active_simd(); }

void set_simd_level(Simd level) {
  const Simd best = detect_simd();
  if (static_cast<int>(level) > static_cast<int>(best))
    throw Error("set_simd_level: this CPU does not support " + to_string(level) +
                " (best: " + to_string(best) + ")");
  active_simd() = level;
}

std::string to_string(Simd simd) {
  switch (simd) {
    case Simd::kAvx512:
      return "avx512";
    case Simd::kAvx2:
      return "avx2";
    case Simd::kBaseline:
      return "baseline";
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
CLEBSCH_INLINE void gemm_body(const T* CLEBSCH_RESTRICT Bp, int K, int N, std::size_t M, const T* A,
                              std::size_t lda, const int* a_rows, T* C, std::size_t ldc,
                              const int* c_rows, bool accumulate) {
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

#define CLEBSCH_GEMM_ARGS                                                                         \
  const T *Bp, int K, int N, std::size_t M, const T *A, std::size_t lda, const int *a_rows, T *C, \
      std::size_t ldc, const int *c_rows, bool accumulate
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
  if (B.panel_width() == kernel_panel_width<T>(Simd::kAvx2)) return gemm_avx2<T>(CLEBSCH_GEMM_PASS);
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

}  // namespace clebsch::mace_detail
