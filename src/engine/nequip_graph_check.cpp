// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// check_nequip_graph (see nequip_graph_check.h).
#include "clebsch/engine/nequip_graph_check.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "clebsch/support/error.h"

namespace clebsch {
namespace {

std::string format_number(double v) {
  std::ostringstream s;
  s.precision(12);
  s << v;
  return s.str();
}

}  // namespace

void check_nequip_graph(const AtomGraph& g, bool has_exchange, const NequipGraphLimits& lim,
                        bool check_vectors) {
  const int num_species = lim.num_species;
  if (g.num_local > g.num_nodes)
    throw Error("NequipEngine: num_local = " + std::to_string(g.num_local) +
                " exceeds num_nodes = " + std::to_string(g.num_nodes));
  if (g.num_nodes > static_cast<std::size_t>(std::numeric_limits<int>::max()) ||
      g.num_edges > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw CapacityError("NequipEngine: " + std::to_string(g.num_nodes) + " nodes and " +
                        std::to_string(g.num_edges) + " edges exceed the 32-bit index range");
  if (g.num_nodes > 0 && !g.species) throw Error("NequipEngine: graph.species is null");
  if (g.num_edges > 0 && (!g.center || !g.neighbor || (check_vectors && !g.vector)))
    throw Error("NequipEngine: graph.center, neighbor or vector is null with " +
                std::to_string(g.num_edges) + " edges");
  if (g.num_nodes > g.num_local && !has_exchange)
    throw Error("NequipEngine: the graph has " + std::to_string(g.num_nodes - g.num_local) +
                " ghost nodes but no GhostExchange was given");
  for (std::size_t n = 0; n < g.num_nodes; ++n)
    if (g.species[n] < 0 || g.species[n] >= num_species)
      throw Error("NequipEngine: species[" + std::to_string(n) +
                  "] = " + std::to_string(g.species[n]) + " is out of range [0, " +
                  std::to_string(num_species) + ")");
  for (std::size_t e = 0; e < g.num_edges; ++e) {
    const int c = g.center[e], j = g.neighbor[e];
    if (c < 0 || static_cast<std::size_t>(c) >= g.num_local)
      throw Error("NequipEngine: edge " + std::to_string(e) + " has center " + std::to_string(c) +
                  ", not a local atom [0, " + std::to_string(g.num_local) + ")");
    if (j < 0 || static_cast<std::size_t>(j) >= g.num_nodes)
      throw Error("NequipEngine: edge " + std::to_string(e) + " has neighbor " + std::to_string(j) +
                  ", not a node [0, " + std::to_string(g.num_nodes) + ")");
    if (!check_vectors) continue;
    const double* v = g.vector + 3 * e;
    if (!(std::isfinite(v[0]) && std::isfinite(v[1]) && std::isfinite(v[2])))
      throw Error("NequipEngine: edge " + std::to_string(e) + " has a non-finite vector (" +
                  format_number(v[0]) + ", " + format_number(v[1]) + ", " + format_number(v[2]) +
                  ")");
    const double r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    if (r == 0)
      throw Error("NequipEngine: edge " + std::to_string(e) + " (center " + std::to_string(c) +
                  ", neighbor " + std::to_string(j) + ") has length 0");
    const int sc = g.species[c], sn = g.species[j];
    const double rc = lim.r_max_pairs[static_cast<std::size_t>(sc) * num_species + sn];
    if (r > rc)
      throw Error("NequipEngine: edge " + std::to_string(e) + " (center " + std::to_string(c) +
                  ", neighbor " + std::to_string(j) + ") has length " + format_number(r) +
                  ", beyond the cutoff " + format_number(rc) + " of species pair (" +
                  lim.species_names[sc] + ", " + lim.species_names[sn] + ")");
  }
}

}  // namespace clebsch
