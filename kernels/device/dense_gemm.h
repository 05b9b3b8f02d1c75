// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The cuBLAS route of GenericKernels::gemm. The generic GEMM kernel (one output per thread, no
// tiling, no tensor cores) dominated the MACE engine on an H200 (radial MLP over ~800k edges:
// 0.6 s per step against a few ms of convolution; then the e3nn linears on node features, 45 of
// 98 ms), so on the CUDA backend two shapes of GemmArgs go to cuBLAS:
//   - plain dense GEMMs (batch 1, a unit stride on each operand: radial MLPs, l = 0 blocks of
//     linears): one cublas<t>gemm;
//   - per-m batches of e3nn linears (l > 0 blocks, batch = 2l+1 with unit stride in m, one weight
//     matrix for all m: o3.Linear forward x W and backward g W^T): neither stride of a block is
//     1, but for a fixed row (node) i the block is a small matrix with a unit-stride m index, so
//     the whole call is one cublas<t>gemmStridedBatched over the rows, with the m index as
//     cuBLAS's first dimension: C_i (2l+1 x n) = X_i (2l+1 x k) op(W), strides lda and ldc
//     between rows, the weights shared (stride 0). That is one tiny GEMM per row, so
//     GenericKernels::gemm gives the blocks of mul_ir rows (ir_mul_route) to its ir_linear kernel
//     (ir_linear.h) instead; the plan remains for the per-m forms outside that rule.
// Everything else stays on the generic kernel: row gathers (a_rows/c_rows), per-row weight
// selection (b_select: species-dependent linears, also with a batch), batches whose weights
// change along the batch (b_batch != 0), shapes with no unit stride in some operand, k = 0
// (zeroing), and every GEMM on the emulated backend or where cuBLAS does not load.
// CLEBSCH_NO_CUBLAS=1 forces the generic kernel everywhere (A/B comparisons).
//
// Precision: fp64 in CUBLAS_DEFAULT_MATH (DMMA tensor cores are exact fp64 FMAs); fp32 in
// CUBLAS_DEFAULT_MATH as well, which never uses TF32 for SGEMM (TF32 needs
// CUBLAS_TF32_TENSOR_OP_MATH), so float results keep the model-spec tolerances. Results differ
// from the generic kernel by summation order only.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/cuda/device/dtype.h"
#include "clebsch/cuda/templates/device_args.h"

namespace clebsch::cuda {

/// One column-major cuBLAS call equivalent to a row-major GemmArgs (see plan_cublas_gemm): for
/// each batch entry b < batch, C_b (m x n, ldc) = alpha op(A_b) op(B_b) + beta C_b, with
/// op(A_b) m x k and op(B_b) k x n, X_b = x + b * stride_x. batch 1 is a cublas<t>gemm call (the
/// strides unused), batch > 1 a cublas<t>gemmStridedBatched call.
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
  int batch = 1;
  long long stride_a = 0, stride_b = 0, stride_c = 0;  ///< elements between batch entries
};

/// The cuBLAS call for @p g, or nullopt when @p g is neither a plain dense GEMM nor a per-m batch
/// (see the file comment; also k < 1, leading dimensions cuBLAS rejects, sizes or a batch count
/// beyond int, negative row strides). Pure; the routing rule tests check it without a GPU.
/// Row-major to column-major: a row-major X with unit column stride is X^T column-major, so
/// C = A B is computed as C^T = B^T A^T (B is cuBLAS's first operand); an operand with unit row
/// stride instead is passed transposed; C with unit row stride swaps the roles of A and B.
/// batch > 1: the same mapping is applied to the per-row problem (rows of the small matrices =
/// the GemmArgs batch index, row strides a_batch / c_batch), and the GemmArgs rows become
/// cuBLAS's batch (batch = g.m, strides g.lda and g.ldc, 0 for the shared B).
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
