// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// EdgeOrderKernels (see edge_order_kernels.h).
#include "clebsch/cuda/graph/edge_order_kernels.h"

#include <algorithm>
#include <string>

#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/templates/edge_order_args.h"
#include "kernel_templates.h"

namespace clebsch::cuda {
namespace {

constexpr long long kScanChunk = 256;  // as templates/edge_order_kernels.cuh.in

ModuleSource module_source() {
  ModuleSource m;
  m.name = "clebsch_edge_order.cu";
  m.source = std::string("// Clebsch edge orderings\n") + templates::k_edge_order_args + "\n" +
             templates::k_edge_order_kernels;
  for (const char* k : {"clebsch_edges_check", "clebsch_edges_centre_ptr", "clebsch_edges_count",
                        "clebsch_scan_chunks", "clebsch_scan_chunk_sums", "clebsch_scan_finish",
                        "clebsch_edges_scatter", "clebsch_edges_rank"})
    m.kernels.push_back({k, "EdgeOrderArgs", false, 0});
  return m;
}

}  // namespace

EdgeOrderKernels::EdgeOrderKernels(DeviceBackend& backend)
    : backend_(backend),
      module_(backend.load(module_source())),
      counts_(backend),
      chunk_sums_(backend),
      batch_edge_(backend),
      batch_centre_(backend),
      scattered_(backend),
      status_(backend, 1) {
  counts_.name("edges.build: counts", BufferScale::kAtom);
  chunk_sums_.name("edges.build: chunk sums", BufferScale::kAtom);
  batch_edge_.name("edges.build: batch bounds", BufferScale::kFixed);
  batch_centre_.name("edges.build: batch bounds", BufferScale::kFixed);
  scattered_.name("edges.build: scattered", BufferScale::kEdge);
  status_.name("edges.build: status", BufferScale::kFixed);
}

bool EdgeOrderKernels::build(DeviceEdgeOrderings& out, std::size_t num_local, std::size_t num_nodes,
                             std::size_t num_edges, int num_species, const int* species,
                             const int* center, const int* neighbor, std::size_t max_batch_edges,
                             Stream s) {
  const long long L = static_cast<long long>(num_local), N = static_cast<long long>(num_nodes),
                  E = static_cast<long long>(num_edges);
  if (num_local > num_nodes || (N > 0 && !species) || (E > 0 && (!center || !neighbor)))
    return false;
  EdgeOrderArgs a{};
  a.species = species, a.center = center, a.neighbor = neighbor;
  a.status = status_.data();
  a.num_local = L, a.num_nodes = N, a.num_edges = E, a.num_species = num_species;
  auto run = [&](const char* name, long long n) {
    backend_.launch(module_->kernel(name), grid_for(n), s, a);
  };
  status_.zero(s);
  run("clebsch_edges_check", std::max(E, N));
  unsigned status = 0;
  backend_.download(&status, status_.data(), sizeof status, s);
  if (status != 0) return false;

  out.centre_ptr.resize(num_local + 1);
  out.perm.resize(num_edges);
  a.centre_ptr = out.centre_ptr.data(), a.perm = out.perm.data();
  run("clebsch_edges_centre_ptr", std::max(L + 1, E));
  centre_ptr_.resize(num_local + 1);
  backend_.download(centre_ptr_.data(), out.centre_ptr.data(), centre_ptr_.size() * sizeof(int), s);
  cut_batches(centre_ptr_, max_batch_edges, out.batch_centre, out.batch_edge);
  const long long B = static_cast<long long>(out.num_batches());
  local_centre_ptr_ = local_centre_ptr(centre_ptr_, out.batch_centre, out.batch_edge);
  out.local_centre_ptr.upload(local_centre_ptr_, s);
  batch_edge_.upload(out.batch_edge, s);
  batch_centre_.upload(out.batch_centre, s);
  out.centre.resize(num_edges), out.sender.resize(num_edges);
  backend_.copy(out.centre.data(), center, num_edges * sizeof(int), s);
  backend_.copy(out.sender.data(), neighbor, num_edges * sizeof(int), s);

  const long long size = B * (N + 1);
  counts_.resize(size);
  counts_.zero(s);
  chunk_sums_.resize((size + kScanChunk - 1) / kScanChunk);
  out.sender_ptr.resize(size);
  out.local_centre.resize(num_edges);
  out.by_sender.resize(num_edges);
  scattered_.resize(num_edges);
  a.batch_edge = batch_edge_.data(), a.batch_centre = batch_centre_.data();
  a.counts = counts_.data(), a.scan = out.sender_ptr.data(), a.chunk_sums = chunk_sums_.data();
  a.by_sender = out.by_sender.data(), a.scattered = scattered_.data();
  a.local_centre = out.local_centre.data();
  a.num_batches = B, a.size = size;
  run("clebsch_edges_count", E);
  run("clebsch_scan_chunks", (size + kScanChunk - 1) / kScanChunk);
  run("clebsch_scan_chunk_sums", 1);
  run("clebsch_scan_finish", (size + kScanChunk - 1) / kScanChunk);
  run("clebsch_edges_scatter", E);
  run("clebsch_edges_rank", E);
  // The uploads above read host vectors that outlive the call (out's and this object's).
  return true;
}

}  // namespace clebsch::cuda
