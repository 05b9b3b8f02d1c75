// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The generic device kernels (templates/generic_kernels.cuh.in, argument structs in
// device_args.h) as one module built once per backend, with typed host entry points. These are
// the layout-agnostic pieces every engine needs between its model-specific kernels: linears
// (e3nn o3.Linear per instruction and m, species-selected maps, MLP layers) through one strided
// GEMM, activations, row gathers/scatters with type conversion, CSR segment sums, row scaling.
//
// GEMM: our own kernel for the general case. It must run in the emulated backend (CI has no GPU),
// take per-row weight selection (species-dependent linears without a batch per species) and
// arbitrary element strides (mul_ir blocks of e3nn linears), and keep libclebsch_cuda free of
// load-time CUDA dependencies. It is one output element per thread, in the network precision
// (float32 never goes through plain TF32, so the model-spec tolerances hold). On both backends,
// gemm() sends float32 plain dense GEMMs of many rows (radial MLPs over the edges, l = 0 blocks
// of linears; beside cuBLAS only the wide ones, where it was measured faster) to the 3xTF32
// tensor-core kernel, float32 accurate (tf32x3_gemm.h: the routing rule, and
// CLEBSCH_NO_TF32X3=1 for the old route), and the per-m GEMMs of e3nn linear blocks on mul_ir
// rows (ir_mul_route) to the tiled ir_linear kernel (ir_linear.h). On the CUDA backend, it
// sends the other plain dense GEMMs (float64, few rows or columns) to cuBLAS, loaded at run time
// (dense_gemm.h: the routing rule, and CLEBSCH_NO_CUBLAS=1 to force the kernels); the engines
// see one GemmArgs interface either way.
#pragma once

#include <memory>

#include "clebsch/cuda/device/dense_gemm.h"
#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/cuda/device/dtype.h"
#include "clebsch/cuda/templates/device_args.h"

namespace clebsch::cuda {

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kFloat32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kFloat64;
}

/// Launch shape of a grid-stride loop over @p n items (capped grid, @p threads per block).
LaunchDims grid_for(long long n, unsigned threads = 256);

/// The source of the generic module: device_args.h, generic_kernels.cuh.in and the tiled kernels
/// (MLP chains, ir_linear, the 3xTF32 GEMM).
std::string generic_kernels_source();
/// device_args.h and generic_kernels.cuh.in alone: what a model's own module pastes for the
/// device helpers (activations, grid-stride loops, the argument structs). The tiled kernels stay
/// out: every model module would otherwise compile them again (NVRTC time at each new model).
std::string generic_helpers_source();
/// The KernelSpecs of every generic kernel.
std::vector<KernelSpec> generic_kernel_specs();

/// Host entry points of the generic kernels. Every call is asynchronous on @p stream.
class GenericKernels {
 public:
  /// Which implementation gemm() may use for the GEMMs cuBLAS can take (plan_cublas_gemm).
  enum class GemmRoute {
    kAuto,     ///< 3xTF32 where tf32x3_route says (unless CLEBSCH_NO_TF32X3), then cuBLAS
               ///< where DenseGemm::create gives one (CUDA backend, library loads)
    kGeneric,  ///< always the generic kernel (tests comparing the two routes)
  };
  /// Builds (compiles or reads the cache) and loads the generic module on @p backend, and with
  /// kAuto opens cuBLAS for it (see dense_gemm.h).
  explicit GenericKernels(DeviceBackend& backend, GemmRoute route = GemmRoute::kAuto);

