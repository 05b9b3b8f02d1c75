// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// A GhostExchange for a single rank whose ghost nodes are copies of its own atoms (periodic
// images made explicit), for the engine tests' ghost-mode checks: forward copies each owner's row
// into its ghost rows, reverse adds each ghost row into its owner's and zeroes the ghost, as
// LAMMPS's forward and reverse communication would on one rank.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "clebsch/engine/engine.h"

namespace clebsch::test {

class OwnerMapExchange : public GhostExchange {
 public:
  /// @param owner the local atom each ghost node copies; ghost k is node num_local + k.
  OwnerMapExchange(std::size_t num_local, std::vector<int> owner)
      : num_local_(num_local), owner_(std::move(owner)) {}
  void forward(double* f, int width) override { fwd(f, width); }
  void forward(float* f, int width) override { fwd(f, width); }
  void reverse(double* g, int width) override { rev(g, width); }
  void reverse(float* g, int width) override { rev(g, width); }
  /// What the engine asked for: calls of each direction, and the widest row exchanged.
  int forward_calls = 0, reverse_calls = 0, max_width = 0;

 private:
  template <class T>
  void fwd(T* f, int width) {
    ++forward_calls;
    max_width = std::max(max_width, width);
    for (std::size_t k = 0; k < owner_.size(); ++k)
      std::copy_n(f + static_cast<std::size_t>(owner_[k]) * width, width,
                  f + (num_local_ + k) * width);
  }
  template <class T>
  void rev(T* g, int width) {
    ++reverse_calls;
    max_width = std::max(max_width, width);
    for (std::size_t k = 0; k < owner_.size(); ++k) {
      T* ghost = g + (num_local_ + k) * width;
      T* own = g + static_cast<std::size_t>(owner_[k]) * width;
      for (int q = 0; q < width; ++q) own[q] += ghost[q];
      std::fill_n(ghost, width, T(0));
    }
  }
  std::size_t num_local_;
  std::vector<int> owner_;
};

}  // namespace clebsch::test
