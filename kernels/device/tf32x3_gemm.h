// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The 3xTF32 route of GenericKernels::gemm: float32 dense GEMMs on the tensor cores at float32
// accuracy (templates/dense_tf32x3.cuh.in: every operand split into two TF32 values, three MMAs
// per product, float32 accumulation; never plain TF32). The radial MLPs' GEMMs over all edges
// (794,988 x 1280 x 64 and its backward 794,988 x 64 x 1280 for MACE on 10k atoms) were the
// largest kernels of a step on cuBLAS SGEMM, which runs on the SIMT units. This file holds the
// host side: the kernels' tile configurations (every tuning decision), their source and
// KernelSpecs for the generic module, and the routing rule, a pure function of the GemmArgs.
//
// Forms taken: float32, batch 1, no row gathers or weight selection, A and C with unit column
// stride (any lda, ldc), B with unit column stride (b_col = 1, any ldb) or unit row stride
// (ldb = 1, any b_col: a weight read transposed, the MLP backward g W^T), rows that do not
// overlap. gemm() sends such a GEMM here when it has at least kTf32x3MinRows rows, on both
// backends (GPUs of sm_80 or later), unless CLEBSCH_NO_TF32X3 is set (non-empty, not "0") or the
// GenericKernels was made with GemmRoute::kGeneric; everything else keeps its route (cuBLAS or
// the generic kernel).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/cuda/device/dtype.h"
#include "clebsch/cuda/templates/device_args.h"

namespace clebsch::cuda {

/// One 3xTF32 kernel: a BM x BN block tile of C over K slices of BK, a STAGES-deep cp.async
/// pipeline, B row-major or transposed (dense_tf32x3.cuh.in's template parameters).
struct Tf32x3Kernel {
  const char* name;
  int bm, bn, bk, stages;
  bool b_transposed;
  /// 64 x 32 warp tiles: 32 (bm / 64) (bn / 32) threads.
  int threads() const;
  /// The pipeline's dynamic shared memory (the layout of dense_tf32x3.cuh.in's Tf32x3Layout).
  unsigned shared_bytes() const;
};

/// The kernels compiled into the generic module.
const std::vector<Tf32x3Kernel>& tf32x3_kernels();
/// Their source (the template and one instantiation each), appended to the generic module.
std::string tf32x3_kernels_source();
/// Their KernelSpecs (warp-synchronous: barriers and warp-wide MMAs; shared memory above 48 KB).
std::vector<KernelSpec> tf32x3_kernel_specs();

/// A 3xTF32 launch: which kernel and its grid (one block per tile, column tiles fastest).
struct Tf32x3Plan {
  const Tf32x3Kernel* kernel = nullptr;
  LaunchDims dims;
};

/// The launch for @p g when its form is one the kernels take (see the file comment), whatever
/// its size; nullopt otherwise (and for m, n or k below 1). Pure.
std::optional<Tf32x3Plan> plan_tf32x3_gemm(DType t, const GemmArgs& g);

/// GEMMs with fewer rows (less than one row tile) stay on their previous route: on a GPU they
/// are launch-bound either way, and on the emulated backend a launch of the tensor-core kernel
/// costs a few milliseconds whatever its size (its blocks run as fibers; the generic kernel
/// takes well under one for such sizes). From one tile on the emulation costs 1.2 to 2 times the
/// generic kernel's time (measured: 246 x 64 x 64 14 ms against 8, 1000 x 64 x 64 60 against
/// 38, 5000 x 1280 x 64 2.2 s against 1.7), and the engine tests' fixture systems (MACE and
/// NequIP cells of 180 to 400 edges) run their radial MLPs through it.
inline constexpr long long kTf32x3MinRows = 128;

/// Beside cuBLAS (the CUDA backend where it loads), gemm() sends a GEMM here only from this many
/// columns on, or with B read transposed from this depth on (tf32x3_beside_cublas). On an H100
/// (794,988 rows), the radial MLPs' last layers took 2.83 and 1.14 ms here against SGEMM's 4.29
/// and 1.73 (1280 and 512 columns on 64 inputs, run 28). Their backward g W^T (64 columns on
/// 1280 and 512 inputs, W read transposed) took 3.05 and 1.25 ms on the 4-stage 128 x 64 tile
/// against SGEMM's 2.98 and 1.27, and 2.77 and 1.13 against 2.94 and 1.25 on the current one
/// (run 30: thinner K slices, four blocks an SM). Narrower and shallower forms were not measured
/// against cuBLAS.
inline constexpr long long kTf32x3MinColumnsBesideCublas = 256;
inline constexpr long long kTf32x3MinDepthBesideCublas = 256;

/// Beside cuBLAS, the forms measured faster here: n >= kTf32x3MinColumnsBesideCublas, or B read
/// transposed (unit row stride) with k >= kTf32x3MinDepthBesideCublas. Pure.
bool tf32x3_beside_cublas(const GemmArgs& g);

/// The routing rule of GenericKernels::gemm: plan_tf32x3_gemm(t, g) exists and g.m is at least
/// kTf32x3MinRows. Pure (the environment is read by tf32x3_disabled_by_env).
bool tf32x3_route(DType t, const GemmArgs& g);

/// CLEBSCH_NO_TF32X3 is set, non-empty and not "0": GenericKernels made now take the old route
/// (cuBLAS or the generic kernel) for every GEMM.
bool tf32x3_disabled_by_env();

}  // namespace clebsch::cuda
