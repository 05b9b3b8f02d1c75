// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Counting sorts of the edges by centre and, per batch, by sender (see edge_orderings.h).
#include "clebsch/cuda/graph/edge_orderings.h"

namespace clebsch::cuda {

void cut_batches(const std::vector<int>& centre_ptr, std::size_t max_batch_edges,
                 std::vector<int>& batch_centre, std::vector<int>& batch_edge) {
  const std::size_t L = centre_ptr.size() - 1;
  const std::size_t E = static_cast<std::size_t>(centre_ptr.back());
  // Greedily up to max_batch_edges edges; a batch has at least one centre.
  const std::size_t cap = max_batch_edges == 0 ? E : max_batch_edges;
  batch_centre.assign(1, 0);
  batch_edge.assign(1, 0);
  for (std::size_t r = 0; r < L; ++r) {
    const std::size_t begin = static_cast<std::size_t>(batch_edge.back());
    const bool full = static_cast<std::size_t>(centre_ptr[r + 1]) - begin > cap;
    if (full && static_cast<int>(r) > batch_centre.back()) {
      batch_centre.push_back(static_cast<int>(r));
      batch_edge.push_back(centre_ptr[r]);
    }
  }
  batch_centre.push_back(static_cast<int>(L));
  batch_edge.push_back(static_cast<int>(E));
}

std::vector<int> local_centre_ptr(const std::vector<int>& centre_ptr,
                                  const std::vector<int>& batch_centre,
                                  const std::vector<int>& batch_edge) {
  const std::size_t B = batch_edge.size() - 1;
  std::vector<int> out(centre_ptr.size() - 1 + B);
  for (std::size_t b = 0; b < B; ++b)
    for (int r = batch_centre[b]; r <= batch_centre[b + 1]; ++r)
      out[b + r] = centre_ptr[r] - batch_edge[b];
  return out;
}

EdgeOrderings order_edges_by_centre(std::size_t num_local, std::size_t num_nodes,
                                    std::size_t num_edges, const int* center, const int* neighbor,
                                    std::size_t max_batch_edges) {
  const std::size_t L = num_local, N = num_nodes, E = num_edges;
  EdgeOrderings o;
  // Stable by centre, as the host engines' by-centre sums, so that a centre's edges are
  // contiguous (the receiver CSR needs no order array).
  o.centre_ptr.assign(L + 1, 0);
  o.perm.resize(E), o.centre.resize(E), o.sender.resize(E);
  for (std::size_t e = 0; e < E; ++e) ++o.centre_ptr[center[e] + 1];
  for (std::size_t i = 0; i < L; ++i) o.centre_ptr[i + 1] += o.centre_ptr[i];
  {
    std::vector<int> next(o.centre_ptr.begin(), o.centre_ptr.end() - 1);
    for (std::size_t e = 0; e < E; ++e) {
      const int q = next[center[e]]++;
      o.perm[q] = static_cast<int>(e);
      o.centre[q] = center[e];
      o.sender[q] = neighbor[e];
    }
  }
  cut_batches(o.centre_ptr, max_batch_edges, o.batch_centre, o.batch_edge);
  const std::size_t B = o.num_batches();
  o.local_centre.resize(E);
  o.local_centre_ptr = local_centre_ptr(o.centre_ptr, o.batch_centre, o.batch_edge);
  o.sender_ptr.assign(B * (N + 1), 0);
  o.by_sender.resize(E);
  for (std::size_t b = 0; b < B; ++b) {
    const int r0 = o.batch_centre[b];
    const int e0 = o.batch_edge[b], e1 = o.batch_edge[b + 1];
    int* ptr = o.sender_ptr.data() + b * (N + 1);
    for (int q = e0; q < e1; ++q) {
      o.local_centre[q] = o.centre[q] - r0;
      ++ptr[o.sender[q] + 1];
    }
    for (std::size_t i = 0; i < N; ++i) ptr[i + 1] += ptr[i];
    std::vector<int> next(ptr, ptr + N);
    for (int q = e0; q < e1; ++q) o.by_sender[e0 + next[o.sender[q]]++] = q - e0;
  }
  return o;
}

}  // namespace clebsch::cuda
