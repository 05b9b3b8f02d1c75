// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Implementation of pair_style clebsch/kk (see pair_clebsch_kokkos.h for the design).

#include "pair_clebsch_kokkos.h"

#include "atom_kokkos.h"
#include "atom_masks.h"
#include "comm.h"
#include "error.h"
#include "force.h"
#include "kokkos.h"
#include "memory_kokkos.h"
#include "neigh_list_kokkos.h"
#include "neigh_request.h"
#include "neighbor.h"
#include "utils.h"

#include "clebsch/cuda/engine/cuda_engine.h"
#include "clebsch/engine/engine.h"
#include "clebsch_md_checks_kokkos.h"
#include "clebsch_pair_common.h"

#include <algorithm>
#include <exception>

using namespace LAMMPS_NS;

namespace {

// The engine's view of LAMMPS communication between layers, through the Kokkos pair comm.
// The rows are always packed where DeviceType keeps its data; @p device_rows says that this is
// also where the engine keeps them (the device path), so the engine passes them in place.
template <class DeviceType> class KokkosGhostExchange : public clebsch::GhostExchange {
 public:
  KokkosGhostExchange(PairClebschKokkos<DeviceType> *pair, bool device_rows) :
      pair_(pair), device_rows_(device_rows)
  {
  }
  void forward(double *rows, int width) override { pair_->exchange_forward_kokkos(rows, width); }
  void forward(float *rows, int width) override { pair_->exchange_forward_kokkos(rows, width); }
  void reverse(double *rows, int width) override { pair_->exchange_reverse_kokkos(rows, width); }
  void reverse(float *rows, int width) override { pair_->exchange_reverse_kokkos(rows, width); }
  bool accepts_device_rows() const override { return device_rows_; }

 private:
  PairClebschKokkos<DeviceType> *pair_;
  bool device_rows_;
};

// Kokkos' stream for DeviceType (null where it has none: host spaces, the emulated backend).
template <class DeviceType> void *kokkos_stream()
{
#ifdef KOKKOS_ENABLE_CUDA
  if constexpr (std::is_same_v<typename DeviceType::execution_space, Kokkos::Cuda>)
    return static_cast<void *>(typename DeviceType::execution_space().cuda_stream());
#endif
  return nullptr;
}

// Atomic add of a double to LAMMPS's accumulators, which are float with KOKKOS_PREC single.
template <class T> KOKKOS_INLINE_FUNCTION void atomic_add_to(T *target, const double value)
{
  Kokkos::atomic_add(target, static_cast<T>(value));
}

// Whether the host can read memory of DeviceType (Kokkos OpenMP/Serial, or /kk/host).
template <class DeviceType>
constexpr bool kHostReadable =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename DeviceType::memory_space>::accessible;

}    // namespace

/* ---------------------------------------------------------------------- */

template <class DeviceType>
PairClebschKokkos<DeviceType>::PairClebschKokkos(LAMMPS *lmp) : PairClebsch(lmp)
{
  respa_enable = 0;
  kokkosable = 1;
  reverse_comm_device = 1;
  atomKK = (AtomKokkos *) atom;
  execution_space = ExecutionSpaceFromDevice<DeviceType>::space;
  datamask_read = EMPTY_MASK;
  datamask_modify = EMPTY_MASK;
  // On a GPU the model runs on the GPU by default: the host engine cannot read device Views.
  if constexpr (!kHostReadable<DeviceType>) device_name_ = "gpu";
}

template <class DeviceType> int PairClebschKokkos<DeviceType>::gpu_ordinal() const
{
  // The GPU Kokkos runs on (LAMMPS's '-k on g N' and its per-rank assignment): the engine's
  // buffers and Kokkos' Views must live on one device.
#ifdef KOKKOS_ENABLE_CUDA
  if constexpr (std::is_same_v<typename DeviceType::execution_space, Kokkos::Cuda>)
    return typename DeviceType::execution_space().cuda_device();
#endif
  return PairClebsch::gpu_ordinal();
}

template <class DeviceType> PairClebschKokkos<DeviceType>::~PairClebschKokkos()
{
  // Kernels are a separate functor, so this object is never copied into a kernel; the guard is
  // LAMMPS's convention and harmless.
  if (copymode) return;
  memoryKK->destroy_kokkos(k_eatom, eatom);
  memoryKK->destroy_kokkos(k_vatom, vatom);
  eatom = nullptr;
  vatom = nullptr;
}

