// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Argument struct of the edge-ordering kernels (templates/edge_order_kernels.cuh.in), shared by
// host and device like device_args.h (CMake embeds it into the device source). Plain C only.
#pragma once

/// One struct for every kernel of the module; each kernel reads the members it names.
struct EdgeOrderArgs {
  const int* species;       ///< [num_nodes]
  const int* center;        ///< [num_edges], sorted by centre when the check passes
  const int* neighbor;      ///< [num_edges]
  const int* batch_edge;    ///< [num_batches+1] first edge of each batch
  const int* batch_centre;  ///< [num_batches+1] first centre of each batch
  int* centre_ptr;          ///< [num_local+1]
  int* counts;              ///< [num_batches*(num_nodes+1)] per batch and sender, then cursors
  int* scan;                ///< exclusive scan of counts (same size), then sender CSRs
  int* chunk_sums;          ///< [ceil(size/kScanChunk)]
  int* by_sender;           ///< [num_edges]
  int* scattered;           ///< [num_edges] by_sender before ranking: segments in atomic order
  int* local_centre;        ///< [num_edges]
  int* perm;                ///< [num_edges]
  unsigned* status;         ///< bit 0: an index out of range; bit 1: centres not sorted
  long long num_local, num_nodes, num_edges, num_species, num_batches, size;
};
