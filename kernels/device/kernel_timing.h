// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Kernel timing: what a DeviceBackend records while DeviceBackend::set_kernel_timing(true) is in
// force, one record per piece of device work (a kernel launch, a copy, a memset, or a region
// that bypasses launch() and brackets itself: the cuBLAS GEMMs), and the aggregation the
// benchmarks report. The CUDA backend records an event before and after each piece on its
// stream and reads the elapsed times when the records are taken; the emulated backend measures
// wall-clock time around each call (it runs every call to completion), so that CI exercises the
// same interface. Events serialise nothing, but each costs the host a few microseconds, so a
// step timed this way is a little slower than one that is not: the sum of the records is the
// device's busy time, and the step's wall time minus that sum is its idle gaps (launch
// overhead, host work, synchronisations).
//
// KernelTimingLog is the shared bookkeeping of both backends: names and labels are interned, so
// that a warm step (same kernels, records taken between steps) allocates nothing per launch.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace clebsch::cuda {

/// What a piece of device work must do at least, where its caller knows it
/// (DeviceBackend::set_timing_floor): the bytes it moves with every operand read once and every
/// result written once (int32 indices included), and its floating-point operations (2 per
/// multiply-add). Either is 0 when not given.
struct KernelFloor {
  double bytes = 0, flops = 0;
};

/// One timed piece of device work.
struct KernelTiming {
  /// The phase it belongs to (DeviceBackend::end_timing_phase); "" when none was given.
  std::string label;
  /// The kernel's name, or "copy H2D", "copy D2H", "copy D2D", "memset", or a region's name,
  /// followed by the caller's detail where one was given (DeviceBackend::set_timing_detail):
  /// "clebsch_gemm_f64 1236x128x128 x3 gather", "cublas dgemm 795000x64x8" (GEMMs: the
  /// row-major m x n x k, the batch, gathers and per-row weights).
  std::string name;
  unsigned grid_x = 0, grid_y = 0, grid_z = 0;  ///< launch grid (0 for anything but a kernel)
  unsigned threads = 0;                         ///< threads per block (0 likewise)
  unsigned shared_bytes = 0;                    ///< dynamic shared memory (0 likewise)
  std::size_t bytes = 0;                        ///< bytes copied or set (copies, memsets)
  KernelFloor floor;                            ///< its floor, where the caller gave one
  double seconds = 0;                           ///< device time (CUDA events) or wall time
};

/// Records with one key, summed.
struct KernelTimingTotal {
  std::string label;  ///< "" when aggregated by name only
  std::string name;
  long long calls = 0;
  double seconds = 0;     ///< sum over the calls
  std::size_t bytes = 0;  ///< sum over the calls
  KernelFloor floor;      ///< sums over the calls
  double mean_seconds() const { return calls ? seconds / double(calls) : 0.0; }
};

/// What records are aggregated by.
enum class TimingKey {
  kName,          ///< the name alone (every phase together)
  kLabelAndName,  ///< (label, name): one row per kernel and phase
};

/// The totals of @p records by @p key, in the order in which each key first appears.
std::vector<KernelTimingTotal> aggregate_kernel_timings(const std::vector<KernelTiming>& records,
                                                        TimingKey key = TimingKey::kName);

/// The records of one backend while timing is on (see the file comment). Not thread-safe.
class KernelTimingLog {
 public:
  /// Appends an open record named @p name, or "name detail" when @p detail is not empty; returns
  /// its index. @p dims: grid_x, grid_y, grid_z, threads, shared_bytes (all 0 for copies and
  /// regions); @p floor: the record's floor (KernelFloor).
  std::size_t add(std::string_view name, std::string_view detail, const unsigned (&dims)[5],
                  std::size_t bytes, KernelFloor floor = {});
  /// Closes record @p i: only closed records are taken (a launch that threw leaves its record
  /// open). @p seconds: its time, when the backend knows it now (the emulated backend).
  void close(std::size_t i, double seconds = 0);
  /// Backend scratch for record @p i (the emulated backend keeps a region's start time here).
  double& start(std::size_t i) { return entries_[i].start; }
  /// Gives @p label to the records made since the previous call (or since the last clear()).
  void end_phase(std::string_view label);
  std::size_t size() const { return entries_.size(); }
  bool closed(std::size_t i) const { return entries_[i].closed; }
  /// The closed records in order, with @p seconds(i) as the time of record i (the CUDA backend
  /// reads its events there; null: the times given to close()); then clear().
  std::vector<KernelTiming> take(const std::function<double(std::size_t)>& seconds = nullptr);
  /// Drops every record; keeps the capacity and the interned names.
  void clear();

 private:
  struct Entry {
    int name = 0, label = -1;
    unsigned dims[5] = {0, 0, 0, 0, 0};
    std::size_t bytes = 0;
    KernelFloor floor;
    double seconds = 0, start = 0;
    bool closed = false;
  };
  static int intern(std::vector<std::string>& names, std::map<std::string, int, std::less<>>& index,
                    std::string_view s);
  std::vector<Entry> entries_;
  std::vector<std::string> names_, labels_;
  std::map<std::string, int, std::less<>> name_index_, label_index_;
  std::size_t phase_start_ = 0;
  std::string joined_;  // "name detail", its capacity kept
};

}  // namespace clebsch::cuda