/* ---------------------------------------------------------------------- */

template <class DeviceType> void PairClebschKokkos<DeviceType>::init_style()
{
  // The plain style's checks (model, units, atom IDs) and its full neighbor list request, made
  // a Kokkos request on this style's execution space.
  PairClebsch::init_style();
  if constexpr (!kHostReadable<DeviceType>)
    if (device_name_ != "gpu")
      error->all(FLERR,
                 "Pair style clebsch/kk: device {} cannot read Kokkos' GPU data; use "
                 "device gpu, or pair_style clebsch/kk/host for the host engine",
                 device_name_);
  auto request = neighbor->find_request(this);
  request->set_kokkos_host(std::is_same_v<DeviceType, LMPHostType> &&
                           !std::is_same_v<DeviceType, LMPDeviceType>);
  request->set_kokkos_device(std::is_same_v<DeviceType, LMPDeviceType>);
  request->enable_full();
  if (comm->me == 0)
    utils::logmesg(lmp, "Clebsch: {} evaluates the model {}\n", force->pair_style,
                   engine_reads_views()
                       ? "on the Kokkos Views in place (CUDA engine, compute_device)"
                       : "through the engine's host interface");
}

template <class DeviceType> double PairClebschKokkos<DeviceType>::init_one(int i, int j)
{
  const double cut = PairClebsch::init_one(i, j);
  ntypes_tables_ = -1;    // the directed cutoffs may have changed: refill the View
  return cut;
}

template <class DeviceType>
template <class View>
void PairClebschKokkos<DeviceType>::grow(View &view, size_t n, const char *label)
{
  // Grow with headroom, never shrink: the graph changes size a little every step.
  if (view.extent(0) < n)
    view =
        View(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), n + n / 5 + 16);
}

/* ---------------------------------------------------------------------- */

template <class DeviceType> void PairClebschKokkos<DeviceType>::compute(int eflag_in, int vflag_in)
{
  ev_init(eflag_in, vflag_in, 0);

  if (eflag_atom) {
    memoryKK->destroy_kokkos(k_eatom, eatom);
    memoryKK->create_kokkos(k_eatom, eatom, maxeatom, "clebsch:eatom");
    k_.d_eatom = k_eatom.template view<DeviceType>();
  }
  if (vflag_atom) {
    memoryKK->destroy_kokkos(k_vatom, vatom);
    memoryKK->create_kokkos(k_vatom, vatom, maxvatom, "clebsch:vatom");
    k_.d_vatom = k_vatom.template view<DeviceType>();
  }

  atomKK->sync(execution_space, X_MASK | F_MASK | TYPE_MASK | TAG_MASK);
  k_.x = atomKK->k_x.template view<DeviceType>();
  k_.f = atomKK->k_f.template view<DeviceType>();
  k_.type = atomKK->k_type.template view<DeviceType>();
  k_.tag = atomKK->k_tag.template view<DeviceType>();

  auto *k_list = static_cast<NeighListKokkos<DeviceType> *>(list);
  k_.d_numneigh = k_list->d_numneigh;
  k_.d_neighbors = k_list->d_neighbors;
  k_.d_ilist = k_list->d_ilist;

  // The plain style's MD checks (clebsch_md_checks.h), reduced on the Views.
  clebsch_pair::check_lost_atoms(lmp);
  build_graph_kokkos();
  clebsch_pair::check_edge_lengths_kokkos<DeviceType>(lmp, k_, nedges_,
                                                      atom->nlocal + atom->nghost);
  run_engine();
  atomKK->modified(execution_space, F_MASK);
}

/* ----------------------------------------------------------------------
   the atomic graph, built on the execution space from LAMMPS's Views
------------------------------------------------------------------------- */

