// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Stage 5 of the kernel generator: the launch. A TpLauncher owns the compiled module of one
// problem (emitted, compiled or read from the cache, and loaded when it is constructed);
// can_run() checks extents, pointers and the accumulation mode's index arrays, and run()
// launches one pass on a stream. run() never compiles and never allocates; it only clears, in
// atomic mode, the outputs that are accumulated with atomic adds. Device code reports bad edge
// indices through a status word that take_status() reads back (a synchronising call, for tests
// and debug builds, not for the hot path).
//
// Layouts are those of src/o3/convolution.h: x [num_senders][dim_in1], Y [num_edges][dim_in2],
// W [num_edges][weight_numel], out / grad_out [num_receivers][dim_out]; gradients like their
// tensors. All pointers are device pointers of the problem's dtype; index arrays are int32.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "clebsch/cuda/device/kernel_timing.h"
#include "clebsch/cuda/device/nvrtc_module.h"
#include "clebsch/cuda/generator/tp_problem.h"
#include "clebsch/cuda/generator/tp_schedule.h"

namespace clebsch::cuda {

/// Device buffers of one convolution call. Unused members stay null.
struct ConvBuffers {
  std::int64_t num_senders = 0, num_receivers = 0, num_edges = 0;
  const int* sender = nullptr;    ///< [num_edges]
  const int* receiver = nullptr;  ///< [num_edges]
  /// Deterministic mode: CSR of the edges by receiver (forward, double forward) and by sender
  /// (backward, double backward), as EdgeIndex builds them; a null order means the edges are
  /// already sorted by that node.
  const int* receiver_ptr = nullptr;    ///< [num_receivers + 1]
  const int* receiver_order = nullptr;  ///< [num_edges] or null
  const int* sender_ptr = nullptr;      ///< [num_senders + 1]
  const int* sender_order = nullptr;    ///< [num_edges] or null
  const void* x = nullptr;
  const void* y = nullptr;
  const void* w = nullptr;         ///< may be null when the problem has no weights
  const void* grad_out = nullptr;  ///< sender passes
  const void* dx = nullptr;        ///< double backward cotangents; null counts as zero
  const void* dy = nullptr;
  const void* dw = nullptr;
  void* out = nullptr;     ///< forward
  void* grad_x = nullptr;  ///< sender passes; null: not computed
  void* grad_y = nullptr;
  void* grad_w = nullptr;
  void* grad_grad_out = nullptr;  ///< double forward
  /// The fused radial form (TpProblem::fused_hidden; forward and backward, which then read no
  /// w and write no grad_w): the radial MLP's last hidden rows [num_edges][fused_hidden], its
  /// last layer [fused_hidden][weight_numel] and that transposed [weight_numel][fused_hidden];
  /// grad_h [num_edges][fused_hidden] receives dE/dh (backward). In the fused spline form
  /// (TpProblem::spline_intervals): h the edges' lengths [num_edges], w4 the table, w4t unused,
  /// grad_h [num_edges] receives dE/dr.
  const void* h = nullptr;
  const void* w4 = nullptr;
  const void* w4t = nullptr;
  void* grad_h = nullptr;
  /// Sender passes: add this call's grad_x to what grad_x holds (the caller zeroed it once)
  /// instead of clearing or storing over it, so that the edges can come in several batches.
  bool accumulate_grad_x = false;
  /// Sender passes: add this call's grad_y to what grad_y holds instead of storing over it, so
  /// that several layers' passes sum into one dE/dY without a scratch row per edge.
  bool accumulate_grad_y = false;
};

/// Kernel argument block; identical to struct ConvArgs of templates/conv_prelude.cuh.in.
struct ConvArgs {
  const void* x;
  const void* y;
  const void* w;
  const void* g;
  const void* dx;
  const void* dy;
  const void* dw;
  void* out;
  void* grad_x;
  void* grad_y;
  void* grad_w;
  const void* h;
  const void* w4;
  const void* w4t;
  void* grad_h;
  const int* sender;
  const int* receiver;
  const int* ptr;
  const int* order;
  unsigned int* status;
  long long num_edges, num_senders, num_receivers, num_rows;
  long long accumulate_grad_x;
  long long accumulate_grad_y;
};

/// The limits of the current context's device. @throws CudaError.
DeviceLimits query_device_limits();

/// Why run(@p pass, @p b) cannot run @p problem (empty when it can): counts in range, the
/// pointers the pass reads non-null, at least one output, the CSR arrays in deterministic mode.
std::string check_buffers(const TpProblem& problem, Pass pass, const ConvBuffers& b);

/// What one run() does, as data: the kernel arguments, the outputs to clear first (atomic
/// accumulation, or a pass without instructions) and the launches of the pass's group kernels,
/// in group order (kernel_name(pass, g) for g < num_launches, grid (grid_x, grid_y[g])).
/// Pure and free of heap allocations, so that the launch logic is tested without a GPU and
/// run() allocates nothing.
struct LaunchPlan {
  struct Clear {
    void* ptr;
    std::size_t bytes;
  };
  ConvArgs args;
  Clear clears[4];
  int num_clears = 0;
  int num_launches = 0;
  unsigned grid_x = 0, threads = 0, shared_bytes = 0;
  /// Receiver passes: one grid row per chunk of the group; sender passes: 1.
  bool rows_per_chunk = false;
  unsigned grid_y(const PassSchedule& ps, int g) const {
    return rows_per_chunk ? unsigned(ps.groups[g].chunks) : 1u;
  }
};

/// How the group kernels of a pass overlap on @p streams streams: the groups are launched in
/// order[] (group order, or a receiver pass's longest chains first), group g on stream[g] (0:
/// the caller's stream, i > 0: the launcher's side stream i - 1) once the groups in waits[g],
/// each on another stream, have finished; signals[g]: a later group waits for g. Receiver-pass
/// groups write disjoint output blocks and go round-robin in launch order with no waits. A
/// sender-pass group adds into grad_x of its in1 blocks and grad_Y of its in2 blocks, so every
/// two groups that share such a block keep their order in the pass (the later one waits for
/// the earlier, or follows it on the same stream): each block is summed in the order of one
/// stream, and the result, bits included in deterministic mode, is that of one group after the
/// other.
struct GroupOverlap {
  /// The launch order: every group once (LaunchConfig::order: kLongestFirst by lane_work, else
  /// 0, 1, ...).
  std::vector<int> order;
  std::vector<int> stream;
  std::vector<std::vector<int>> waits;
  std::vector<char> signals;
};
GroupOverlap group_overlap(const PassSchedule& ps, int streams);

/// The plan of run(@p pass, @p b) with status word @p status. Assumes check_buffers() passed.
LaunchPlan plan_launch(const TpProblem& problem, const Schedule& schedule, Pass pass,
                       const ConvBuffers& b, unsigned int* status);

/// The floor of group @p group of @p pass on @p b (what kernel profiles report beside its time):
/// bytes, the group's blocks of each operand the pass reads (x, Y, W or the fused form's hidden
/// rows or edge lengths, grad_out, the double passes' dx, dY, dW) read once and of each result
/// it writes written once, with the int32 edge arrays; flops, 2 per multiply-add of its
/// instructions, per edge, channel and Y channel: nnz + d3 forward (C Y contracted with x, then
/// the weight), 2 nnz + 2 d1 + d2 backward (grad_x's and grad_Y's contractions, their weight
/// updates and grad_W), twice those in the double passes, and in the fused radial form the
/// weights made from the hidden rows (hidden multiply-adds per weight; twice in a sender pass).
/// Pure.
KernelFloor conv_group_floor(const TpProblem& problem, const PassSchedule& ps, int group,
                             const ConvBuffers& b);

/// Owner of one problem's compiled kernels (see the file comment).
class TpLauncher {
 public:
  /// Emits the module of @p problem under @p schedule, compiles it for the current device (or
  /// reads the cache) and loads it. Needs a current context (ensure_context()). The module is
  /// always compiled for the device's architecture; options.arch is ignored.
  /// @throws CudaError (no driver, compilation or load failure).
  TpLauncher(const TpProblem& problem, const Schedule& schedule, CompileOptions options = {});
  /// Builds the problem from @p tp, queries the device, schedules (retrying with fewer warps per
  /// block while shared memory does not fit) and constructs the launcher.
  /// @throws CapacityError for an unsupported product; CudaError.
  static TpLauncher create(const TensorProduct& tp, DType dtype, Accumulation accumulation,
                           CompileOptions options = {}, ScheduleOptions schedule_options = {});
  ~TpLauncher();
  TpLauncher(TpLauncher&& o) noexcept;
  TpLauncher(const TpLauncher&) = delete;
  TpLauncher& operator=(const TpLauncher&) = delete;
  TpLauncher& operator=(TpLauncher&&) = delete;

