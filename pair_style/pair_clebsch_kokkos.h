// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// pair_style clebsch/kk: the Kokkos twin of pair_style clebsch. It reads positions, types, tags
// and the Kokkos full neighbor list where LAMMPS keeps them (the Kokkos execution space), builds
// the atomic graph there (owner mapping on one rank, directed per-type cutoffs), hands it to the
// engine, and writes forces, per-atom energies and virials back through Kokkos Views with the
// atomKK sync/modified protocol. Between message-passing layers the engine's ghost features
// travel through LAMMPS's Kokkos pair communication (pack/unpack_forward_comm_kokkos and the
// reverse pair) on Kokkos buffers.
//
// Engines: on Kokkos' CUDA space (clebsch/kk on a CUDA build, where `device gpu` is the default)
// the CUDA engine runs on the graph Views in place, on Kokkos' stream and GPU, writes dE/dvector
// and per-atom energies into Views, and hands its per-layer ghost rows to the Kokkos pair
// communication without leaving the device (CudaEngine::compute_device). On an execution space
// whose memory the host can read (Kokkos OpenMP or Serial, clebsch/kk/host on any build) the host
// engine runs on the Views in place, or `device gpu` takes the graph through its host interface;
// with the emulated CUDA backend (tests) the device path runs on host memory.
//
// Settings, coeff (model loading, element mapping) and init_one (directed cutoffs) are the plain
// style's; this class overrides only compute, init_style and the communication hooks. The
// kernels live in a separate functor (ClebschKokkosKernels) holding Views and scalars only, so
// no copy of the pair (which owns the engine) is ever made for a kernel.

#ifdef PAIR_CLASS
// clang-format off
PairStyle(clebsch/kk,PairClebschKokkos<LMPDeviceType>);
PairStyle(clebsch/kk/device,PairClebschKokkos<LMPDeviceType>);
PairStyle(clebsch/kk/host,PairClebschKokkos<LMPHostType>);
// clang-format on
#else

#ifndef LMP_PAIR_CLEBSCH_KOKKOS_H
#define LMP_PAIR_CLEBSCH_KOKKOS_H

#include "atom_kokkos.h"
#include "kokkos_base.h"
#include "kokkos_type.h"
#include "pair_clebsch.h"