template <class DeviceType> void PairClebschKokkos<DeviceType>::build_graph_kokkos()
{
  const int nlocal = atom->nlocal;
  const int nall = nlocal + atom->nghost;
  const int inum = list->inum;
  owners_only_ = comm->nprocs == 1;
  k_.nlocal = nlocal;
  k_.owners_only = owners_only_ ? 1 : 0;

  // Per-type tables (type -> species, directed cutoff^2) from the plain style's host tables.
  const int ntp1 = atom->ntypes + 1;
  if (ntypes_tables_ != atom->ntypes) {
    k_.d_type_to_species = typename Kernels::IntView("clebsch:type_to_species", ntp1);
    k_.d_cutsq = Kokkos::View<double **, DeviceType>("clebsch:cutsq_directed", ntp1, ntp1);
    auto h_species = Kokkos::create_mirror_view(k_.d_type_to_species);
    auto h_cutsq = Kokkos::create_mirror_view(k_.d_cutsq);
    for (int a = 0; a < ntp1; a++) {
      h_species(a) = type_to_species_[a];
      for (int b = 0; b < ntp1; b++) h_cutsq(a, b) = cutsq_directed_[a * ntp1 + b];
    }
    Kokkos::deep_copy(k_.d_type_to_species, h_species);
    Kokkos::deep_copy(k_.d_cutsq, h_cutsq);
    ntypes_tables_ = atom->ntypes;
  }

  if (owners_only_) {
    // One rank: every ghost is an image of a local atom, found by tag (our own table, so that
    // no atom map is required of the input).
    tagint max_tag = 0;
    auto tag = k_.tag;
    Kokkos::parallel_reduce(
        "clebsch:max_tag", Kokkos::RangePolicy<DeviceType>(0, nlocal),
        LAMMPS_LAMBDA(const int i, tagint &m) { m = tag(i) > m ? tag(i) : m; },
        Kokkos::Max<tagint>(max_tag));
    grow(k_.d_owner_of_tag, static_cast<size_t>(max_tag) + 1, "clebsch:owner_of_tag");
    Kokkos::deep_copy(k_.d_owner_of_tag, -1);
    Kokkos::parallel_for("clebsch:owner_map",
                         Kokkos::RangePolicy<DeviceType, typename Kernels::TagOwnerMap>(0, nlocal),
                         k_);
  }

  nnodes_ = owners_only_ ? nlocal : nall;
  grow(k_.d_species, nnodes_, "clebsch:species");
  Kokkos::parallel_for("clebsch:species",
                       Kokkos::RangePolicy<DeviceType, typename Kernels::TagSpecies>(0, nnodes_),
                       k_);

  // Edges: count per centre atom, exclusive scan, fill. The order (centre by centre, then the
  // neighbor list's order) is the plain style's.
  grow(k_.d_edge_offset, static_cast<size_t>(inum) + 1, "clebsch:edge_offset");
  Kokkos::parallel_for("clebsch:count_edges",
                       Kokkos::RangePolicy<DeviceType, typename Kernels::TagCountEdges>(0, inum),
                       k_);
  auto offset = k_.d_edge_offset;
  Kokkos::parallel_scan(
      "clebsch:edge_scan", Kokkos::RangePolicy<DeviceType>(0, inum + 1),
      LAMMPS_LAMBDA(const int ii, int &sum, const bool final) {
        const int count = ii < inum ? offset(ii) : 0;
        if (final) offset(ii) = sum;
        sum += count;
      });
  Kokkos::deep_copy(nedges_, Kokkos::subview(k_.d_edge_offset, inum));
  grow(k_.d_center, nedges_, "clebsch:center");
  grow(k_.d_neighbor, nedges_, "clebsch:neighbor");
  grow(k_.d_neighbor_atom, nedges_, "clebsch:neighbor_atom");
  grow(k_.d_vector, nedges_, "clebsch:vector");
  grow(k_.d_gradient, nedges_, "clebsch:gradient");
  if (!k_.d_missing_owner.data())
    k_.d_missing_owner = Kokkos::View<tagint, DeviceType>("clebsch:missing_owner");
  Kokkos::deep_copy(k_.d_missing_owner, tagint(0));
  Kokkos::parallel_for("clebsch:fill_edges",
                       Kokkos::RangePolicy<DeviceType, typename Kernels::TagFillEdges>(0, inum),
                       k_);
  tagint missing = 0;
  Kokkos::deep_copy(missing, k_.d_missing_owner);
  if (missing) error->one(FLERR, "Pair style clebsch: ghost atom {} has no local owner", missing);
}

template <class DeviceType>
KOKKOS_INLINE_FUNCTION void ClebschKokkosKernels<DeviceType>::operator()(TagOwnerMap,
                                                                         const int i) const
{
  d_owner_of_tag(tag(i)) = i;
}

template <class DeviceType>
KOKKOS_INLINE_FUNCTION void ClebschKokkosKernels<DeviceType>::operator()(TagSpecies,
                                                                         const int i) const
{
  d_species(i) = d_type_to_species(type(i));
}

