// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The generic device kernels (templates/generic_kernels.cuh.in, argument structs in
// device_args.h) as one module built once per backend, with typed host entry points. These are
// the layout-agnostic pieces every engine needs between its model-specific kernels: linears
// (e3nn o3.Linear per instruction and m, species-selected maps, MLP layers) through one strided
// GEMM, activations, row gathers/scatters with type conversion, CSR segment sums, row scaling.
//
// GEMM choice: our own kernel, not cuBLAS. It must run in the emulated backend (CI has no GPU),
// take per-row weight selection (species-dependent linears without a batch per species) and
// arbitrary element strides (mul_ir blocks of e3nn linears), and keep libclebsch_cuda free of
// load-time CUDA dependencies. It is one output element per thread, in the network precision
// (float32 never goes through TF32, so the model-spec tolerances hold); a tiled or tensor-core
// variant can replace it behind the same GemmArgs without touching the engines.
#pragma once

#include <memory>

#include "device_args.h"
#include "device_backend.h"
#include "tp_problem.h"

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

/// The source of the generic module (device_args.h + generic_kernels.cuh.in), for engines that
/// append their own kernels to it and for tests.
std::string generic_kernels_source();
/// The KernelSpecs of every generic kernel.
std::vector<KernelSpec> generic_kernel_specs();

/// Host entry points of the generic kernels. Every call is asynchronous on @p stream.
class GenericKernels {
 public:
  /// Builds (compiles or reads the cache) and loads the generic module on @p backend.
  explicit GenericKernels(DeviceBackend& backend);

  void gemm(DType t, const GemmArgs& a, Stream s) const;
  void fill(DType t, void* x, long long n, double value, Stream s) const;
  void axpby(DType tx, DType ty, const AxpbyArgs& a, Stream s) const;
  void act_forward(DType t, const ActArgs& a, Stream s) const;
  void act_backward(DType t, const ActArgs& a, Stream s) const;
  void segment_sum(DType tx, DType tout, const SegmentSumArgs& a, Stream s) const;
  void scale_rows(DType t, const ScaleRowsArgs& a, Stream s) const;
  void row_dot(DType t, const RowDotArgs& a, Stream s) const;

  /// Convenience: a plain row-major GEMM C[m][n] = alpha A[m][k] B[k][n] + beta C (lda = k...).
  static GemmArgs dense(const void* A, const void* B, void* C, long long m, long long n,
                        long long k, double alpha = 1.0, double beta = 0.0);
  /// Convenience: y[0:n] = alpha x + beta y (one row).
  static AxpbyArgs vector(const void* x, void* y, long long n, double alpha, double beta);

  DeviceBackend& backend() const { return backend_; }

 private:
  const DeviceKernel& k(const std::string& base, DType t) const;
  const DeviceKernel& k2(const std::string& base, DType tx, DType ty) const;
  DeviceBackend& backend_;
  std::unique_ptr<DeviceModule> module_;
};

}  // namespace clebsch::cuda
