// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// An op of the NequIP CUDA engine that the shared device pieces (DeviceLinear, DeviceMlp,
// DeviceGate) do not cover, converted once from its model:: description and kept on the device:
// NequipDeviceSelfConnection, NequIP's self-connection, a uvw FullyConnectedTensorProduct of
//     the features with the type embedding. The embedding takes one of num_species values, so
//     its sum is done at load time, K_s[u][w] = c sum_v W[u,v,w] a_s[v] (c the path's coupling,
//     which for a scalar second input is c times the identity), and a row costs one
//     species-selected linear map: strided GEMMs with per-row weight selection, batched over m.
// Rows are in e3nn's mul_ir layout (index u*(2l+1)+m inside a block).
#pragma once

#include <string>
#include <vector>

#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/nn/device_linear.h"
#include "clebsch/cuda/templates/nequip_device_args.h"
#include "clebsch/model/model.h"

namespace clebsch::cuda {

template <class T>
class NequipDeviceSelfConnection {
 public:
  NequipDeviceSelfConnection() = default;
  /// @throws Error naming @p where when @p tp is not a weighted uvw product with internal weights
  ///   and a scalar second input of the embedding's dimension.
  NequipDeviceSelfConnection(DeviceBackend& backend, const model::TensorProduct& tp,
                             const std::vector<double>& type_embedding, int num_species,
                             int embedding_dim, const std::string& where);
  int dim_in() const { return dim_in_; }
  int dim_out() const { return dim_out_; }

  /// Y[r] += sc(X[r], species[r]) for r < n (species on the device).
  void forward(const GenericKernels& gk, long long n, const T* X, long long ldx, T* Y,
               long long ldy, const int* species, Stream s) const;
  /// gX[r] += sc^T(gY[r]).
  void backward(const GenericKernels& gk, long long n, const T* gY, long long ldy, T* gX,
                long long ldx, const int* species, Stream s) const;

 private:
  void run(const GenericKernels& gk, bool transpose, long long n, const T* X, long long ldx, T* Y,
           long long ldy, const int* species, Stream s) const;
  std::vector<DeviceLinearBlock> blocks_;  // K' [species][mul_in][mul_out] in weights_
  DeviceArray<T> weights_;
  int dim_in_ = 0, dim_out_ = 0;
};

}  // namespace clebsch::cuda
