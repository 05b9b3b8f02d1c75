// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// e3nn's nn.Gate (FORMAT.md §4.5; host: src/nn/gate.h) on device rows in e3nn's mul_ir layout,
// with its backward: the model's gate converted once to index tables for the generic gate
// kernels (GateArgs, generic_kernels.cuh.in). One class for the NequIP gate after each
// convolution and MACE's non-linear interaction block (mace-torch
// RealAgnosticResidualNonLinearInteractionBlock), so both engines check a gate alike
// (model::check_gate) and evaluate it with the same kernels.
#pragma once

#include <string>

#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/model/model.h"

namespace clebsch::cuda {

template <class T>
class DeviceGate {
 public:
  DeviceGate() = default;
  /// @param where the context that error messages start with (e.g. "NequipEngine: layer 1 gate").
  /// @throws Error for indices or activations that do not fit the irreps, or an activation the
  ///   device kernels do not evaluate.
  DeviceGate(DeviceBackend& backend, const model::Gate& gate, const std::string& where);
  int dim_in() const { return dim_in_; }
  int dim_out() const { return dim_out_; }

  /// out[i][0:dim_out] (row stride ld_out) = gate(x[i]) for i < rows (x rows of dim_in).
  void forward(const GenericKernels& gk, long long rows, const T* x, T* out, long long ld_out,
               Stream s) const;
  /// gx[i] = gate^T(gy[i]) at x[i] (overwritten; gy row stride ld_out).
  void backward(const GenericKernels& gk, long long rows, const T* x, const T* gy, long long ld_out,
                T* gx, Stream s) const;

 private:
  GateArgs args(long long rows) const;
  int dim_in_ = 0, dim_out_ = 0;
  DeviceArray<int> src_, gate_, act_kind_, in_kind_, in_out_, in_dim_, in_gate_, in_act_kind_;
  DeviceArray<double> act_cst_, in_act_cst_;
};

}  // namespace clebsch::cuda
