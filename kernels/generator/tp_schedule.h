// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Stage 2 of the kernel generator: the schedule. schedule(problem, limits) is a pure function
// that makes every tuning decision the emitted source follows:
//   - the strategy (a tag type): WarpPerEdgeTile (atomic accumulation: a warp owns a tile of
//     consecutive edges, merges runs of equal receivers in registers and flushes them with
//     atomic adds) or WarpPerNode (deterministic: a warp owns one output row, a receiver in the
//     receiver passes and a sender in the sender passes, and sums its CSR edges in order);
//   - lanes over channels: lane l of chunk c works on channel u = 32c + l of every block;
//   - groups: the output blocks cut into groups whose per-lane live values (accumulators,
//     gathered inputs, gradients) fit a register budget; all blocks of a group have the same
//     multiplicity, so a group runs over ceil(mul/32) chunks with no idle lanes but the last;
//     each group is one kernel; one group-chunk pair is a "unit" of work (a grid row of a
//     receiver-pass kernel, an inner loop iteration of a sender-pass kernel);
//   - the shared-memory plan: per warp, the staged edge ids, senders, receivers and the edge
//     attribute rows Y (and dY) of one edge tile, loaded coalesced and kept resident while
//     all chunks of a group run over them;
//   - the launch configuration of each kernel.
// It needs no GPU: DeviceLimits is a plain value (DeviceLimits::h200() for tests and CI).
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "clebsch/cuda/generator/tp_problem.h"