template <class DeviceType>
KOKKOS_INLINE_FUNCTION void ClebschKokkosKernels<DeviceType>::operator()(TagCountEdges,
                                                                         const int ii) const
{
  const int i = d_ilist(ii);
  const int jnum = d_numneigh(i);
  const int ti = type(i);
  const double xi[3] = {x(i, 0), x(i, 1), x(i, 2)};
  int count = 0;
  for (int jj = 0; jj < jnum; jj++) {
    const int j = d_neighbors(i, jj) & NEIGHMASK;
    const double d0 = x(j, 0) - xi[0], d1 = x(j, 1) - xi[1], d2 = x(j, 2) - xi[2];
    if (d0 * d0 + d1 * d1 + d2 * d2 < d_cutsq(ti, type(j))) count++;
  }
  d_edge_offset(ii) = count;
}

template <class DeviceType>
KOKKOS_INLINE_FUNCTION void ClebschKokkosKernels<DeviceType>::operator()(TagFillEdges,
                                                                         const int ii) const
{
  const int i = d_ilist(ii);
  const int jnum = d_numneigh(i);
  const int ti = type(i);
  const double xi[3] = {x(i, 0), x(i, 1), x(i, 2)};
  int e = d_edge_offset(ii);
  for (int jj = 0; jj < jnum; jj++) {
    const int j = d_neighbors(i, jj) & NEIGHMASK;
    const double d0 = x(j, 0) - xi[0], d1 = x(j, 1) - xi[1], d2 = x(j, 2) - xi[2];
    if (d0 * d0 + d1 * d1 + d2 * d2 >= d_cutsq(ti, type(j))) continue;
    int node = j;
    if (owners_only && j >= nlocal) {
      const tagint t = tag(j);
      node = t < static_cast<tagint>(d_owner_of_tag.extent(0)) ? d_owner_of_tag(t) : -1;
      if (node < 0) {
        d_missing_owner() = t;    // any one of them: the host reports it
        node = i;
      }
    }
    d_center(e) = i;
    d_neighbor(e) = node;
    d_neighbor_atom(e) = j;
    d_vector(e, 0) = d0;
    d_vector(e, 1) = d1;
    d_vector(e, 2) = d2;
    e++;
  }
}

/* ----------------------------------------------------------------------
   the engine
------------------------------------------------------------------------- */

template <class DeviceType> void PairClebschKokkos<DeviceType>::run_engine()
{
  if (engine_reads_views())
    run_device_engine();
  else if constexpr (kHostReadable<DeviceType>)
    run_host_engine();
  else
    // init_style() makes device gpu the only choice here; this is a build where the engine's
    // backend cannot address Kokkos' device (the emulated backend beside Kokkos CUDA).
    error->one(FLERR,
               "Pair style clebsch/kk: the CUDA engine runs on the {} backend, which "
               "cannot address Kokkos' GPU data; use clebsch/kk/host",
               static_cast<clebsch::cuda::CudaEngine *>(engine_.get())->backend().name());
}

// Whether the engine can run on the graph Views in place: a CUDA engine on the memory Kokkos
// keeps them in (its real backend on Kokkos' GPU, the emulated one on host memory).
template <class DeviceType> bool PairClebschKokkos<DeviceType>::engine_reads_views() const
{
  // device gpu's engine comes from libclebsch_cuda's factory, which makes only CudaEngines.
  if (device_name_ != "gpu") return false;
  auto *engine = static_cast<clebsch::cuda::CudaEngine *>(engine_.get());
  return engine->backend().emulated() == kHostReadable<DeviceType>;
}

// The graph Views as the engine's graph (AtomGraph or DeviceAtomGraph: the same fields).
template <class DeviceType>
template <class Graph>
Graph PairClebschKokkos<DeviceType>::graph_of_views() const
{
  Graph graph;
  graph.num_local = atom->nlocal;
  graph.num_nodes = nnodes_;
  graph.species = k_.d_species.data();
  graph.num_edges = nedges_;
  graph.center = k_.d_center.data();
  graph.neighbor = k_.d_neighbor.data();
  graph.vector = k_.d_vector.data();
  return graph;
}

