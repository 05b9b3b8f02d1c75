// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The weighted tensor product of e3nn (o3.TensorProduct, 0.6.0): a descriptor that validates the
// instructions and derives what e3nn derives from them (normalisation coefficient, path shape,
// weight layout, the sparse Clebsch-Gordan non-zeros with the coefficient folded in), and the
// plain host kernels (forward, backward, double backward) that every device kernel is tested
// against.
//
// Layouts (all row-major, e3nn's):
//   x1[B][irreps_in1.dim()], x2[B][irreps_in2.dim()], out[B][irreps_out.dim()]; inside a block
//   of mul copies of irrep l the index is u*(2l+1)+(m+l), m = -l..l (e3nn's real basis).
//   weights: shared [weight_numel()] or per row [B][weight_numel()]; inside a row, the weighted
//   instructions in order, each a row-major array over its path_shape:
//     uvw (mul1, mul2, mul_out), uvu (mul1, mul2), uvv (mul1, mul2), uuw (mul1, mul_out),
//     uuu (mul1).
// CG coefficients are e3nn's wigner_3j (Frobenius norm 1, real basis, e3nn's sign), from
// clebsch_gordan.h; with the normalisation coefficient c = sqrt(alpha) of the instruction
// (TensorProductPath::coefficient; alpha includes path_weight, as in e3nn),
//   uvw: out[w,k] += c sum_uv W[u,v,w] sum_ij C_ijk x1[u,i] x2[v,j]
//   uvu: out[u,k] += c sum_v  W[u,v]   sum_ij C_ijk x1[u,i] x2[v,j]
//   uvv: out[v,k] += c sum_u  W[u,v]   sum_ij C_ijk x1[u,i] x2[v,j]
//   uuw: out[w,k] += c sum_u  W[u,w]   sum_ij C_ijk x1[u,i] x2[u,j]
//   uuu: out[u,k] += c        W[u]     sum_ij C_ijk x1[u,i] x2[u,j]
// with W = 1 for an instruction without weights (e3nn then sums over the free index; uvw needs
// weights, uuw without weights needs mul_out = 1, as in e3nn). A product built by
// TensorProduct::with_couplings uses a given coupling P_ijk in place of c C_ijk (exported models).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "clebsch/o3/irreps.h"

namespace clebsch {

/// How the multiplicity indices of an instruction are connected (e3nn's connection_mode).
enum class ConnectionMode { kUvw, kUvu, kUvv, kUuw, kUuu };

/// e3nn's name of a mode: "uvw", "uvu", "uvv", "uuw", "uuu".
std::string to_string(ConnectionMode mode);
/// Parses e3nn's name. @throws Error naming the string (also for e3nn's modes not supported here,
/// "uvuv", "uvu<v", "u<vw").
ConnectionMode connection_mode_from_string(const std::string& name);

/// e3nn's irrep_normalization: alpha = 2l_out+1 (component), (2l1+1)(2l2+1) (norm) or 1 (none).
enum class IrrepNormalization { kComponent, kNorm, kNone };
/// e3nn's path_normalization: divide by the fan-in of all instructions into the same output
/// (element), by this instruction's fan-in times their count (path), or not at all (none).
enum class PathNormalization { kElement, kPath, kNone };

/// One path of a tensor product, as e3nn's Instruction tuple (i_in1, i_in2, i_out, mode,
/// has_weight, path_weight). Immutable; indices are checked against the irreps by TensorProduct.
class Instruction {
 public:
  /// @param path_weight multiplies alpha before the square root, as in e3nn.
  /// @throws Error if an index is negative or path_weight is negative or not finite.
  Instruction(int i_in1, int i_in2, int i_out, ConnectionMode mode, bool has_weight = true,
              double path_weight = 1.0);
  /// Same, with e3nn's mode name ("uvu", ...). @throws Error naming an unknown mode.
  Instruction(int i_in1, int i_in2, int i_out, const std::string& mode, bool has_weight = true,
              double path_weight = 1.0);

  int i_in1() const { return i_in1_; }
  int i_in2() const { return i_in2_; }
  int i_out() const { return i_out_; }
  ConnectionMode mode() const { return mode_; }
  bool has_weight() const { return has_weight_; }
  double path_weight() const { return path_weight_; }
  /// e3nn's tuple syntax, e.g. (0, 1, 2, 'uvu', True, 1.0).
  std::string str() const;