namespace clebsch::cuda {

/// What the schedule needs to know about the device.
struct DeviceLimits {
  int sm_major = 9, sm_minor = 0;
  int num_sms = 132;
  /// Largest dynamic shared memory one block may opt into.
  int max_shared_per_block = 227 * 1024;
  int max_shared_per_sm = 228 * 1024;
  int max_threads_per_block = 1024;
  /// The H200 (sm_90) as measured; for schedules made without a device.
  static DeviceLimits h200() { return {}; }
  /// "sm_90".
  std::string arch() const;
};

/// Atomic accumulation: a warp owns edges [tile*k, tile*(k+1)).
struct WarpPerEdgeTile {
  int edges_per_tile;
};
/// Deterministic accumulation: a warp owns one output row and stages its CSR edges
/// edges_per_stage at a time.
struct WarpPerNode {
  int edges_per_stage;
};
/// The strategy, chosen from the problem's accumulation mode.
using Strategy = std::variant<WarpPerEdgeTile, WarpPerNode>;

/// The four kernels of a module.
enum class Pass {
  /// out[r] = sum_e TP(x[s], Y[e], W[e]) (receiver pass).
  kForward,
  /// grad_x (scattered to senders), grad_Y and grad_W per edge, from grad_out (sender pass).
  kBackward,
  /// Double backward, receiver pass: grad_grad_out from the cotangents (dx, dY, dW).
  kDoubleForward,
  /// Double backward, sender pass: grad_x, grad_Y, grad_W from the cotangents.
  kDoubleBackward
};
inline constexpr int kNumPasses = 4;
std::string to_string(Pass pass);
/// Entry-point name of the kernel of group @p group of @p pass in the generated module. Each
/// group is its own kernel, so that the register allocation of one group does not limit the
/// occupancy of another; the launcher runs a sender pass's group kernels in order on one
/// stream and spreads a receiver pass's over LaunchConfig::streams streams.
std::string kernel_name(Pass pass, int group);
/// Receiver passes run one grid row per chunk; sender passes loop over the chunks in a warp.
bool is_receiver_pass(Pass pass);
/// The double passes take the cotangents dx, dY, dW beside x, Y, W.
bool is_double_pass(Pass pass);

/// How a group's pass loop gathers the per-edge operands (Group::operand_load).
enum class OperandLoad {
  /// Each edge's operands when the edge is computed.
  kCurrentEdge,
  /// The next edge's operands while the current one is computed (software pipelining: twice the
  /// operand registers, one memory latency hidden per edge).
  kPrefetchNextEdge
};

/// What runs a group's contractions (Group::unit).
enum class ContractionUnit {
  /// The SIMT lanes (fused multiply-adds, warp shuffles).
  kSimt,
  /// The float64 tensor cores (m8n8k4 DMMAs, templates/conv_mma.cuh.in).
  kTensorCores
};

/// A set of output blocks (of one multiplicity) computed together, with the paths into them and
/// the input blocks they read.
struct Group {
  std::vector<int> out_blocks;
  std::vector<int> paths;
  std::vector<int> in1_blocks;
  std::vector<int> in2_blocks;
  int mul;
  /// ceil(mul / (32 lane_channels)).
  int chunks;
  /// Channels per lane: 1, or in the matrix CG form up to 4, so that one shared-memory M and
  /// one warp reduction serve several channels (lane l of chunk c works on channels
  /// 32 (c lane_channels + h) + l, h < lane_channels).
  int lane_channels = 1;
  /// Estimated live values per lane (the quantity the budget bounds).
  int live_values;
  /// Matrix form, receiver passes: a lane's multiply-adds per edge (lane_channels times d1 d3
  /// summed over the instructions and Y channels), the length of one grid row's chain; 0 in
  /// the other forms and the sender passes (which launch in group order).
  /// Launch-only (LaunchConfig::order).
  long long lane_work = 0;
  /// Per-edge gathered operands per lane (x, dx, W, dW and grad_out values of the group).
  int operand_values;
  /// Whether the pass loop prefetches the next edge's operands.
  OperandLoad operand_load;
  /// kTensorCores: the matrix form on the float64 tensor cores. Forward
  /// (ScheduleOptions::mma_float64): a warp's 32 lane_channels channels are 4 lane_channels row
  /// tiles of 8 for m8n8k4 MMAs, each lane holding MMA fragments instead of whole channels.
  /// Sender passes (ScheduleOptions::mma_backward, mma_double_backward): grad_Y's pair products
  /// summed over the warp's channels by MMAs (the channels as their k dimension) instead of warp
  /// shuffles.
  ContractionUnit unit = ContractionUnit::kSimt;
  bool on_tensor_cores() const { return unit == ContractionUnit::kTensorCores; }
};

/// Per-warp shared memory: byte offsets of the staged arrays and the total. dy_offset (double
/// passes) and gy_offset (sender passes: the grad_Y rows of the tile, summed over the lanes and
/// chunks before one coalesced write per value) are -1 when absent; m_offset is the scratch of
/// the matrix CG form (uses_matrix_cg), -1 when the pass does not use it.
struct SharedMemoryPlan {
  int tile;  ///< edges staged at a time
  int edge_offset, sender_offset, receiver_offset, y_offset, dy_offset, gy_offset;
  int m_offset;
  /// The fused radial form's passes (fused_pass()), else 0 / -1: the weights of sub_tile edges
  /// are made at a time from their staged hidden rows (hs, sub_tile x fused_hidden values) into
  /// ws ([sub_tile][ws_stride]: per edge, weight j of lane l at j * 32 + l); the sender passes'
  /// per-edge weight gradients go to gws (same layout) before they are contracted to dE/dh.
  /// The fused spline form's sender passes keep the weights' slopes in dws (two sub-tiles,
  /// alternating: the prefetch of the next sub-tile's weights precedes this one's contraction).
  int sub_tile = 0, ws_stride = 0, hs_offset = -1, ws_offset = -1, gws_offset = -1, dws_offset = -1;
  /// The fused radial form's W4 slice (ScheduleOptions::fused_w4_slice_bytes), shared by the
  /// block's warps at the start of its shared memory, before the warps' regions; 0: none.
  /// [hidden][weights per lane x 32 + 1] (the odd row length keeps the backward's reads across
  /// the hidden index free of bank conflicts).
  int w4_slice_bytes = 0;
  /// The fused radial form's weights and dE/dh on the float64 tensor cores
  /// (ScheduleOptions::fused_mma_float64).
  bool radial_mma = false;
  int bytes_per_warp;
};

/// The order in which a pass's group kernels are launched (LaunchConfig::order).
enum class LaunchOrder {
  /// Group order (by output block).
  kGroupOrder,
  /// By descending Group::lane_work (receiver passes).
  kLongestFirst
};

/// Launch shape of one kernel. The grid's x extent depends on the edge or node count and is
/// computed at launch by the launcher: ceil(work items / warps_per_block), a work item being an
/// edge tile (WarpPerEdgeTile) or an output row (WarpPerNode).
struct LaunchConfig {
  int warps_per_block;
  int threads_per_block;
  int shared_bytes;  ///< dynamic shared memory per block
  /// Streams the group kernels of the pass are spread over (1: one after the other on the
  /// caller's stream). Receiver-pass groups write disjoint output blocks, so they overlap
  /// freely; sender-pass groups accumulate into shared gradients (grad_x of their in1 blocks,
  /// grad_Y of their in2 blocks), so the launcher keeps the order of every two groups that
  /// write a block (group_overlap() in tp_launcher.h) and overlaps the rest. Launch-only: the
  /// sender passes' streams are left out of Schedule::str(), which heads the module source,
  /// so that they do not change the kernel cache key.
  int streams = 1;
  /// Receiver passes with kLongestFirst: launch the groups by descending Group::lane_work,
  /// round-robin over the streams in that order (ScheduleOptions::receiver_launch_order);
  /// launch-only.
  LaunchOrder order = LaunchOrder::kGroupOrder;
};

/// The schedule of one pass.
struct PassSchedule {
  Pass pass;
  std::vector<Group> groups;
  SharedMemoryPlan smem;
  LaunchConfig launch;
  /// Total group-chunk units.
  int units() const;
};

/// ScheduleOptions::mma_float64 and the like: which float64 matrix groups of a pass use the tensor
/// cores. The values are those of bench_conv's --mma flags.
enum class TensorCoreUse {
  kNever = 0,
  /// The groups whose SIMT lanes are register-limited (the rule of each option).
  kRegisterLimited = 1,
  kAlways = 2
};

/// The form of a looped module's per-edge contractions (ScheduleOptions::looped_cg_form).
enum class CgForm {
  /// Loops over the CG tables.
  kLooped,
  /// M(Y) built per edge and instruction, contracted densely by each lane.
  kMatrix
};

/// Tuning knobs; the defaults are the tuned values. The caller may retry with fewer warps when
/// schedule() throws CapacityError.
struct ScheduleOptions {
  int warps_per_block = 4;
  /// Per-lane live-value budget for float32 and float64 (a float64 value takes two registers).
  int budget_float32 = 72;
  int budget_float64 = 56;
  /// The forward pass's float32 budget when positive (budget_float32 otherwise): the forward
  /// keeps no gradient partials, so larger groups (fewer x re-gathers) pay there (measured:
  /// bench/NOTES.md run 9).
  int forward_budget_float32 = 128;
  /// Largest edge tile; smaller when the staged rows would not leave room for occupancy.
  /// Atomic mode prefers longer tiles: fewer rows are split between two tiles (two flushes).
  int max_tile = 32;
  int max_tile_atomic = 64;
  /// Prefetch when a group's operands take at most this many 32-bit registers.
  int prefetch_registers = 64;
  /// Sender passes of the unrolled form: an output block whose instructions alone would keep
  /// more than this many 32-bit registers per lane live is split into groups of its
  /// instructions (each reads the block's grad_out and adds into the shared grad_x and grad_Y
  /// blocks, in the launcher's order). NequIP-style products sum up to 11 instructions into one
  /// block: in float64 their double backward groups kept ~160 values (320 registers) and
  /// compiled to 32-register kernels with 5-9 KB stack frames, 95 ms per call against 2 ms in
  /// float32 (bench/NOTES.md run 25). 0: never split.
  int sender_split_registers = 208;
  /// Target bytes of staged edge attributes per warp when choosing the tile.
  int staged_bytes_per_warp = 8192;
  /// Looped CG form (emit_conv_looped.cpp): when the module's largest instruction has more CG
  /// non-zeros than this, every instruction's per-edge contraction is emitted as a loop over a
  /// table of (i, j, k, C) entries instead of unrolled multiply-adds with the coefficients as
  /// immediates. Unrolled bodies make NVRTC's time grow far faster than the code, and the looped
  /// form runs far slower: 100 keeps every MACE and NequIP model with l <= 3 (at most 42
  /// non-zeros) and high-l-4 (97) unrolled and loops l >= 5, whose unrolled modules take NVRTC
  /// many minutes (measured: bench/NOTES.md "High l" and run 5).
  /// -1: never loop; 0: loop every instruction (tests of the looped form on small problems).
  int loop_cg_above = 100;
  /// Matrix CG form for the forward and backward passes of a looped module (emit_conv_matrix.cpp):
  /// per edge and instruction the warp builds M(Y)_ik = sum_j C_ijk Y_j once in shared memory
  /// (it does not depend on the channel) and each lane contracts it densely with its channel's
  /// x (forward) or grad_out (backward); grad_Y sums the products x_i grad_out_k over the lanes
  /// first and contracts them with C once per edge. The double passes stay looped unless
  /// looped_cg_form_double is kMatrix too. kLooped: the looped form in every pass (A/B
  /// benchmarks, tests of the looped form).
  CgForm looped_cg_form = CgForm::kMatrix;
  /// With looped_cg_form kMatrix, the double passes' form: kMatrix builds M(Y) and M(dY) per
  /// edge and instruction; the double forward sums (w dx + dW x) M(Y) + w x M(dY), the double
  /// backward forms M(Y)^T g and M(dY)^T g per lane and grad_Y from the lane-summed products
  /// (dW x_i + w dx_i) g_k. kLooped: the double passes stay looped.
  CgForm looped_cg_form_double = CgForm::kMatrix;
  /// Matrix form: the per-lane register estimate that bounds lane_channels (at most
  /// max_lane_channels) of its single-block groups, in float32 and float64 modules. float64 takes
  /// up to twice the channels of 160: fewer M builds and grad_Y reductions per channel (measured:
  /// bench/NOTES.md run 10). float32 stays at the measured 160.
  int matrix_lane_registers = 160;
  int matrix_lane_registers_float64 = 224;
  /// The float64 estimates of the double passes, which hold x, dx, W and dW per channel. The
  /// double backward's is larger: more of its groups keep two or four channels per lane in SIMT
  /// instead of one channel on the tensor cores' pair products, in both modes (measured:
  /// bench/NOTES.md runs 16, 17). The double forward keeps 224: its register-limited groups run
  /// on the tensor cores (mma_double_forward), which a larger estimate would take back to
  /// spilling SIMT lanes.
  int matrix_lane_registers_float64_double_forward = 224;
  int matrix_lane_registers_float64_double_backward = 256;
  int max_lane_channels = 4;
  /// Matrix form: prefetch the next edge's operands when they take at most this many 32-bit
  /// registers. 0: never. Its groups already hold 128-255 registers per lane, so that the
  /// prefetch's extra operand registers cost warps: with the receiver groups overlapped on
  /// streams, occupancy hides the latency better (measured: bench/NOTES.md run 10).
  int matrix_prefetch_registers = 0;
  /// Most streams a receiver pass's group kernels run on at once (LaunchConfig::streams). A
  /// high-l module has one kernel per output block (69 at l = 5) of one grid row of warps per
  /// receiver each, and the longest row sets its time: overlapping the kernels lets the rows of
  /// one fill the others' tails (measured: bench/NOTES.md run 10).
  int receiver_streams = 8;
  /// Launch a receiver pass's groups longest chain first (LaunchConfig::order) rather than in
  /// output-block order, which puts the largest l last: the longest rows then start when the
  /// others are ending (list scheduling's tail; measured: bench/NOTES.md run 15). Launch-only.
  /// Receiver groups store whole blocks of their own, so any order gives the same bits. Sender
  /// passes keep group order: their module stores in the first group that writes a gradient
  /// block and adds in the later ones (run 15 tried them longest first: every check failed).
  LaunchOrder receiver_launch_order = LaunchOrder::kLongestFirst;
  /// Most streams a sender pass's group kernels run on at once (LaunchConfig::streams): a
  /// sender group kernel holds one grid row of warps per sender, and the longest row sets its
  /// time, as in the receiver passes (measured: bench/NOTES.md run 13); 1: one group after the
  /// other.
  int sender_streams = 8;
  /// Matrix form, float64 forward (sm_80 and later): the contraction out[c][k] += (w x)[c][i]
  /// M[i][k] on the tensor cores, m8n8k4 DMMAs with the channels as rows, x (times W) as A and
  /// M(Y) as B: each lane builds its own B entries in registers, so there is no shared-memory
  /// M, no barrier and one MMA instruction per 256 multiply-adds (padded to tiles of 4 i and
  /// 8 k). mma_lane_registers bounds lane_channels as matrix_lane_registers does.
  /// kNever, kRegisterLimited (default) or kAlways. The form pays where the SIMT form's
  /// registers cap a lane below max_lane_channels (M is then built for fewer channels either way
  /// and the SIMT lanes spill), so by default those groups use it, and every group once they are
  /// at least mma_all_share of the forward's groups. The share is 1 (every group only when every
  /// group is limited): with the groups launched longest first the register-limited rule wins
  /// even where every group had won in output-block order (measured: bench/NOTES.md runs 12, 13,
  /// 15).
  TensorCoreUse mma_float64 = TensorCoreUse::kRegisterLimited;
  /// The same for the double forward, (w dx + dW x) M(Y) + (w x) M(dY): dx and dW enter the A
  /// fragments with x and W, M(Y)'s and M(dY)'s B fragments are built in turn. kNever,
  /// kRegisterLimited (default: the groups whose SIMT lanes hold fewer than max_lane_channels
  /// channels, where the tensor cores won; the share rule is the forward's only) or kAlways
  /// (measured: bench/NOTES.md run 15).
  TensorCoreUse mma_double_forward = TensorCoreUse::kRegisterLimited;
  int mma_lane_registers = 160;
  double mma_all_share = 1.0;
  /// Matrix form, float64 backward (sm_80 and later): grad_Y's pair products P_ik = sum_u
  /// x_ui w_u g_uk summed over the warp's channels u on the tensor cores (m8n8k4 DMMAs, u as
  /// their k dimension, operands read from memory straight into fragments) instead of 32 pairs
  /// at a time in transposed warp reductions (a float64 shuffle is two 32-bit shuffles).
  /// kNever, kRegisterLimited (default: the groups whose SIMT lanes hold one channel of a
  /// block of several 32-channel chunks, where the reductions are the most per channel and the
  /// tensor cores won; with more channels per lane they broke even or lost) or kAlways
  /// (measured: bench/NOTES.md run 14).
  TensorCoreUse mma_backward = TensorCoreUse::kRegisterLimited;
  /// The same in the double backward, where P_ik = sum_u (w_u dx_ui + dW_u x_ui) g_uk: A is
  /// formed as its fragments load, one sum as the SIMT lanes' (mma_pairs_double; summing the two
  /// products apart, twice the MMAs, lost). The same three values; the same rule by default
  /// (measured: bench/NOTES.md runs 14, 15).
  TensorCoreUse mma_double_backward = TensorCoreUse::kRegisterLimited;
  /// The fused radial form (TpProblem::fused_hidden): edges whose weights are made at once from
  /// their hidden rows. Each W4 value a lane loads serves this many edges (multiply-adds per
  /// load), at sub_tile x (weights per lane) values of shared memory per warp.
  int fused_sub_tile = 8;
  /// The fused radial form: a block stages the W4 columns of its group and chunk (hidden x
  /// weights per lane x 32 values) in shared memory once, for all its warps, when they take at
  /// most this many bytes (0: never) and leave as many blocks resident per multiprocessor as
  /// without them; otherwise every sub-tile reads them from L1/L2 (bench/NOTES.md run 27).
  int fused_w4_slice_bytes = 96 * 1024;
  /// Stage the slice even where it costs resident blocks (tests and A/B benchmarks).
  bool fused_w4_slice_any_occupancy = false;
  /// The fused radial form in float64 on sm_80 and later: a sub-tile's weights W = h W4 and its
  /// dE/dh = dE/dW W4^T as m8n8k4 DMMAs, the sub-tile's 8 edges as their rows (needs
  /// fused_sub_tile 8 and a hidden width that is a multiple of 8), instead of SIMT multiply-adds.
  bool fused_mma_float64 = true;
};

/// Row length (values) of the fused radial form's W4 slice (SharedMemoryPlan::w4_slice_bytes):
/// the widest group's weights per lane x 32, plus one.
inline int w4_slice_stride(const SharedMemoryPlan& sm) { return sm.ws_stride + 1; }
/// Blocks of @p threads_per_block threads and @p shared_bytes of dynamic shared memory that one
/// multiprocessor of @p limits holds at once.
int blocks_per_sm(const DeviceLimits& limits, int shared_bytes, int threads_per_block);
/// Whether @p pass of @p problem runs in the fused radial form: the forward and backward passes
/// of a problem in a fused form, TpProblem::radial_row_width() > 0 (the double passes read W).
bool fused_pass(const TpProblem& problem, Pass pass);
/// The weights one lane of group @p g reads per edge: one per Y channel of each weighted
/// instruction (for_each_weight's order).
int group_weights(const TpProblem& problem, const Group& g);

/// Whether @p problem's modules use the looped CG form (ScheduleOptions::loop_cg_above).
bool uses_looped_cg(const TpProblem& problem, const ScheduleOptions& options);
/// The matrix form's per-lane register estimate for @p dtype in @p pass (ScheduleOptions).
int matrix_lane_registers(DType dtype, Pass pass, const ScheduleOptions& options);
/// Whether @p pass of @p problem's modules uses the matrix CG form
/// (ScheduleOptions::looped_cg_form, looped_cg_form_double).
bool uses_matrix_cg(const TpProblem& problem, const ScheduleOptions& options, Pass pass);
/// Row length (elements) of an M matrix of the matrix CG form: d values (d1 in a row k of M,
/// d3 in a row i of M^T) padded to 16 bytes, so that a lane reads a row with vector loads.
int matrix_cg_stride(int d, DType dtype);
/// Elements of one M (or P) buffer of the matrix CG form: the largest instruction's matrix, M
/// or M^T.
int matrix_cg_buffer(const TpProblem& problem);

/// The whole module's schedule.
struct Schedule {
  Strategy strategy;
  std::vector<PassSchedule> passes;  ///< indexed by Pass
  DeviceLimits limits;
  ScheduleOptions options;
  const PassSchedule& pass(Pass p) const { return passes.at(static_cast<int>(p)); }
  /// Human-readable summary (strategy, groups per pass, shared memory, launch).
  std::string str() const;
};

/// Makes every tuning decision for @p problem on a device with @p limits.
/// @throws CapacityError when the per-block shared memory exceeds the device (retry with fewer
/// warps_per_block) or a single output block alone cannot be scheduled.
Schedule schedule(const TpProblem& problem, const DeviceLimits& limits,
                  const ScheduleOptions& options = {});

}  // namespace clebsch::cuda
