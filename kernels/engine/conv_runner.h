// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The generated uvu convolution (emit_conv.h) on any DeviceBackend: the same problem, schedule,
// emitted module and launch plan (plan_launch) as TpLauncher, but built and launched through the
// device layer, so that an engine runs it on the GPU and in the emulation alike. run() never
// compiles and never allocates.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/cuda/device/nvrtc_module.h"
#include "clebsch/cuda/generator/tp_launcher.h"
#include "clebsch/cuda/graph/edge_orderings.h"

namespace clebsch::cuda {

/// The index arrays of edge batch @p batch of @p edges (edge_orderings.h) as a convolution of its
/// own: edges numbered from the batch's first, receivers from its first centre, all
/// @p num_nodes senders with the batch's by-sender CSR. The caller sets the operands.
ConvBuffers batch_conv_buffers(const DeviceEdgeOrderings& edges, std::size_t batch,
                               std::size_t num_nodes);

class ConvRunner {
 public:
  /// Builds the problem of @p tp, schedules it for @p backend's limits (retrying with fewer warps
  /// per block while shared memory does not fit), emits, compiles and loads the module;
  /// @p fused_hidden > 0: in the fused radial form (TpProblem::with_fused_radial).
  /// @throws CapacityError for an unsupported product; CudaError.
  ConvRunner(DeviceBackend& backend, const TensorProduct& tp, DType dtype,
             Accumulation accumulation, ScheduleOptions options = {}, int fused_hidden = 0);
  /// The same for a problem built by the caller (the fused spline form:
  /// TpProblem::with_fused_spline).
  ConvRunner(DeviceBackend& backend, TpProblem problem, ScheduleOptions options = {});
  ~ConvRunner();
  ConvRunner(const ConvRunner&) = delete;
  ConvRunner& operator=(const ConvRunner&) = delete;

  /// Launches @p pass on @p stream. @throws CapacityError when check_buffers() fails.
  void run(Stream stream, Pass pass, const ConvBuffers& b) const;
  /// Synchronises, returns and clears the status word (see TpLauncher::take_status).
  std::uint32_t take_status(Stream stream);

  const TpProblem& problem() const { return problem_; }
  const Schedule& schedule() const { return schedule_; }
  const std::string& source() const { return source_; }
  /// The module's KernelSpecs (every pass and group), for compile-only checks.
  static std::vector<KernelSpec> kernel_specs(const Schedule& schedule);

 private:
  DeviceBackend& backend_;
  TpProblem problem_;
  Schedule schedule_;
  std::string source_;
  std::unique_ptr<DeviceModule> module_;
  unsigned int* status_ = nullptr;
};

/// DeviceLimits (tp_schedule.h) of a backend.
DeviceLimits device_limits(const DeviceBackend& backend);
/// DeviceLimits (tp_schedule.h) of backend limits @p limits.
DeviceLimits device_limits(const BackendLimits& limits);

/// Compiles, without a device, the module that ConvRunner(backend, @p tp, @p dtype,
/// @p accumulation, @p options) loads on a CUDA backend whose limits() are @p limits (default:
/// an H200), into the kernel cache (default_cache_dir()) where that ConvRunner finds it: the same
/// problem, schedule, source and compile options (the architecture from @p limits). So a GPU
/// host that receives the cache compiles nothing. @throws CapacityError; CudaError.
Cubin precompile_conv(const TensorProduct& tp, DType dtype, Accumulation accumulation,
                      const BackendLimits& limits = {}, ScheduleOptions options = {});

}  // namespace clebsch::cuda
