// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The device layer under every CUDA engine: memory, modules and launches behind one interface
// with two implementations.
//   - The CUDA backend (make_cuda_backend): the driver API resolved at run time (cuda_driver.h),
//     modules compiled with NVRTC and cached on disk (nvrtc_module.h). Loading the library never
//     needs a driver; constructing this backend without one throws CudaError with an actionable
//     message.
//   - The emulated backend (make_emulated_backend): the same module source compiled by the host
//     compiler together with templates/emulation_shim.cuh.in into a shared object and loaded with
//     dlopen; "device" memory is host memory and launches run on the host. CI runs whole engines
//     this way without a GPU: the device code under test is the code that runs on the GPU.
// Conventions that make one source serve both: every kernel is `extern "C" __global__` and takes
// exactly one argument, a trivially copyable struct passed by value (KernelSpec::args_type names
// it); kernels declared warp_synchronous may use __syncwarp / shuffles (the generated
// convolution), all others must be correct for any execution order of their threads (no
// barriers, no cross-thread shared memory). Streams are opaque (CUstream on CUDA, ignored by the
// emulation, which runs every call to completion before returning).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "clebsch/cuda/device/allocation_ledger.h"
#include "clebsch/cuda/device/kernel_timing.h"

namespace clebsch::cuda {

/// A stream: CUstream on the CUDA backend (nullptr = the legacy default stream).
using Stream = void*;

/// One entry point of a module.
struct KernelSpec {
  std::string name;               ///< extern "C" name in the source
  std::string args_type;          ///< the struct type of its single by-value argument
  bool warp_synchronous = false;  ///< uses __syncwarp/shuffles (emulated with 32 threads a warp)
  /// Dynamic shared memory the kernel may be launched with, when above 48 KB (CUDA opt-in).
  unsigned max_shared_bytes = 0;
};

/// Source and entry points of a module to build.
struct ModuleSource {
  std::string name;    ///< for messages and file names, e.g. "clebsch_generic.cu"
  std::string source;  ///< complete device source (no #include of files outside NVRTC's own)
  std::vector<KernelSpec> kernels;
};

/// A resolved entry point; valid while its module lives.
struct DeviceKernel {
  void* handle = nullptr;  ///< CUfunction, or the emulation trampoline
  bool warp_synchronous = false;
  std::string name;
};

/// A loaded module. Move-only through unique_ptr; unloads on destruction.
class DeviceModule {
 public:
  virtual ~DeviceModule() = default;
  /// @throws CudaError naming a kernel the module does not have.
  virtual const DeviceKernel& kernel(const std::string& name) const = 0;
};

/// Launch geometry.
struct LaunchDims {
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned threads = 128;
  unsigned shared_bytes = 0;
};

/// What schedules need to know about the device (a subset of tp_schedule.h's DeviceLimits).
struct BackendLimits {
  int sm_major = 9, sm_minor = 0;
  int num_sms = 132;
  int max_shared_per_block = 227 * 1024;
  int max_shared_per_sm = 228 * 1024;
  int max_threads_per_block = 1024;
  /// Device memory in bytes, what the engines size their per-edge working sets by (the
  /// emulated backend reports a nominal 1 GiB).
  std::size_t memory_bytes = std::size_t(1) << 30;
};

/// Memory, modules and launches on one device (see the file comment). Not thread-safe.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  /// "cuda:0 NVIDIA H200 (sm_90)" or "emulated".
  virtual std::string name() const = 0;
  virtual bool emulated() const = 0;
  virtual BackendLimits limits() const = 0;