  /// gemm_tf32x3 when uses_tf32x3() and tf32x3_route(t, a) (beside cuBLAS from
  /// kTf32x3MinColumnsBesideCublas columns on); else the ir_linear kernel for the
  /// ir_mul_route form (with d = 1, an l = 0 block, only where there is no cuBLAS: it is then a
  /// plain dense GEMM, which cuBLAS runs faster); else cuBLAS when plan_cublas_gemm(a) gives a
  /// plan and this object has a cuBLAS handle, else the generic kernel.
  void gemm(DType t, const GemmArgs& a, Stream s) const;
  /// Whether @p a is the per-m form of an e3nn linear block on mul_ir rows, which the ir_linear
  /// kernel takes: GemmArgs batch over the d <= kIrLinearMaxDim components (a_batch = c_batch =
  /// 1, a_col = c_col = d), one B for every component and row (b_batch = 0, no b_select), no
  /// row gathers, m, n, k > 0.
  static bool ir_mul_route(const GemmArgs& a);
  /// @p a (ir_mul_route form) on the ir_linear kernel, whatever gemm() would choose; @p tile
  /// >= 0 forces that tile of ir_linear_tiles (plan_ir_linear). Public for the tests.
  void gemm_ir_linear(DType t, const GemmArgs& a, Stream s, int tile = -1) const;
  /// The 3xTF32 tensor-core kernel (tf32x3_gemm.h) on @p a, whatever its size: float32 only, a
  /// form plan_tf32x3_gemm takes (@throws Error otherwise). gemm() calls it where tf32x3_route
  /// says; public so that the tests run it on small problems.
  void gemm_tf32x3(const GemmArgs& a, Stream s) const;
  /// true when gemm() sends the GEMMs tf32x3_route takes to gemm_tf32x3: GemmRoute::kAuto,
  /// CLEBSCH_NO_TF32X3 unset when this object was made, and the emulated backend or a GPU of
  /// sm_80 or later.
  bool uses_tf32x3() const { return tf32x3_; }
  /// true when the GEMMs cuBLAS can take go to it; gemm_route() says why or why not.
  bool uses_cublas() const { return dense_ != nullptr; }
  const std::string& gemm_route() const { return gemm_route_; }
  void fill(DType t, void* x, long long n, double value, Stream s) const;
  void axpby(DType tx, DType ty, const AxpbyArgs& a, Stream s) const;
  void act_forward(DType t, const ActArgs& a, Stream s) const;
  void act_backward(DType t, const ActArgs& a, Stream s) const;
  void segment_sum(DType tx, DType tout, const SegmentSumArgs& a, Stream s) const;
  void scale_rows(DType t, const ScaleRowsArgs& a, Stream s) const;
  void row_dot(DType t, const RowDotArgs& a, Stream s) const;
  /// e3nn's Gate (GateArgs; DeviceGate builds the tables).
  void gate_forward(DType t, const GateArgs& a, Stream s) const;
  void gate_backward(DType t, const GateArgs& a, Stream s) const;
  /// A chain of dense layers on tiles of rows in shared memory (MlpChainArgs, DeviceMlp's
  /// fused route): y = chain(x), and gx = (d chain / dx)^T gy with the forward made again.
  void mlp_forward(DType t, const MlpChainArgs& a, Stream s) const;
  void mlp_backward(DType t, const MlpChainArgs& a, Stream s) const;
  /// The dynamic shared memory those kernels take for @p a (backward: every pre-activation).
  static unsigned mlp_shared_bytes(DType t, const MlpChainArgs& a, bool backward);
  /// Whether a chain may run on the tensor cores (templates/mlp_chain_mma.cuh.in: 1 to 4 layers
  /// of 64 outputs on up to 64 inputs, its weights packed in fragment order too
  /// (mlp_mma_fragments.h), on sm_80 or later or the emulated backend): its backward in both
  /// precisions, its forward in float64 (a float32 forward stays on the SIMT kernel unless
  /// CLEBSCH_MLP_F32_FORWARD=mma); CLEBSCH_MLP_SIMT=1 keeps every chain on the SIMT kernels
  /// (A/B runs).
  static bool mlp_mma_route(const MlpChainArgs& a, const BackendLimits& limits, bool emulated);
  /// Whether a fused chain is worth building for @p a (DeviceMlp): where mlp_mma_route holds,
  /// or where CLEBSCH_MLP_SIMT=1 asks for the SIMT chain.
  static bool mlp_chain_pays(const MlpChainArgs& a, const BackendLimits& limits, bool emulated);
  /// torch LayerNorm on rows (LayerNormArgs; DeviceMlp's layers with one).
  void layer_norm_forward(DType t, const LayerNormArgs& a, Stream s) const;
  void layer_norm_backward(DType t, const LayerNormArgs& a, Stream s) const;
  /// out[0] = sum of x[0:n] in index order (float64; deterministic): an engine's total energy.
  void total(const double* x, long long n, double* out, Stream s) const;

  /// Convenience: a plain row-major GEMM C[m][n] = alpha A[m][k] B[k][n] + beta C (lda = k...).
  static GemmArgs dense(const void* A, const void* B, void* C, long long m, long long n,
                        long long k, double alpha = 1.0, double beta = 0.0);
  /// Convenience: y[0:n] = alpha x + beta y (one row).
  static AxpbyArgs vector(const void* x, void* y, long long n, double alpha, double beta);

  DeviceBackend& backend() const { return backend_; }

 private:
  const DeviceKernel& k(const std::string& base, DType t) const;
  const DeviceKernel& k2(const std::string& base, DType tx, DType ty) const;
  void launch_mlp(DType t, const MlpChainArgs& a, bool backward, Stream s) const;
  DeviceBackend& backend_;
  std::unique_ptr<DeviceModule> module_;
  std::unique_ptr<DenseGemm> dense_;  // null: every GEMM on the generic kernel
  bool tf32x3_ = false;               // gemm() takes the 3xTF32 route (uses_tf32x3)
  std::string gemm_route_;
  // total()'s one-segment bounds {0, n}, kept on the device while n does not change.
  mutable DeviceArray<int> total_bounds_{backend_};
  mutable long long total_n_ = -1;
};

}  // namespace clebsch::cuda
