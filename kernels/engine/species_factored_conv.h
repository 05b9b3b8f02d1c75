// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The species-factored convolution of MACE's first layer, in either of its two forms:
//   - per-receiver blocks (species_conv.h): one block walks a receiver's species, sums Z and
//     contracts it with W4 itself;
//   - GEMMs over slots (species_gemm_conv.h): Z per (receiver, species present) slot, the W4
//     contraction as dense GEMMs, the CG contraction and the per-edge gradients as kernels of
//     their own.
// Both have the same inputs and outputs (those of ConvRunner's fused radial form with the
// senders' features a per-species table) and are exact to rounding and deterministic.
// make_species_factored_conv picks one: GEMMs over slots, unless CLEBSCH_SPECIES_FORM=block
// (run 34 on an H100, MACE-MP-0-medium-sized, 10k atoms: the step 24.3 -> 22.9 ms in float32,
// 42.9 -> 40.6 in float64).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/cuda/device/dtype.h"
#include "clebsch/cuda/generator/tp_launcher.h"
#include "clebsch/o3/tensor_product.h"

namespace clebsch::cuda {

class GenericKernels;
class TpProblem;

class SpeciesFactoredConv {
 public:
  virtual ~SpeciesFactoredConv();
  SpeciesFactoredConv(const SpeciesFactoredConv&) = delete;
  SpeciesFactoredConv& operator=(const SpeciesFactoredConv&) = delete;
  /// Pass::kForward (b.out) or Pass::kBackward (b.grad_h and b.grad_y, from b.grad_out) over the
  /// receivers of @p b (its receiver CSR), with the senders' features table[species[sender]]:
  /// @p table [num_species][dim_in1], @p species [b.num_senders]. b.x, b.w and b.grad_x are not
  /// read. A backward follows a forward over the same senders' species. @throws CapacityError
  /// for another pass or a missing buffer.
  /// @p gk runs the GEMM form's GEMMs.
  virtual void run(const GenericKernels& gk, Stream stream, Pass pass, const ConvBuffers& b,
                   const void* table, const int* species, int num_species) = 0;
  /// Synchronises, returns and clears the status word (bit 0: edges skipped for an index or a
  /// species out of range).
  unsigned take_status(Stream stream);
  /// Names the device buffers the form keeps between its kernels in the backend's ledger.
  virtual void name_scratch(const std::string& prefix) { (void)prefix; }
  /// The generated device source (for tests and register checks).
  virtual const std::string& source() const = 0;

 protected:
  /// Allocates the status word on @p backend.
  explicit SpeciesFactoredConv(DeviceBackend& backend);
  /// Checks a run's pass and buffers (@throws CapacityError naming what is wrong); false when
  /// there is nothing to do (no receivers).
  static bool check_run(Pass pass, const ConvBuffers& b, const void* table, const int* species);

  DeviceBackend& backend_;
  unsigned* status_ = nullptr;  // bit 0: edges skipped for an index or species out of range
};

/// The product shape both forms need: every path with weights, every edge-attribute block of
/// multiplicity 1. @throws CapacityError naming the path, prefixed by @p what.
void check_species_paths(const TpProblem& p, const std::string& what);

/// Device source of both forms: `__device__ void NAME(real* out, int u, const real
/// (&acc)[kAccLen])`, which stores channel u's accumulators (the output blocks' values one after
/// another, block b's from @p acc_offset[b]) into a receiver's output row.
std::string species_store_out_function(const TpProblem& p, const std::vector<int>& acc_offset,
                                       const std::string& name);

/// The form CLEBSCH_SPECIES_FORM names ("block" or "gemm"; GEMMs over slots when unset) for
/// product
/// @p tp with @p hidden hidden values per edge. @throws CapacityError where the product does not
/// have the form's shape; Error for another CLEBSCH_SPECIES_FORM.
std::unique_ptr<SpeciesFactoredConv> make_species_factored_conv(DeviceBackend& backend,
                                                                const TensorProduct& tp,
                                                                DType dtype, int hidden);

}  // namespace clebsch::cuda
