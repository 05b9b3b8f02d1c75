// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The ir_linear kernel (templates/ir_linear.cuh.in): the per-m GEMMs of an e3nn o3.Linear block
// (l > 0, also l = 0) applied straight to rows in e3nn's mul_ir layout, one tiled launch per
// block: for each row i and component m < d = 2l+1, C_i[v][m] = alpha sum_u A_i[u][m] B[u][v] +
// beta C_i[v][m] (GemmArgs in the form of GenericKernels::ir_mul_route). It replaces a route that
// permuted the rows' blocks into a batch-major copy for one cuBLAS strided-batched GEMM per
// component and permuted back (three passes over the data, a workspace of 7 KB per atom): A is
// read once, C written once (and read when beta != 0), B read from shared memory.
//
// Cost, a 128 -> 128 block, per (row, component): 2 x 128 x 128 flops against 2 x 128 values,
// 32 flops per byte in float32 and 16 in float64. At an H200's ~4.8 TB/s that is 150 (resp. 77)
// TFLOP/s to keep up with memory: above the SIMT rates (~50 float32, ~25-30 float64) and the
// float64 tensor cores' (~55-67), so this kernel is bound by its multiply-adds, and the tiles
// are chosen for arithmetic efficiency (large register tiles, vector loads from shared memory,
// no bank conflicts in the inner loop; float64's largest tile on the DMMA units) rather than
// for bytes. Its timing record's floor gives both (bytes and flops). Float32 stays off the
// tensor cores: TF32 would break the model-spec tolerances (generic_kernels.h).
//
// This file is the schedule stage of the kernel (style.md): the tile table, the choice of a tile
// for a problem (plan_ir_linear, pure), the source text with one instantiation per tile, and the
// launch. GenericKernels (generic_kernels.h) builds the kernels into its module and routes to
// them.
#pragma once

#include <string>
#include <vector>

#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/cuda/device/dtype.h"
#include "clebsch/cuda/templates/device_args.h"

namespace clebsch::cuda {

/// The largest component count d a block may have (the smallest tile holds one whole row of d
/// components: kIrLinearMaxDim <= its BM). d = 2l+1, so l <= 15.
inline constexpr long long kIrLinearMaxDim = 32;

/// One tile shape of the ir_linear kernel. bm (row, component) pairs by bn outputs per block, K in
/// chunks of bk; SIMT: a tm x tn register tile per thread (both whole 16-byte vectors of the
/// element type: tm, tn multiples of 4 in float32, 2 in float64); mma (float64 only, sm_80 and
/// later): a tm x tn tile of m8n8k4 DMMAs per warp.
struct IrLinearTile {
  int bm = 0, bn = 0, bk = 0, tm = 0, tn = 0;
  /// Blocks per multiprocessor the compiler must leave room for (__launch_bounds__).
  int min_blocks = 1;
  bool mma = false;
  /// Elements of 16 bytes (4 in float32, 2 in float64).
  static int vector(DType t) { return t == DType::kFloat64 ? 2 : 4; }
  int threads() const { return (bm / tm) * (bn / tn) * (mma ? 32 : 1); }
  /// Row pitches of the shared A and B chunks (elements). SIMT: one vector of padding, so that
  /// the transposing stores of a warp spread over the banks and every row stays 16-byte
  /// aligned; mma: 4 mod 16 doubles, so that a fragment's loads hit distinct banks.
  int pitch_a(DType t) const { return bm + (mma ? 4 : vector(t)); }
  int pitch_b(DType t) const { return bn + (mma ? 4 : vector(t)); }
  /// Outputs per epilogue slab: one vector run of each thread's outputs (SIMT), one column of
  /// warps (mma).
  int slab(DType t) const { return mma ? tn : bn / (tn / vector(t)); }
  /// Dynamic shared memory: two buffers of the A and B chunks, reused by the epilogue's slab.
  unsigned shared_bytes(DType t) const;
};

/// The tile shapes of @p t, largest first (the kernels of ir_linear_source, in this order).
const std::vector<IrLinearTile>& ir_linear_tiles(DType t);

/// A launch of the ir_linear kernel: which tile (an index into ir_linear_tiles) and its geometry.
struct IrLinearPlan {
  int tile = 0;
  LaunchDims dims;
};

/// The launch for @p g (GenericKernels::ir_mul_route form, m > 0) on a device with @p limits.
/// The first tile (largest first) that gives every multiprocessor a block, whose columns are at
/// least half used, that holds a whole row (bm >= d) and that the device runs (mma: sm_80 and
/// later); else the smallest SIMT tile that holds a row. @p force_tile >= 0 takes that tile
/// instead (tests). Pure.
/// @throws Error when no tile holds a row (d > kIrLinearMaxDim), @p force_tile is out of range
/// or its tile does not hold a row or does not run on the device, or the grid would exceed
/// 2^31 - 1 blocks.
IrLinearPlan plan_ir_linear(DType t, const GemmArgs& g, const BackendLimits& limits,
                            int force_tile = -1);

/// The kernel name of @p tile for @p t ("clebsch_ir_linear_f32_128x128").
const std::string& ir_linear_kernel_name(DType t, int tile);

/// The device source (templates/ir_linear.cuh.in and one instantiation per tile and type), to be
/// pasted after device_args.h: GenericKernels appends it to the generic module.
std::string ir_linear_source();
/// The KernelSpecs of every ir_linear kernel (warp-synchronous: barriers and shared memory).
std::vector<KernelSpec> ir_linear_kernel_specs();

/// Launches @p g (GenericKernels::ir_mul_route form) on @p s with the kernels of @p module (one
/// built from ir_linear_source). m = 0 launches nothing. @p force_tile: see plan_ir_linear.
void launch_ir_linear(DeviceBackend& backend, const DeviceModule& module, DType t,
                      const GemmArgs& g, Stream s, int force_tile = -1);

}  // namespace clebsch::cuda