 private:
  int i_in1_, i_in2_, i_out_;
  ConnectionMode mode_;
  bool has_weight_;
  double path_weight_;
};

/// The normalisation options of e3nn's TensorProduct constructor.
struct TensorProductOptions {
  IrrepNormalization irrep_normalization = IrrepNormalization::kComponent;
  PathNormalization path_normalization = PathNormalization::kElement;
  /// Variances per entry of irreps_in1 / irreps_in2 / irreps_out; empty means all 1.
  std::vector<double> in1_var, in2_var, out_var;
  /// true: one weight vector for the whole batch; false: one per row (per edge).
  bool shared_weights = true;
};

/// One non-zero of a path's CG tensor, with the path's normalisation coefficient folded in:
/// c = coefficient * C[i][j][k]; i, j, k = m+l index the three irreps (0..2l).
struct CgEntry {
  int i, j, k;
  double c;
};

/// Everything the kernels need about one instruction, derived once by TensorProduct.
struct TensorProductPath {
  Instruction ins;
  Irrep ir1, ir2, ir_out;
  int mul1, mul2, mul_out;
  /// Start of the instruction's blocks in the flat x1, x2 and out rows.
  int offset1, offset2, offset_out;
  /// e3nn's normalisation coefficient sqrt(alpha): what e3nn stores as the instruction's
  /// path_weight after construction. For explicit couplings (TensorProduct::with_couplings) the
  /// instruction's path_weight, for reference only: cg already includes it.
  double coefficient;
  /// e3nn's path_shape (see the header comment).
  std::vector<int> path_shape;
  /// Start of this instruction's weights inside a weight row; -1 when it has none.
  int weight_offset;
  /// Number of weights of this instruction (product of path_shape, 0 when it has none).
  int weight_size;
  /// Non-zeros of coefficient * wigner_3j(l1, l2, l_out), in (i, j, k) row-major order; empty
  /// when the coefficient is 0. For explicit couplings: the non-zeros of the given coupling.
  std::vector<CgEntry> cg;
};

/// e3nn's o3.TensorProduct as an immutable descriptor (see the header comment for the math and
/// the layouts). The constructor validates every instruction.
class TensorProduct {
 public:
  /// The empty product (no irreps, no instructions, weight_numel 0), so that descriptions that
  /// hold a TensorProduct by value can be default-constructed and filled in later.
  TensorProduct() = default;

  /// @throws Error naming the instruction and the values when an index is out of range, the
  /// parity or triangle rule fails, the multiplicities do not fit the mode, a uvw instruction has
  /// no weights, a uuw instruction without weights has mul_out != 1, a variance list has the
  /// wrong length, or a normalisation coefficient would be negative or not finite.
  TensorProduct(Irreps irreps_in1, Irreps irreps_in2, Irreps irreps_out,
                std::vector<Instruction> instructions, TensorProductOptions options = {});

  /// A product whose couplings are given instead of derived: couplings[n] is instruction n's
  /// dense coupling P[i][j][k], row-major over (2l1+1, 2l2+1, 2l_out+1), with every
  /// normalisation already folded in, and the kernels then compute, e.g. for uvu,
  ///   out[u,k] += sum_v W[u,v] sum_ij P[i][j][k] x1[u,i] x2[v,j]
  /// (the other modes likewise, with P in place of c*C). This is how an exported model states
  /// its couplings (potentials/FORMAT.md, section 4.2 "cg"): the exporting module's own
  /// Clebsch-Gordan signs (e3nn 0.4.4 and 0.6 differ for some odd l1+l2+l3 triples) and path
  /// weight, so the host kernels evaluate exactly what the module evaluated. Nothing is derived
  /// from wigner_3j and no normalisation option applies; each instruction's path_weight is kept
  /// as its path's coefficient for reference only (it is not applied again).
  /// @throws Error for everything the main constructor rejects except normalisation, and when
  /// the number of couplings differs from the number of instructions, a coupling has the wrong
  /// size, or holds a value that is not finite.
  static TensorProduct with_couplings(Irreps irreps_in1, Irreps irreps_in2, Irreps irreps_out,
                                      std::vector<Instruction> instructions,
                                      const std::vector<std::vector<double>>& couplings,
                                      bool shared_weights = true);

