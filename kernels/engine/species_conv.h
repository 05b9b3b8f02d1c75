// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The species-factored convolution (templates/species_conv.cuh.in): the uvu convolution of a
// layer whose sender features are a per-species table (MACE's first layer) and whose weights
// are W = h W4 from the radial MLP's last hidden rows, computed as per-receiver sums
// Z = sum_e h_e (x) Y_e contracted with W4 once per receiver and species, instead of W per edge.
// Same inputs and outputs as ConvRunner's fused radial form (ConvBuffers h, w4, y, grad_h,
// grad_y), exact to rounding, deterministic (fixed summation order) in either accumulation mode.
// Forward and backward only; no dE/dx (the table is a constant).
#pragma once

#include <memory>
#include <string>

#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/cuda/device/dtype.h"
#include "clebsch/cuda/generator/tp_launcher.h"
#include "clebsch/o3/tensor_product.h"

namespace clebsch::cuda {

class SpeciesConv {
 public:
  /// Builds and loads the module for product @p tp with @p hidden hidden values per edge.
  /// @throws CapacityError when the product does not have this form's shape (a path without
  ///   weights, an edge-attribute block of multiplicity above 1, shared memory beyond the
  ///   device's), saying which; CudaError.
  SpeciesConv(DeviceBackend& backend, const TensorProduct& tp, DType dtype, int hidden);
  ~SpeciesConv();
  SpeciesConv(const SpeciesConv&) = delete;
  SpeciesConv& operator=(const SpeciesConv&) = delete;

  /// Pass::kForward (b.out) or Pass::kBackward (b.grad_h and b.grad_y, from b.grad_out) over the
  /// receivers of @p b (its receiver CSR), with the senders' features table[species[sender]]:
  /// @p table [num_species][dim_in1], @p species [b.num_senders]. b.x, b.w and b.grad_x are not
  /// read. @throws CapacityError for another pass or a missing buffer.
  void run(Stream stream, Pass pass, const ConvBuffers& b, const void* table, const int* species,
           int num_species) const;
  /// Synchronises, returns and clears the status word (bit 0: edges skipped for an index or a
  /// species out of range).
  unsigned take_status(Stream stream);

  const std::string& source() const { return source_; }

 private:
  DeviceBackend& backend_;
  std::string source_;
  std::unique_ptr<DeviceModule> module_;
  unsigned threads_ = 0, recv_forward_ = 0, recv_backward_ = 0, forward_bytes_ = 0,
           backward_bytes_ = 0;
  int hidden_ = 0, dim_in2_ = 0, dim_out_ = 0, value_bytes_ = 0;
  unsigned* status_ = nullptr;
};

}  // namespace clebsch::cuda
