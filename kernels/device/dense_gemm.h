// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The cuBLAS route of GenericKernels::gemm. The generic GEMM kernel (one output per thread, no
// tiling, no tensor cores) dominated the MACE engine on an H200 (radial MLP over ~800k edges:
// 0.6 s per step against a few ms of convolution), so GEMMs whose operands are plain dense
// matrices go to cuBLAS on the CUDA backend. Everything else stays on the generic kernel: row
// gathers (a_rows/c_rows), per-row weight selection (b_select: species-dependent linears),
// batches, strided blocks of e3nn linears (l > 0: neither stride is 1), k = 0 (zeroing), and
// every GEMM on the emulated backend or where cuBLAS does not load. CLEBSCH_NO_CUBLAS=1 forces the
// generic kernel everywhere (A/B comparisons).
//
// Precision: fp64 in CUBLAS_DEFAULT_MATH (DMMA tensor cores are exact fp64 FMAs); fp32 in
// CUBLAS_DEFAULT_MATH as well, which never uses TF32 for SGEMM (TF32 needs
// CUBLAS_TF32_TENSOR_OP_MATH), so float results keep the model-spec tolerances. Results differ
// from the generic kernel by summation order only.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "clebsch/cuda/templates/device_args.h"
#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/cuda/device/dtype.h"

namespace clebsch::cuda {

/// One column-major cuBLAS call equivalent to a row-major GemmArgs (see plan_cublas_gemm):
/// C (m x n, ldc) = alpha op(A) op(B) + beta C, with op(A) m x k and op(B) k x n.
struct CublasGemmPlan {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int lda = 0;
  const void* b = nullptr;
  int ldb = 0;
  void* c = nullptr;
  int ldc = 0;
  double alpha = 1, beta = 0;
};

/// The cuBLAS call for @p g, or nullopt when @p g is not a plain dense GEMM (gathers, b_select,
/// batch != 1, k < 1, no unit stride on some operand, leading dimensions cuBLAS rejects, sizes
/// beyond int). Pure; the routing rule tests check it without a GPU.
/// Row-major to column-major: a row-major X with unit column stride is X^T column-major, so
/// C = A B is computed as C^T = B^T A^T (B is cuBLAS's first operand); an operand with unit row
/// stride instead is passed transposed; C with unit row stride swaps the roles of A and B.
std::optional<CublasGemmPlan> plan_cublas_gemm(const GemmArgs& g);

/// A cuBLAS handle bound to the CUDA backend's context. Not thread-safe (as the backend).
class DenseGemm {
 public:
  /// A DenseGemm for @p backend, or nullptr (with the reason in @p why when given) on the
  /// emulated backend, with CLEBSCH_NO_CUBLAS set (non-empty, not "0"), or when cuBLAS does not
  /// load or cublasCreate fails. Needs the backend's context current on this thread (it is after
  /// any backend call that loads a module or allocates). Never throws.
  static std::unique_ptr<DenseGemm> create(DeviceBackend& backend, std::string* why = nullptr);
  ~DenseGemm();
  DenseGemm(const DenseGemm&) = delete;
  DenseGemm& operator=(const DenseGemm&) = delete;

  /// Runs @p p on @p s (asynchronous). @throws CudaError with the cuBLAS status.
  void run(DType t, const CublasGemmPlan& p, Stream s) const;

 private:
  explicit DenseGemm(void* handle) : handle_(handle) {}
  void* handle_;  // cublasHandle_t
};

}  // namespace clebsch::cuda
