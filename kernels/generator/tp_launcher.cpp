// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// TpLauncher: module construction, argument checks and kernel launches (see tp_launcher.h).
#include "clebsch/cuda/generator/tp_launcher.h"

#include <algorithm>
#include <cstddef>
#include <numeric>

#include "clebsch/cuda/device/cuda_driver.h"
#include "clebsch/cuda/generator/emit_conv.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda {
namespace {

std::vector<std::string> kernel_names(const Schedule& s) {
  std::vector<std::string> names;
  for (const PassSchedule& ps : s.passes)
    for (std::size_t g = 0; g < ps.groups.size(); ++g)
      names.push_back(kernel_name(ps.pass, int(g)));
  return names;
}

// Always for the architecture of the current context's device, whatever options.arch says.
NvrtcModule build_module(const std::string& source, const std::string& name,
                         const Schedule& schedule, CompileOptions options) {
  options.arch = query_device_limits().arch();
  return NvrtcModule(compile_cubin(source, name, options), kernel_names(schedule));
}

// The host struct must match the device one member for member: pointers then 64-bit counts.
static_assert(sizeof(ConvArgs) == 20 * sizeof(void*) + 6 * sizeof(long long),
              "ConvArgs must have no padding");
static_assert(offsetof(ConvArgs, num_edges) == 20 * sizeof(void*), "ConvArgs layout");

}  // namespace

DeviceLimits query_device_limits() {
  const CUdevice dev = ensure_context();
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    CLEBSCH_CU_CHECK(DeviceGetAttribute(&v, a, dev));
    return v;
  };
  DeviceLimits l;
  l.sm_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  l.sm_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  l.num_sms = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  l.max_shared_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  l.max_shared_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  l.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  return l;
}

TpLauncher::TpLauncher(const TpProblem& problem, const Schedule& schedule, CompileOptions options)
    : problem_(problem),
      schedule_(schedule),
      source_(emit_conv_module(problem, schedule)),
      module_(
          build_module(source_, "clebsch_conv_" + problem.hash_hex() + ".cu", schedule, options)) {
  for (int p = 0; p < kNumPasses; ++p) {
    const Pass pass = static_cast<Pass>(p);
    const PassSchedule& ps = schedule_.pass(pass);
    for (std::size_t g = 0; g < ps.groups.size(); ++g) {
      const CUfunction f = module_.function(kernel_name(pass, int(g)));
      // Above the default 48 KB a kernel must opt in to its dynamic shared memory.
      CLEBSCH_CU_CHECK(FuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        ps.launch.shared_bytes));
      functions_[p].push_back(f);
    }
  }
  // The only allocation of the launcher: the status word, made once here.
  CLEBSCH_CU_CHECK(MemAlloc(&status_, sizeof(std::uint32_t)));
  CLEBSCH_CU_CHECK(MemsetD8(status_, 0, sizeof(std::uint32_t)));
  int streams = 1;
  for (const PassSchedule& ps : schedule_.passes) streams = std::max(streams, ps.launch.streams);
  if (streams > 1) {
    CLEBSCH_CU_CHECK(EventCreate(&fork_, CU_EVENT_DISABLE_TIMING));
    for (int i = 1; i < streams; ++i) {
      CUstream st = nullptr;
      CLEBSCH_CU_CHECK(StreamCreate(&st, CU_STREAM_NON_BLOCKING));
      side_streams_.push_back(st);
      CUevent ev = nullptr;
      CLEBSCH_CU_CHECK(EventCreate(&ev, CU_EVENT_DISABLE_TIMING));
      joins_.push_back(ev);
    }
  }
  for (int p = 0; p < kNumPasses; ++p) {
    const PassSchedule& ps = schedule_.passes[std::size_t(p)];
    overlaps_[p] = group_overlap(ps, ps.launch.streams);
    for (char signals : overlaps_[p].signals) {
      CUevent ev = nullptr;
      if (signals) CLEBSCH_CU_CHECK(EventCreate(&ev, CU_EVENT_DISABLE_TIMING));
      group_events_[p].push_back(ev);
    }
  }
}

