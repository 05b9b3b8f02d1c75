// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// MACE's product basis (mace/modules/symmetric_contraction.py: SymmetricContraction, one
// Contraction per output irrep L). For node i of species z_i, channel c and output component M:
//   B[i, c, M] = sum_{nu=1..corr} sum_k W_nu[z_i, k, c]
//                  sum_{i1..i_nu} U_nu[M, i1, ..., i_nu, k] A[i, c, i1] ... A[i, c, i_nu],
// with A[i, c, :] the node's features of channel c over the coupling irreps (index l-major,
// m+l inside an l block, e3nn's real basis; D = sum (2l+1)). U_nu are the module's buffers
// `U_matrix_{nu}` (generalised Clebsch-Gordan tensors in component normalisation, exported, never
// rebuilt) and W_nu its weights (`weights_max` for nu = corr, `weights.{j}` for nu = corr-1-j).
// The output is c-major per L, B[c*(2L+1)+M], concatenated over L: the mul_ir layout of
// "Cx(L1)+Cx(L2)+...".
//
// Evaluation does not follow MACE's dense Horner recursion. At construction each U_nu is summed
// over the permutations of its nu input indices (the polynomial only sees that symmetric part),
// and its nonzeros are stored per (monomial A[i1]...A[i_nu] with i1 <= ... <= i_nu, output
// component): typically under 1% of the dense entries. Per call, each species present has its
// weights contracted with these terms once (sum over k), so that per node and channel every
// monomial is built once from its prefix (shared by all L and nu) and every (monomial,
// component) pair costs a single multiply-add. The backward (vector-Jacobian product) runs the
// same monomial tree in reverse. Channels are independent, so they are processed in fixed-width
// blocks that vectorise; nodes are spread over OpenMP threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "clebsch/o3/irreps.h"

namespace clebsch {

/// A dense row-major tensor as a model file stores it (shape and values, any dtype read as
/// double).
struct DenseTensor {
  std::vector<std::int64_t> shape;
  std::vector<double> values;
};

/// The tensors of one MACE `Contraction` (one output irrep), indexed by correlation order.
struct ContractionTensors {
  /// The output irrep L (its parity is carried into irreps_out(), the math uses only l).
  Irrep ir_out;
  /// U[nu-1] = buffer `U_matrix_{nu}`, nu = 1..correlation, shape [2L+1, D (nu times), K_nu];
  /// MACE squeezes the leading dimension away when L = 0, and any size-1 dimension except K_nu
  /// may be absent.
  std::vector<DenseTensor> U;
  /// W[nu-1] = the weights of order nu, shape [num_elements, K_nu, C].
  std::vector<DenseTensor> W;

  /// Picks the tensors out of a Contraction module's named buffers and parameters
  /// (`U_matrix_{nu}`, `weights_max`, `weights.{j}`), applying MACE's reverse order: `weights_max`
  /// is nu = correlation and `weights.{j}` is nu = correlation-1-j. Other names are ignored.
  /// @throws Error naming a missing tensor, or if correlation < 1.
  static ContractionTensors from_module(Irrep ir_out, int correlation,
                                        const std::map<std::string, DenseTensor>& tensors);
};

/// Descriptor and host evaluation of MACE's SymmetricContraction. Immutable.
///
/// A is [n_nodes, C, D] (row-major), B is [n_nodes, dim_out()], species[i] in
/// [0, num_elements()) selects the weights (MACE's one-hot node_attrs; use_agnostic_product
/// models have num_elements() = 1). Instantiated for float and double: float evaluation uses the
/// tensors rounded to float, as a float32 model holds them.
class SymmetricContraction {
 public:
  /// @param irreps_in the module's irreps_in: C copies of each coupling irrep, e.g.
  ///   "128x0e+128x1o+128x2e+128x3o" (C = 128, D = 16).
  /// @param contractions one entry per output irrep, in the module's order.
  /// @throws Error if irreps_in is empty or its multiplicities differ, no contraction is given,
  ///   U and W counts disagree, or a tensor's shape or size is wrong (the message names the
  ///   tensor, e.g. `U_matrix_2`, and both shapes), or a value is not finite.
  SymmetricContraction(Irreps irreps_in, std::vector<ContractionTensors> contractions);