template <class DeviceType> void PairClebschKokkos<DeviceType>::run_device_engine()
{
  auto &engine = *static_cast<clebsch::cuda::CudaEngine *>(engine_.get());
  const int nlocal = atom->nlocal;
  const auto graph = graph_of_views<clebsch::cuda::DeviceAtomGraph>();
  if (eflag_atom) grow(k_.d_atom_energy, nlocal, "clebsch:atom_energy");
  if (!d_energy_.data()) d_energy_ = Kokkos::View<double, DeviceType>("clebsch:energy");
  clebsch::cuda::DeviceResult result;
  result.energy = d_energy_.data();
  result.atom_energy = eflag_atom ? k_.d_atom_energy.data() : nullptr;
  result.edge_gradient = k_.d_gradient.data();
  // The graph kernels ran on Kokkos' default instance; the engine's stream is the same one on a
  // GPU, a fence covers the emulated backend (no stream).
  Kokkos::fence();
  KokkosGhostExchange<DeviceType> exchange(this, true);
  try {
    engine.compute_device(graph, result, owners_only_ ? nullptr : &exchange,
                          kokkos_stream<DeviceType>());
  } catch (std::exception &e) {
    error->one(FLERR, "Pair style clebsch: {}", e.what());
  }
  double energy = 0;
  Kokkos::deep_copy(energy, d_energy_);
  clebsch_pair::check_engine_output_kokkos<DeviceType>(
      lmp, k_, nedges_, nlocal, atom->nlocal + atom->nghost, energy, eflag_atom != 0);
  tally_kokkos(energy);
}

template <class DeviceType> void PairClebschKokkos<DeviceType>::run_host_engine()
{
  // The engine's host interface on the Views in place (their memory is host memory here).
  const auto graph = graph_of_views<clebsch::AtomGraph>();
  Kokkos::fence();

  clebsch::EngineResult result;
  KokkosGhostExchange<DeviceType> exchange(this, false);
  try {
    engine_->compute(graph, result, owners_only_ ? nullptr : &exchange);
  } catch (std::exception &e) {
    error->one(FLERR, "Pair style clebsch: {}", e.what());
  }
  const int nlocal = atom->nlocal;
  {
    clebsch_pair::StepEdges edges;
    edges.num_edges = nedges_;
    edges.center = k_.d_center.data();
    edges.neighbor_atom = k_.d_neighbor_atom.data();
    edges.vector = k_.d_vector.data();
    edges.tag = k_.tag.data();
    const bool per_atom = result.atom_energy.size() == static_cast<size_t>(nlocal);
    clebsch_pair::check_engine_output(lmp, result.energy,
                                      per_atom ? result.atom_energy.data() : nullptr, nlocal, edges,
                                      result.edge_gradient.data());
  }
  using HostVec3 = Kokkos::View<const double *[3], Kokkos::LayoutRight, Kokkos::HostSpace,
                                Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Kokkos::deep_copy(Kokkos::subview(k_.d_gradient, std::make_pair(0, nedges_), Kokkos::ALL),
                    HostVec3(result.edge_gradient.data(), nedges_));
  if (eflag_atom) {
    grow(k_.d_atom_energy, nlocal, "clebsch:atom_energy");
    Kokkos::deep_copy(
        Kokkos::subview(k_.d_atom_energy, std::make_pair(0, nlocal)),
        Kokkos::View<const double *, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
            result.atom_energy.data(), nlocal));
  }
  tally_kokkos(result.energy);
}

/* ----------------------------------------------------------------------
   forces, energies and virials from the per-edge gradients g = dE/dv, v = x_j - x_i:
   F_i += g, F_j -= g, edge virial W = -sym(v (x) g), half to each atom of the edge
------------------------------------------------------------------------- */