  /// Whether run(pass, b) is valid: counts in range, the pointers the pass reads non-null, at
  /// least one output, and the CSR arrays in deterministic mode. @param why receives the reason.
  bool can_run(Pass pass, const ConvBuffers& b, std::string* why = nullptr) const;
  /// Launches @p pass on @p stream (asynchronous). A pass's group kernels may run on the
  /// launcher's side streams (group_overlap()), forked from and joined back to @p stream
  /// (stream capture included): work queued on @p stream after run() sees all of them.
  /// @throws CapacityError if !can_run (the reason in the message); CudaError from the driver.
  void run(CUstream stream, Pass pass, const ConvBuffers& b) const;
  /// The double backward: kDoubleForward when b.grad_grad_out is set, then kDoubleBackward when
  /// any of grad_x, grad_y, grad_w is set.
  void run_double_backward(CUstream stream, const ConvBuffers& b) const;
  /// Launches only group @p group of @p pass on @p stream, with no clears: to time the groups
  /// one at a time (bench_conv --group-times). Outputs are valid only once every group ran.
  /// @throws CapacityError if !can_run or the group does not exist; CudaError.
  void run_group(CUstream stream, Pass pass, const ConvBuffers& b, int group) const;
  /// Synchronises @p stream, returns the status word (bit 0: an edge index out of range,
  /// bit 1: an edge outside its CSR row) and clears it.
  std::uint32_t take_status(CUstream stream) const;

  const TpProblem& problem() const { return problem_; }
  const Schedule& schedule() const { return schedule_; }
  const std::string& source() const { return source_; }
  const NvrtcModule& module() const { return module_; }
  /// The group kernels of @p pass, in launch order.
  const std::vector<CUfunction>& kernels(Pass pass) const {
    return functions_[static_cast<int>(pass)];
  }

 private:
  TpProblem problem_;
  Schedule schedule_;
  std::string source_;
  NvrtcModule module_;
  std::vector<CUfunction> functions_[kNumPasses];  ///< per pass, one per group
  CUdeviceptr status_ = 0;
  /// The passes' extra streams (LaunchConfig::streams - 1 of the widest) and the events that
  /// fork them from and join them to the caller's stream. One run() at a time per
  /// launcher: the events are reused from call to call.
  std::vector<CUstream> side_streams_;
  CUevent fork_ = nullptr;
  std::vector<CUevent> joins_;
  /// Per pass: its groups' streams and waits (group_overlap()), and an event per group that a
  /// later group waits for (null otherwise).
  GroupOverlap overlaps_[kNumPasses];
  std::vector<CUevent> group_events_[kNumPasses];
};

}  // namespace clebsch::cuda