  const Irreps& irreps_in1() const { return irreps_in1_; }
  const Irreps& irreps_in2() const { return irreps_in2_; }
  const Irreps& irreps_out() const { return irreps_out_; }
  const TensorProductOptions& options() const { return options_; }
  bool shared_weights() const { return options_.shared_weights; }
  int dim_in1() const { return dim_in1_; }
  int dim_in2() const { return dim_in2_; }
  int dim_out() const { return dim_out_; }
  /// Total number of weights in one weight row (e3nn's weight_numel).
  int weight_numel() const { return weight_numel_; }
  /// One entry per instruction, in the order given.
  const std::vector<TensorProductPath>& paths() const { return paths_; }
  /// True when built by with_couplings(): the CG non-zeros are the given couplings, and the
  /// normalisation fields of options() were not used.
  bool explicit_couplings() const { return explicit_couplings_; }
  std::string str() const;

 private:
  // Validates and derives everything; couplings is null for e3nn's derived CG.
  void init(std::vector<Instruction> instructions,
            const std::vector<std::vector<double>>* couplings);

  Irreps irreps_in1_, irreps_in2_, irreps_out_;
  TensorProductOptions options_;
  bool explicit_couplings_ = false;
  int dim_in1_ = 0, dim_in2_ = 0, dim_out_ = 0, weight_numel_ = 0;
  std::vector<TensorProductPath> paths_;
};

/// out[b] = TP(x1[b], x2[b], w) for b < batch (out is overwritten).
/// @param weights [weight_numel] if tp.shared_weights(), else [batch][weight_numel]; may be null
///                when weight_numel() == 0.
template <typename T>
void tensor_product_forward(const TensorProduct& tp, std::int64_t batch, const T* x1, const T* x2,
                            const T* weights, T* out);

/// Gradients of L = sum_b <grad_out[b], TP(x1[b], x2[b], w)>: the reverse pass of the forward.
/// Each output pointer may be null (not computed); the others are overwritten. grad_weights has
/// the layout of weights: with shared weights it is summed over the batch (in a fixed order, so
/// the result does not depend on the thread count).
template <typename T>
void tensor_product_backward(const TensorProduct& tp, std::int64_t batch, const T* x1, const T* x2,
                             const T* weights, const T* grad_out, T* grad_x1, T* grad_x2,
                             T* grad_weights);

/// The reverse pass of tensor_product_backward (PyTorch's double backward): with cotangents
/// (dx1, dx2, dweights) of its outputs (grad_x1, grad_x2, grad_weights), the gradients of
/// S = <grad_x1, dx1> + <grad_x2, dx2> + <grad_weights, dweights> with respect to
/// (x1, x2, weights, grad_out). As the product is trilinear, with g = grad_out:
///   grad_grad_out = TP(dx1, x2, w) + TP(x1, dx2, w) + TP(x1, x2, dw)
///   grad_x1 = T1*(dx2, w, g) + T1*(x2, dw, g),  grad_x2 = T2*(dx1, w, g) + T2*(x1, dw, g)
///   grad_weights = T3*(dx1, x2, g) + T3*(x1, dx2, g)
/// where Tn* is the backward with respect to slot n. A null cotangent counts as zero; a null
/// output is not computed. Layouts as in tensor_product_backward (dweights like weights).
template <typename T>
void tensor_product_double_backward(const TensorProduct& tp, std::int64_t batch, const T* x1,
                                    const T* x2, const T* weights, const T* grad_out, const T* dx1,
                                    const T* dx2, const T* dweights, T* grad_x1, T* grad_x2,
                                    T* grad_weights, T* grad_grad_out);

namespace detail {

/// What the weight argument of tensor_product_row stands for: the weights themselves (an
/// instruction without weights then acts with W = 1), or a tangent/cotangent of the weights
/// (instructions without weights do not depend on it and contribute nothing).
enum class WeightRole { kValue, kTangent };

/// The one-row building block of every host kernel (batched and convolution). With the scalar
/// E = <g, TP(x1, x2, w)>, it ADDS to each non-null output the partial derivative of E with
/// respect to that slot:
///   out += dE/dg = TP(x1, x2, w),  gx1 += dE/dx1,  gx2 += dE/dx2,  gw += dE/dw.
/// Inputs that a requested output needs must be non-null (w may be null when the product has no
/// weights). Accumulation order is fixed (instruction, then u, then v, then CG entry), so the
/// result is deterministic.
template <typename T>
void tensor_product_row(const TensorProduct& tp, const T* x1, const T* x2, const T* w,
                        WeightRole role, const T* g, T* out, T* gx1, T* gx2, T* gw);

}  // namespace detail

}  // namespace clebsch
