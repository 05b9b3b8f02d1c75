// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// e3nn's o3.Linear without biases (o3/_linear.py): the equivariant linear map that mixes the
// channels of equal irreps and never mixes m components. Each instruction (i_in, i_out) joins
// input block i_in (mul_in copies of an irrep) to output block i_out (mul_out copies of the same
// irrep) through a weight matrix W_ins[mul_in][mul_out]:
//   y[i_out][w, m] += path_weight * sum_u W_ins[u, w] * x[i_in][u, m].
// The flat weight vector holds W_ins row-major, per instruction in order, at accumulating offsets.
// By default the instructions are all pairs with equal irreps in i_in-major order, with
// path_weight = alpha^(-1/2), where alpha sums, over the instructions into the same i_out, mul_in
// ('element' normalization) or this instruction's mul_in ('path'); an alpha of 0 counts as 1.
// Features use the e3nn "mul_ir" layout: index u*(2l+1)+(m+l) inside a block.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include "clebsch/o3/irreps.h"
#include "clebsch/o3/tensor_product.h"

namespace clebsch {

// PathNormalization (tensor_product.h) is shared with the tensor product: o3.Linear takes
// kElement (alpha = sum of mul_in over the instructions into the same output, e3nn's default),
// kPath (alpha = number of those instructions times this mul_in) or kNone (alpha = 1).

/// One path as a caller states it: input block, output block and weight, e.g. read from the
/// `instructions` attribute of an exported module.
struct LinearPath {
  // A constructor (not an aggregate) so that {{0, 1}} can only mean a list of (i_in, i_out) pairs.
  LinearPath(int i_in_, int i_out_, double path_weight_)
      : i_in(i_in_), i_out(i_out_), path_weight(path_weight_) {}
  int i_in;
  int i_out;
  double path_weight;
};

/// One validated instruction of a Linear, with its place in the flat weight vector.
struct LinearInstruction {
  int i_in;
  int i_out;
  double path_weight;
  int mul_in;                 ///< path_shape[0]
  int mul_out;                ///< path_shape[1]
  std::size_t weight_offset;  ///< start of W_ins[mul_in][mul_out] in the flat weights
  std::size_t weight_numel() const {
    return static_cast<std::size_t>(mul_in) * static_cast<std::size_t>(mul_out);
  }
};

/// Descriptor and host evaluation of an e3nn o3.Linear (no biases, shared weights). Immutable.
///
/// The evaluation functions take a batch of @p n_rows feature rows, row-major (row r of x starts
/// at x + r*irreps_in().dim()), and are parallel over rows with OpenMP. Instantiated for float
/// and double.
class Linear {
 public:
  /// All (i_in, i_out) pairs with equal irreps, i_in-major, with default path weights.
  Linear(Irreps irreps_in, Irreps irreps_out,
         PathNormalization normalization = PathNormalization::kElement);
  /// The given (i_in, i_out) pairs, in the given order (repeats allowed, as in e3nn), with
  /// default path weights.
  /// @throws Error if an index is out of range or a pair joins different irreps.
  Linear(Irreps irreps_in, Irreps irreps_out, const std::vector<std::pair<int, int>>& pairs,
         PathNormalization normalization = PathNormalization::kElement);
  /// The given paths with explicit path weights, as an exported module states them.
  /// @throws Error if an index is out of range, a path joins different irreps or a weight is not
  /// finite.
  Linear(Irreps irreps_in, Irreps irreps_out, const std::vector<LinearPath>& paths);

  const Irreps& irreps_in() const { return irreps_in_; }
  const Irreps& irreps_out() const { return irreps_out_; }
  const std::vector<LinearInstruction>& instructions() const { return instructions_; }
  /// Length of the flat weight vector: sum of mul_in*mul_out over the instructions.
  std::size_t weight_numel() const { return weight_numel_; }

  /// y = Linear(x). @p y (n_rows x irreps_out().dim()) is overwritten; output blocks that no
  /// instruction reaches are zero.
  template <class T>
  void forward(const T* weight, std::size_t n_rows, const T* x, T* y) const;

  /// Reverse mode: given grad_y = dL/dy, writes grad_x = dL/dx (overwritten; skipped if null)
  /// and grad_weight = dL/dweight summed over the rows (overwritten; skipped if null).
  /// @param x the forward input; only read when grad_weight is requested (may then be null).
  /// T is deduced from weight and grad_y only (std::common_type_t is a non-deduced context), so
  /// the optional pointers accept a plain nullptr.
  template <class T>
  void backward(const T* weight, std::size_t n_rows, const std::common_type_t<T>* x,
                const T* grad_y, std::common_type_t<T>* grad_x,
                std::common_type_t<T>* grad_weight) const;

 private:
  void init(const std::vector<LinearPath>& paths);

  Irreps irreps_in_;
  Irreps irreps_out_;
  std::vector<int> offsets_in_;
  std::vector<int> offsets_out_;
  std::vector<LinearInstruction> instructions_;
  std::size_t weight_numel_ = 0;
};

}  // namespace clebsch