namespace LAMMPS_NS {

// LAMMPS renamed its Kokkos precision types in September 2025 (KK_FLOAT, KK_ACC_FLOAT, transform
// views for per-atom tallies, double buffers in the Kokkos pair communication). Both APIs are
// supported: cmake/ClebschLAMMPS.cmake defines CLEBSCH_LAMMPS_KOKKOS_LEGACY_API for the older one
// (20250204: E_FLOAT/F_FLOAT DualViews, X_FLOAT communication buffers, double precision only).
#ifdef CLEBSCH_LAMMPS_KOKKOS_LEGACY_API
using ClebschKokkosEatomDual = DAT::tdual_efloat_1d;
using ClebschKokkosVatomDual = DAT::tdual_virial_array;
using ClebschKokkosCommBuffer = DAT::tdual_xfloat_1d;
template <class DeviceType>
using ClebschKokkosCommBufferUm = typename ArrayTypes<DeviceType>::t_xfloat_1d_um;
#else
#if !defined(LMP_KOKKOS_DOUBLE_DOUBLE) && !defined(LMP_KOKKOS_SINGLE_DOUBLE) && \
    !defined(LMP_KOKKOS_SINGLE_SINGLE)
#error "LAMMPS's KOKKOS precision macro is missing: build through cmake/ClebschLAMMPS.cmake"
#endif
using ClebschKokkosEatomDual = DAT::ttransform_kkacc_1d;
using ClebschKokkosVatomDual = DAT::ttransform_kkacc_1d_6;
using ClebschKokkosCommBuffer = DAT::tdual_double_1d;
template <class DeviceType>
using ClebschKokkosCommBufferUm = typename ArrayTypes<DeviceType>::t_double_1d_um;
#endif

/// Kernels of clebsch/kk: every View and scalar a stage reads, one tag per stage.
template <class DeviceType> struct ClebschKokkosKernels {
  // The only reduction through this functor is the edge tally's virial.
  typedef EV_FLOAT value_type;
  using AtomView =
      std::remove_cvref_t<decltype(std::declval<AtomKokkos &>().k_x.template view<DeviceType>())>;
  using ForceView =
      std::remove_cvref_t<decltype(std::declval<AtomKokkos &>().k_f.template view<DeviceType>())>;
  using TypeView = std::remove_cvref_t<
      decltype(std::declval<AtomKokkos &>().k_type.template view<DeviceType>())>;
  using TagView =
      std::remove_cvref_t<decltype(std::declval<AtomKokkos &>().k_tag.template view<DeviceType>())>;
  using EatomView = std::remove_cvref_t<
      decltype(std::declval<ClebschKokkosEatomDual &>().template view<DeviceType>())>;
  using VatomView = std::remove_cvref_t<
      decltype(std::declval<ClebschKokkosVatomDual &>().template view<DeviceType>())>;
  template <typename T>
  using Rows =
      Kokkos::View<T **, Kokkos::LayoutRight, DeviceType, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using IntView = Kokkos::View<int *, DeviceType>;
  using Vec3View = Kokkos::View<double *[3], Kokkos::LayoutRight, DeviceType>;

  struct TagSpecies {};
  struct TagOwnerMap {};
  struct TagCountEdges {};
  struct TagFillEdges {};
  struct TagAtomEnergy {};
  struct TagTally {};
  template <typename T> struct TagPackForward {
  };
  template <typename T> struct TagUnpackForward {
  };
  template <typename T> struct TagPackReverse {
  };
  template <typename T> struct TagUnpackReverse {
  };
  struct TagPackReverseTally {};
  struct TagUnpackReverseTally {};

  // Atoms and the neighbor list (LAMMPS's Views).
  AtomView x;
  ForceView f;
  TypeView type;
  TagView tag;
  typename ArrayTypes<DeviceType>::t_neighbors_2d d_neighbors;
  typename ArrayTypes<DeviceType>::t_int_1d d_ilist, d_numneigh;
  EatomView d_eatom;
  VatomView d_vatom;

  // Model tables.
  IntView d_type_to_species;                      // [ntypes+1]
  Kokkos::View<double **, DeviceType> d_cutsq;    // [ntypes+1][ntypes+1], [centre][neighbor]

  // The graph (node index = LAMMPS atom index, or its owner on one rank).
  IntView d_owner_of_tag;    // one rank: local index of each atom ID
  IntView d_species, d_edge_offset, d_center, d_neighbor, d_neighbor_atom;
  Vec3View d_vector, d_gradient;
  Kokkos::View<double *, DeviceType> d_atom_energy;
  Kokkos::View<tagint, DeviceType> d_missing_owner;    // tag of a ghost without owner, else 0
  Kokkos::View<double **, Kokkos::LayoutRight, DeviceType> d_ghost_tally;    // [nall][9]

  // Communication: the rows being exchanged and LAMMPS's buffers.
  Rows<double> d_rows_double;
  Rows<float> d_rows_float;
  Kokkos::View<int *, DeviceType, Kokkos::MemoryTraits<Kokkos::Unmanaged>> d_sendlist;
  ClebschKokkosCommBufferUm<DeviceType> d_buf;
  int width = 0, first = 0;

  int nlocal = 0, owners_only = 1, own_ghost_tally = 0;
  int eflag_atom = 0, vflag_atom = 0, vflag_global = 0;

  KOKKOS_INLINE_FUNCTION void operator()(TagSpecies, const int i) const;
  KOKKOS_INLINE_FUNCTION void operator()(TagOwnerMap, const int i) const;
  KOKKOS_INLINE_FUNCTION void operator()(TagCountEdges, const int ii) const;
  KOKKOS_INLINE_FUNCTION void operator()(TagFillEdges, const int ii) const;
  KOKKOS_INLINE_FUNCTION void operator()(TagAtomEnergy, const int i) const;
  KOKKOS_INLINE_FUNCTION void operator()(TagTally, const int e, EV_FLOAT &ev) const;
  template <typename T>
  KOKKOS_INLINE_FUNCTION void operator()(TagPackForward<T>, const int k) const;
  template <typename T>
  KOKKOS_INLINE_FUNCTION void operator()(TagUnpackForward<T>, const int k) const;
  template <typename T>
  KOKKOS_INLINE_FUNCTION void operator()(TagPackReverse<T>, const int k) const;
  template <typename T>
  KOKKOS_INLINE_FUNCTION void operator()(TagUnpackReverse<T>, const int k) const;
  KOKKOS_INLINE_FUNCTION void operator()(TagPackReverseTally, const int k) const;
  KOKKOS_INLINE_FUNCTION void operator()(TagUnpackReverseTally, const int k) const;

  template <typename T> KOKKOS_INLINE_FUNCTION const Rows<T> &rows() const
  {
    if constexpr (std::is_same_v<T, double>)
      return d_rows_double;
    else
      return d_rows_float;
  }
};

template <class DeviceType> class PairClebschKokkos : public PairClebsch, public KokkosBase {
 public:
  typedef DeviceType device_type;
  typedef ArrayTypes<DeviceType> AT;
  using Kernels = ClebschKokkosKernels<DeviceType>;

  PairClebschKokkos(class LAMMPS *);
  ~PairClebschKokkos() override;

  void compute(int, int) override;
  void init_style() override;
  double init_one(int, int) override;
  double memory_usage() override;

  int pack_forward_comm_kokkos(int, DAT::tdual_int_1d, ClebschKokkosCommBuffer &, int,
                               int *) override;
  void unpack_forward_comm_kokkos(int, int, ClebschKokkosCommBuffer &) override;
  int pack_reverse_comm_kokkos(int, int, ClebschKokkosCommBuffer &) override;
  void unpack_reverse_comm_kokkos(int, DAT::tdual_int_1d, ClebschKokkosCommBuffer &) override;
  // LAMMPS's host communication path (no GPU-aware MPI, clebsch/kk/host on a GPU build, or
  // 'package kokkos comm/pair/* host'): the same kernels, staged through device copies on a GPU.
  int pack_forward_comm(int, int *, double *, int, int *) override;
  void unpack_forward_comm(int, int, double *) override;
  int pack_reverse_comm(int, int, double *) override;
  void unpack_reverse_comm(int, int *, double *) override;

  /// Per-layer exchanges of the engine's node features (forward) and their gradients
  /// (reverse), on Kokkos buffers; @p rows must be addressable on DeviceType.
  template <typename T> void exchange_forward_kokkos(T *rows, int width);
  template <typename T> void exchange_reverse_kokkos(T *rows, int width);

  /// The graph Views from LAMMPS's (public: CUDA forbids device lambdas in non-public members).
  void build_graph_kokkos();

 protected:
  int gpu_ordinal() const override;
  void run_engine();
  void run_host_engine();
  void run_device_engine();
  bool engine_reads_views() const;
  template <class Graph> Graph graph_of_views() const;
  void tally_kokkos(double energy);
  void comm_kokkos(bool forward, int width);
  template <template <typename> class Tag> void for_rows(int n);
  int run_pack_forward(int n);
  void run_unpack_forward(int n);
  int run_pack_reverse(int n);
  void run_unpack_reverse(int n);
  template <class View> void grow(View &view, size_t n, const char *label);
  void host_list_on_device(int *list, int n);
  void buffer_on_device(double *buf, size_t count, bool copy_in);
  void buffer_to_host(double *buf, size_t count);

  Kernels k_;
  Kokkos::View<double, DeviceType> d_energy_;    // the device engine's total energy
  // Device copies of LAMMPS's host send list and buffer (host communication path on a GPU).
  Kokkos::View<int *, DeviceType> d_stage_list_;
  Kokkos::View<double *, DeviceType> d_stage_buf_;
  ClebschKokkosEatomDual k_eatom;
  ClebschKokkosVatomDual k_vatom;
  int nedges_ = 0;
  int nnodes_ = 0;
  int ntypes_tables_ = -1;    // ntypes the per-type Views were filled for
};

}    // namespace LAMMPS_NS

#endif
#endif
