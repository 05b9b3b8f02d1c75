// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Per-layer ghost exchange of a device engine's node rows. Most callers' GhostExchange works on
// host memory (the plain pair style packs LAMMPS's host buffers), so the rows travel through a
// host copy; an exchange that packs on the device itself (the Kokkos pair style on Kokkos' CUDA
// space, or any exchange on the emulated backend's host memory) says so with
// GhostExchange::accepts_device_rows() and gets the device rows in place, with no copy.
#pragma once

#include <cstddef>
#include <vector>

#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/engine/engine.h"

namespace clebsch::cuda {

/// Fills ghost rows [num_local, num_nodes) of @p rows (device, row-major, @p width per node).
template <class T>
void exchange_forward_rows(DeviceBackend& backend, T* rows, std::size_t num_local,
                           std::size_t num_nodes, int width, GhostExchange& exchange,
                           Stream stream) {
  if (exchange.accepts_device_rows()) {
    // The exchange's own kernels may run on another stream: the rows must be final first.
    backend.synchronize(stream);
    exchange.forward(rows, width);
    return;
  }
  std::vector<T> h(num_nodes * width);
  backend.download(h.data(), rows, h.size() * sizeof(T), stream);
  exchange.forward(h.data(), width);
  const std::size_t off = num_local * width;
  backend.upload(rows + off, h.data() + off, (h.size() - off) * sizeof(T), stream);
  backend.synchronize(stream);
}

/// Adds ghost rows of @p rows to their owners' rows and zeroes the ghost rows.
template <class T>
void exchange_reverse_rows(DeviceBackend& backend, T* rows, std::size_t num_nodes, int width,
                           GhostExchange& exchange, Stream stream) {
  if (exchange.accepts_device_rows()) {
    backend.synchronize(stream);
    exchange.reverse(rows, width);
    return;
  }
  std::vector<T> h(num_nodes * width);
  backend.download(h.data(), rows, h.size() * sizeof(T), stream);
  exchange.reverse(h.data(), width);
  backend.upload(rows, h.data(), h.size() * sizeof(T), stream);
  backend.synchronize(stream);
}

}  // namespace clebsch::cuda
