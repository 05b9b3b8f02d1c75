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
#include "clebsch/o3/irreps.h"
#include "clebsch/model/model.h"

namespace clebsch::cuda {

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
  struct Ins {
    int i_in, i_out, mul_in, mul_out, dim_m, off_in, off_out;
    long long w_offset;  // into weights_: block [mul_in][ldb] (per species: + s*select_stride)
    long long ldb, select_stride;
  };
  void run(const GenericKernels& gk, bool transpose, long long n, const T* X, long long ldx,
           T* Y, long long ldy, bool accumulate, const int* species, Stream s) const;
  Irreps in_, out_;
  int dim_in_ = 0, dim_out_ = 0;
  bool per_species_ = false;
  std::vector<Ins> ins_;
  DeviceArray<T> weights_;
};

}  // namespace clebsch::cuda