TpLauncher TpLauncher::create(const TensorProduct& tp, DType dtype, Accumulation accumulation,
                              CompileOptions options, ScheduleOptions so) {
  const TpProblem problem = TpProblem::from_tensor_product(tp, dtype, accumulation);
  const DeviceLimits limits = query_device_limits();
  for (;;) {
    try {
      const Schedule s = ::clebsch::cuda::schedule(problem, limits, so);
      return TpLauncher(problem, s, options);
    } catch (const CapacityError&) {
      if (so.warps_per_block <= 1) throw;
      so.warps_per_block /= 2;
    }
  }
}

TpLauncher::~TpLauncher() {
  if (status_) driver().MemFree(status_);
  for (CUevent ev : joins_) driver().EventDestroy(ev);
  if (fork_) driver().EventDestroy(fork_);
  for (const std::vector<CUevent>& events : group_events_)
    for (CUevent ev : events)
      if (ev) driver().EventDestroy(ev);
  for (CUstream st : side_streams_) driver().StreamDestroy(st);
}

TpLauncher::TpLauncher(TpLauncher&& o) noexcept
    : problem_(std::move(o.problem_)),
      schedule_(std::move(o.schedule_)),
      source_(std::move(o.source_)),
      module_(std::move(o.module_)),
      status_(o.status_),
      side_streams_(std::move(o.side_streams_)),
      fork_(o.fork_),
      joins_(std::move(o.joins_)) {
  for (int p = 0; p < kNumPasses; ++p) {
    functions_[p] = std::move(o.functions_[p]);
    overlaps_[p] = std::move(o.overlaps_[p]);
    group_events_[p] = std::move(o.group_events_[p]);
    o.group_events_[p].clear();
  }
  o.status_ = 0;
  o.fork_ = nullptr;
  o.side_streams_.clear();
  o.joins_.clear();
}

std::string check_buffers(const TpProblem& problem, Pass pass, const ConvBuffers& b) {
  auto fail = [&](const std::string& reason) { return to_string(pass) + " pass: " + reason; };
  const std::int64_t kMax = 2147483647;
  if (b.num_senders < 0 || b.num_receivers < 0 || b.num_edges < 0) return fail("negative count");
  if (b.num_senders > kMax || b.num_receivers > kMax || b.num_edges > kMax)
    return fail("counts above 2^31-1 (int32 indices)");
  const bool edges = b.num_edges > 0;
  if (edges && (!b.sender || !b.receiver)) return fail("sender/receiver arrays are null");
  if (edges && (!b.x || !b.y)) return fail("x or Y is null");
  const bool fused = fused_pass(problem, pass);
  if (fused) {
    if (edges && (!b.h || !b.w4)) return fail("the fused radial form needs h and w4");
    if (b.grad_w) return fail("the fused radial form writes grad_h, not grad_w");
    // The hidden form's backward reads W4 transposed; the spline form's needs only the table.
    if (edges && b.grad_h && !b.w4t && problem.spline_intervals() == 0)
      return fail("grad_h needs w4t");
  } else if (edges && problem.weight_numel() > 0 && !b.w) {
    return fail("W is null");
  }
  switch (pass) {
    // No receiver (a rank without atoms): nothing to write, and no buffer to write it to.
    case Pass::kForward:
      if (!b.out && b.num_receivers > 0) return fail("out is null");
      break;
    case Pass::kDoubleForward:
      if (!b.grad_grad_out && b.num_receivers > 0) return fail("grad_grad_out is null");
      break;
    case Pass::kBackward:
    case Pass::kDoubleBackward:
      if (!b.grad_x && !b.grad_y && !b.grad_w && !(fused && b.grad_h))
        return fail("no output requested");
      if (edges && !b.grad_out) return fail("grad_out is null");
      break;
  }
  if (problem.accumulation() == Accumulation::kDeterministic) {
    if (is_receiver_pass(pass) && b.num_receivers > 0 && !b.receiver_ptr)
      return fail("deterministic mode needs receiver_ptr (CSR by receiver)");
    if (!is_receiver_pass(pass) && b.num_senders > 0 && !b.sender_ptr)
      return fail("deterministic mode needs sender_ptr (CSR by sender)");
  }
  return {};
}

