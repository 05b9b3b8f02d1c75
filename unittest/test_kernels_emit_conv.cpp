// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Tests of kernels/emit_conv (no GPU): the output is byte-for-byte deterministic, starts with
// the problem hash and generator version, names each instruction it implements, carries every
// CG coefficient as an exact literal of the right type, and is pinned by a golden file for a
// small problem (set CLEBSCH_UPDATE_GOLDEN=1 to rewrite the golden file after a deliberate
// generator change, and bump kGeneratorVersion).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "clebsch/cuda/generator/conv_shapes.h"
#include "clebsch/cuda/generator/emit_conv.h"
#include "kernels/kernel_test_util.h"

namespace clebsch::cuda {
namespace {

TpProblem small_problem(DType dtype, Accumulation acc) {
  return TpProblem::from_tensor_product(
      conv_tensor_product(Irreps("2x0e+2x1o"), Irreps("0e+1o"), Irreps("2x0e+2x1o")), dtype, acc);
}

std::string emit(const TpProblem& p) {
  return emit_conv_module(p, schedule(p, DeviceLimits::h200()));
}

TEST(EmitConv, IsDeterministic) {
  for (const auto& shape : test::test_shapes()) {
    const TpProblem a =
        TpProblem::from_tensor_product(shape.tp, DType::kFloat64, Accumulation::kDeterministic);
    const TpProblem b =
        TpProblem::from_tensor_product(shape.tp, DType::kFloat64, Accumulation::kDeterministic);
    EXPECT_EQ(emit(a), emit(b)) << shape.name;
  }
}

TEST(EmitConv, FirstLineRecordsHashAndGeneratorVersion) {
  const TpProblem p = small_problem(DType::kFloat32, Accumulation::kAtomic);
  const std::string src = emit(p);
  const std::string first = src.substr(0, src.find('\n'));
  EXPECT_EQ(first, "// clebsch conv module | problem " + p.hash_hex() + " | generator " +
                       std::to_string(kGeneratorVersion));
}

TEST(EmitConv, NamesEveryInstructionAndEveryKernel) {
  const TpProblem p = TpProblem::from_tensor_product(test::test_shapes()[0].tp, DType::kFloat32,
                                                     Accumulation::kAtomic);
  const std::string src = emit(p);
  for (std::size_t n = 0; n < p.paths().size(); ++n)
    EXPECT_NE(src.find("// instruction " + std::to_string(n) + " " + p.paths()[n].description),
              std::string::npos)
        << n;
  const Schedule sch = schedule(p, DeviceLimits::h200());
  for (const PassSchedule& ps : sch.passes)
    for (std::size_t g = 0; g < ps.groups.size(); ++g)
      EXPECT_NE(src.find(kernel_name(ps.pass, int(g)) + "(ConvArgs a)"), std::string::npos);
}

TEST(EmitConv, CoefficientsAreExactLiteralsOfTheType) {
  EXPECT_EQ(emit_literal(1.0, DType::kFloat64), "1.0");
  EXPECT_EQ(emit_literal(1.0, DType::kFloat32), "1.0f");
  EXPECT_EQ(emit_literal(0.1, DType::kFloat32), "0.1f");
  EXPECT_EQ(emit_literal(-0.5, DType::kFloat64), "-0.5");
  EXPECT_EQ(emit_literal(1e-20, DType::kFloat64), "1e-20");
  // Round trip: the literal reads back to exactly static_cast<T>(c) (what the host uses).
  const TpProblem p = small_problem(DType::kFloat64, Accumulation::kAtomic);
  const std::string src = emit(p);
  for (const TpPath& path : p.paths())
    for (const CgEntry& e : path.cg) {
      const std::string l = emit_literal(e.c, DType::kFloat64);
      EXPECT_EQ(std::stod(l), e.c);
      EXPECT_NE(src.find("madd(" + l + ","), std::string::npos) << l;
      const std::string f = emit_literal(e.c, DType::kFloat32);
      EXPECT_EQ(std::stof(f), static_cast<float>(e.c));
    }
}

TEST(EmitConv, MatchesTheGoldenSource) {
  const std::string path =
      std::string(CLEBSCH_KERNELS_GOLDEN_DIR) + "/golden_conv_2x0e+2x1o_f32_atomic.cu";
  const std::string src = emit(small_problem(DType::kFloat32, Accumulation::kAtomic));
  if (const char* update = std::getenv("CLEBSCH_UPDATE_GOLDEN"); update && *update == '1') {
    std::ofstream(path, std::ios::binary) << src;
    GTEST_SKIP() << "golden file rewritten: " << path;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "missing golden file " << path
                  << " (run with CLEBSCH_UPDATE_GOLDEN=1 to create it)";
  std::stringstream golden;
  golden << in.rdbuf();
  EXPECT_TRUE(golden.str() == src)
      << "generated source differs from " << path
      << "; if the change is deliberate, bump kGeneratorVersion and rerun with "
         "CLEBSCH_UPDATE_GOLDEN=1";
}

TEST(EmitConv, AccumulationModeIsACompileTimeConstant) {
  const std::string src = emit(small_problem(DType::kFloat64, Accumulation::kDeterministic));
  EXPECT_NE(src.find("constexpr bool kDeterministic = true;"), std::string::npos);
  const std::string atomic = emit(small_problem(DType::kFloat64, Accumulation::kAtomic));
  EXPECT_NE(atomic.find("constexpr bool kDeterministic = false;"), std::string::npos);
}

// The looped CG form (ScheduleOptions::loop_cg_above): off for small instructions by default,
// forced on or off by the knob, one table pair per instruction and index (i, j, k), no
// coefficient immediates (here without the matrix form, which takes every pass by default).
TEST(EmitConv, LoopedFormFollowsTheThreshold) {
  const TpProblem p = small_problem(DType::kFloat64, Accumulation::kAtomic);
  EXPECT_EQ(emit(p).find("kCgIjk"), std::string::npos);
  ScheduleOptions looped;
  looped.loop_cg_above = 0;
  looped.looped_cg_form = CgForm::kLooped;
  const std::string src = emit_conv_module(p, schedule(p, DeviceLimits::h200(), looped));
  EXPECT_NE(src.find("// looped CG form"), std::string::npos);
  EXPECT_NE(src.find("#pragma unroll 1"), std::string::npos);
  for (std::size_t n = 0; n < p.paths().size(); ++n)
    if (!p.paths()[n].cg.empty()) {
      for (const char* axis : {"i", "j", "k"}) {
        EXPECT_NE(src.find("kCgIjk" + std::to_string(n) + axis + "["), std::string::npos) << n;
        EXPECT_NE(src.find("kCgC" + std::to_string(n) + axis + "["), std::string::npos) << n;
      }
    }
  // The coefficients are table entries, exact literals of the type, not madd immediates.
  for (const TpPath& path : p.paths())
    for (const CgEntry& e : path.cg)
      EXPECT_EQ(src.find("madd(" + emit_literal(e.c, DType::kFloat64) + ","), std::string::npos);
}

// The matrix CG form (ScheduleOptions::looped_cg_form): in a looped module the forward and
// backward passes build M(Y) in a shared-memory scratch the schedule reserves; the double passes
// too unless looped_cg_form_double is kLooped; looped_cg_form kLooped keeps every pass looped.
TEST(EmitConv, MatrixFormInTheForwardAndBackwardOfLoopedModules) {
  const TpProblem p = small_problem(DType::kFloat32, Accumulation::kDeterministic);
  ScheduleOptions looped;
  looped.loop_cg_above = 0;
  looped.looped_cg_form_double = CgForm::kLooped;
  const Schedule s = schedule(p, DeviceLimits::h200(), looped);
  EXPECT_GE(s.pass(Pass::kForward).smem.m_offset, 0);
  EXPECT_GE(s.pass(Pass::kBackward).smem.m_offset, 0);
  EXPECT_EQ(s.pass(Pass::kDoubleForward).smem.m_offset, -1);
  EXPECT_EQ(s.pass(Pass::kDoubleBackward).smem.m_offset, -1);
  EXPECT_EQ(s.pass(Pass::kForward).smem.m_offset % 16, 0);
  const std::string src = emit_conv_module(p, s);
  for (const char* what :
       {"build_matrix<", "matrix_apply<", "matrix_apply_transposed<", "matrix_grad_y<",
        "matrix_scratch<CfgForward>", "matrix_scratch<CfgBackward>"})
    EXPECT_NE(src.find(what), std::string::npos) << what;
  EXPECT_EQ(src.find("matrix_scratch<CfgDouble"), std::string::npos);
  for (std::size_t n = 0; n < p.paths().size(); ++n)
    if (!p.paths()[n].cg.empty())
      for (const char* t : {"kMj", "kMc", "kMTj", "kMTc", "kPptr", "kPpair", "kPc"})
        EXPECT_NE(src.find(t + std::to_string(n) + "["), std::string::npos) << t << n;

  looped.looped_cg_form = CgForm::kLooped;
  const Schedule plain = schedule(p, DeviceLimits::h200(), looped);
  EXPECT_EQ(plain.pass(Pass::kForward).smem.m_offset, -1);
  EXPECT_LT(plain.pass(Pass::kBackward).smem.bytes_per_warp,
            s.pass(Pass::kBackward).smem.bytes_per_warp);
  const std::string off = emit_conv_module(p, plain);
  EXPECT_EQ(off.find("build_matrix"), std::string::npos);
  EXPECT_NE(off.find("kCgIjk"), std::string::npos);

  // looped_cg_form_double kMatrix: the double passes build M(Y) and M(dY) too (twice the matrices
  // of the single passes), and no pass is left to use the looped form's tables.
  looped.looped_cg_form = CgForm::kMatrix;
  looped.looped_cg_form_double = CgForm::kMatrix;
  const Schedule all = schedule(p, DeviceLimits::h200(), looped);
  EXPECT_GE(all.pass(Pass::kDoubleForward).smem.m_offset, 0);
  EXPECT_GE(all.pass(Pass::kDoubleBackward).smem.m_offset, 0);
  EXPECT_GT(all.pass(Pass::kDoubleBackward).smem.bytes_per_warp,
            all.pass(Pass::kBackward).smem.bytes_per_warp);
  const std::string dbl = emit_conv_module(p, all);
  for (const char* what : {"matrix_scratch<CfgDoubleForward>", "matrix_scratch<CfgDoubleBackward>",
                           "(md, kMj", "(md, kMTj"})
    EXPECT_NE(dbl.find(what), std::string::npos) << what;
  EXPECT_EQ(dbl.find("kCgIjk"), std::string::npos);
  // Unlooped modules reserve nothing and emit no matrix code.
  EXPECT_EQ(schedule(p, DeviceLimits::h200()).pass(Pass::kForward).smem.m_offset, -1);
  EXPECT_EQ(emit(p).find("build_matrix"), std::string::npos);
}

// With mma_float64 TensorCoreUse::kAlways a float64 forward in the matrix form runs on the tensor
// cores: fragment-ordered M tables and DMMAs in the forward groups only (mma_double_forward
// TensorCoreUse::kNever); float32 and TensorCoreUse::kNever keep the shared-memory M.
// mma_double_forward TensorCoreUse::kAlways puts the double forward there too: B fragments of M(Y)
// and M(dY), A of w dx + dW x and of w x.
TEST(EmitConv, Float64ForwardMatrixGroupsEmitTensorCoreCode) {
  ScheduleOptions looped;
  looped.loop_cg_above = 0;
  looped.mma_float64 = TensorCoreUse::kAlways;
  looped.mma_double_forward = TensorCoreUse::kNever;
  const TpProblem p = small_problem(DType::kFloat64, Accumulation::kDeterministic);
  const std::string src = emit_conv_module(p, schedule(p, DeviceLimits::h200(), looped));
  const auto forward = src.find("// ==== forward pass"), backward = src.find("// ==== backward");
  ASSERT_NE(forward, std::string::npos);
  ASSERT_NE(backward, std::string::npos);
  const std::string fwd = src.substr(forward, backward - forward);
  EXPECT_NE(fwd.find("mma_f64(acc["), std::string::npos);
  EXPECT_NE(fwd.find("mma_fragments<"), std::string::npos);
  EXPECT_EQ(fwd.find("matrix_apply<"), std::string::npos);
  EXPECT_EQ(src.find("mma_f64(acc[", backward), std::string::npos);
  for (std::size_t n = 0; n < p.paths().size(); ++n)
    if (!p.paths()[n].cg.empty())
      EXPECT_NE(src.find("kMFj" + std::to_string(n) + "["), std::string::npos) << n;
  looped.mma_float64 = TensorCoreUse::kNever;
  EXPECT_EQ(emit_conv_module(p, schedule(p, DeviceLimits::h200(), looped)).find("mma_f64(acc["),
            std::string::npos);
  looped.mma_double_forward = TensorCoreUse::kAlways;
  const std::string dbl = emit_conv_module(p, schedule(p, DeviceLimits::h200(), looped));
  const auto double_forward = dbl.find("// ==== double_forward");
  ASSERT_NE(double_forward, std::string::npos);
  EXPECT_EQ(dbl.find("mma_f64(acc["), dbl.find("mma_f64(acc[", double_forward));
  EXPECT_NE(dbl.find("mma_fragments<", double_forward), std::string::npos);
  EXPECT_NE(dbl.find(", dys + ", double_forward), std::string::npos);
  EXPECT_NE(dbl.find("const real x = madd(o.w", double_forward), std::string::npos);
  EXPECT_EQ(dbl.find("matrix_apply<", double_forward), std::string::npos);
  const TpProblem p32 = small_problem(DType::kFloat32, Accumulation::kDeterministic);
  looped.mma_float64 = TensorCoreUse::kAlways;
  EXPECT_EQ(emit_conv_module(p32, schedule(p32, DeviceLimits::h200(), looped)).find("kMFj"),
            std::string::npos);
}

// With mma_backward and mma_double_backward TensorCoreUse::kAlways every float64 sender group sums
// grad_Y's pair products on the tensor cores: mma_pairs (double backward: mma_pairs_double) and the
// dense P tables in the backward and double backward, no transposed reductions there, and no
// forward fragment tables (kMF) when the forward stays SIMT.
TEST(EmitConv, Float64SenderGroupsSumThePairProductsOnTheTensorCores) {
  ScheduleOptions looped;
  looped.loop_cg_above = 0;
  looped.mma_float64 = TensorCoreUse::kNever;
  looped.mma_backward = TensorCoreUse::kAlways;
  looped.mma_double_backward = TensorCoreUse::kAlways;
  const TpProblem p = small_problem(DType::kFloat64, Accumulation::kDeterministic);
  const std::string src = emit_conv_module(p, schedule(p, DeviceLimits::h200(), looped));
  const auto backward = src.find("// ==== backward");
  ASSERT_NE(backward, std::string::npos);
  EXPECT_EQ(src.find("mma_pairs<"), src.find("mma_pairs<", backward));
  // The double backward sums (w dx + dW x) g once (A formed as it loads), not two sums.
  const auto double_backward = src.find("// ==== double_backward");
  ASSERT_NE(double_backward, std::string::npos);
  EXPECT_NE(src.find("mma_pairs_double<", double_backward), std::string::npos);
  EXPECT_EQ(src.find("if (o.dwr)", double_backward), std::string::npos);
  EXPECT_EQ(src.find("Transposed<", backward), std::string::npos);
  EXPECT_EQ(src.find("kMFj"), std::string::npos);
  for (std::size_t n = 0; n < p.paths().size(); ++n)
    if (!p.paths()[n].cg.empty())
      EXPECT_NE(src.find("kPdense" + std::to_string(n) + "["), std::string::npos) << n;
  looped.mma_backward = TensorCoreUse::kNever;
  looped.mma_double_backward = TensorCoreUse::kNever;
  const std::string off = emit_conv_module(p, schedule(p, DeviceLimits::h200(), looped));
  EXPECT_EQ(off.find("mma_pairs<"), std::string::npos);
  EXPECT_EQ(off.find("kPdense"), std::string::npos);
  EXPECT_NE(off.find("Transposed<", off.find("// ==== backward")), std::string::npos);
  looped.mma_backward = TensorCoreUse::kAlways;
  looped.mma_double_backward = TensorCoreUse::kAlways;
  const TpProblem p32 = small_problem(DType::kFloat32, Accumulation::kDeterministic);
  EXPECT_EQ(emit_conv_module(p32, schedule(p32, DeviceLimits::h200(), looped)).find("mma_pairs<"),
            std::string::npos);
}

// l = 4 stays unrolled by default (it runs 9x faster so; bench/NOTES.md), l = 5 loops (in the
// matrix form of every pass: its M tables, no per-entry loop tables).
TEST(EmitConv, HighLModulesAreLoopedFromL5UnlessDisabled) {
  const TensorProduct l4 = conv_tensor_product(Irreps("4x0e+4x1o+4x2e+4x3o+4x4e"),
                                               Irreps("0e+1o+2e+3o+4e"), Irreps("4x4e"));
  EXPECT_EQ(emit(TpProblem::from_tensor_product(l4, DType::kFloat32, Accumulation::kAtomic))
                .find("kCgIjk"),
            std::string::npos);
  const TensorProduct tp = conv_tensor_product(Irreps("4x0e+4x1o+4x2e+4x3o+4x4e+4x5o"),
                                               Irreps("0e+1o+2e+3o+4e+5o"), Irreps("4x5o"));
  const TpProblem p = TpProblem::from_tensor_product(tp, DType::kFloat32, Accumulation::kAtomic);
  EXPECT_NE(emit(p).find("kMj"), std::string::npos);
  ScheduleOptions unrolled;
  unrolled.loop_cg_above = -1;
  const std::string plain = emit_conv_module(p, schedule(p, DeviceLimits::h200(), unrolled));
  EXPECT_EQ(plain.find("kCgIjk"), std::string::npos);
  EXPECT_EQ(plain.find("kMj"), std::string::npos);
}

}  // namespace
}  // namespace clebsch::cuda
