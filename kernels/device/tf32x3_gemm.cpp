// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Host side of the 3xTF32 GEMM (see tf32x3_gemm.h): tile configurations, source, routing rule.
#include "clebsch/cuda/device/tf32x3_gemm.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "kernel_templates.h"

namespace clebsch::cuda {

int Tf32x3Kernel::threads() const { return 32 * (bm / 64) * (bn / 32); }

unsigned Tf32x3Kernel::shared_bytes() const {
  // Per stage: the A slice [bm][bk + 4], the B slice [bn][bk + 4] (transposed) or [bk][bn + 8].
  const int a = bm * (bk + 4), b = b_transposed ? bn * (bk + 4) : bk * (bn + 8);
  return static_cast<unsigned>(stages * (a + b) * 4);
}

const std::vector<Tf32x3Kernel>& tf32x3_kernels() {
  // Wide (n > 64): 128 x 128 tiles, 8 warps, 3 stages (the radial MLP's last layer, n = 1280,
  // k = 64: two K slices, so depth matters little; blocks of one row tile share A through L2).
  // Narrow (n <= 64): 128 x 64 tiles, 4 warps (its backward, n = 64, k = 1280: a long K loop
  // reading A once). These need 105-108 KB of shared memory, two blocks an SM on an H100 or H200
  // (228 KB), except the narrow transposed one: K slices of 16 in 3 stages, 46 KB, four blocks
  // an SM, which took the 794,988 x 64 x 1280 backward from 3.05 to 2.77 ms on an H100 (run 30;
  // 2 stages of 32: 2.81). The launch bounds cap registers at 128 (121 for it, no spills).
  // Measured and dropped (run 30): 64 x 128 wide tiles in 2 stages (four blocks an SM), 3.26 ms
  // against 2.86 for the 1280-column forward; C through shared memory in 16-byte row chunks,
  // 3.03 (an H100 writes 8-byte pairs of 8 rows as fast as whole rows: 3.30 TB/s either way,
  // bench/probes/mma_peak.cu). The mma.sync TF32 ceiling there is ~320 TFLOP/s, 107 in 3xTF32:
  // these kernels run at 42-47 % of it.
  static const std::vector<Tf32x3Kernel> k = {
      {"clebsch_gemm_tf32x3_128x128_nn", 128, 128, 32, 3, false},
      {"clebsch_gemm_tf32x3_128x128_nt", 128, 128, 32, 3, true},
      {"clebsch_gemm_tf32x3_128x64_nn", 128, 64, 32, 4, false},
      {"clebsch_gemm_tf32x3_128x64_nt", 128, 64, 16, 3, true},
  };
  return k;
}

std::string tf32x3_kernels_source() {
  std::ostringstream s;
  s << templates::k_dense_tf32x3;
  for (const Tf32x3Kernel& k : tf32x3_kernels())
    s << "CLEBSCH_TF32X3_KERNEL(" << k.name << ", " << k.bm << ", " << k.bn << ", " << k.bk << ", "
      << k.stages << ", " << (k.b_transposed ? "true" : "false") << ", " << k.threads() << ", "
      << k.shared_bytes() << ")\n";
  return s.str();
}

std::vector<KernelSpec> tf32x3_kernel_specs() {
  std::vector<KernelSpec> specs;
  for (const Tf32x3Kernel& k : tf32x3_kernels())
    specs.push_back({k.name, "GemmArgs", true, k.shared_bytes()});
  return specs;
}

std::optional<Tf32x3Plan> plan_tf32x3_gemm(DType t, const GemmArgs& g) {
  if (t != DType::kFloat32 || g.batch != 1 || g.a_rows || g.c_rows || g.b_select)
    return std::nullopt;
  if (g.m < 1 || g.n < 1 || g.k < 1 || !g.a || !g.b || !g.c) return std::nullopt;
  // A and C row-major; a stride along a dimension of size 1 is never used.
  if ((g.a_col != 1 && g.k > 1) || (g.c_col != 1 && g.n > 1)) return std::nullopt;
  // B row-major (unit column stride) or transposed (unit row stride).
  const bool b_rows = g.b_col == 1 || g.n == 1, b_transposed = !b_rows && (g.ldb == 1 || g.k == 1);
  if (!b_rows && !b_transposed) return std::nullopt;
  // Rows that overlap (a leading dimension below the width) or run backwards are left to the
  // generic kernel; C's would be written by two blocks.
  if (g.m > 1 && (g.lda < g.k || g.ldc < g.n)) return std::nullopt;
  if (b_rows && g.k > 1 && g.ldb < g.n) return std::nullopt;
  if (b_transposed && g.n > 1 && g.b_col < g.k) return std::nullopt;

  const bool wide = g.n > 64;
  const Tf32x3Kernel* kernel = nullptr;
  for (const Tf32x3Kernel& k : tf32x3_kernels())
    if ((k.bn > 64) == wide && k.b_transposed == b_transposed) kernel = &k;
  const long long tiles =
      ((g.m + kernel->bm - 1) / kernel->bm) * ((g.n + kernel->bn - 1) / kernel->bn);
  if (tiles > INT_MAX) return std::nullopt;  // one grid dimension
  Tf32x3Plan p;
  p.kernel = kernel;
  p.dims.grid_x = static_cast<unsigned>(tiles);
  p.dims.threads = static_cast<unsigned>(kernel->threads());
  p.dims.shared_bytes = kernel->shared_bytes();
  return p;
}

bool tf32x3_route(DType t, const GemmArgs& g) {
  return g.m >= kTf32x3MinRows && plan_tf32x3_gemm(t, g).has_value();
}

bool tf32x3_beside_cublas(const GemmArgs& g) {
  if (g.n >= kTf32x3MinColumnsBesideCublas) return true;
  // B's layout as the plan reads it (one rule for both).
  const std::optional<Tf32x3Plan> p = plan_tf32x3_gemm(DType::kFloat32, g);
  return p && p->kernel->b_transposed && g.k >= kTf32x3MinDepthBesideCublas;
}

bool tf32x3_disabled_by_env() {
  const char* e = std::getenv("CLEBSCH_NO_TF32X3");
  return e && *e && std::strcmp(e, "0") != 0;
}

}  // namespace clebsch::cuda
