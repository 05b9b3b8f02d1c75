// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The engine interface: the seam between a caller that owns atoms (the LAMMPS pair styles, the
// tests, the benchmarks) and an implementation that evaluates a model (the host engine in src/,
// the CUDA engine in kernels/). A caller builds an AtomGraph, calls compute(), and turns the
// per-edge gradients it gets back into forces and virials; it never branches on the device.
//
// Conventions (one set for every model; an engine converts to its model's own):
//   - nodes [0, num_local) are local atoms, whose energies are summed; nodes [num_local,
//     num_nodes) are ghosts (atoms owned by another MPI rank) whose features arrive between
//     layers through a GhostExchange;
//   - edge e connects center[e] (a local atom, the receiver of the message) and neighbor[e]
//     (any node, the sender), with vector[e] = x[neighbor] - x[center] including any periodic
//     image shift; |vector[e]| < r_max of the species pair;
//   - edge_gradient[e] = dE/d vector[e], so that F[center] += g and F[neighbor] -= g, and the
//     virial is W_ab = -Σ_e vector[e]_a g[e]_b.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace clebsch {

/// The atomic graph of one force evaluation. Pointers are borrowed for the duration of compute().
struct AtomGraph {
  std::size_t num_local = 0;     ///< atoms whose energies count
  std::size_t num_nodes = 0;     ///< local + ghost atoms
  const int* species = nullptr;  ///< [num_nodes] model species index (0-based, model order)
  std::size_t num_edges = 0;
  const int* center = nullptr;     ///< [num_edges] local atom receiving the message
  const int* neighbor = nullptr;   ///< [num_edges] atom sending it (local or ghost)
  const double* vector = nullptr;  ///< [num_edges][3] x[neighbor] - x[center]
};

/// What compute() returns. Buffers are resized by the engine.
struct EngineResult {
  double energy = 0;                  ///< Σ over local atoms of atom_energy (eV)
  std::vector<double> atom_energy;    ///< [num_local] (eV), reference energies included
  std::vector<double> edge_gradient;  ///< [num_edges][3] dE/d vector (eV/Å)
};

/// Moves node features between ranks between message-passing layers. Implemented by the caller
/// (the pair style's forward/reverse communication); absent on one rank, where ghosts are
/// replaced by their owners and the graph has no ghosts.
class GhostExchange {
 public:
  virtual ~GhostExchange() = default;
  /// Fill the ghost rows [num_local, num_nodes) of @p features (row-major, @p width values per
  /// node) from their owners' rows.
  virtual void forward(double* features, int width) = 0;
  virtual void forward(float* features, int width) = 0;
  /// Add the ghost rows of @p gradients to their owners' rows (on whichever rank owns them) and
  /// zero the ghost rows.
  virtual void reverse(double* gradients, int width) = 0;
  virtual void reverse(float* gradients, int width) = 0;
  /// Whether forward/reverse can take rows in an accelerator engine's own memory (the caller
  /// packs them where they are, as the Kokkos pair style does on Kokkos' device). When false an
  /// accelerator engine passes host copies. The host engine always passes host rows.
  virtual bool accepts_device_rows() const { return false; }
};

/// What an engine holds between compute() calls (Engine::memory_usage), in bytes.
struct EngineMemory {
  /// Host memory: the model's data as the engine keeps it, and the buffers that stay allocated
  /// from one compute() to the next (sized by the largest graph so far). Scratch that a call
  /// allocates and frees is not counted.
  std::size_t host_bytes = 0;
  /// Accelerator memory: the allocations the engine has made and not freed (0 on the host).
  std::size_t device_bytes = 0;
  /// Accelerator memory: the most that was allocated at once during the last compute() (0 on
  /// the host or before a call).
  std::size_t device_peak_bytes = 0;
  /// One buffer of device_bytes: its name, live bytes, and what its size grows with ("atom",
  /// "edge" or "fixed"), so that the bytes per atom can be extrapolated to other sizes.
  struct Buffer {
    std::string name;
    std::size_t bytes = 0;
    std::string per;
  };
  /// device_bytes buffer by buffer, largest first (empty on the host).
  std::vector<Buffer> device_buffers;
};

/// Arithmetic of an engine: float64 everywhere; float32 everywhere; or float32 network with
/// geometry, energies, forces and virials accumulated in float64.
enum class Precision { kFloat64, kFloat32, kMixed };

/// Parses "fp64" / "fp32" / "mixed". @throws Error naming the text.
Precision precision_from_string(const std::string& text);
std::string to_string(Precision precision);

/// A model ready to evaluate. One instance per thread of control; compute() may reuse internal
/// buffers between calls.
class Engine {
 public:
  virtual ~Engine() = default;
  /// Species names in model order (chemical symbols), for the caller's type mapping.
  virtual const std::vector<std::string>& species() const = 0;
  /// Largest cutoff over all species pairs (Å).
  virtual double r_max() const = 0;
  /// Cutoff of one species pair (Å); edges at or beyond it must not be passed.
  virtual double r_max(int species_a, int species_b) const = 0;
  /// Number of message-passing layers (ghost exchanges per evaluation = layers - 1 each way).
  virtual int num_layers() const = 0;
  /// Largest `width` the engine passes to GhostExchange (the caller sizes its buffers by it).
  virtual int exchange_width() const = 0;
  /// Evaluates energies and dE/dvector. @p exchange may be null only when the graph has no
  /// ghosts. When it is given, every exchange is collective across MPI ranks: the engine makes
  /// the same sequence of exchange calls on every rank, also when it has no local atoms or no
  /// edges. @throws Error on an invalid graph (species out of range, edge index out of range,
  /// vector longer than the cutoff, atoms closer than the engine's minimum distance).
  virtual void compute(const AtomGraph& graph, EngineResult& result, GhostExchange* exchange) = 0;
  /// Memory held now (it grows with the largest graph computed so far), for the caller's memory
  /// report (LAMMPS's memory_usage()).
  virtual EngineMemory memory_usage() const = 0;
};

}  // namespace clebsch