  /// @throws CudaError (out of memory names the size).
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void free(void* ptr) noexcept = 0;
  /// Bytes allocated through allocate() and not yet freed (what memory reports count).
  virtual std::size_t allocated_bytes() const = 0;
  /// The live allocations by buffer name (allocation_ledger.h): DeviceArray names its own, and
  /// an AllocationScope names what is allocated inside it.
  virtual AllocationLedger& ledger() = 0;
  virtual const AllocationLedger& ledger() const = 0;
  /// Host to device; @p src must stay valid until the stream reaches the copy.
  virtual void upload(void* dst, const void* src, std::size_t bytes, Stream stream) = 0;
  /// Device to host; returns when the data is on the host (synchronises the stream).
  virtual void download(void* dst, const void* src, std::size_t bytes, Stream stream) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes, Stream stream) = 0;
  virtual void memset(void* dst, int byte, std::size_t bytes, Stream stream) = 0;
  virtual void synchronize(Stream stream) = 0;

  /// Compiles (or reads from the cache) and loads @p module. @throws CudaError with the
  /// compiler's log on a compilation failure.
  virtual std::unique_ptr<DeviceModule> load(const ModuleSource& module) = 0;
  /// Launches @p kernel with its argument struct @p args (@p args_size bytes, copied at once).
  virtual void launch(const DeviceKernel& kernel, const LaunchDims& dims, Stream stream,
                      const void* args, std::size_t args_size) = 0;

  template <class Args>
  void launch(const DeviceKernel& kernel, const LaunchDims& dims, Stream stream, const Args& args) {
    launch(kernel, dims, stream, &args, sizeof(Args));
  }

  // --- Kernel timing (kernel_timing.h): for profiles, off by default. ---
  /// Starts (true) or stops recording a KernelTiming for every launch, copy, memset and timed
  /// region. Switching on discards records not yet taken; switching off keeps them for
  /// take_kernel_timings(). Off, each call pays one branch.
  virtual void set_kernel_timing(bool on) = 0;
  bool kernel_timing() const { return timing_; }
  /// The records made since timing was switched on or last taken, in issue order (the CUDA
  /// backend waits for each to complete and reads its events); empties the list.
  virtual std::vector<KernelTiming> take_kernel_timings() = 0;
  /// Gives @p label to the records made since the previous call, or since timing was switched on
  /// or last taken (an engine's phase markers come at the end of a phase). A no-op while timing
  /// is off.
  virtual void end_timing_phase(const std::string& label) = 0;
  /// Appended, after a space, to the name of the next record only (the next launch, copy, memset
  /// or region): what the kernel name does not say (GenericKernels::gemm gives the GEMM's
  /// shape, so the linears of a layer can be told apart). Ignored while timing is off.
  void set_timing_detail(std::string_view detail) {
    if (timing_) timing_detail_.assign(detail);
  }
  /// The floor (KernelFloor: least bytes moved, floating-point operations) of the next record
  /// only, like set_timing_detail: the profiles report each kernel's time beside it. Ignored
  /// while timing is off.
  void set_timing_floor(double bytes, double flops = 0) {
    if (timing_) timing_floor_ = {bytes, flops};
  }
  /// Brackets device work issued on @p stream outside launch() (cuBLAS GEMMs) as one record named
  /// @p name: begin before issuing it, end with the returned mark after. Call only while
  /// kernel_timing() is on; a region that is never ended is not recorded.
  virtual std::size_t begin_timed_region(std::string_view name, Stream stream) = 0;
  virtual void end_timed_region(std::size_t mark, Stream stream) = 0;

 protected:
  // Here rather than behind a virtual call, so that a launch with timing off tests one member.
  bool timing_ = false;
  std::string timing_detail_;  // set_timing_detail's, until the next record takes it
  KernelFloor timing_floor_;   // set_timing_floor's, likewise
};

/// The CUDA backend on device @p ordinal (its primary context made current on this thread);
/// ordinal -1: device_for_local_rank() of the driver's device count.
/// @throws CudaError "no CUDA driver found ..." / "no CUDA device ..." with what to check.
std::unique_ptr<DeviceBackend> make_cuda_backend(int ordinal = 0);

/// The device an MPI rank uses when none is named: its rank on the node (from the launcher's
/// environment: OMPI_COMM_WORLD_LOCAL_RANK, MV2_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID,
/// SLURM_LOCALID, PMI_LOCAL_RANK; 0 when none is set) modulo @p device_count, so that ranks
/// sharing a node spread over its GPUs.
int device_for_local_rank(int device_count);

/// How the emulated backend builds modules.
struct EmulationOptions {
  /// Host C++20 compiler; empty: $CLEBSCH_EMULATION_CXX, else "c++".
  std::string cxx;
  /// Where compiled modules are kept (keyed by a hash of the source and command); empty:
  /// $CLEBSCH_EMULATION_CACHE, else <temp>/clebsch-emulated-<uid>.
  std::string cache_dir;
  /// Optimisation flag passed to the compiler.
  std::string optimize = "-O0";
  /// Plain (not warp-synchronous) kernels run their (block, thread) pairs last to first instead
  /// of first to last: tests see whether a result depends on the order threads run in (atomic
  /// cursors, for instance), which a GPU does not fix.
  bool reverse_thread_order = false;
};
/// The emulated backend (see the file comment). @throws Error if no compiler is found at use.
std::unique_ptr<DeviceBackend> make_emulated_backend(EmulationOptions options = {});

/// The device source text of the emulation shim (for tests that build modules themselves).
const char* emulation_shim_source();

}  // namespace clebsch::cuda
