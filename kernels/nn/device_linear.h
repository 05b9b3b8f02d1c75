// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// e3nn linear maps on device rows in e3nn's mul_ir layout (index u*(2l+1)+m inside a block, as
// the convolution kernels and the model file use), as sequences of strided GEMMs
// (generic_kernels.h), one per instruction batched over m:
//   - o3.Linear (model::Linear, FORMAT.md §4.1): y[i_out][w,m] += pw sum_u W[u,w] x[i_in][u,m];
//   - a uvw tensor product whose second input is the one-hot species (MACE's skip_tp, FORMAT.md
//     §4.2): per species s the map y[w,m] = c sum_u W[u,s,w] x[u,m], selected per row by the
//     GEMM's b_select (no batching by species, no one-hot expansion).
// Coefficients (path weights, couplings) are folded into the weights in float64 and rounded to T
// once, as the host engine does. forward() and backward() (the transpose) overwrite or
// accumulate; without accumulate, output blocks that no instruction reaches are zeroed.
#pragma once

#include <string>
#include <vector>

#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/model/model.h"
#include "clebsch/o3/irreps.h"

namespace clebsch::cuda {

/// One block map of a linear on device rows (e3nn's mul_ir layout): mul_in copies of a
/// d-dimensional irrep at off_in to mul_out copies at off_out, through the weights
/// B[u][w] = weights[w_offset + u * ldb + w] (a per-species map adds species[r] * select_stride
/// for row r). DeviceLinear's instructions and NequIP's self-connection are made of these.
struct DeviceLinearBlock {
  int off_in = 0, off_out = 0, mul_in = 0, mul_out = 0, d = 1;
  long long w_offset = 0, ldb = 0, select_stride = 0;
  /// A per-species block's transposed copy, Bt[s][w][u] at weights[t_offset + ...] (-1: none):
  /// the generic GEMM (a selected map has no cuBLAS form) reads B one output column per thread,
  /// and the transpose's columns are B's rows, a stride of ldb apart; from the copy they are
  /// adjacent. Measured before: the backward of MACE's 10k x 128 x 128 skip map took 0.69 ms
  /// against the forward's 0.08 ms.
  long long t_offset = -1;

  /// Appends the transposed copy of this block's @p num_select matrices (in @p w, which holds
  /// the block's weights at w_offset) to @p w and records where it starts.
  template <class T>
  void append_transposed(std::vector<T>& w, int num_select) {
    t_offset = static_cast<long long>(w.size());
    w.resize(w.size() + static_cast<std::size_t>(num_select) * mul_out * mul_in);
    T* t = w.data() + t_offset;
    for (int sel = 0; sel < num_select; ++sel)
      for (int o = 0; o < mul_out; ++o)
        for (int u = 0; u < mul_in; ++u)
          *t++ = w[static_cast<std::size_t>(w_offset + u * ldb + sel * select_stride + o)];
  }

  /// The strided GEMM (generic_kernels.h), batched over the d components, of this block on the
  /// n rows X -> Y, or with @p transpose of its transpose, from Y's block back to X's (X then
  /// holds the output-side rows). alpha is 1; beta is the caller's (0 as returned).
  /// @p species: per-row weight selection, or null.
  template <class T>
  GemmArgs gemm(bool transpose, long long n, const T* X, long long ldx, T* Y, long long ldy,
                const T* weights, const int* species) const {
    GemmArgs g{};
    g.m = n, g.batch = d;
    g.a_batch = 1, g.c_batch = 1, g.b_batch = 0;
    g.a_col = d, g.c_col = d;
    g.lda = ldx, g.ldc = ldy;
    g.b = weights + w_offset;
    g.b_select = species;
    g.b_select_stride = select_stride;
    if (!transpose) {
      g.a = X + off_in, g.c = Y + off_out;
      g.k = mul_in, g.n = mul_out;
      g.ldb = ldb, g.b_col = 1;
    } else {
      g.a = X + off_out, g.c = Y + off_in;
      g.k = mul_out, g.n = mul_in;
      g.ldb = 1, g.b_col = ldb;
      if (species && t_offset >= 0) {
        g.b = weights + t_offset;
        g.ldb = mul_in, g.b_col = 1;
        g.b_select_stride = static_cast<long long>(mul_out) * mul_in;
      }
    }
    g.alpha = 1.0;
    return g;
  }
};

template <class T>
class DeviceLinear {
 public:
  DeviceLinear() = default;
  /// o3.Linear.
  DeviceLinear(DeviceBackend& backend, const model::Linear& linear);
  /// The species-selected map of a uvw product with one-hot species input (S x 0e).
  /// @throws ModelFormatError (naming @p where) if @p tp is not of that form.
  DeviceLinear(DeviceBackend& backend, const model::TensorProduct& tp, int num_species,
               const std::string& where);

  int dim_in() const { return dim_in_; }
  int dim_out() const { return dim_out_; }
  const Irreps& irreps_in() const { return in_; }
  const Irreps& irreps_out() const { return out_; }
  bool per_species() const { return per_species_; }

  /// Y[r] (+)= map(X[r]) for r < n; rows at X + r*ldx, Y + r*ldy. @p species (device, [n]) is
  /// required for a per-species map and ignored otherwise.
  void forward(const GenericKernels& gk, long long n, const T* X, long long ldx, T* Y,
               long long ldy, bool accumulate, const int* species, Stream s) const;
  /// gX[r] (+)= map^T(gY[r]).
  void backward(const GenericKernels& gk, long long n, const T* gY, long long ldy, T* gX,
                long long ldx, bool accumulate, const int* species, Stream s) const;

 private:
  struct Ins : DeviceLinearBlock {
    int i_in = 0, i_out = 0;  // the blocks of irreps_in and irreps_out it maps
  };
  void run(const GenericKernels& gk, bool transpose, long long n, const T* X, long long ldx, T* Y,
           long long ldy, bool accumulate, const int* species, Stream s) const;
  Irreps in_, out_;
  int dim_in_ = 0, dim_out_ = 0;
  bool per_species_ = false;
  std::vector<Ins> ins_;
  DeviceArray<T> weights_;
};

}  // namespace clebsch::cuda
