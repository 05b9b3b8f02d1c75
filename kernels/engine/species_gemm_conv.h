// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The species-factored convolution as GEMMs over slots (templates/species_gemm_conv.cuh.in): a
// slot is one (receiver, species present among the senders) pair. Per pass: `z` (one warp a
// slot) sums the slot's edges' h (x) Y into Z, one dense GEMM per path contracts Z with the
// path's columns of W4 (T_p = Z W4[:, p]), and `out` (one block a receiver) makes the CG
// contraction of T with the species' table rows; the backward runs `dt`, the GEMMs dZ (+)= dT_p
// W4[:, p]^T and `edges` (dE/dh and dE/dY of each edge from its slot's dZ). The GEMMs take what
// GenericKernels::gemm routes them to (cuBLAS, 3xTF32 in float32: exact to float32 rounding).
// The slots are sized by the species present among all senders, found by `mark` and `rank` and
// brought back to the host once per forward (one synchronisation).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/engine/species_factored_conv.h"

namespace clebsch::cuda {

class SpeciesGemmConv final : public SpeciesFactoredConv {
 public:
  /// Builds and loads the module for product @p tp with @p hidden hidden values per edge.
  /// @throws CapacityError when the product does not have this form's shape (a path without
  ///   weights, an edge-attribute block of multiplicity above 1), saying which; CudaError.
  SpeciesGemmConv(DeviceBackend& backend, const TensorProduct& tp, DType dtype, int hidden);

  void run(const GenericKernels& gk, Stream stream, Pass pass, const ConvBuffers& b,
           const void* table, const int* species, int num_species) override;
  void name_scratch(const std::string& prefix) override;
  const std::string& source() const override { return source_; }

 private:
  /// What the GEMMs need of each path: its attribute block and the columns of W4 it reads.
  struct PathGemm {
    int block, dim, mul, weight_offset;
    long long t_offset;  // its T rows' first value, per slot
  };

  void prepare_species(Stream stream, const int* species, long long num_senders, int num_species);
  void gemm_forward(const GenericKernels& gk, const unsigned char* z, unsigned char* t,
                    long long slots, const void* w4, Stream stream) const;
  void gemm_backward(const GenericKernels& gk, const unsigned char* t, unsigned char* z,
                     long long slots, const void* w4, Stream stream) const;

  std::string source_;
  std::unique_ptr<DeviceModule> module_;
  DType dtype_;
  int hidden_ = 0, num_weights_ = 0, dim_in2_ = 0, dim_out_ = 0, value_bytes_ = 0, mul_threads_ = 0;
  long long t_per_slot_ = 0;  // T values per slot
  std::vector<int> block_dim_, block_offset_;
  std::vector<int> block_first_path_;  // per attribute block: the first path reading it, or -1
  std::vector<PathGemm> paths_;
  // The species present, from the last forward: their count and the arrays of SpeciesGemmArgs.
  long long present_ = 0;
  int species_capacity_ = 0;
  DeviceArray<int> marks_;           // present, rank, slot_species, count: 3 * species + 1
  DeviceArray<unsigned char> rows_;  // Z then T
  DeviceArray<int> slot_edges_;
};

}  // namespace clebsch::cuda
