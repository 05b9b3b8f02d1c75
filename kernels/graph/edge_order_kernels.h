// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The edge orderings (edge_orderings.h) built on the device, for compute_device(): a graph that
// lives on the device (the Kokkos pair style's) is ordered where it is, instead of its index
// arrays being copied to the host, sorted there and copied back every step. The kernels
// (templates/edge_order_kernels.cuh.in) need the edges already sorted by centre, as LAMMPS's
// neighbor lists give them; for any other graph, and for any index out of range, build()
// declines and the engine takes the host path, which also words the error. The result equals
// order_edges_by_centre's, array for array (the by-sender segments are ranked after the atomic
// scatter), so both paths sum in the same order.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/cuda/graph/edge_orderings.h"

namespace clebsch::cuda {

class EdgeOrderKernels {
 public:
  /// Builds (or reads the cache of) and loads the module on @p backend.
  explicit EdgeOrderKernels(DeviceBackend& backend);

  /// Orders a device graph into @p out (batches of at most @p max_batch_edges edges, 0: one).
  /// Returns false, with @p out unspecified, when an index is out of range (centre, neighbour,
  /// species below @p num_species) or the centres are not sorted. Synchronises @p stream twice
  /// (the check's status word, then the centre CSR for the batch bounds).
  bool build(DeviceEdgeOrderings& out, std::size_t num_local, std::size_t num_nodes,
             std::size_t num_edges, int num_species, const int* species, const int* center,
             const int* neighbor, std::size_t max_batch_edges, Stream stream);

 private:
  DeviceBackend& backend_;
  std::unique_ptr<DeviceModule> module_;
  DeviceArray<int> counts_, chunk_sums_, batch_edge_, batch_centre_, scattered_;
  DeviceArray<unsigned> status_;
  std::vector<int> centre_ptr_, local_centre_ptr_;  // host copies (uploads read them)
};

}  // namespace clebsch::cuda
