// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Counting sorts of the edges by centre and by sender (see edge_orderings.h).
#include "edge_orderings.h"

namespace clebsch::cuda {

EdgeOrderings order_edges_by_centre(std::size_t num_local, std::size_t num_nodes,
                                    std::size_t num_edges, const int* center, const int* neighbor) {
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
  o.sender_ptr.assign(N + 1, 0);
  o.by_sender.resize(E);
  for (std::size_t q = 0; q < E; ++q) ++o.sender_ptr[o.sender[q] + 1];
  for (std::size_t i = 0; i < N; ++i) o.sender_ptr[i + 1] += o.sender_ptr[i];
  {
    std::vector<int> next(o.sender_ptr.begin(), o.sender_ptr.end() - 1);
    for (std::size_t q = 0; q < E; ++q) o.by_sender[next[o.sender[q]]++] = static_cast<int>(q);
  }
  return o;
}

}  // namespace clebsch::cuda
