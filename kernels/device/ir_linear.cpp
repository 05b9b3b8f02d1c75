// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The ir_linear kernel's tiles, plan, source and launch (see ir_linear.h).
#include "clebsch/cuda/device/ir_linear.h"

#include <algorithm>
#include <array>
#include <climits>

#include "clebsch/support/error.h"
#include "kernel_templates.h"

namespace clebsch::cuda {
namespace {

// SIMT register tiles of 8 x 8 (float32) and 4 x 8 (float64) outputs per thread: 64 (resp. 32)
// multiply-adds per 4 (resp. 6) vectors read from shared memory, within the 128 registers per
// thread that leave two blocks of 256 threads per multiprocessor (ptxas for sm_90, NVRTC 13.0:
// 128 and 126 registers, no spills; 161 for float32's without the __launch_bounds__ minimum).
// Float64's first tile runs the same blocks on the tensor cores: warps of 4 x 4 m8n8k4 DMMAs
// (128 registers), planned on sm_80 and later, where DMMA doubles the float64 rate. The
// smaller tiles trade efficiency for blocks, for problems too small to give every
// multiprocessor a large tile. K chunks of 16 (float32, DMMA) and 8 (float64 SIMT) inputs keep
// both buffers of both chunks and the register-staged next chunk small: 34, 51 and 25 KB of
// shared memory for the largest tiles (the DMMA tile's spec opts in past 48 KB).
const std::vector<IrLinearTile> kTilesF32 = {
    {128, 128, 16, 8, 8, 2}, {64, 64, 16, 4, 8, 1}, {32, 32, 16, 4, 4, 1}};
const std::vector<IrLinearTile> kTilesF64 = {{64, 128, 16, 32, 32, 2, true},
                                             {64, 128, 8, 4, 8, 2},
                                             {64, 64, 8, 4, 8, 1},
                                             {32, 32, 8, 4, 4, 1}};

const char* suffix(DType t) { return t == DType::kFloat32 ? "f32" : "f64"; }
const char* type_name(DType t) { return t == DType::kFloat32 ? "float" : "double"; }

std::string tile_name(DType t, const IrLinearTile& x) {
  return std::string(suffix(t)) + (x.mma ? "_mma_" : "_") + std::to_string(x.bm) + "x" +
         std::to_string(x.bn);
}

std::vector<std::string> kernel_names(DType t) {
  std::vector<std::string> names;
  for (const IrLinearTile& x : ir_linear_tiles(t))
    names.push_back("clebsch_ir_linear_" + tile_name(t, x));
  return names;
}

}  // namespace

unsigned IrLinearTile::shared_bytes(DType t) const {
  const int chunks = 2 * bk * (pitch_a(t) + pitch_b(t));
  return static_cast<unsigned>(std::max(chunks, bm * slab(t)) * size_of(t));
}

const std::vector<IrLinearTile>& ir_linear_tiles(DType t) {
  return t == DType::kFloat32 ? kTilesF32 : kTilesF64;
}

const std::string& ir_linear_kernel_name(DType t, int tile) {
  static const std::array<std::vector<std::string>, 2> names = {kernel_names(DType::kFloat32),
                                                                kernel_names(DType::kFloat64)};
  return names[t == DType::kFloat32 ? 0 : 1].at(static_cast<std::size_t>(tile));
}

IrLinearPlan plan_ir_linear(DType t, const GemmArgs& g, const BackendLimits& limits,
                            int force_tile) {
  const std::vector<IrLinearTile>& tiles = ir_linear_tiles(t);
  const long long d = g.batch;
  auto blocks = [&](const IrLinearTile& x) {
    return (g.m + x.bm / d - 1) / (x.bm / d) * ((g.n + x.bn - 1) / x.bn);
  };
  const bool dmma = limits.sm_major >= 8;
  int pick = -1;
  if (force_tile >= 0) {
    if (force_tile >= static_cast<int>(tiles.size()))
      throw Error("ir_linear: tile " + std::to_string(force_tile) + " requested, " +
                  std::to_string(tiles.size()) + " exist");
    const IrLinearTile& x = tiles[force_tile];
    if (x.bm < d)
      throw Error("ir_linear: tile " + std::to_string(force_tile) + " (" + std::to_string(x.bm) +
                  " rows x components) cannot hold a row of " + std::to_string(d) + " components");
    if (x.mma && !dmma)
      throw Error("ir_linear: tile " + std::to_string(force_tile) + " needs DMMA (sm_80), sm_" +
                  std::to_string(limits.sm_major) + std::to_string(limits.sm_minor) + " has none");
    pick = force_tile;
  } else {
    for (int i = 0; i < static_cast<int>(tiles.size()); ++i) {
      const IrLinearTile& x = tiles[i];
      if (x.bm < d || (x.mma && !dmma)) continue;
      if (2 * g.n > x.bn && blocks(x) >= limits.num_sms) {
        pick = i;
        break;
      }
      if (!x.mma) pick = i;  // the smallest SIMT tile that holds a row, if none qualifies
    }
    if (pick < 0)
      throw Error("ir_linear: blocks of " + std::to_string(d) + " components exceed the " +
                  std::to_string(kIrLinearMaxDim) + " the tiles hold");
  }
  const IrLinearTile& x = tiles[pick];
  const long long n = blocks(x);
  if (n > INT_MAX)
    throw Error("ir_linear: " + std::to_string(g.m) + " rows need " + std::to_string(n) +
                " blocks, beyond a grid's 2^31 - 1");
  IrLinearPlan p;
  p.tile = pick;
  p.dims.grid_x = static_cast<unsigned>(n);
  p.dims.threads = static_cast<unsigned>(x.threads());
  p.dims.shared_bytes = x.shared_bytes(t);
  return p;
}

std::string ir_linear_source() {
  std::string s = templates::k_ir_linear;
  for (DType t : {DType::kFloat32, DType::kFloat64})
    for (const IrLinearTile& x : ir_linear_tiles(t))
      s += std::string(x.mma ? "CLEBSCH_IR_LINEAR_MMA(" : "CLEBSCH_IR_LINEAR(") +
           (x.mma ? std::string() : std::string(type_name(t)) + ", ") + tile_name(t, x) + ", " +
           std::to_string(x.bm) + ", " + std::to_string(x.bn) + ", " + std::to_string(x.bk) + ", " +
           std::to_string(x.tm) + ", " + std::to_string(x.tn) + ", " +
           std::to_string(x.pitch_a(t)) + ", " + std::to_string(x.pitch_b(t)) + ", " +
           std::to_string(x.slab(t)) + ", " + std::to_string(x.threads()) + ", " +
           std::to_string(x.min_blocks) + ")\n";
  return s;
}

std::vector<KernelSpec> ir_linear_kernel_specs() {
  std::vector<KernelSpec> specs;
  for (DType t : {DType::kFloat32, DType::kFloat64})
    for (int i = 0; i < static_cast<int>(ir_linear_tiles(t).size()); ++i) {
      const unsigned bytes = ir_linear_tiles(t)[i].shared_bytes(t);
      specs.push_back(
          {ir_linear_kernel_name(t, i), "GemmArgs", true, bytes > 48 * 1024 ? bytes : 0u});
    }
  return specs;
}

void launch_ir_linear(DeviceBackend& backend, const DeviceModule& module, DType t,
                      const GemmArgs& g, Stream s, int force_tile) {
  if (g.m <= 0) return;
  const IrLinearPlan p = plan_ir_linear(t, g, backend.limits(), force_tile);
  backend.launch(module.kernel(ir_linear_kernel_name(t, p.tile)), p.dims, s, g);
}

}  // namespace clebsch::cuda
