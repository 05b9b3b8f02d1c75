// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The communication of pair_style clebsch/kk, included once by pair_clebsch_kokkos.cpp before
// its explicit instantiations (template bodies kept apart, as LAMMPS's KOKKOS styles do with
// their _impl.h files): the per-layer forward exchange of node features, the reverse exchange of
// their gradients, and the newton-off ghost tally, through LAMMPS's Kokkos pair communication
// (pack/unpack on the Views where DeviceType keeps its data, or LAMMPS's host buffers).

#include "pair_clebsch_kokkos.h"

#include "atom_kokkos.h"
#include "comm.h"
#include "kokkos.h"

#include <type_traits>

namespace LAMMPS_NS {

/* ----------------------------------------------------------------------
   per-layer exchange of node features (forward) and their gradients (reverse), and the
   newton-off ghost tally (reverse), through LAMMPS's Kokkos pair communication
------------------------------------------------------------------------- */

template <class DeviceType> void PairClebschKokkos<DeviceType>::comm_kokkos(bool forward, int width)
{
  if constexpr (std::is_same_v<DeviceType, LMPDeviceType>) {
    // On a host-only Kokkos build (OpenMP) LAMMPS hands a HostKK pair to the legacy host
    // pack_*_comm. Present the pair as a Device pair for the duration of the call, so that the
    // same *_comm_kokkos packing on Kokkos buffers runs as on a GPU build (and is tested here).
    const ExecutionSpace saved = execution_space;
    execution_space = Device;
    if (forward)
      comm->forward_comm(this, width);
    else
      comm->reverse_comm(this, width);
    execution_space = saved;
  } else {
    // clebsch/kk/host on a GPU build: LAMMPS's host path, which calls the host pack_*_comm
    // overrides below (the same kernels on host buffers).
    if (forward)
      comm->forward_comm(this, width);
    else
      comm->reverse_comm(this, width);
  }
}

template <class DeviceType>
template <typename T>
void PairClebschKokkos<DeviceType>::exchange_forward_kokkos(T *rows, int width)
{
  const int nall = atom->nlocal + atom->nghost;
  comm_mode_ = std::is_same_v<T, double> ? CommMode::kFeaturesDouble : CommMode::kFeaturesFloat;
  k_.width = width;
  if constexpr (std::is_same_v<T, double>)
    k_.d_rows_double = typename Kernels::template Rows<double>(rows, nall, width);
  else
    k_.d_rows_float = typename Kernels::template Rows<float>(rows, nall, width);
  comm_kokkos(true, width);
  comm_mode_ = CommMode::kNone;
}

template <class DeviceType>
template <typename T>
void PairClebschKokkos<DeviceType>::exchange_reverse_kokkos(T *rows, int width)
{
  const int nlocal = atom->nlocal;
  const int nall = nlocal + atom->nghost;
  comm_mode_ = std::is_same_v<T, double> ? CommMode::kFeaturesDouble : CommMode::kFeaturesFloat;
  k_.width = width;
  typename Kernels::template Rows<T> view(rows, nall, width);
  if constexpr (std::is_same_v<T, double>)
    k_.d_rows_double = view;
  else
    k_.d_rows_float = view;
  comm_kokkos(false, width);
  comm_mode_ = CommMode::kNone;
  Kokkos::deep_copy(Kokkos::subview(view, std::make_pair(nlocal, nall), Kokkos::ALL), T(0));
}

template <class DeviceType>
int PairClebschKokkos<DeviceType>::pack_forward_comm_kokkos(int n, DAT::tdual_int_1d k_sendlist,
                                                            ClebschKokkosCommBuffer &buf, int,
                                                            int *)
{
  k_.d_sendlist = k_sendlist.template view<DeviceType>();
  k_.d_buf = buf.template view<DeviceType>();
  return run_pack_forward(n);
}

template <class DeviceType>
void PairClebschKokkos<DeviceType>::unpack_forward_comm_kokkos(int n, int first,
                                                               ClebschKokkosCommBuffer &buf)
{
  k_.first = first;
  k_.d_buf = buf.template view<DeviceType>();
  run_unpack_forward(n);
}

template <class DeviceType>
int PairClebschKokkos<DeviceType>::pack_reverse_comm_kokkos(int n, int first,
                                                            ClebschKokkosCommBuffer &buf)
{
  k_.first = first;
  k_.d_buf = buf.template view<DeviceType>();
  return run_pack_reverse(n);
}

template <class DeviceType>
void PairClebschKokkos<DeviceType>::unpack_reverse_comm_kokkos(int n, DAT::tdual_int_1d k_sendlist,
                                                               ClebschKokkosCommBuffer &buf)
{
  k_.d_sendlist = k_sendlist.template view<DeviceType>();
  k_.d_buf = buf.template view<DeviceType>();
  run_unpack_reverse(n);
}

// LAMMPS's host communication path (no GPU-aware MPI, 'package kokkos comm/pair/* host', or
// clebsch/kk/host): the same kernels. Where the host can address DeviceType's memory they run on
// LAMMPS's buffers in place; on a GPU the send list and the buffer are staged through device
// copies (host_list_on_device / buffer_on_device), since the rows and tallies live there.
template <class DeviceType>
void PairClebschKokkos<DeviceType>::host_list_on_device(int *list, int n)
{
  if constexpr (kHostReadable<DeviceType>) {
    k_.d_sendlist = decltype(k_.d_sendlist)(list, n);
  } else {
    grow(d_stage_list_, static_cast<size_t>(n), "clebsch:stage_list");
    Kokkos::deep_copy(
        Kokkos::subview(d_stage_list_, std::make_pair(0, n)),
        Kokkos::View<const int *, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(list,
                                                                                              n));
    k_.d_sendlist = decltype(k_.d_sendlist)(d_stage_list_.data(), n);
  }
}

template <class DeviceType>
void PairClebschKokkos<DeviceType>::buffer_on_device(double *buf, size_t count, bool copy_in)
{
  if constexpr (kHostReadable<DeviceType>) {
    k_.d_buf = ClebschKokkosCommBufferUm<DeviceType>(buf, count);
  } else {
    grow(d_stage_buf_, count, "clebsch:stage_buffer");
    k_.d_buf = ClebschKokkosCommBufferUm<DeviceType>(d_stage_buf_.data(), count);
    if (copy_in) Kokkos::deep_copy(k_.d_buf, ClebschKokkosCommBufferUm<LMPHostType>(buf, count));
  }
}

template <class DeviceType>
void PairClebschKokkos<DeviceType>::buffer_to_host(double *buf, size_t count)
{
  if constexpr (!kHostReadable<DeviceType>)
    Kokkos::deep_copy(ClebschKokkosCommBufferUm<LMPHostType>(buf, count),
                      Kokkos::subview(k_.d_buf, std::make_pair(size_t(0), count)));
}

template <class DeviceType>
int PairClebschKokkos<DeviceType>::pack_forward_comm(int n, int *list, double *buf, int, int *)
{
  host_list_on_device(list, n);
  buffer_on_device(buf, static_cast<size_t>(n) * k_.width, false);
  const int m = run_pack_forward(n);
  buffer_to_host(buf, m);
  return m;
}

template <class DeviceType>
void PairClebschKokkos<DeviceType>::unpack_forward_comm(int n, int first, double *buf)
{
  k_.first = first;
  buffer_on_device(buf, static_cast<size_t>(n) * k_.width, true);
  run_unpack_forward(n);
}

template <class DeviceType>
int PairClebschKokkos<DeviceType>::pack_reverse_comm(int n, int first, double *buf)
{
  k_.first = first;
  buffer_on_device(buf, static_cast<size_t>(n) * std::max(k_.width, clebsch_pair::kGhostTallyWidth),
                   false);
  const int m = run_pack_reverse(n);
  buffer_to_host(buf, m);
  return m;
}

template <class DeviceType>
void PairClebschKokkos<DeviceType>::unpack_reverse_comm(int n, int *list, double *buf)
{
  host_list_on_device(list, n);
  buffer_on_device(buf, static_cast<size_t>(n) * std::max(k_.width, clebsch_pair::kGhostTallyWidth),
                   true);
  run_unpack_reverse(n);
}

// One row kernel over the n entries of a swap, in the type of the rows being exchanged.
template <class DeviceType>
template <template <typename> class Tag>
void PairClebschKokkos<DeviceType>::for_rows(int n)
{
  if (comm_mode_ == CommMode::kFeaturesDouble)
    Kokkos::parallel_for(Kokkos::RangePolicy<DeviceType, Tag<double>>(0, n), k_);
  else
    Kokkos::parallel_for(Kokkos::RangePolicy<DeviceType, Tag<float>>(0, n), k_);
}

template <class DeviceType> int PairClebschKokkos<DeviceType>::run_pack_forward(int n)
{
  for_rows<Kernels::template TagPackForward>(n);
  return n * k_.width;
}

template <class DeviceType> void PairClebschKokkos<DeviceType>::run_unpack_forward(int n)
{
  for_rows<Kernels::template TagUnpackForward>(n);
}

template <class DeviceType> int PairClebschKokkos<DeviceType>::run_pack_reverse(int n)
{
  if (comm_mode_ == CommMode::kGhostTally) {
    Kokkos::parallel_for(
        Kokkos::RangePolicy<DeviceType, typename Kernels::TagPackReverseTally>(0, n), k_);
    return n * clebsch_pair::kGhostTallyWidth;
  }
  for_rows<Kernels::template TagPackReverse>(n);
  return n * k_.width;
}

template <class DeviceType> void PairClebschKokkos<DeviceType>::run_unpack_reverse(int n)
{
  // Within one swap every atom appears once in the send list: no two iterations write one row.
  if (comm_mode_ == CommMode::kGhostTally)
    Kokkos::parallel_for(
        Kokkos::RangePolicy<DeviceType, typename Kernels::TagUnpackReverseTally>(0, n), k_);
  else
    for_rows<Kernels::template TagUnpackReverse>(n);
}

template <class DeviceType>
template <typename T>
KOKKOS_INLINE_FUNCTION void ClebschKokkosKernels<DeviceType>::operator()(TagPackForward<T>,
                                                                         const int k) const
{
  const auto &r = rows<T>();
  const int j = d_sendlist(k);
  for (int c = 0; c < width; c++) d_buf(k * width + c) = r(j, c);
}

template <class DeviceType>
template <typename T>
KOKKOS_INLINE_FUNCTION void ClebschKokkosKernels<DeviceType>::operator()(TagUnpackForward<T>,
                                                                         const int k) const
{
  const auto &r = rows<T>();
  for (int c = 0; c < width; c++) r(first + k, c) = static_cast<T>(d_buf(k * width + c));
}

template <class DeviceType>
template <typename T>
KOKKOS_INLINE_FUNCTION void ClebschKokkosKernels<DeviceType>::operator()(TagPackReverse<T>,
                                                                         const int k) const
{
  const auto &r = rows<T>();
  for (int c = 0; c < width; c++) d_buf(k * width + c) = r(first + k, c);
}

template <class DeviceType>
template <typename T>
KOKKOS_INLINE_FUNCTION void ClebschKokkosKernels<DeviceType>::operator()(TagUnpackReverse<T>,
                                                                         const int k) const
{
  const auto &r = rows<T>();
  const int j = d_sendlist(k);
  for (int c = 0; c < width; c++) r(j, c) += static_cast<T>(d_buf(k * width + c));
}

template <class DeviceType>
KOKKOS_INLINE_FUNCTION void ClebschKokkosKernels<DeviceType>::operator()(TagPackReverseTally,
                                                                         const int k) const
{
  constexpr int w = clebsch_pair::kGhostTallyWidth;
  for (int c = 0; c < w; c++) d_buf(k * w + c) = d_ghost_tally(first + k, c);
}

template <class DeviceType>
KOKKOS_INLINE_FUNCTION void ClebschKokkosKernels<DeviceType>::operator()(TagUnpackReverseTally,
                                                                         const int k) const
{
  constexpr int w = clebsch_pair::kGhostTallyWidth;
  const int j = d_sendlist(k);
  if (j >= nlocal) {
    // A ghost that is itself sent on by an earlier swap (ghost cutoff beyond one subdomain):
    // keep accumulating in the tally, which that swap packs next.
    for (int c = 0; c < w; c++) d_ghost_tally(j, c) += d_buf(k * w + c);
    return;
  }
  for (int c = 0; c < 3; c++) f(j, c) += d_buf(k * w + c);
  if (vflag_atom)
    for (int c = 0; c < 6; c++) d_vatom(j, c) += d_buf(k * w + 3 + c);
}

}    // namespace LAMMPS_NS
