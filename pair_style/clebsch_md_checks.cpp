// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The MD-side checks of pair_style clebsch and clebsch/kk (see clebsch_md_checks.h): lost atoms,
// overlapping atoms and a non-finite engine output, each a LAMMPS error naming atom IDs and the
// step. The scans are cheap beside the model (one pass over the edges the model itself reads);
// the work of naming the atoms is done only once something is wrong.

#include "clebsch_md_checks.h"

#include "atom.h"
#include "comm.h"
#include "error.h"
#include "neighbor.h"
#include "output.h"
#include "thermo.h"
#include "update.h"

#include "clebsch/engine/mace_engine.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace LAMMPS_NS;

namespace clebsch_pair {

namespace {

  // How many offenders a message lists: enough to find them, short enough to read.
  constexpr std::size_t kListed = 8;

  std::string join(const std::vector<std::string> &items, std::size_t total)
  {
    std::string out;
    for (const auto &s : items) out += (out.empty() ? "" : ", ") + s;
    if (total > items.size()) out += fmt::format(" and {} more", total - items.size());
    return out;
  }

  bool finite3(const double *v)
  {
    return std::isfinite(v[0]) && std::isfinite(v[1]) && std::isfinite(v[2]);
  }

}    // namespace

double min_atom_distance()
{
  return clebsch::MaceEngine::kMinEdgeLength;
}

void order_center_edges(std::size_t begin, std::size_t end, int *neighbor, int *neighbor_atom,
                        double *vector, const tagint *tag)
{
  const std::size_t n = end - begin;
  if (n < 2) return;
  // Reused between calls: the plain style calls this once per atom per step.
  thread_local std::vector<std::size_t> perm;
  thread_local std::vector<int> nb, na;
  thread_local std::vector<double> vec;
  perm.resize(n);
  for (std::size_t k = 0; k < n; k++) perm[k] = begin + k;
  std::sort(perm.begin(), perm.end(), [&](std::size_t a, std::size_t b) {
    const tagint ta = tag[neighbor_atom[a]], tb = tag[neighbor_atom[b]];
    if (ta != tb) return ta < tb;
    for (int c = 0; c < 3; c++)
      if (vector[3 * a + c] != vector[3 * b + c]) return vector[3 * a + c] < vector[3 * b + c];
    return false;
  });
  nb.assign(neighbor + begin, neighbor + end);
  na.assign(neighbor_atom + begin, neighbor_atom + end);
  vec.assign(vector + 3 * begin, vector + 3 * end);
  for (std::size_t k = 0; k < n; k++) {
    const std::size_t from = perm[k] - begin;
    neighbor[begin + k] = nb[from];
    neighbor_atom[begin + k] = na[from];
    for (int c = 0; c < 3; c++) vector[3 * (begin + k) + c] = vec[3 * from + c];
  }
}

void check_edge_lengths(LAMMPS *lmp, const StepEdges &edges)
{
  const double dmin = min_atom_distance(), min_sq = dmin * dmin;
  std::vector<std::string> pairs;
  std::size_t count = 0;
  bool nonfinite = false;
  for (std::size_t e = 0; e < edges.num_edges; e++) {
    const double *v = edges.vector + 3 * e;
    const double rsq = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
    if (!bad_edge_length_sq(rsq, min_sq)) continue;
    const tagint ti = edges.tag[edges.center[e]], tj = edges.tag[edges.neighbor_atom[e]];
    // A full list holds each pair twice: name it once, from its lower ID.
    if (ti > tj) continue;
    count++;
    nonfinite |= !std::isfinite(rsq);
    if (pairs.size() < kListed)
      pairs.push_back(std::isfinite(rsq)
                          ? fmt::format("{} and {} ({:.4g} A apart)", ti, tj, std::sqrt(rsq))
                          : fmt::format("{} and {} (non-finite distance)", ti, tj));
  }
  if (count == 0) return;
  lmp->error->one(FLERR,
                  "Pair style clebsch: at step {}, atoms {} are closer than the {} A the model "
                  "allows (overlapping atoms{}): check the data file for duplicated atoms, or "
                  "the run for instability (time step too long, atoms too hot)",
                  lmp->update->ntimestep, join(pairs, count), dmin,
                  nonfinite ? ", or non-finite coordinates" : "");
}

void check_engine_output(LAMMPS *lmp, double energy, const double *atom_energy, int nlocal,
                         const StepEdges &edges, const double *gradient)
{
  const tagint *tag = edges.tag;
  std::vector<std::string> atoms, pairs;
  std::size_t natoms = 0, npairs = 0;
  if (atom_energy)
    for (int i = 0; i < nlocal; i++)
      if (!std::isfinite(atom_energy[i])) {
        natoms++;
        if (atoms.size() < kListed) atoms.push_back(fmt::format("{} ({})", tag[i], atom_energy[i]));
      }
  for (std::size_t e = 0; e < edges.num_edges; e++)
    if (!finite3(gradient + 3 * e)) {
      npairs++;
      if (pairs.size() < kListed)
        pairs.push_back(fmt::format("{}-{}", tag[edges.center[e]], tag[edges.neighbor_atom[e]]));
    }
  if (natoms == 0 && npairs == 0 && std::isfinite(energy)) return;

  std::string what;
  if (natoms) what += fmt::format("the energy of atoms {}", join(atoms, natoms));
  if (npairs)
    what +=
        fmt::format("{}the forces between atoms {}", what.empty() ? "" : "; ", join(pairs, npairs));
  if (what.empty())
    what = atom_energy ? fmt::format("the energy summed over this rank's {} atoms ({}), while "
                                     "each atom's is finite",
                                     nlocal, energy)
                       : fmt::format("the energy of this rank's {} atoms ({})", nlocal, energy);
  lmp->error->one(FLERR,
                  "Pair style clebsch: the model gave a non-finite result (NaN or inf) at step "
                  "{}: {}. The model file's weights or this structure (far outside the "
                  "training data) overflow the network; the run cannot continue",
                  lmp->update->ntimestep, what);
}

void check_lost_atoms(LAMMPS *lmp)
{
  // Atoms leave a rank (or the box) only when LAMMPS exchanges them, which it does on the steps
  // it rebuilds the neighbor list: a cheap sum then, nothing on the other steps.
  if (lmp->neighbor->ago != 0) return;
  if (!lmp->output->thermo || lmp->output->thermo->lostflag != Thermo::ERROR) return;
  Atom *atom = lmp->atom;
  bigint mine = atom->nlocal, total = 0;
  MPI_Allreduce(&mine, &total, 1, MPI_LMP_BIGINT, MPI_SUM, lmp->world);
  if (total == atom->natoms) return;

  // Name the missing IDs: a presence table over every ID the run may hold (IDs are 1..natoms
  // unless the input chose otherwise; the largest one present covers the rest).
  tagint maxtag = 0, mymax = 0;
  for (int i = 0; i < atom->nlocal; i++) mymax = std::max(mymax, atom->tag[i]);
  MPI_Allreduce(&mymax, &maxtag, 1, MPI_LMP_TAGINT, MPI_MAX, lmp->world);
  maxtag = std::max<tagint>(maxtag, static_cast<tagint>(atom->natoms));
  std::string ids = "(too many atoms to list)";
  if (maxtag <= 100000000) {
    std::vector<unsigned char> here(static_cast<std::size_t>(maxtag) + 1, 0), all(here.size(), 0);
    for (int i = 0; i < atom->nlocal; i++) here[atom->tag[i]] = 1;
    MPI_Allreduce(here.data(), all.data(), static_cast<int>(all.size()), MPI_UNSIGNED_CHAR, MPI_MAX,
                  lmp->world);
    std::vector<std::string> missing;
    std::size_t count = 0;
    for (tagint t = 1; t <= maxtag; t++)
      if (!all[t]) {
        count++;
        if (missing.size() < kListed) missing.push_back(std::to_string(t));
      }
    ids = count ? join(missing, count) : "(not found among IDs 1.." + std::to_string(maxtag) + ")";
  }
  lmp->error->all(FLERR,
                  "Pair style clebsch: lost atoms at step {}: {} of {} atoms remain; missing "
                  "atom IDs {}. An atom left a non-periodic box or moved farther than a "
                  "subdomain in one step (flew off: forces too large, or the time step too "
                  "long); 'thermo_modify lost warn' lets the run go on without them",
                  lmp->update->ntimestep, total, atom->natoms, ids);
}

}    // namespace clebsch_pair
