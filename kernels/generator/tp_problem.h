// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Stage 1 of the kernel generator: the problem. A TpProblem is everything that decides the
// generated source of a tensor-product convolution, and nothing about the device: the irreps
// blocks of the three operands, the instructions with their folded Clebsch-Gordan non-zeros
// (normalisation coefficient included, as clebsch::TensorProduct derives them), the per-edge
// weight layout, the floating-point type and the accumulation mode. It is a value: compared with
// ==, hashed with a hash that is stable across runs, platforms and builds (it keys the on-disk
// kernel cache and is recorded on the first line of the generated source).
//
// Only e3nn's "uvu" connection mode is supported (MACE and NequIP use it): out[u,k] +=
// W[u,v] * sum_ij c_ijk x[u,i] Y[v,j]. CG conventions are those of tensor_product.h (e3nn's real
// basis, m = -l..l, Frobenius-normalised wigner_3j times the path coefficient).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "clebsch/cuda/device/content_hash.h"
#include "clebsch/cuda/device/dtype.h"
#include "clebsch/o3/tensor_product.h"

namespace clebsch::cuda {

/// Version of the generator; changes whenever the emitted source changes for the same problem.
inline constexpr int kGeneratorVersion = 4;
/// Largest l of any operand the generated kernels accept.
inline constexpr int kMaxKernelL = 8;
/// Largest multiplicity of an edge-attribute (second operand) block: its channels are unrolled.
inline constexpr int kMaxKernelMul2 = 8;
/// Largest hidden width of the fused radial form (TpProblem::fused_hidden).
inline constexpr int kMaxFusedHidden = 256;

/// How contributions of several edges to one output row are combined.
enum class Accumulation {
  /// Atomic adds from edge tiles: fast, any edge order, summation order not fixed.
  kAtomic,
  /// Each output row has one owning warp that sums its edges in CSR order: bitwise
  /// reproducible, no atomics, no memsets.
  kDeterministic
};

std::string to_string(Accumulation accumulation);

/// One block mul x (l, p) of an operand and where it starts in the flat row.
struct TpBlock {
  int mul, l, p, offset;
  int dim() const { return 2 * l + 1; }
  bool operator==(const TpBlock& o) const {
    return mul == o.mul && l == o.l && p == o.p && offset == o.offset;
  }
};

/// One uvu instruction: blocks in1 (x) and in2 (Y) into block out, weights W[u][v] at
/// weight_offset inside a weight row (when has_weight), CG non-zeros with coefficient folded.
struct TpPath {
  int in1, in2, out;
  bool has_weight;
  int weight_offset;
  std::vector<CgEntry> cg;
  /// e3nn's tuple of the instruction, for comments in the generated source.
  std::string description;
  bool operator==(const TpPath& o) const;
};

/// The generator's input (see the file comment). Immutable; checked in the constructor.
class TpProblem {
 public:
  /// @throws CapacityError for anything the generated kernels do not support (a mode other
  /// than uvu, shared weights, l > kMaxKernelL, a second-operand multiplicity above
  /// kMaxKernelMul2), naming the instruction or irrep and the value.
  static TpProblem from_tensor_product(const TensorProduct& tp, DType dtype,
                                       Accumulation accumulation);

  /// Builds from parts. @throws Error if validate() fails.
  TpProblem(std::vector<TpBlock> in1, std::vector<TpBlock> in2, std::vector<TpBlock> out,
            std::vector<TpPath> paths, int weight_numel, DType dtype, Accumulation accumulation);

  const std::vector<TpBlock>& in1() const { return in1_; }
  const std::vector<TpBlock>& in2() const { return in2_; }
  const std::vector<TpBlock>& out() const { return out_; }
  const std::vector<TpPath>& paths() const { return paths_; }
  int dim_in1() const { return dim(in1_); }
  int dim_in2() const { return dim(in2_); }
  int dim_out() const { return dim(out_); }
  int weight_numel() const { return weight_numel_; }
  DType dtype() const { return dtype_; }
  Accumulation accumulation() const { return accumulation_; }
  /// Largest multiplicity of a block of the first operand (= of the output in uvu).
  int max_mul() const;
  /// The fused radial form (0: off): the forward and backward passes do not read the per-edge
  /// weights W but compute them per edge tile as W = h W4 from the last hidden layer of the
  /// radial MLP (h [num_edges][fused_hidden()], W4 [fused_hidden()][weight_numel()]), and the
  /// backward writes dE/dh instead of dE/dW, so that no edges x weights tensor exists. The
  /// double passes keep reading W.
  int fused_hidden() const { return fused_hidden_; }
  /// This problem in the fused radial form with @p hidden values per edge (0: off).
  /// @throws Error for hidden < 0 or above kMaxFusedHidden, or a problem without weights.
  TpProblem with_fused_radial(int hidden) const;
  /// The fused spline form (radial spline N; 0: off): the forward and backward passes make each
  /// edge's weights per edge tile by cubic Hermite interpolation of a table of the radial
  /// functions (h: the edges' lengths r [num_edges]; w4: the table [intervals +
  /// 1][2][weight_numel], per knot the values and the interval width times their slopes,
  /// model::RadialSpline's layout) on `intervals` equal intervals of [spline_lo, spline_hi], and
  /// the backward writes dE/dr [num_edges] instead of dE/dW. The interval geometry is compiled into
  /// the module.
  int spline_intervals() const { return spline_intervals_; }
  double spline_lo() const { return spline_lo_; }
  double spline_hi() const { return spline_hi_; }
  /// This problem in the fused spline form. @throws Error for intervals < 1, hi <= lo, a problem
  /// without weights or one already in the fused radial form.
  TpProblem with_fused_spline(int intervals, double lo, double hi) const;
  /// Values per edge of the fused forms' per-edge input h and output grad_h: the hidden width,
  /// 1 (the length) in the spline form, 0 unfused.
  int radial_row_width() const { return spline_intervals_ > 0 ? 1 : fused_hidden_; }

  /// Checks internal consistency: contiguous block offsets, indices in range, uvu rules (mul1 ==
  /// mul_out, parity, triangle), weight ranges inside [0, weight_numel) without overlap, CG
  /// indices inside the blocks, l <= kMaxKernelL, mul2 <= kMaxKernelMul2.
  /// @throws Error naming the path or block and the value; CapacityError for the limits.
  void validate() const;

  /// 64-bit FNV-1a of a canonical serialisation (integers as 64-bit little-endian, doubles as
  /// their IEEE bit patterns): the same value on every platform and run.
  std::uint64_t hash() const;
  /// hash() as 16 hex digits.
  std::string hash_hex() const;
  /// One line: irreps of the three operands, path count, dtype, accumulation.
  std::string str() const;

  bool operator==(const TpProblem& o) const;
  bool operator!=(const TpProblem& o) const { return !(*this == o); }

 private:
  static int dim(const std::vector<TpBlock>& blocks);
  std::vector<TpBlock> in1_, in2_, out_;
  std::vector<TpPath> paths_;
  int weight_numel_;
  DType dtype_;
  Accumulation accumulation_;
  int fused_hidden_ = 0;
  int spline_intervals_ = 0;
  double spline_lo_ = 0, spline_hi_ = 0;
};

/// e3nn-style irreps string of a block list ("128x0e+128x1o").
std::string blocks_str(const std::vector<TpBlock>& blocks);

}  // namespace clebsch::cuda
