// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The host-side edge orderings both device engines (MACE, NequIP) upload before a step: edges
// stably sorted by centre, so that a centre's edges are contiguous and its sums run in the host
// engine's order, with a CSR over centres; DeviceEdgeOrderings is the engines' device copy.
//
// The sorted edges are cut into batches of whole centres (a batch: centres [r0, r1), edges
// [e0, e1)), so that an engine can run its per-edge weight stage (radial MLP, convolution)
// batch by batch and hold one batch's weights instead of all of them. Within a batch the
// convolution sees a problem of its own: edges numbered from e0, receivers from r0 (so the
// receiver pass writes only the batch's rows and each row once), and a by-sender order of the
// batch's edges with its CSR over all senders (grad_x is accumulated batch after batch).
// With one batch these are the whole graph's receiver and sender orders.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "clebsch/cuda/device/device_array.h"

namespace clebsch::cuda {

/// Edge orderings of a graph; "sorted" edges are the input edges stably sorted by centre.
struct EdgeOrderings {
  std::vector<int> perm;        ///< [E] input edge of each sorted edge
  std::vector<int> centre;      ///< [E] centre of each sorted edge
  std::vector<int> sender;      ///< [E] neighbour (sender) of each sorted edge
  std::vector<int> centre_ptr;  ///< [num_local+1] CSR of the sorted edges over centres
  // Batches: batch b holds centres [batch_centre[b], batch_centre[b+1]) and sorted edges
  // [batch_edge[b], batch_edge[b+1]).
  std::vector<int> batch_centre;      ///< [B+1]
  std::vector<int> batch_edge;        ///< [B+1]
  std::vector<int> local_centre;      ///< [E] centre minus its batch's first centre
  std::vector<int> local_centre_ptr;  ///< [num_local+B] batch b's CSR over its centres, from
                                      ///< batch_centre[b] + b, edges counted from its e0
  std::vector<int> sender_ptr;        ///< [B][num_nodes+1] batch b's CSR of by_sender over senders
  std::vector<int> by_sender;         ///< [E] per batch (from its e0): its edges (numbered from
                                      ///< e0) grouped by sender, stable within a sender
  std::size_t num_batches() const { return batch_edge.size() - 1; }
};

/// Orders the edges of a graph by centre and cuts them into batches of whole centres with at
/// most @p max_batch_edges edges each (a centre with more edges is a batch of its own); 0: one
/// batch. Indices are not checked: the caller validates them (centres below num_local,
/// neighbours below num_nodes).
EdgeOrderings order_edges_by_centre(std::size_t num_local, std::size_t num_nodes,
                                    std::size_t num_edges, const int* center, const int* neighbor,
                                    std::size_t max_batch_edges = 0);

/// The batches of a centre CSR (see order_edges_by_centre): @p batch_centre and @p batch_edge
/// receive the B+1 bounds.
void cut_batches(const std::vector<int>& centre_ptr, std::size_t max_batch_edges,
                 std::vector<int>& batch_centre, std::vector<int>& batch_edge);
/// EdgeOrderings::local_centre_ptr of those batches.
std::vector<int> local_centre_ptr(const std::vector<int>& centre_ptr,
                                  const std::vector<int>& batch_centre,
                                  const std::vector<int>& batch_edge);

/// The device copy of EdgeOrderings that both engines keep (same fields; the batch bounds also
/// on the host, for the launches).
struct DeviceEdgeOrderings {
  DeviceArray<int> perm, centre, sender, centre_ptr, local_centre, local_centre_ptr, sender_ptr,
      by_sender;
  std::vector<int> batch_centre, batch_edge;

  /// Binds the arrays and names them in the backend's ledger ("edges.perm", ...).
  void bind(DeviceBackend& backend) {
    const BufferScale e = BufferScale::kEdge, n = BufferScale::kAtom;
    const std::pair<DeviceArray<int>*, std::pair<const char*, BufferScale>> named[] = {
        {&perm, {"perm", e}},
        {&centre, {"centre", e}},
        {&sender, {"sender", e}},
        {&centre_ptr, {"centre_ptr", n}},
        {&local_centre, {"local_centre", e}},
        {&local_centre_ptr, {"local_centre_ptr", n}},
        {&sender_ptr, {"sender_ptr", n}},
        {&by_sender, {"by_sender", e}}};
    for (const auto& [a, label] : named) {
      a->bind(backend);
      a->name(std::string("edges.") + label.first, label.second);
    }
  }
  std::size_t num_batches() const { return batch_edge.size() - 1; }
  /// Uploads @p o and waits: the uploads read host vectors the caller is about to drop.
  void upload(const EdgeOrderings& o, DeviceBackend& backend, Stream stream) {
    perm.upload(o.perm, stream);
    centre.upload(o.centre, stream);
    sender.upload(o.sender, stream);
    centre_ptr.upload(o.centre_ptr, stream);
    local_centre.upload(o.local_centre, stream);
    local_centre_ptr.upload(o.local_centre_ptr, stream);
    sender_ptr.upload(o.sender_ptr, stream);
    by_sender.upload(o.by_sender, stream);
    batch_centre = o.batch_centre;
    batch_edge = o.batch_edge;
    backend.synchronize(stream);
  }
};

}  // namespace clebsch::cuda
