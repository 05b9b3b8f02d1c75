// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The graph checks of the NequIP engines: one function that the host engine (nequip_engine.cpp)
// and the CUDA engine (kernels/engine/nequip_cuda_engine.cpp) both call, so that an invalid graph
// fails with the same Error and the same message on either device.
#pragma once

#include <string>
#include <vector>

#include "clebsch/engine/engine.h"

namespace clebsch {

/// What the checks need to know about a NequIP model.
struct NequipGraphLimits {
  int num_species = 0;
  std::vector<double> r_max_pairs;         ///< [centre species][neighbour species]
  std::vector<std::string> species_names;  ///< for messages
};

/// Checks everything an engine relies on before any arithmetic, in a fixed order (counts and
/// pointers, ghosts without exchange, species, then edge by edge: centre, neighbour, finite
/// vector, non-zero length, cutoff of the species pair).
/// @param has_exchange whether the caller passed a GhostExchange
/// @param check_vectors false: skip everything about graph.vector (which may then be null), for
///   callers that check the geometry elsewhere (the CUDA engine on a device graph)
/// @throws Error (CapacityError for counts beyond 32-bit indices) naming the offending value,
///   every message prefixed "NequipEngine: ".
void check_nequip_graph(const AtomGraph& graph, bool has_exchange, const NequipGraphLimits& limits,
                        bool check_vectors = true);

}  // namespace clebsch
