// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The graph side of the MACE host engine's compute(): the whole graph is validated before any
// arithmetic (so that an invalid graph fails with one message naming the value, and never half
// way through a pass), then the internal edge orderings are built: edges sorted by centre (the
// forward pass gives every centre's row one owner) and by sender (the backward pass gives every
// sender's gradient row one owner), and both cut into tasks of whole centres or senders.
#include <cmath>
#include <cstdint>

#include "clebsch/engine/mace_engine_impl.h"
#include "clebsch/support/error.h"

namespace clebsch::mace_detail {

namespace {

// Whole centres (or senders) per task, about kTaskEdges edges and at most kTaskRows rows each.
void make_tasks(const std::vector<int>& ptr, std::vector<std::pair<int, int>>& tasks) {
  tasks.clear();
  const int n = static_cast<int>(ptr.size()) - 1;
  int begin = 0;
  for (int i = 0; i < n; ++i)
    if (static_cast<std::size_t>(ptr[i + 1] - ptr[begin]) >= kTaskEdges ||
        static_cast<std::size_t>(i + 1 - begin) >= kTaskRows || i + 1 == n) {
      tasks.push_back({begin, i + 1});
      begin = i + 1;
    }
}

// A stable counting sort of the items 0..n-1 by key[item] < num_keys: order[ptr[k]..ptr[k+1])
// are the items of key k, in increasing order.
void sort_by_key(std::size_t num_keys, std::size_t n, const int* key, std::vector<int>& ptr,
                 std::vector<int>& order) {
  ptr.assign(num_keys + 1, 0);
  for (std::size_t e = 0; e < n; ++e) ++ptr[key[e] + 1];
  for (std::size_t k = 0; k < num_keys; ++k) ptr[k + 1] += ptr[k];
  order.resize(n);
  std::vector<int> next(ptr.begin(), ptr.end() - 1);
  for (std::size_t e = 0; e < n; ++e) order[next[key[e]]++] = static_cast<int>(e);
}

}  // namespace

template <class T, class G>
void MaceImpl<T, G>::validate(const AtomGraph& g, GhostExchange* exchange) const {
  if (g.num_local > g.num_nodes)
    throw Error("graph has num_local = " + std::to_string(g.num_local) +
                " > num_nodes = " + std::to_string(g.num_nodes));
  if (g.num_nodes > static_cast<std::size_t>(INT32_MAX) ||
      g.num_edges > static_cast<std::size_t>(INT32_MAX))
    throw CapacityError("graph has " + std::to_string(g.num_nodes) + " nodes and " +
                        std::to_string(g.num_edges) + " edges; at most 2^31-1 of each");
  if (g.num_nodes > 0 && !g.species) throw Error("graph.species is null");
  if (g.num_edges > 0 && (!g.center || !g.neighbor || !g.vector))
    throw Error("graph has " + std::to_string(g.num_edges) + " edges but a null edge array");
  if (g.num_nodes > g.num_local && !exchange)
    throw Error("graph has " + std::to_string(g.num_nodes - g.num_local) +
                " ghost atoms but no GhostExchange was given");
  for (std::size_t n = 0; n < g.num_nodes; ++n)
    if (g.species[n] < 0 || g.species[n] >= S_)
      throw Error("atom " + std::to_string(n) + " has species " + std::to_string(g.species[n]) +
                  ", the model has " + std::to_string(S_) + " species (0.." +
                  std::to_string(S_ - 1) + ")");
  for (std::size_t e = 0; e < g.num_edges; ++e) {
    const int c = g.center[e], j = g.neighbor[e];
    if (c < 0 || static_cast<std::size_t>(c) >= g.num_local)
      throw Error("edge " + std::to_string(e) + " has centre " + std::to_string(c) +
                  ", not a local atom (0.." + std::to_string(g.num_local) + ")");
    if (j < 0 || static_cast<std::size_t>(j) >= g.num_nodes)
      throw Error("edge " + std::to_string(e) + " has neighbour " + std::to_string(j) +
                  ", not an atom (0.." + std::to_string(g.num_nodes) + ")");
    const double* v = g.vector + 3 * e;
    const double r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    if (!std::isfinite(r))
      throw Error("edge " + std::to_string(e) + " (centre " + std::to_string(c) + ", neighbour " +
                  std::to_string(j) + ") has a non-finite vector");
    const int sc = g.species[c], sj = g.species[j];
    const double rc = r_max_pairs[static_cast<std::size_t>(sc) * S_ + sj];
    if (!(r < rc))
      throw Error("edge " + std::to_string(e) + " (centre " + std::to_string(c) + ", neighbour " +
                  std::to_string(j) + ") has length " + fmt(r) + " A, not below the cutoff " +
                  fmt(rc) + " A of species pair (" + species_names[sc] + ", " + species_names[sj] +
                  ")");
    if (r < MaceEngine::kMinEdgeLength)
      throw Error("edge " + std::to_string(e) + " (centre " + std::to_string(c) + ", neighbour " +
                  std::to_string(j) + ") has length " + fmt(r) + " A, below the minimum " +
                  fmt(MaceEngine::kMinEdgeLength) + " A (overlapping atoms)");
  }
}

template <class T, class G>
void MaceImpl<T, G>::build_orderings(const AtomGraph& g) {
  // Internal edge order: by centre (stable), so a centre's edges are contiguous.
  sort_by_key(L_, E_, g.center, centre_ptr_, perm_);
  centre_.resize(E_);
  sender_.resize(E_);
  for (std::size_t q = 0; q < E_; ++q) {
    centre_[q] = g.center[perm_[q]];
    sender_[q] = g.neighbor[perm_[q]];
  }
  sort_by_key(N_, E_, sender_.data(), sender_ptr_, by_sender_);
  make_tasks(centre_ptr_, centre_tasks_);
  make_tasks(sender_ptr_, sender_tasks_);
}

#define CLEBSCH_INSTANTIATE(T, G)                                                 \
  template void MaceImpl<T, G>::validate(const AtomGraph&, GhostExchange*) const; \
  template void MaceImpl<T, G>::build_orderings(const AtomGraph&);
CLEBSCH_MACE_PRECISIONS(CLEBSCH_INSTANTIATE)
#undef CLEBSCH_INSTANTIATE

}  // namespace clebsch::mace_detail