GroupOverlap group_overlap(const PassSchedule& ps, int streams) {
  const std::size_t n = ps.groups.size();
  streams = std::max(1, streams);
  GroupOverlap o;
  o.order.resize(n);
  std::iota(o.order.begin(), o.order.end(), 0);
  o.stream.resize(n);
  o.waits.resize(n);
  o.signals.assign(n, 0);
  if (is_receiver_pass(ps.pass) && ps.launch.order == LaunchOrder::kLongestFirst) {
    std::stable_sort(o.order.begin(), o.order.end(), [&](int a, int b) {
      return ps.groups[std::size_t(a)].lane_work > ps.groups[std::size_t(b)].lane_work;
    });
    for (std::size_t k = 0; k < n; ++k)
      o.stream[std::size_t(o.order[k])] = int(k % std::size_t(streams));
    return o;
  }
  // The last group so far that wrote each in1 (grad_x) and in2 (grad_Y) block of a sender pass.
  std::vector<int> last_x, last_y, last_h;
  for (std::size_t g = 0; g < n; ++g) {
    const Group& group = ps.groups[g];
    const int s = int(g % std::size_t(streams));
    o.stream[g] = s;
    if (is_receiver_pass(ps.pass)) continue;
    // The latest conflicting group on each other stream (earlier ones there precede it).
    std::vector<int> latest(std::size_t(streams), -1);
    auto after = [&](std::vector<int>& last, int block) {
      if (std::size_t(block) >= last.size()) last.resize(std::size_t(block) + 1, -1);
      const int before = last[std::size_t(block)];
      if (before >= 0 && o.stream[std::size_t(before)] != s)
        latest[std::size_t(o.stream[std::size_t(before)])] =
            std::max(latest[std::size_t(o.stream[std::size_t(before)])], before);
      last[std::size_t(block)] = int(g);
    };
    for (int a : group.in1_blocks) after(last_x, a);
    for (int b : group.in2_blocks) after(last_y, b);
    // The fused radial form: every group adds to the edges' dE/dh.
    if (ps.smem.gws_offset >= 0) after(last_h, 0);
    for (int before : latest)
      if (before >= 0) {
        o.waits[g].push_back(before);
        o.signals[std::size_t(before)] = 1;
      }
  }
  return o;
}

KernelFloor conv_group_floor(const TpProblem& problem, const PassSchedule& ps, int group,
                             const ConvBuffers& b) {
  const Group& g = ps.groups.at(std::size_t(group));
  const double e = size_of(problem.dtype()), E = double(b.num_edges);
  const double senders = double(b.num_senders), receivers = double(b.num_receivers);
  double x = 0, y = 0, out = 0, w = 0, madds = 0;
  for (int a : g.in1_blocks) x += problem.in1()[a].mul * problem.in1()[a].dim();
  for (int c : g.in2_blocks) y += problem.in2()[c].mul * problem.in2()[c].dim();
  for (int o : g.out_blocks) out += problem.out()[o].mul * problem.out()[o].dim();
  const bool receiver = is_receiver_pass(ps.pass), dbl = is_double_pass(ps.pass);
  for (int n : g.paths) {
    const TpPath& path = problem.paths()[std::size_t(n)];
    const double m2 = problem.in2()[path.in2].mul, nnz = double(path.cg.size());
    const double d1 = problem.in1()[path.in1].dim(), d2 = problem.in2()[path.in2].dim();
    const double d3 = problem.out()[path.out].dim();
    if (path.has_weight) w += m2 * g.mul;
    madds += m2 * g.mul * (receiver ? nnz + d3 : 2 * nnz + 2 * d1 + d2) * (dbl ? 2 : 1);
  }
  // Per edge, the weights' source: W, the fused form's hidden rows, or the spline's lengths.
  const double hidden = problem.fused_hidden();
  const double w_row = problem.spline_intervals() > 0 ? 1.0 : hidden > 0 ? hidden : w;
  if (problem.spline_intervals() == 0 && hidden > 0)
    madds += w * hidden * (receiver ? 1.0 : 2.0) * (dbl ? 2 : 1);
  const double copies = dbl ? 2.0 : 1.0;  // x, Y, W and their tangents dx, dY, dW
  double values = copies * (senders * x + E * (y + w_row));
  if (receiver) {
    values += receivers * out;  // out, or the double forward's grad_grad_out
  } else {
    values += receivers * out;  // grad_out
    if (b.grad_x) values += senders * x;
    if (b.grad_y) values += E * y;
    if (b.grad_w || b.grad_h) values += E * w_row;
  }
  const double indices = 4.0 * (2.0 * E + (receiver ? receivers : senders) + 1.0);
  return {e * values + indices, 2.0 * E * madds};
}

