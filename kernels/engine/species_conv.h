// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The species-factored convolution in per-receiver blocks (templates/species_conv.cuh.in): the uvu
// convolution of a layer whose sender features are a per-species table (MACE's first layer) and
// whose weights are W = h W4 from the radial MLP's last hidden rows, computed as per-receiver sums
// Z = sum_e h_e (x) Y_e contracted with W4 once per receiver and species, instead of W per edge.
// Same inputs and outputs as ConvRunner's fused radial form (ConvBuffers h, w4, y, grad_h,
// grad_y), exact to rounding, deterministic (fixed summation order) in either accumulation mode.
// Forward and backward only; no dE/dx (the table is a constant).
#pragma once

#include <memory>
#include <string>

#include "clebsch/cuda/engine/species_factored_conv.h"

namespace clebsch::cuda {

class SpeciesConv final : public SpeciesFactoredConv {
 public:
  /// Builds and loads the module for product @p tp with @p hidden hidden values per edge.
  /// @throws CapacityError when the product does not have this form's shape (a path without
  ///   weights, an edge-attribute block of multiplicity above 1, shared memory beyond the
  ///   device's), saying which; CudaError.
  SpeciesConv(DeviceBackend& backend, const TensorProduct& tp, DType dtype, int hidden);

  void run(const GenericKernels& gk, Stream stream, Pass pass, const ConvBuffers& b,
           const void* table, const int* species, int num_species) override;
  const std::string& source() const override { return source_; }

 private:
  std::string source_;
  std::unique_ptr<DeviceModule> module_;
  unsigned threads_ = 0, recv_forward_ = 0, recv_backward_ = 0, forward_bytes_ = 0,
           backward_bytes_ = 0;
  int hidden_ = 0, dim_in2_ = 0, dim_out_ = 0, value_bytes_ = 0;
};

}  // namespace clebsch::cuda