template <class DeviceType> void PairClebschKokkos<DeviceType>::tally_kokkos(double energy)
{
  // Reads the engine's outputs from the Views: k_.d_gradient (dE/dvector per edge) and, with
  // eflag_atom, k_.d_atom_energy.
  const int nlocal = atom->nlocal;
  const int nall = nlocal + atom->nghost;
  // Ghost contributions go through our own reverse communication when LAMMPS does not sum
  // ghost forces (newton pair off); with newton on LAMMPS's own reverse comm does it.
  k_.own_ghost_tally = (!owners_only_ && !force->newton_pair) ? 1 : 0;
  k_.eflag_atom = eflag_atom;
  k_.vflag_atom = vflag_atom;
  k_.vflag_global = vflag_global;

  if (eflag_global) eng_vdwl += energy;
  if (eflag_atom) {
    Kokkos::parallel_for(
        "clebsch:atom_energy",
        Kokkos::RangePolicy<DeviceType, typename Kernels::TagAtomEnergy>(0, nlocal), k_);
  }
  if (k_.own_ghost_tally) {
    if (k_.d_ghost_tally.extent(0) < static_cast<size_t>(nall))
      k_.d_ghost_tally = Kokkos::View<double **, Kokkos::LayoutRight, DeviceType>(
          "clebsch:ghost_tally", nall + nall / 5 + 16, clebsch_pair::kGhostTallyWidth);
    Kokkos::deep_copy(k_.d_ghost_tally, 0.0);
  }

  EV_FLOAT ev;
  Kokkos::parallel_reduce("clebsch:tally",
                          Kokkos::RangePolicy<DeviceType, typename Kernels::TagTally>(0, nedges_),
                          k_, ev);
  if (vflag_global)
    for (int k = 0; k < 6; k++) virial[k] += ev.v[k];

  if (k_.own_ghost_tally) {
    comm_mode_ = CommMode::kGhostTally;
    comm_kokkos(false, clebsch_pair::kGhostTallyWidth);
    comm_mode_ = CommMode::kNone;
  }
  if (eflag_atom) {
    k_eatom.template modify<DeviceType>();
    k_eatom.sync_host();
  }
  if (vflag_atom) {
    k_vatom.template modify<DeviceType>();
    k_vatom.sync_host();
  }
}

template <class DeviceType>
KOKKOS_INLINE_FUNCTION void ClebschKokkosKernels<DeviceType>::operator()(TagAtomEnergy,
                                                                         const int i) const
{
  d_eatom(i) += d_atom_energy(i);
}

template <class DeviceType>
KOKKOS_INLINE_FUNCTION void ClebschKokkosKernels<DeviceType>::operator()(TagTally, const int e,
                                                                         EV_FLOAT &ev) const
{
  const double g[3] = {d_gradient(e, 0), d_gradient(e, 1), d_gradient(e, 2)};
  const double v[3] = {d_vector(e, 0), d_vector(e, 1), d_vector(e, 2)};
  const int i = d_center(e);
  const int j = owners_only ? d_neighbor(e) : d_neighbor_atom(e);
  // Atomic: edges of other centres write the same atoms concurrently.
  for (int c = 0; c < 3; c++) atomic_add_to(&f(i, c), g[c]);
  const bool to_tally = own_ghost_tally && j >= nlocal;
  if (to_tally)
    for (int c = 0; c < 3; c++) atomic_add_to(&d_ghost_tally(j, c), -g[c]);
  else
    for (int c = 0; c < 3; c++) atomic_add_to(&f(j, c), -g[c]);
  if (vflag_global || vflag_atom) {
    double w[6];
    clebsch_pair::edge_virial(v, g, w);
    if (vflag_global)
      for (int k = 0; k < 6; k++) ev.v[k] += w[k];
    if (vflag_atom) {
      for (int k = 0; k < 6; k++) atomic_add_to(&d_vatom(i, k), 0.5 * w[k]);
      if (to_tally)
        for (int k = 0; k < 6; k++) atomic_add_to(&d_ghost_tally(j, 3 + k), 0.5 * w[k]);
      else
        for (int k = 0; k < 6; k++) atomic_add_to(&d_vatom(j, k), 0.5 * w[k]);
    }
  }
}

#include "pair_clebsch_kokkos_comm_impl.h"

/* ---------------------------------------------------------------------- */

template <class DeviceType> double PairClebschKokkos<DeviceType>::memory_usage()
{
  double bytes = PairClebsch::memory_usage();
  auto span = [](const auto &v) {
    return static_cast<double>(v.span() * sizeof(typename std::decay_t<decltype(v)>::value_type));
  };
  bytes += span(k_.d_type_to_species) + span(k_.d_cutsq) + span(k_.d_owner_of_tag);
  bytes += span(k_.d_species) + span(k_.d_edge_offset) + span(k_.d_center);
  bytes += span(k_.d_neighbor) + span(k_.d_neighbor_atom) + span(k_.d_vector);
  bytes += span(k_.d_gradient) + span(k_.d_atom_energy) + span(k_.d_ghost_tally);
  return bytes;
}

namespace LAMMPS_NS {
template class PairClebschKokkos<LMPDeviceType>;
#ifdef LMP_KOKKOS_GPU
template class PairClebschKokkos<LMPHostType>;
#endif
}    // namespace LAMMPS_NS
