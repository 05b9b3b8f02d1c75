// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The engines' edge orderings (kernels/graph/edge_orderings.h), checked by brute force on random
// graphs: the sort by centre is stable, batches are whole centres within the edge cap (a centre
// above the cap alone), and each batch's local receiver CSR and by-sender order describe exactly
// its own edges, numbered from the batch's first. The device builder (edge_order_kernels.h, on
// the emulated backend) gives the host's orderings array for array on centre-sorted graphs and
// declines unsorted graphs and out-of-range indices. The batch size rule both engines use
// (edge_batch_budget.h): the option decides; else one batch while every layer's weights fit a
// quarter of the memory, batches that fit an eighth beyond.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/cuda/graph/edge_batch_budget.h"
#include "clebsch/cuda/graph/edge_order_kernels.h"
#include "clebsch/cuda/graph/edge_orderings.h"

namespace clebsch::cuda {
namespace {

struct Graph {
  std::size_t L, N;
  std::vector<int> center, neighbor;
};

Graph random_graph(std::size_t L, std::size_t N, std::size_t E, unsigned seed) {
  std::mt19937 rng(seed);
  Graph g{L, N, {}, {}};
  for (std::size_t e = 0; e < E; ++e) {
    // Skewed centres: some centres get many edges, some none.
    const std::size_t c = std::min<std::size_t>(L - 1, std::size_t(rng() % L) * (rng() % 3) / 2);
    g.center.push_back(int(c));
    g.neighbor.push_back(int(rng() % N));
  }
  return g;
}

void check(const Graph& g, std::size_t cap) {
  const std::size_t E = g.center.size();
  const EdgeOrderings o =
      order_edges_by_centre(g.L, g.N, E, g.center.data(), g.neighbor.data(), cap);
  // Stable sort by centre.
  for (std::size_t q = 0; q < E; ++q) {
    ASSERT_EQ(o.centre[q], g.center[o.perm[q]]);
    ASSERT_EQ(o.sender[q], g.neighbor[o.perm[q]]);
    if (q > 0) {
      ASSERT_LE(o.centre[q - 1], o.centre[q]);
      if (o.centre[q - 1] == o.centre[q]) ASSERT_LT(o.perm[q - 1], o.perm[q]);
    }
  }
  const std::size_t B = o.num_batches();
  ASSERT_GE(B, 1u);
  ASSERT_EQ(o.batch_centre.front(), 0);
  ASSERT_EQ(o.batch_centre.back(), int(g.L));
  ASSERT_EQ(o.batch_edge.back(), int(E));
  if (cap == 0) EXPECT_EQ(B, 1u);
  for (std::size_t b = 0; b < B; ++b) {
    const int r0 = o.batch_centre[b], r1 = o.batch_centre[b + 1];
    const int e0 = o.batch_edge[b], e1 = o.batch_edge[b + 1];
    ASSERT_LT(r0, r1);
    ASSERT_EQ(e0, o.centre_ptr[r0]);
    ASSERT_EQ(e1, o.centre_ptr[r1]);
    // Within the cap, or one centre alone.
    if (cap > 0) EXPECT_TRUE(std::size_t(e1 - e0) <= cap || r1 - r0 == 1) << "batch " << b;
    // Greedy: the next batch's first centre would not have fitted.
    if (cap > 0 && b + 1 < B) EXPECT_GT(std::size_t(o.centre_ptr[r1 + 1] - e0), cap);
    for (int r = r0; r <= r1; ++r) ASSERT_EQ(o.local_centre_ptr[b + r], o.centre_ptr[r] - e0);
    std::vector<int> seen;
    const int* ptr = o.sender_ptr.data() + b * (g.N + 1);
    ASSERT_EQ(ptr[0], 0);
    ASSERT_EQ(ptr[g.N], e1 - e0);
    for (std::size_t s = 0; s < g.N; ++s)
      for (int k = ptr[s]; k < ptr[s + 1]; ++k) {
        const int local = o.by_sender[e0 + k];
        ASSERT_GE(local, 0);
        ASSERT_LT(local, e1 - e0);
        ASSERT_EQ(o.sender[e0 + local], int(s));
        if (k > ptr[s]) ASSERT_LT(o.by_sender[e0 + k - 1], local);  // stable
        seen.push_back(local);
      }
    std::sort(seen.begin(), seen.end());
    for (int k = 0; k < e1 - e0; ++k) ASSERT_EQ(seen[k], k);  // each edge once
    for (int q = e0; q < e1; ++q) ASSERT_EQ(o.local_centre[q], o.centre[q] - r0);
  }
}

TEST(EdgeOrderings, BatchesAreWholeCentresWithTheirOwnOrders) {
  for (unsigned seed : {1u, 2u, 3u}) {
    const Graph g = random_graph(40, 55, 600, seed);
    for (std::size_t cap : {std::size_t(0), std::size_t(1), std::size_t(17), std::size_t(150),
                            std::size_t(600), std::size_t(10000)}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " cap " + std::to_string(cap));
      check(g, cap);
    }
  }
}

TEST(EdgeOrderings, NoEdgesAndNoAtoms) {
  check(Graph{5, 7, {}, {}}, 3);
  const EdgeOrderings o = order_edges_by_centre(0, 0, 0, nullptr, nullptr, 4);
  EXPECT_EQ(o.num_batches(), 1u);
  EXPECT_EQ(o.local_centre_ptr, std::vector<int>{0});
}

Graph sorted_by_centre(Graph g) {
  std::vector<std::size_t> idx(g.center.size());
  for (std::size_t e = 0; e < idx.size(); ++e) idx[e] = e;
  std::stable_sort(idx.begin(), idx.end(),
                   [&](std::size_t a, std::size_t b) { return g.center[a] < g.center[b]; });
  Graph s{g.L, g.N, {}, {}};
  for (std::size_t e : idx) s.center.push_back(g.center[e]), s.neighbor.push_back(g.neighbor[e]);
  return s;
}

struct DeviceGraph {
  DeviceArray<int> species, center, neighbor;
  DeviceGraph(DeviceBackend& b, const Graph& g, int num_species)
      : species(b), center(b), neighbor(b) {
    std::vector<int> sp(g.N);
    for (std::size_t n = 0; n < g.N; ++n) sp[n] = int(n) % num_species;
    species.upload(sp), center.upload(g.center), neighbor.upload(g.neighbor);
  }
};

TEST(EdgeBatchBudget, OneBatchWhileTheKeptWeightsFitAQuarterElseBatchesOfAnEighth) {
  const EdgeBatchBudget b{100, 40};
  // A quarter of the memory keeps 2000 edges' weights; an eighth holds batches of 2500 edges.
  const std::size_t memory = 800000;
  EXPECT_EQ(b.max_batch_edges(2000, 100, 0, memory), 0u);
  EXPECT_EQ(b.max_batch_edges(2001, 100, 0, memory), 2500u);
  EXPECT_EQ(b.max_batch_edges(2000, 100, 7, memory), 7u);  // the option decides
  EXPECT_EQ(b.max_batch_edges(0, 0, 0, 0), 0u);            // no edges: one batch
  EXPECT_EQ(b.max_batch_edges(10, 1, 0, 100), 1u);         // never batches of 0 edges
}

TEST(EdgeBatchBudget, BatchesKeepTheirCentresRowsWithinASixteenthOfTheDevice) {
  // 50 values per centre: a sixteenth of the memory (50,000 values) holds 1,000 centres' rows.
  EdgeBatchBudget b{1, 1};
  b.batch_per_centre = 50;
  const std::size_t memory = 800000;
  EXPECT_EQ(b.max_batch_edges(20000, 1000, 0, memory), 0u);  // every centre's rows fit: one batch
  // 4,000 centres of 20 edges each: batches of 1,000 centres' edges, although the weights fit.
  EXPECT_EQ(b.max_batch_edges(80000, 4000, 0, memory), 20000u);
  // Both limits: the smaller batch (the weights' eighth, 100,000 / 40 = 2,500 edges).
  EdgeBatchBudget w{100, 40};
  w.batch_per_centre = 50;
  EXPECT_EQ(w.max_batch_edges(80000, 4000, 0, memory), 2500u);
  EXPECT_EQ(w.max_batch_edges(80000, 4000, 3, memory), 3u);  // the option still decides
}

TEST(EdgeBatchBudget, RowsKeptWhileTheyFitAQuarterElseABatchHoldsItsShare) {
  // 180 kept values per centre and 1 per edge: a quarter of the memory (200,000 values) keeps
  // 1,000 centres' of 20 edges each.
  EdgeBatchBudget b{1, 1};
  b.batch_per_centre = 30, b.rows_per_centre = 180, b.rows_per_edge = 1;
  const std::size_t memory = 800000;
  EXPECT_TRUE(b.keep_rows(1000, 20000, memory));
  EXPECT_FALSE(b.keep_rows(1001, 20000, memory));
  EXPECT_FALSE(b.keep_rows(1000, 20001, memory));
  // 4,000 centres of 20 edges: kept, a batch holds 30 values per centre (1,666 centres in a
  // sixteenth: 33,320 edges); made again, 30 + 180 + 20 = 230 (217 centres: 4,340 edges).
  EXPECT_EQ(b.max_batch_edges(80000, 4000, 0, memory, true), 33320u);
  EXPECT_EQ(b.max_batch_edges(80000, 4000, 0, memory, false), 4340u);
  EXPECT_EQ(b.max_batch_edges(80000, 4000, 9, memory, false), 9u);  // the option decides
  EdgeBatchBudget none{1, 1};  // nothing kept per centre (NequIP): always kept
  EXPECT_TRUE(none.keep_rows(1u << 30, 1u << 30, memory));
}

TEST(EdgeOrderKernels, EqualTheHostOrderingsAndDeclineWhatTheyCannotOrder) {
  // Threads last to first: the atomic scatter then fills each segment backwards, and only the
  // segment sort makes the order the host's.
  EmulationOptions reversed;
  reversed.reverse_thread_order = true;
  std::shared_ptr<DeviceBackend> b(make_emulated_backend(reversed));
  EdgeOrderKernels k(*b);
  DeviceEdgeOrderings d;
  d.bind(*b);
  for (unsigned seed : {4u, 5u}) {
    const Graph g = sorted_by_centre(random_graph(30, 47, 400, seed));
    DeviceGraph dg(*b, g, 3);
    for (std::size_t cap : {std::size_t(0), std::size_t(1), std::size_t(60), std::size_t(400)}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " cap " + std::to_string(cap));
      const EdgeOrderings h =
          order_edges_by_centre(g.L, g.N, g.center.size(), g.center.data(), g.neighbor.data(), cap);
      ASSERT_TRUE(k.build(d, g.L, g.N, g.center.size(), 3, dg.species.data(), dg.center.data(),
                          dg.neighbor.data(), cap, nullptr));
      EXPECT_EQ(d.batch_centre, h.batch_centre);
      EXPECT_EQ(d.batch_edge, h.batch_edge);
      EXPECT_EQ(d.perm.download(), h.perm);
      EXPECT_EQ(d.centre.download(), h.centre);
      EXPECT_EQ(d.sender.download(), h.sender);
      EXPECT_EQ(d.centre_ptr.download(), h.centre_ptr);
      EXPECT_EQ(d.local_centre.download(), h.local_centre);
      EXPECT_EQ(d.local_centre_ptr.download(), h.local_centre_ptr);
      EXPECT_EQ(d.sender_ptr.download(), h.sender_ptr);
      EXPECT_EQ(d.by_sender.download(), h.by_sender);
    }
  }
  const Graph sorted = sorted_by_centre(random_graph(30, 47, 400, 6));
  {
    Graph unsorted = sorted;
    std::swap(unsorted.center[10], unsorted.center[300]);
    DeviceGraph dg(*b, unsorted, 3);
    EXPECT_FALSE(k.build(d, unsorted.L, unsorted.N, 400, 3, dg.species.data(), dg.center.data(),
                         dg.neighbor.data(), 0, nullptr));
  }
  {
    Graph bad = sorted;
    bad.neighbor[7] = int(bad.N);  // out of range
    DeviceGraph dg(*b, bad, 3);
    EXPECT_FALSE(k.build(d, bad.L, bad.N, 400, 3, dg.species.data(), dg.center.data(),
                         dg.neighbor.data(), 0, nullptr));
  }
  {
    DeviceGraph dg(*b, sorted, 3);
    EXPECT_FALSE(k.build(d, sorted.L, sorted.N, 400, 2, dg.species.data(), dg.center.data(),
                         dg.neighbor.data(), 0, nullptr));  // species 2 is not below 2
  }
}

}  // namespace
}  // namespace clebsch::cuda