LaunchPlan plan_launch(const TpProblem& problem, const Schedule& schedule, Pass pass,
                       const ConvBuffers& b, unsigned int* status) {
  const PassSchedule& ps = schedule.pass(pass);
  const bool deterministic = problem.accumulation() == Accumulation::kDeterministic;
  const bool receiver = is_receiver_pass(pass);
  const std::size_t elem = static_cast<std::size_t>(size_of(problem.dtype()));

  LaunchPlan plan;
  ConvArgs& a = plan.args;
  a = ConvArgs{};
  a.x = b.x, a.y = b.y, a.w = b.w, a.g = b.grad_out;
  a.dx = b.dx, a.dy = b.dy, a.dw = b.dw;
  a.out = pass == Pass::kDoubleForward ? b.grad_grad_out : receiver ? b.out : nullptr;
  if (!receiver) a.grad_x = b.grad_x, a.grad_y = b.grad_y, a.grad_w = b.grad_w;
  if (fused_pass(problem, pass)) {
    a.h = b.h, a.w4 = b.w4, a.w4t = b.w4t;
    if (!receiver) a.grad_h = b.grad_h;
  }
  a.sender = b.sender, a.receiver = b.receiver;
  a.status = status;
  a.num_edges = b.num_edges, a.num_senders = b.num_senders, a.num_receivers = b.num_receivers;
  a.accumulate_grad_x = !receiver && b.accumulate_grad_x;
  a.accumulate_grad_y = !receiver && b.accumulate_grad_y;
  // The CSR order is used in both modes when given: deterministic mode needs it, atomic mode
  // merges the runs of one node it makes (fewer atomics).
  if (receiver)
    a.ptr = b.receiver_ptr, a.order = b.receiver_order, a.num_rows = b.num_receivers;
  else
    a.ptr = b.sender_ptr, a.order = b.sender_order, a.num_rows = b.num_senders;

  auto clear = [&](void* p, std::int64_t rows, int dim) {
    if (p && rows > 0 && dim > 0)
      plan.clears[plan.num_clears++] = {p, std::size_t(rows) * std::size_t(dim) * elem};
  };
  if (ps.groups.empty()) {
    // No instruction at all: every output of the pass is zero.
    if (receiver) {
      clear(a.out, b.num_receivers, problem.dim_out());
    } else {
      if (!a.accumulate_grad_x) clear(a.grad_x, b.num_senders, problem.dim_in1());
      if (!a.accumulate_grad_y) clear(a.grad_y, b.num_edges, problem.dim_in2());
      clear(a.grad_w, b.num_edges, problem.weight_numel());
      clear(a.grad_h, b.num_edges, problem.radial_row_width());
    }
    return plan;
  }
  // A fused backward whose groups have no weights writes no dE/dh (the rest is zero).
  if (a.grad_h) {
    bool weighted = false;
    for (const Group& g : ps.groups) weighted |= group_weights(problem, g) > 0;
    if (!weighted) clear(a.grad_h, b.num_edges, problem.radial_row_width());
  }
  // Atomic mode accumulates into the outputs that several warps share: clear them first.
  if (!deterministic) {
    if (receiver)
      clear(a.out, b.num_receivers, problem.dim_out());
    else if (!a.accumulate_grad_x)
      clear(a.grad_x, b.num_senders, problem.dim_in1());
  }
  const long long items =
      deterministic ? a.num_rows : (b.num_edges + ps.smem.tile - 1) / ps.smem.tile;
  if (items == 0) return plan;
  const long long warps = ps.launch.warps_per_block;
  // Group kernels in order: sender passes accumulate grad_Y (and grad_x in deterministic mode)
  // group after group with plain read-modify-writes, which the stream order makes safe.
  plan.num_launches = int(ps.groups.size());
  plan.grid_x = static_cast<unsigned>((items + warps - 1) / warps);
  plan.threads = unsigned(ps.launch.threads_per_block);
  plan.shared_bytes = unsigned(ps.launch.shared_bytes);
  plan.rows_per_chunk = receiver;
  return plan;
}

bool TpLauncher::can_run(Pass pass, const ConvBuffers& b, std::string* why) const {
  const std::string reason = check_buffers(problem_, pass, b);
  if (why) *why = reason;
  return reason.empty();
}

