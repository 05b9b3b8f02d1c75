// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// e3nn's nn.FullyConnectedNet (nn/_fc.py) with its defaults (no biases, variance_in =
// variance_out = 1, no activation after the last layer): the scalar MLP that MACE uses for radial
// weights (e.g. [8, 64, 64, 64, weight_numel] with silu) and density functions ([N, 1]). For
// hs = [n0, ..., nk] and layer weights W_j[n_j][n_{j+1}] (row-major):
//   hidden layers j < k-1:  h <- phi~(h . W_j / sqrt(n_j)),   phi~ = cst * phi (normalize2mom);
//   last layer:             y  = h . W_{k-1} / sqrt(n_{k-1}).
// The flat weight vector is the layers' matrices back to back, layer 0 first.
#pragma once

#include <cstddef>
#include <type_traits>
#include <vector>

#include "clebsch/nn/activation.h"

namespace clebsch {

/// Descriptor and host evaluation of a bias-free e3nn FullyConnectedNet. Immutable.
///
/// The evaluation functions take a batch of @p n_rows rows, row-major (row r of x starts at
/// x + r*dim_in()), and are parallel over rows with OpenMP. Instantiated for float and double.
class FullyConnectedNet {
 public:
  /// @param hs layer widths [n0, ..., nk]: at least two, all >= 1.
  /// @param act the hidden-layer activation with its scale (ScaledActivation::normalized(kind)
  ///   for e3nn's own constant, or the module's `cst`); e3nn's act=None is
  ///   ScaledActivation::none().
  /// @throws Error naming hs when it has fewer than two entries or a width below 1.
  FullyConnectedNet(std::vector<int> hs, ScaledActivation act);

  const std::vector<int>& hs() const { return hs_; }
  const ScaledActivation& activation() const { return act_; }
  int num_layers() const { return static_cast<int>(hs_.size()) - 1; }
  int dim_in() const { return hs_.front(); }
  int dim_out() const { return hs_.back(); }
  /// Total number of weights: sum of n_j * n_{j+1}.
  std::size_t weight_numel() const { return weight_offsets_.back(); }
  /// Start of layer j's matrix W_j[n_j][n_{j+1}] in the flat weights (0 <= j <= num_layers();
  /// j = num_layers() gives weight_numel()).
  std::size_t weight_offset(int layer) const { return weight_offsets_.at(layer); }

  /// y = net(x); @p y (n_rows x dim_out()) is overwritten.
  template <class T>
  void forward(const T* weight, std::size_t n_rows, const T* x, T* y) const;

  /// Reverse mode: given grad_y = dL/dy, writes grad_x = dL/dx (overwritten; skipped if null)
  /// and grad_weight = dL/dweight summed over the rows (overwritten; skipped if null). The
  /// forward pass is recomputed row by row, so no state is kept between the calls. T is deduced
  /// from the inputs only (std::common_type_t is a non-deduced context), so the optional outputs
  /// accept a plain nullptr.
  template <class T>
  void backward(const T* weight, std::size_t n_rows, const T* x, const T* grad_y,
                std::common_type_t<T>* grad_x, std::common_type_t<T>* grad_weight) const;

 private:
  std::vector<int> hs_;
  ScaledActivation act_;
  std::vector<std::size_t> weight_offsets_;
};

}  // namespace clebsch
