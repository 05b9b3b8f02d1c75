// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The host-side edge orderings both device engines (MACE, NequIP) upload before a step: edges
// stably sorted by centre, so that a centre's edges are contiguous and its sums run in the host
// engine's order, with a CSR over centres and over senders and the by-sender order of the sorted
// edges; DeviceEdgeOrderings is the engines' device copy.
#pragma once

#include <cstddef>
#include <vector>

#include "device_array.h"

namespace clebsch::cuda {

/// Edge orderings of a graph; "sorted" edges are the input edges stably sorted by centre.
struct EdgeOrderings {
  std::vector<int> perm;        ///< [E] input edge of each sorted edge
  std::vector<int> centre;      ///< [E] centre of each sorted edge
  std::vector<int> sender;      ///< [E] neighbour (sender) of each sorted edge
  std::vector<int> centre_ptr;  ///< [num_local+1] CSR of the sorted edges over centres
  std::vector<int> sender_ptr;  ///< [num_nodes+1] CSR of by_sender over senders
  std::vector<int> by_sender;   ///< [E] sorted edges grouped by sender, stable within a sender
};

/// Orders the edges of a graph by centre. Indices are not checked: the caller validates them
/// (centres below num_local, neighbours below num_nodes).
EdgeOrderings order_edges_by_centre(std::size_t num_local, std::size_t num_nodes,
                                    std::size_t num_edges, const int* center, const int* neighbor);

/// The device copy of EdgeOrderings that both engines keep (same fields).
struct DeviceEdgeOrderings {
  DeviceArray<int> perm, centre, sender, centre_ptr, sender_ptr, by_sender;

  void bind(DeviceBackend& backend) {
    for (auto* a : {&perm, &centre, &sender, &centre_ptr, &sender_ptr, &by_sender})
      a->bind(backend);
  }
  /// Uploads @p o and waits: the uploads read host vectors the caller is about to drop.
  void upload(const EdgeOrderings& o, DeviceBackend& backend, Stream stream) {
    perm.upload(o.perm, stream);
    centre.upload(o.centre, stream);
    sender.upload(o.sender, stream);
    centre_ptr.upload(o.centre_ptr, stream);
    sender_ptr.upload(o.sender_ptr, stream);
    by_sender.upload(o.by_sender, stream);
    backend.synchronize(stream);
  }
};

}  // namespace clebsch::cuda
