// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Pieces shared by pair_style clebsch and its Kokkos twin clebsch/kk, so the two turn the
// engine's per-edge gradients into the same forces and virials: the edge virial, and the width of
// the newton-off ghost tally. Usable in Kokkos kernels (host or device) and in plain host code.
#pragma once

#if defined(KOKKOS_INLINE_FUNCTION)
#define CLEBSCH_PAIR_INLINE KOKKOS_INLINE_FUNCTION
#else
#define CLEBSCH_PAIR_INLINE inline
#endif

namespace clebsch_pair {

/// Values per ghost atom in the newton-off reverse communication: force (3) + per-atom virial (6).
constexpr int kGhostTallyWidth = 9;

/// Virial of one edge in LAMMPS's Voigt order (xx, yy, zz, xy, xz, yz): W = -sym(v (x) g), where
/// v = x_neighbor - x_center and g = dE/dv. Half goes to each atom of the edge (LAMMPS's
/// convention for pair terms; the halves sum to the global virial).
CLEBSCH_PAIR_INLINE void edge_virial(const double v[3], const double g[3], double w[6])
{
  w[0] = -v[0] * g[0];
  w[1] = -v[1] * g[1];
  w[2] = -v[2] * g[2];
  w[3] = -0.5 * (v[0] * g[1] + v[1] * g[0]);
  w[4] = -0.5 * (v[0] * g[2] + v[2] * g[0]);
  w[5] = -0.5 * (v[1] * g[2] + v[2] * g[1]);
}

}    // namespace clebsch_pair