void TpLauncher::run(CUstream stream, Pass pass, const ConvBuffers& b) const {
  const std::string reason = check_buffers(problem_, pass, b);
  if (!reason.empty()) throw CapacityError(reason);
  LaunchPlan plan =
      plan_launch(problem_, schedule_, pass, b, reinterpret_cast<unsigned int*>(status_));
  for (int c = 0; c < plan.num_clears; ++c)
    CLEBSCH_CU_CHECK(MemsetD8Async(reinterpret_cast<CUdeviceptr>(plan.clears[c].ptr), 0,
                                   plan.clears[c].bytes, stream));
  const std::vector<CUfunction>& kernels = functions_[static_cast<int>(pass)];
  const PassSchedule& ps = schedule_.pass(pass);
  void* params[] = {&plan.args};
  const GroupOverlap& overlap = overlaps_[static_cast<int>(pass)];
  const std::vector<CUevent>& events = group_events_[static_cast<int>(pass)];
  // Launches with no work (plan.num_launches == 0) use no stream.
  const int streams =
      plan.num_launches > 0 ? std::min(ps.launch.streams, int(side_streams_.size()) + 1) : 1;
  if (streams > 1) {
    // Fork: the side streams start after everything queued on the caller's stream (the clears).
    CLEBSCH_CU_CHECK(EventRecord(fork_, stream));
    for (int i = 0; i + 1 < streams; ++i)
      CLEBSCH_CU_CHECK(StreamWaitEvent(side_streams_[i], fork_, 0));
  }
  for (int k = 0; k < plan.num_launches; ++k) {
    const int g = overlap.order[std::size_t(k)];
    const int si = streams > 1 ? overlap.stream[std::size_t(g)] : 0;
    const CUstream st = si == 0 ? stream : side_streams_[std::size_t(si - 1)];
    if (streams > 1)
      for (int before : overlap.waits[std::size_t(g)])
        CLEBSCH_CU_CHECK(StreamWaitEvent(st, events[std::size_t(before)], 0));
    CLEBSCH_CU_CHECK(LaunchKernel(kernels[g], plan.grid_x, plan.grid_y(ps, g), 1, plan.threads, 1,
                                  1, plan.shared_bytes, st, params, nullptr));
    if (streams > 1 && overlap.signals[std::size_t(g)])
      CLEBSCH_CU_CHECK(EventRecord(events[std::size_t(g)], st));
  }
  for (int i = 0; i + 1 < streams; ++i) {
    CLEBSCH_CU_CHECK(EventRecord(joins_[i], side_streams_[i]));
    CLEBSCH_CU_CHECK(StreamWaitEvent(stream, joins_[i], 0));
  }
}

void TpLauncher::run_group(CUstream stream, Pass pass, const ConvBuffers& b, int group) const {
  const std::string reason = check_buffers(problem_, pass, b);
  if (!reason.empty()) throw CapacityError(reason);
  const LaunchPlan plan =
      plan_launch(problem_, schedule_, pass, b, reinterpret_cast<unsigned int*>(status_));
  if (group < 0 || group >= plan.num_launches)
    throw CapacityError("group " + std::to_string(group) + " of " + to_string(pass) +
                        " does not exist (" + std::to_string(plan.num_launches) + " groups)");
  ConvArgs args = plan.args;
  void* params[] = {&args};
  CLEBSCH_CU_CHECK(LaunchKernel(functions_[static_cast<int>(pass)][std::size_t(group)], plan.grid_x,
                                plan.grid_y(schedule_.pass(pass), group), 1, plan.threads, 1, 1,
                                plan.shared_bytes, stream, params, nullptr));
}

void TpLauncher::run_double_backward(CUstream stream, const ConvBuffers& b) const {
  if (b.grad_grad_out) run(stream, Pass::kDoubleForward, b);
  if (b.grad_x || b.grad_y || b.grad_w) run(stream, Pass::kDoubleBackward, b);
}

std::uint32_t TpLauncher::take_status(CUstream stream) const {
  std::uint32_t value = 0;
  CLEBSCH_CU_CHECK(StreamSynchronize(stream));
  CLEBSCH_CU_CHECK(MemcpyDtoH(&value, status_, sizeof value));
  CLEBSCH_CU_CHECK(MemsetD8(status_, 0, sizeof value));
  return value;
}

}  // namespace clebsch::cuda
