// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// clebsch/kk's side of the MD checks (clebsch_md_checks.h): one reduction over the graph or the
// engine's output on the execution space per step; only when it finds a bad edge or a
// non-finite value are the Views copied to the host, where the plain style's scans name the
// atom IDs and stop the run.

#ifndef LMP_CLEBSCH_MD_CHECKS_KOKKOS_H
#define LMP_CLEBSCH_MD_CHECKS_KOKKOS_H

#include "clebsch_md_checks.h"

#include <Kokkos_Core.hpp>

#include <cmath>
#include <utility>

namespace clebsch_pair {

/// Host copies of the Views a check names atoms from (made only on failure).
template <class Kernels> struct HostEdgeCopies {
  Kokkos::View<int *, Kokkos::HostSpace> center, neighbor_atom;
  Kokkos::View<double *[3], Kokkos::LayoutRight, Kokkos::HostSpace> vector, gradient;
  Kokkos::View<LAMMPS_NS::tagint *, Kokkos::HostSpace> tag;

  HostEdgeCopies(const Kernels &k, int nedges, int nall) :
      center("clebsch:h_center", nedges), neighbor_atom("clebsch:h_neighbor_atom", nedges),
      vector("clebsch:h_vector", nedges), gradient("clebsch:h_gradient", nedges),
      tag("clebsch:h_tag", nall)
  {
    const auto edges = std::make_pair(0, nedges);
    Kokkos::deep_copy(center, Kokkos::subview(k.d_center, edges));
    Kokkos::deep_copy(neighbor_atom, Kokkos::subview(k.d_neighbor_atom, edges));
    Kokkos::deep_copy(vector, Kokkos::subview(k.d_vector, edges, Kokkos::ALL));
    Kokkos::deep_copy(gradient, Kokkos::subview(k.d_gradient, edges, Kokkos::ALL));
    Kokkos::deep_copy(tag, Kokkos::subview(k.tag, std::make_pair(0, nall)));
  }

  StepEdges edges() const
  {
    StepEdges e;
    e.num_edges = center.extent(0);
    e.center = center.data();
    e.neighbor_atom = neighbor_atom.data();
    e.vector = vector.data();
    e.tag = tag.data();
    return e;
  }
};

/// The graph's edges (k.d_vector) before the engine sees them: too short, or not finite.
template <class DeviceType, class Kernels>
void check_edge_lengths_kokkos(LAMMPS_NS::LAMMPS *lmp, const Kernels &k, int nedges, int nall)
{
  const double dmin = min_atom_distance(), min_sq = dmin * dmin;
  const auto vec = k.d_vector;
  int bad = 0;
  Kokkos::parallel_reduce(
      "clebsch:check_edge_lengths", Kokkos::RangePolicy<DeviceType>(0, nedges),
      KOKKOS_LAMBDA(const int e, int &n) {
        const double rsq = vec(e, 0) * vec(e, 0) + vec(e, 1) * vec(e, 1) + vec(e, 2) * vec(e, 2);
        if (bad_edge_length_sq(rsq, min_sq)) n++;
      },
      bad);
  if (bad == 0) return;
  const HostEdgeCopies<Kernels> host(k, nedges, nall);
  check_edge_lengths(lmp, host.edges());
}

/// The engine's output on the Views: k.d_gradient, and k.d_atom_energy when @p atom_energies
/// holds this step's per-atom energies; @p energy is the rank's total, already on the host.
template <class DeviceType, class Kernels>
void check_engine_output_kokkos(LAMMPS_NS::LAMMPS *lmp, const Kernels &k, int nedges, int nlocal,
                                int nall, double energy, bool atom_energies)
{
  const auto grad = k.d_gradient;
  const auto eatom = k.d_atom_energy;
  int bad = 0;
  Kokkos::parallel_reduce(
      "clebsch:check_output", Kokkos::RangePolicy<DeviceType>(0, nedges > nlocal ? nedges : nlocal),
      KOKKOS_LAMBDA(const int q, int &n) {
        if (q < nedges)
          for (int c = 0; c < 3; c++)
            if (!Kokkos::isfinite(grad(q, c))) n++;
        if (atom_energies && q < nlocal && !Kokkos::isfinite(eatom(q))) n++;
      },
      bad);
  if (bad == 0 && std::isfinite(energy)) return;
  const HostEdgeCopies<Kernels> host(k, nedges, nall);
  Kokkos::View<double *, Kokkos::HostSpace> h_eatom("clebsch:h_atom_energy", nlocal);
  if (atom_energies) Kokkos::deep_copy(h_eatom, Kokkos::subview(eatom, std::make_pair(0, nlocal)));
  check_engine_output(lmp, energy, atom_energies ? h_eatom.data() : nullptr, nlocal, host.edges(),
                      host.gradient.data());
}

}    // namespace clebsch_pair

#endif
