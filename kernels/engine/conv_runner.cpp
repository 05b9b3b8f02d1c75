// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// ConvRunner (see conv_runner.h).
#include "clebsch/cuda/engine/conv_runner.h"

#include "clebsch/cuda/generator/emit_conv.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda {
namespace {

Schedule schedule_fitting(const TpProblem& problem, const DeviceLimits& limits,
                          ScheduleOptions so) {
  for (;;) {
    try {
      return schedule(problem, limits, so);
    } catch (const CapacityError&) {
      if (so.warps_per_block <= 1) throw;
      so.warps_per_block /= 2;
    }
  }
}

}  // namespace

DeviceLimits device_limits(const DeviceBackend& backend) { return device_limits(backend.limits()); }

DeviceLimits device_limits(const BackendLimits& b) {
  DeviceLimits l;
  l.sm_major = b.sm_major;
  l.sm_minor = b.sm_minor;
  l.num_sms = b.num_sms;
  l.max_shared_per_block = b.max_shared_per_block;
  l.max_shared_per_sm = b.max_shared_per_sm;
  l.max_threads_per_block = b.max_threads_per_block;
  return l;
}

Cubin precompile_conv(const TensorProduct& tp, DType dtype, Accumulation accumulation,
                      const BackendLimits& limits, ScheduleOptions options) {
  const TpProblem problem = TpProblem::from_tensor_product(tp, dtype, accumulation);
  const Schedule s = schedule_fitting(problem, device_limits(limits), options);
  // What the CUDA backend's load() passes: the architecture and nothing else.
  CompileOptions co;
  co.arch = "sm_" + std::to_string(limits.sm_major) + std::to_string(limits.sm_minor);
  return compile_cubin(emit_conv_module(problem, s), "clebsch_conv_" + problem.hash_hex() + ".cu",
                       co);
}

std::vector<KernelSpec> ConvRunner::kernel_specs(const Schedule& s) {
  std::vector<KernelSpec> specs;
  for (const PassSchedule& ps : s.passes)
    for (std::size_t g = 0; g < ps.groups.size(); ++g)
      specs.push_back(
          {kernel_name(ps.pass, int(g)), "ConvArgs", true, unsigned(ps.launch.shared_bytes)});
  return specs;
}

ConvBuffers batch_conv_buffers(const DeviceEdgeOrderings& edges, std::size_t batch,
                               std::size_t num_nodes) {
  const std::size_t r0 = std::size_t(edges.batch_centre[batch]);
  const std::size_t e0 = std::size_t(edges.batch_edge[batch]);
  ConvBuffers b;
  b.num_senders = static_cast<std::int64_t>(num_nodes);
  b.num_receivers = edges.batch_centre[batch + 1] - static_cast<std::int64_t>(r0);
  b.num_edges = edges.batch_edge[batch + 1] - static_cast<std::int64_t>(e0);
  b.sender = edges.sender.data() + e0, b.receiver = edges.local_centre.data() + e0;
  b.receiver_ptr = edges.local_centre_ptr.data() + r0 + batch, b.receiver_order = nullptr;
  b.sender_ptr = edges.sender_ptr.data() + batch * (num_nodes + 1);
  b.sender_order = edges.by_sender.data() + e0;
  return b;
}

ConvRunner::ConvRunner(DeviceBackend& backend, const TensorProduct& tp, DType dtype,
                       Accumulation accumulation, ScheduleOptions options, int fused_hidden)
    : ConvRunner(
          backend,
          TpProblem::from_tensor_product(tp, dtype, accumulation).with_fused_radial(fused_hidden),
          options) {}

ConvRunner::ConvRunner(DeviceBackend& backend, TpProblem problem, ScheduleOptions options)
    : backend_(backend),
      problem_(std::move(problem)),
      schedule_(schedule_fitting(problem_, device_limits(backend), options)),
      source_(emit_conv_module(problem_, schedule_)) {
  module_ = backend_.load(
      {"clebsch_conv_" + problem_.hash_hex() + ".cu", source_, kernel_specs(schedule_)});
  status_ = static_cast<unsigned int*>(backend_.allocate(sizeof(unsigned int)));
  backend_.memset(status_, 0, sizeof(unsigned int), nullptr);
}

ConvRunner::~ConvRunner() { backend_.free(status_); }

void ConvRunner::run(Stream stream, Pass pass, const ConvBuffers& b) const {
  const std::string reason = check_buffers(problem_, pass, b);
  if (!reason.empty()) throw CapacityError(reason);
  const LaunchPlan plan = plan_launch(problem_, schedule_, pass, b, status_);
  for (int c = 0; c < plan.num_clears; ++c)
    backend_.memset(plan.clears[c].ptr, 0, plan.clears[c].bytes, stream);
  const PassSchedule& ps = schedule_.pass(pass);
  for (int g = 0; g < plan.num_launches; ++g) {
    LaunchDims d;
    d.grid_x = plan.grid_x;
    d.grid_y = plan.grid_y(ps, g);
    d.threads = plan.threads;
    d.shared_bytes = plan.shared_bytes;
    if (backend_.kernel_timing()) {
      const KernelFloor f = conv_group_floor(problem_, ps, g, b);
      backend_.set_timing_floor(f.bytes, f.flops);
    }
    backend_.launch(module_->kernel(kernel_name(pass, g)), d, stream, plan.args);
  }
}

std::uint32_t ConvRunner::take_status(Stream stream) {
  unsigned int v = 0;
  backend_.download(&v, status_, sizeof v, stream);
  backend_.memset(status_, 0, sizeof v, stream);
  return v;
}

}  // namespace clebsch::cuda