  const Irreps& irreps_in() const { return irreps_in_; }
  /// "Cx(L1)+Cx(L2)+...": the layout of B.
  const Irreps& irreps_out() const { return irreps_out_; }
  int num_channels() const { return channels_; }
  /// D: dimension of one channel of A (sum of 2l+1 over the coupling irreps).
  int dim_a() const { return dim_a_; }
  int num_elements() const { return num_elements_; }
  /// Per-node size of B: C * sum_L (2L+1).
  int dim_out() const { return channels_ * num_rows_; }
  /// Correlation order of contraction @p k.
  int correlation(std::size_t k) const { return correlations_.at(k); }

  /// Number of distinct monomials (with their prefixes) evaluated per node and channel.
  std::size_t num_monomials() const { return monomials_.size(); }
  /// Number of stored (monomial, output component, weight row) terms after symmetrisation.
  std::size_t num_terms() const { return terms_.size(); }
  /// Number of distinct (monomial, output component) pairs: the per-node work per channel.
  std::size_t num_pairs() const { return pairs_.size(); }
  /// Number of nonzero entries of the dense U tensors (for comparison with num_terms()).
  std::size_t num_dense_nonzeros() const { return dense_nonzeros_; }

  /// B = contraction(A); @p B (n_nodes x dim_out()) is overwritten.
  /// @throws Error if a species index is out of range (checked before any work).
  template <class T>
  void forward(std::size_t n_nodes, const int* species, const T* A, T* B) const;

  /// Reverse mode: grad_A = (dB/dA)^T grad_B, per node (overwritten, n_nodes x C x D).
  template <class T>
  void backward(std::size_t n_nodes, const int* species, const T* A, const T* grad_B,
                T* grad_A) const;

  /// Channels processed together; buffers are padded to this width.
  static constexpr int kChannelBlock = 32;

 private:
  struct Monomial {
    int parent;  // monomial without its last factor; -1 for the D degree-1 monomials
    int last;    // index into D of the last factor
  };
  // One (monomial, output row) pair; its terms are terms_[term_begin, next pair's term_begin).
  struct Pair {
    int monomial;
    int row;  // offset of the L block + M
    int term_begin;
  };
  struct Term {
    int w_row;    // row of the per-species weight table
    double coef;  // sum over the permutations of U[M, i.., k]
  };

  void check_species(std::size_t n_nodes, const int* species) const;
  bool worth_threads(std::size_t n_nodes) const;
  template <class T>
  const std::vector<T>& weights() const;
  template <class T>
  const std::vector<T>& coefs() const;
  template <class T>
  void effective_weights(int species, long long pair, T* E) const;
  template <class T>
  void monomials_block(const T* A_node, int c0, int cb, T* P) const;
  template <class T, bool kBackward>
  void run(std::size_t n_nodes, const int* species, const T* A, const T* grad_B, T* out) const;

  Irreps irreps_in_;
  Irreps irreps_out_;
  int channels_ = 0;
  int dim_a_ = 0;
  int num_elements_ = 0;
  int num_rows_ = 0;  // sum over L of 2L+1
  int num_w_rows_ = 0;
  std::vector<int> correlations_;
  std::vector<int> row_offsets_;  // per contraction: first output row
  std::vector<Monomial> monomials_;
  std::vector<Pair> pairs_;  // sorted by monomial
  std::vector<Term> terms_;  // grouped by pair
  std::size_t dense_nonzeros_ = 0;
  std::vector<double> weights_d_;  // [z][w_row][c]
  std::vector<float> weights_f_;
  std::vector<double> coefs_d_;  // coef of terms_[t], by type
  std::vector<float> coefs_f_;
};

}  // namespace clebsch
