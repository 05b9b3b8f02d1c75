// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The checks that make a long MD run break loudly instead of silently (issue 28), shared by
// pair_style clebsch and clebsch/kk: atoms lost from the box or between ranks, two atoms closer
// than the engines allow (or a non-finite distance), and a NaN or inf in the engine's output.
// Each failure is a LAMMPS error naming the atom IDs (tags) and the step. The scans run on host
// arrays; clebsch/kk reduces on its Views first and copies them here only when something is wrong.

#ifndef LMP_CLEBSCH_MD_CHECKS_H
#define LMP_CLEBSCH_MD_CHECKS_H

#include "lmptype.h"

#include <cmath>
#include <cstddef>

namespace LAMMPS_NS {
class LAMMPS;
}

namespace clebsch_pair {

/// Shortest neighbor distance (A) the engines accept: their radial bases are singular at r = 0
/// (clebsch::MaceEngine::kMinEdgeLength, which the NequIP engine shares).
double min_atom_distance();

/// The edges of one step, as the pair styles build them (host memory).
struct StepEdges {
  std::size_t num_edges = 0;
  const int *center = nullptr;               ///< local index of each edge's centre atom
  const int *neighbor_atom = nullptr;        ///< LAMMPS index (local or ghost) of its neighbor
  const double *vector = nullptr;            ///< [num_edges][3] x_neighbor - x_centre
  const LAMMPS_NS::tagint *tag = nullptr;    ///< atom->tag (local + ghost)
};

/// Whether an edge of this squared length is one the engines must not see: shorter than
/// min_atom_distance(), or not finite. Inline: the plain style tests every edge with it.
inline bool bad_edge_length_sq(double rsq, double min_sq)
{
  return !(rsq >= min_sq) || !std::isfinite(rsq);
}

/// Sorts the edges [@p begin, @p end) of one centre atom by their neighbor's ID, then by the
/// vector (two images of one atom): the engine's sums then run in an order set by the atoms
/// alone, not by the neighbor list's (which differs between a list built during a run and one
/// built at a run's setup), so that a restarted run continues the uninterrupted one bitwise.
void order_center_edges(std::size_t begin, std::size_t end, int *neighbor, int *neighbor_atom,
                        double *vector, const LAMMPS_NS::tagint *tag);

/// error->one naming the atom IDs and the step when an edge is shorter than
/// min_atom_distance() or not finite; returns when every edge is fine.
void check_edge_lengths(LAMMPS_NS::LAMMPS *lmp, const StepEdges &edges);

/// error->one naming the atom IDs and the step when the engine's output is not finite: the
/// total @p energy of this rank, the per-atom energies (@p atom_energy, [nlocal], may be null)
/// or the per-edge gradients (@p gradient, [num_edges][3]).
void check_engine_output(LAMMPS_NS::LAMMPS *lmp, double energy, const double *atom_energy,
                         int nlocal, const StepEdges &edges, const double *gradient);

/// Collective (every rank calls it at the same step): on a step where atoms were exchanged or
/// re-wrapped (a neighbor-list rebuild), compares the atoms owned on all ranks with
/// atom->natoms, and when atoms are missing stops with an error naming their IDs, unless the
/// input allows it (thermo_modify lost ignore/warn: then LAMMPS's own handling applies).
void check_lost_atoms(LAMMPS_NS::LAMMPS *lmp);

}    // namespace clebsch_pair

#endif
