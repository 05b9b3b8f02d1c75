// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Tests of kernels/tp_problem: extraction from TensorProduct (blocks, paths, weight layout and
// the folded CG non-zeros are exactly the descriptor's), rejection of what the kernels do not
// support (CapacityError naming the value), validation of hand-built problems, equality and
// the stable hash.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "clebsch/cuda/generator/conv_shapes.h"
#include "clebsch/cuda/generator/tp_problem.h"
#include "clebsch/support/error.h"
#include "kernels/kernel_test_util.h"

namespace clebsch::cuda {
namespace {

TpProblem mace_medium(DType dtype = DType::kFloat32, Accumulation acc = Accumulation::kAtomic) {
  const ConvShape s = benchmark_shape("mace-medium");
  return TpProblem::from_tensor_product(conv_tensor_product(s.node_irreps, s.edge_irreps, s.target),
                                        dtype, acc);
}

TEST(TpProblem, MirrorsTheTensorProduct) {
  const ConvShape s = benchmark_shape("mace-medium");
  const TensorProduct tp = conv_tensor_product(s.node_irreps, s.edge_irreps, s.target);
  const TpProblem p = TpProblem::from_tensor_product(tp, DType::kFloat64, Accumulation::kAtomic);
  EXPECT_EQ(p.dim_in1(), tp.dim_in1());
  EXPECT_EQ(p.dim_in2(), tp.dim_in2());
  EXPECT_EQ(p.dim_out(), tp.dim_out());
  EXPECT_EQ(p.weight_numel(), tp.weight_numel());
  EXPECT_EQ(p.weight_numel(), 1024);  // docs/kernels.md: 8 paths x 128 channels
  ASSERT_EQ(p.paths().size(), tp.paths().size());
  for (std::size_t n = 0; n < p.paths().size(); ++n) {
    const TpPath& a = p.paths()[n];
    const TensorProductPath& b = tp.paths()[n];
    EXPECT_EQ(a.in1, b.ins.i_in1());
    EXPECT_EQ(a.in2, b.ins.i_in2());
    EXPECT_EQ(a.out, b.ins.i_out());
    EXPECT_EQ(a.weight_offset, b.weight_offset);
    ASSERT_EQ(a.cg.size(), b.cg.size());
    for (std::size_t e = 0; e < a.cg.size(); ++e) EXPECT_EQ(a.cg[e].c, b.cg[e].c);
    EXPECT_EQ(p.out()[a.out].offset, b.offset_out);
  }
  EXPECT_EQ(p.max_mul(), 128);
}

TEST(TpProblem, RejectsModesOtherThanUvu) {
  TensorProductOptions o;
  o.shared_weights = false;
  const TensorProduct tp(Irreps("4x0e"), Irreps("4x0e"), Irreps("4x0e"),
                         {Instruction(0, 0, 0, "uvw")}, o);
  try {
    TpProblem::from_tensor_product(tp, DType::kFloat32, Accumulation::kAtomic);
    FAIL() << "expected CapacityError";
  } catch (const CapacityError& e) {
    EXPECT_NE(std::string(e.what()).find("'uvw'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("only 'uvu'"), std::string::npos) << e.what();
  }
}

TEST(TpProblem, RejectsSharedWeights) {
  const TensorProduct tp(Irreps("4x0e"), Irreps("0e"), Irreps("4x0e"),
                         {Instruction(0, 0, 0, "uvu")});
  EXPECT_THROW(TpProblem::from_tensor_product(tp, DType::kFloat32, Accumulation::kAtomic),
               CapacityError);
}

TEST(TpProblem, RejectsLAboveTheKernelLimit) {
  TensorProductOptions o;
  o.shared_weights = false;
  const TensorProduct tp(Irreps("4x9e"), Irreps("0e"), Irreps("4x9e"),
                         {Instruction(0, 0, 0, "uvu")}, o);
  try {
    TpProblem::from_tensor_product(tp, DType::kFloat32, Accumulation::kAtomic);
    FAIL() << "expected CapacityError";
  } catch (const CapacityError& e) {
    EXPECT_NE(std::string(e.what()).find("l=9"), std::string::npos) << e.what();
  }
}

TEST(TpProblem, ValidateNamesTheBadPath) {
  TpProblem p = mace_medium();
  std::vector<TpPath> paths = p.paths();
  paths[2].weight_offset = paths[1].weight_offset;  // overlapping weights
  try {
    TpProblem(p.in1(), p.in2(), p.out(), paths, p.weight_numel(), p.dtype(), p.accumulation());
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("path 2"), std::string::npos) << e.what();
  }
  std::vector<TpBlock> out = p.out();
  out[1].offset += 1;
  EXPECT_THROW(
      TpProblem(p.in1(), p.in2(), out, p.paths(), p.weight_numel(), p.dtype(), p.accumulation()),
      Error);
}

TEST(TpProblem, EqualityAndHashSeeEveryField) {
  const TpProblem a = mace_medium(), b = mace_medium();
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hash(), b.hash());
  const TpProblem c = mace_medium(DType::kFloat64);
  const TpProblem d = mace_medium(DType::kFloat32, Accumulation::kDeterministic);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  EXPECT_NE(a.hash(), c.hash());
  EXPECT_NE(a.hash(), d.hash());
  std::vector<TpPath> paths = a.paths();
  paths[3].cg[0].c = std::nextafter(paths[3].cg[0].c, 2.0);  // one ulp
  const TpProblem e(a.in1(), a.in2(), a.out(), paths, a.weight_numel(), a.dtype(),
                    a.accumulation());
  EXPECT_NE(a, e);
  EXPECT_NE(a.hash(), e.hash());
}

// The fused spline form's interval geometry is compiled into the module, so every part of it
// is part of the problem's identity; it excludes the fused radial form and needs weights.
TEST(TpProblem, TheFusedSplineFormIsPartOfTheIdentity) {
  const TpProblem a = mace_medium();
  const TpProblem s = a.with_fused_spline(1000, 0.1, 6.0);
  EXPECT_EQ(s.spline_intervals(), 1000);
  EXPECT_EQ(s.radial_row_width(), 1);
  EXPECT_EQ(a.radial_row_width(), 0);
  EXPECT_EQ(s, a.with_fused_spline(1000, 0.1, 6.0));
  for (const TpProblem& other :
       {a, a.with_fused_spline(999, 0.1, 6.0), a.with_fused_spline(1000, 0.2, 6.0),
        a.with_fused_spline(1000, 0.1, std::nextafter(6.0, 7.0))}) {
    EXPECT_NE(s, other);
    EXPECT_NE(s.hash(), other.hash());
  }
  EXPECT_NE(s.str().find("fused spline, 1000 intervals"), std::string::npos);
  EXPECT_THROW(a.with_fused_spline(0, 0.1, 6.0), Error);
  EXPECT_THROW(a.with_fused_spline(10, 6.0, 6.0), Error);
  EXPECT_THROW(a.with_fused_radial(64).with_fused_spline(10, 0.1, 6.0), Error);
}

TEST(TpProblem, HashIsStableAcrossBuilds) {
  // Pinned: the hash keys the on-disk cache and heads the generated source, so it must not
  // depend on the platform, the compiler or the run. A change here is a deliberate format change.
  const TpProblem p = mace_medium();
  EXPECT_EQ(p.hash_hex(), "d00478e5890bb62f");
  EXPECT_EQ(hex64(fnv1a("a", 1)), "af63dc4c8601ec8c");
}

}  // namespace
}  // namespace clebsch::cuda
