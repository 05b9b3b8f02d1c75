// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// schedule(): groups, shared-memory plan and launch configuration of each pass (see
// tp_schedule.h). Pure: depends only on its arguments.
#include "clebsch/cuda/generator/tp_schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "clebsch/support/error.h"

namespace clebsch::cuda {
namespace {

constexpr int kWarpSize = 32;

int round_up(int x, int a) { return (x + a - 1) / a * a; }

// Live values per lane of a group in a pass: the registers the unrolled code keeps at once
// (accumulators, gathered operands, gradient partials, one path's temporaries).
// Gathered operands per edge and lane: the values Ops of the emitted group holds.
int operand_values(Pass pass, const TpProblem& p, const std::vector<int>& paths,
                   const std::set<int>& out, const std::set<int>& in1) {
  int d1 = 0, d_out = 0, weights = 0;
  for (int a : in1) d1 += p.in1()[a].dim();
  for (int o : out) d_out += p.out()[o].dim();
  for (int n : paths)
    if (p.paths()[n].has_weight) weights += p.in2()[p.paths()[n].in2].mul;
  switch (pass) {
    case Pass::kForward:
      return d1 + weights;
    case Pass::kBackward:
      return d1 + weights + d_out;
    case Pass::kDoubleForward:
      return 2 * (d1 + weights);
    case Pass::kDoubleBackward:
      return 2 * (d1 + weights) + d_out;
  }
  return 0;
}

int live_values(Pass pass, const TpProblem& p, const std::set<int>& out, const std::set<int>& in1,
                const std::set<int>& in2) {
  int d_out = 0, d1 = 0, d2 = 0, max_d3 = 0;
  for (int o : out) d_out += p.out()[o].dim(), max_d3 = std::max(max_d3, p.out()[o].dim());
  for (int a : in1) d1 += p.in1()[a].dim();
  for (int b : in2) d2 += p.in2()[b].mul * p.in2()[b].dim();
  switch (pass) {
    case Pass::kForward:
      return d_out + d1 + d2 + max_d3;
    case Pass::kBackward:
      return 2 * d1 + d_out + 2 * d2 + max_d3;
    case Pass::kDoubleForward:
      return d_out + 2 * d1 + 2 * d2 + 2 * max_d3;
    case Pass::kDoubleBackward:
      return 3 * d1 + d_out + 3 * d2 + 2 * max_d3;
  }
  return 0;
}

std::vector<Group> make_groups(Pass pass, const TpProblem& p, int budget, int prefetch_regs,
                               int split_values) {
  std::vector<std::vector<int>> paths_into(p.out().size());
  for (std::size_t n = 0; n < p.paths().size(); ++n) paths_into[p.paths()[n].out].push_back(int(n));

  std::vector<Group> groups;
  std::set<int> out, in1, in2;
  std::vector<int> some_paths;  // a split block's instructions in this group (else: all)
  int mul = -1;
  auto close = [&]() {
    if (out.empty()) return;
    Group g;
    g.out_blocks.assign(out.begin(), out.end());
    if (!some_paths.empty())
      g.paths = some_paths;
    else
      for (int o : g.out_blocks)
        for (int n : paths_into[o]) g.paths.push_back(n);
    std::sort(g.paths.begin(), g.paths.end());
    g.in1_blocks.assign(in1.begin(), in1.end());
    g.in2_blocks.assign(in2.begin(), in2.end());
    g.mul = mul;
    g.chunks = (mul + kWarpSize - 1) / kWarpSize;
    g.live_values = live_values(pass, p, out, in1, in2);
    g.operand_values = operand_values(pass, p, g.paths, out, in1);
    g.operand_load = g.operand_values * size_of(p.dtype()) / 4 <= prefetch_regs
                         ? OperandLoad::kPrefetchNextEdge
                         : OperandLoad::kCurrentEdge;
    groups.push_back(std::move(g));
    out.clear(), in1.clear(), in2.clear(), some_paths.clear();
  };
  // A block too large for one sender group: its instructions by first operand, as many per
  // group as fit split_values (at least one).
  const bool may_split = !is_receiver_pass(pass) && split_values > 0;
  auto split = [&](int o) {
    std::vector<int> order = paths_into[o];
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return p.paths()[a].in1 < p.paths()[b].in1; });
    for (int n : order) {
      std::set<int> a2 = in1, b2 = in2;
      a2.insert(p.paths()[n].in1), b2.insert(p.paths()[n].in2);
      if (!some_paths.empty() && live_values(pass, p, {o}, a2, b2) > split_values) close();
      out.insert(o), in1.insert(p.paths()[n].in1), in2.insert(p.paths()[n].in2);
      some_paths.push_back(n);
    }
    close();
  };
  // Output blocks are visited by multiplicity (in order of first appearance), so that
  // non-uniform multiplicities cost one chunk loop per multiplicity, and within one
  // multiplicity in units of the blocks that one first-operand block feeds: a unit that fits
  // joins the current group whole or starts the next one, so that each group gathers few x
  // blocks and, across the groups of a pass, each x value is gathered about once per edge (for
  // MACE, where every output block has one instruction, exactly once). A unit larger than the
  // budget is split block by block.
  std::vector<int> muls;
  for (const TpBlock& b : p.out())
    if (std::find(muls.begin(), muls.end(), b.mul) == muls.end()) muls.push_back(b.mul);
  auto feeder = [&](int o) {
    int a = int(p.in1().size());
    for (int n : paths_into[o]) a = std::min(a, p.paths()[n].in1);
    return a;
  };
  auto cost_with = [&](const std::vector<int>& blocks) {
    std::set<int> o2 = out, a2 = in1, b2 = in2;
    for (int o : blocks) {
      o2.insert(o);
      for (int n : paths_into[o]) a2.insert(p.paths()[n].in1), b2.insert(p.paths()[n].in2);
    }
    return live_values(pass, p, o2, a2, b2);
  };
  auto add = [&](const std::vector<int>& blocks) {
    for (int o : blocks) {
      out.insert(o);
      for (int n : paths_into[o]) in1.insert(p.paths()[n].in1), in2.insert(p.paths()[n].in2);
    }
  };
  for (int m : muls) {
    if (!out.empty()) close();
    mul = m;
    // Units: blocks of this multiplicity with instructions, by feeding block, in block order.
    // Blocks nobody writes to and blocks of zero channels are zero-filled by the emitted code.
    std::map<int, std::vector<int>> units;
    for (std::size_t o = 0; o < p.out().size(); ++o)
      if (p.out()[o].mul == m && m > 0 && !paths_into[o].empty())
        units[feeder(int(o))].push_back(int(o));
    for (const auto& [a, blocks] : units) {
      if (cost_with(blocks) <= budget) {
        add(blocks);
        continue;
      }
      close();
      if (cost_with(blocks) <= budget) {
        add(blocks);
        continue;
      }
      for (int o : blocks) {
        if (!out.empty() && cost_with({o}) > budget) close();
        if (may_split && out.empty() && paths_into[o].size() > 1 && cost_with({o}) > split_values) {
          split(o);
          continue;
        }
        add({o});
      }
    }
  }
  close();
  return groups;
}

// A float64 forward group on the tensor cores: per lane, the accumulator fragments of its
// 4 lane_channels row tiles (8 channels each) times ceil(d3 / 8) column tiles (two values
// each), the edge's operands of every row tile (an x entry per in1 block and k-step and a W per
// weight, all loaded before the MMAs so that their latency overlaps the B build; the double
// forward also dx and dW) and the B fragments of one instruction's M (ceil(d1 / 4) k-steps by
// the column tiles; the double forward builds M(Y)'s and then M(dY)'s in the same registers);
// lane_channels is the largest power of two (at most max_lane_channels and the 32-channel
// chunks) within mma_lane_registers.
void mma_channels(Group& g, const TpProblem& p, const ScheduleOptions& o, int chunks32, int weights,
                  bool dbl) {
  const int tiles_k = (p.out()[std::size_t(g.out_blocks.at(0))].dim() + 7) / 8;
  int steps = 0, x_steps = 0;
  for (int a : g.in1_blocks) {
    steps = std::max(steps, (p.in1()[std::size_t(a)].dim() + 3) / 4);
    x_steps += (p.in1()[std::size_t(a)].dim() + 3) / 4;
  }
  if (dbl) x_steps *= 2, weights *= 2;
  auto values = [&](int nc) {
    return nc * 4 * (2 * tiles_k + x_steps + weights) + steps * tiles_k;
  };
  g.unit = ContractionUnit::kTensorCores;
  g.operand_load = OperandLoad::kCurrentEdge;
  const long long work_per_channel = g.lane_work / g.lane_channels;
  g.lane_channels = 1;
  while (2 * g.lane_channels <= std::min(o.max_lane_channels, chunks32) &&
         values(2 * g.lane_channels) * 2 <= o.mma_lane_registers)
    g.lane_channels *= 2;
  g.chunks = (g.mul + kWarpSize * g.lane_channels - 1) / (kWarpSize * g.lane_channels);
  g.live_values = values(g.lane_channels);
  g.operand_values = g.lane_channels * 4 * (x_steps + weights);
  g.lane_work = work_per_channel * g.lane_channels;
}

// Matrix CG form: one group per output block (its instructions share the block's accumulators),
// each lane working on as many channels as fit matrix_lane_registers (a power of two, at most
// max_lane_channels and the block's chunk count). Per channel a lane keeps the block's x and W
// (the double passes also dx and dW), and the accumulators in a receiver pass; in a sender pass
// the grad_x sums and grad_out, plus one batch of 32 pair products (x_i w grad_out_k summed over
// the channels) for the warp reduction of grad_Y.
std::vector<Group> matrix_groups(Pass pass, const TpProblem& p, const ScheduleOptions& o,
                                 const DeviceLimits& limits) {
  std::vector<Group> groups;
  const TensorCoreUse receiver_mma = pass == Pass::kForward         ? o.mma_float64
                                     : pass == Pass::kDoubleForward ? o.mma_double_forward
                                                                    : TensorCoreUse::kNever;
  const bool mma =
      receiver_mma != TensorCoreUse::kNever && p.dtype() == DType::kFloat64 && limits.sm_major >= 8;
  // Sender passes on the tensor cores: the backward's groups by mma_backward, the double
  // backward's by mma_double_backward.
  const TensorCoreUse sender_mma =
      is_receiver_pass(pass) || p.dtype() != DType::kFloat64 || limits.sm_major < 8
          ? TensorCoreUse::kNever
      : pass == Pass::kBackward ? o.mma_backward
                                : o.mma_double_backward;
  // Per group, what mma_channels() needs and whether the SIMT lanes are register-limited.
  struct MmaCandidate {
    int chunks32, weights;
    bool register_limited;
  };
  std::vector<MmaCandidate> shape;
  const int regs = size_of(p.dtype()) / 4;
  const int lane_registers = matrix_lane_registers(p.dtype(), pass, o);
  for (std::size_t b = 0; b < p.out().size(); ++b) {
    Group g;
    g.out_blocks = {int(b)};
    std::set<int> in1, in2;
    int weights = 0, d1 = 0;
    for (std::size_t n = 0; n < p.paths().size(); ++n) {
      const TpPath& path = p.paths()[n];
      if (path.out != int(b)) continue;
      g.paths.push_back(int(n));
      in1.insert(path.in1), in2.insert(path.in2);
      if (path.has_weight) weights += p.in2()[path.in2].mul;
    }
    g.mul = p.out()[b].mul;
    if (g.paths.empty() || g.mul == 0) continue;
    for (int a : in1) d1 += p.in1()[a].dim();
    g.in1_blocks.assign(in1.begin(), in1.end());
    g.in2_blocks.assign(in2.begin(), in2.end());
    const int d3 = p.out()[b].dim();
    const int copies = is_double_pass(pass) ? 2 : 1;
    const int operands = copies * (d1 + weights);
    const int per_channel = operands + d3 + (is_receiver_pass(pass) ? 0 : d1);
    const int chunks32 = (g.mul + kWarpSize - 1) / kWarpSize;
    auto lane_channels = [&](int per_lane) {
      int nc = 1;
      while (2 * nc <= std::min(o.max_lane_channels, chunks32) &&
             (2 * nc * per_channel + per_lane) * regs <= lane_registers)
        nc *= 2;
      return nc;
    };
    // Sender passes: one batch of 32 pair products for the warp reduction, or on the tensor
    // cores the accumulator fragments of P (row tiles of i by column tiles of k, two values
    // each) and one k-step's A and B fragments.
    int per_lane = is_receiver_pass(pass) ? 0 : kWarpSize;
    g.lane_channels = lane_channels(per_lane);
    const bool one_of_several = g.lane_channels == 1 && std::min(o.max_lane_channels, chunks32) > 1;
    if (sender_mma == TensorCoreUse::kAlways ||
        (sender_mma == TensorCoreUse::kRegisterLimited && one_of_several))
      g.unit = ContractionUnit::kTensorCores;
    if (g.on_tensor_cores()) {
      per_lane = 0;
      for (int n : g.paths) {
        const TpPath& path = p.paths()[std::size_t(n)];
        const int mt = (p.in1()[path.in1].dim() + 7) / 8, nt = (d3 + 7) / 8;
        per_lane = std::max(per_lane, 2 * mt * nt + mt + nt);
      }
      g.lane_channels = lane_channels(per_lane);
    }
    g.chunks = (g.mul + kWarpSize * g.lane_channels - 1) / (kWarpSize * g.lane_channels);
    g.live_values = g.lane_channels * per_channel + per_lane;
    if (is_receiver_pass(pass))
      for (int n : g.paths) {
        const TpPath& path = p.paths()[std::size_t(n)];
        g.lane_work +=
            (long long)g.lane_channels * p.in2()[path.in2].mul * p.in1()[path.in1].dim() * d3;
      }
    g.operand_values = g.lane_channels * (operands + (is_receiver_pass(pass) ? 0 : d3));
    g.operand_load = g.operand_values * regs <= o.matrix_prefetch_registers
                         ? OperandLoad::kPrefetchNextEdge
                         : OperandLoad::kCurrentEdge;
    const bool limited = g.lane_channels < std::min(o.max_lane_channels, chunks32);
    groups.push_back(std::move(g));
    shape.push_back({chunks32, weights, limited});
  }
  if (!mma) return groups;
  std::size_t limited = 0;
  for (const MmaCandidate& c : shape) limited += c.register_limited;
  // The share rule was measured in the forward only.
  const bool all =
      receiver_mma == TensorCoreUse::kAlways ||
      (pass == Pass::kForward && double(limited) >= o.mma_all_share * double(groups.size()));
  for (std::size_t n = 0; n < groups.size(); ++n)
    if (all || shape[n].register_limited)
      mma_channels(groups[n], p, o, shape[n].chunks32, shape[n].weights, is_double_pass(pass));
  return groups;
}

// Scratch of the matrix CG form per warp, in elements: per instruction the pass's matrices (of Y;
// the double passes also of dY) in two alternating sets (one instruction's are built while a
// slower lane may still read the previous ones); the sender passes also two buffers of the
// lane-summed pair products and one grad_Y row.
int matrix_scratch_elements(const TpProblem& p, Pass pass) {
  const int largest = matrix_cg_buffer(p);
  const int matrices = is_double_pass(pass) ? 2 : 1;
  return is_receiver_pass(pass) ? 2 * matrices * largest
                                : 2 * (matrices + 1) * largest + p.dim_in2();
}

}  // namespace

bool uses_looped_cg(const TpProblem& problem, const ScheduleOptions& options) {
  if (options.loop_cg_above < 0) return false;
  std::size_t largest = 0;
  for (const TpPath& path : problem.paths()) largest = std::max(largest, path.cg.size());
  return largest > static_cast<std::size_t>(options.loop_cg_above);
}

int matrix_lane_registers(DType dtype, Pass pass, const ScheduleOptions& options) {
  if (dtype != DType::kFloat64) return options.matrix_lane_registers;
  switch (pass) {
    case Pass::kDoubleForward:
      return options.matrix_lane_registers_float64_double_forward;
    case Pass::kDoubleBackward:
      return options.matrix_lane_registers_float64_double_backward;
    default:
      return options.matrix_lane_registers_float64;
  }
}

bool uses_matrix_cg(const TpProblem& problem, const ScheduleOptions& options, Pass pass) {
  const bool single = pass == Pass::kForward || pass == Pass::kBackward;
  return options.looped_cg_form == CgForm::kMatrix &&
         (single || options.looped_cg_form_double == CgForm::kMatrix) &&
         uses_looped_cg(problem, options);
}

int matrix_cg_stride(int d, DType dtype) { return round_up(d, 16 / size_of(dtype)); }

int matrix_cg_buffer(const TpProblem& p) {
  int largest = 0;
  for (const TpPath& path : p.paths()) {
    const int d1 = p.in1()[path.in1].dim(), d3 = p.out()[path.out].dim();
    largest = std::max(
        {largest, d3 * matrix_cg_stride(d1, p.dtype()), d1 * matrix_cg_stride(d3, p.dtype())});
  }
  return largest;
}

std::string DeviceLimits::arch() const {
  return "sm_" + std::to_string(sm_major) + std::to_string(sm_minor);
}

std::string to_string(Pass pass) {
  switch (pass) {
    case Pass::kForward:
      return "forward";
    case Pass::kBackward:
      return "backward";
    case Pass::kDoubleForward:
      return "double_forward";
    case Pass::kDoubleBackward:
      return "double_backward";
  }
  return "?";
}

std::string kernel_name(Pass pass, int group) {
  return "clebsch_conv_" + to_string(pass) + "_g" + std::to_string(group);
}

bool is_receiver_pass(Pass pass) { return pass == Pass::kForward || pass == Pass::kDoubleForward; }

bool is_double_pass(Pass pass) {
  return pass == Pass::kDoubleForward || pass == Pass::kDoubleBackward;
}

bool fused_pass(const TpProblem& problem, Pass pass) {
  return problem.radial_row_width() > 0 && (pass == Pass::kForward || pass == Pass::kBackward);
}

int group_weights(const TpProblem& problem, const Group& g) {
  int n = 0;
  for (int p : g.paths) {
    const TpPath& path = problem.paths()[std::size_t(p)];
    if (path.has_weight) n += problem.in2()[std::size_t(path.in2)].mul;
  }
  return n;
}

int blocks_per_sm(const DeviceLimits& limits, int shared_bytes, int threads_per_block) {
  // sm_80 and later reserve 1 KB of shared memory per resident block; 2048 threads and 32 blocks
  // per multiprocessor.
  constexpr int kReservedPerBlock = 1024, kThreadsPerSm = 2048, kBlocksPerSm = 32;
  const int by_shared = limits.max_shared_per_sm / (shared_bytes + kReservedPerBlock);
  return std::min({by_shared, kThreadsPerSm / std::max(1, threads_per_block), kBlocksPerSm});
}

int PassSchedule::units() const {
  int n = 0;
  for (const Group& g : groups) n += g.chunks;
  return n;
}

Schedule schedule(const TpProblem& problem, const DeviceLimits& limits,
                  const ScheduleOptions& options) {
  if (options.warps_per_block < 1 ||
      options.warps_per_block * kWarpSize > limits.max_threads_per_block)
    throw CapacityError(
        "warps_per_block=" + std::to_string(options.warps_per_block) +
        " does not fit max_threads_per_block=" + std::to_string(limits.max_threads_per_block));
  if (options.max_tile < 1 || options.max_tile_atomic < 1)
    throw Error("max_tile and max_tile_atomic must be >= 1");
  if (problem.radial_row_width() > 0) {
    if (options.fused_sub_tile < 1 || options.fused_sub_tile > 32)
      throw Error("fused_sub_tile must be in [1, 32]");
    // The weights are read where the unrolled forms load W; the matrix and looped forms have
    // no such place yet.
    if (uses_looped_cg(problem, options))
      throw CapacityError("the fused radial form needs the unrolled CG form (" + problem.str() +
                          " is looped)");
  }
  const int elem = size_of(problem.dtype());
  const int budget =
      problem.dtype() == DType::kFloat32 ? options.budget_float32 : options.budget_float64;
  const int dim2 = problem.dim_in2();
  const int split_values = options.sender_split_registers > 0
                               ? std::max(1, options.sender_split_registers * 4 / elem)
                               : 0;

  Schedule s;
  s.limits = limits;
  s.options = options;
  for (int n = 0; n < kNumPasses; ++n) {
    const Pass pass = static_cast<Pass>(n);
    const bool with_dy = is_double_pass(pass);
    PassSchedule ps;
    ps.pass = pass;
    const int pass_budget = pass == Pass::kForward && problem.dtype() == DType::kFloat32 &&
                                    options.forward_budget_float32 > 0
                                ? options.forward_budget_float32
                                : budget;
    ps.groups =
        uses_matrix_cg(problem, options, pass)
            ? matrix_groups(pass, problem, options, limits)
            : make_groups(pass, problem, pass_budget, options.prefetch_registers, split_values);

    // Tile: the largest power of two up to max_tile whose staged rows stay near the per-warp
    // target, so that several blocks still fit one multiprocessor.
    const bool with_gy = !is_receiver_pass(pass);
    const int row_bytes = std::max(1, dim2 * elem * (1 + with_dy + with_gy));
    const int max_tile = problem.accumulation() == Accumulation::kAtomic ? options.max_tile_atomic
                                                                         : options.max_tile;
    int tile = 1;
    while (tile * 2 <= max_tile && tile * 2 * row_bytes <= options.staged_bytes_per_warp) tile *= 2;
    SharedMemoryPlan& sm = ps.smem;
    sm.tile = tile;
    sm.edge_offset = 0;
    sm.sender_offset = 4 * tile;
    sm.receiver_offset = 8 * tile;
    int at = round_up(12 * tile, 16);
    auto region = [&](bool present) {
      if (!present) return -1;
      const int off = at;
      at = round_up(at + tile * dim2 * elem, 16);
      return off;
    };
    sm.y_offset = region(true);
    sm.dy_offset = region(with_dy);
    sm.gy_offset = region(with_gy);
    sm.m_offset = -1;
    if (uses_matrix_cg(problem, options, pass)) {
      sm.m_offset = at;
      at = round_up(at + matrix_scratch_elements(problem, pass) * elem, 16);
    }
    if (fused_pass(problem, pass)) {
      int most = 0;
      for (const Group& g : ps.groups) most = std::max(most, group_weights(problem, g));
      // The spline form shares no load between the edges of a sub-tile (the hidden form reads
      // each W4 value once for all of them): one edge at a time, the least shared memory.
      const bool spline = problem.spline_intervals() > 0;
      sm.sub_tile = spline ? 1 : std::min(options.fused_sub_tile, tile);
      sm.ws_stride = std::max(1, most) * kWarpSize;
      sm.hs_offset = at;
      // The hidden rows (the spline form stages nothing: its edges' lengths are read per lane).
      at = round_up(at + sm.sub_tile * problem.fused_hidden() * elem, 16);
      sm.ws_offset = at;
      at = round_up(at + sm.sub_tile * sm.ws_stride * elem, 16);
      if (!is_receiver_pass(pass)) {
        sm.gws_offset = at;
        at = round_up(at + sm.sub_tile * sm.ws_stride * elem, 16);
        if (spline) {
          sm.dws_offset = at;
          at = round_up(at + 2 * sm.sub_tile * sm.ws_stride * elem, 16);
        }
      }
    }
    sm.bytes_per_warp = at;
    const bool hidden_form = fused_pass(problem, pass) && problem.spline_intervals() == 0;
    sm.radial_mma = hidden_form && options.fused_mma_float64 &&
                    problem.dtype() == DType::kFloat64 && limits.sm_major >= 8 &&
                    sm.sub_tile == 8 && problem.fused_hidden() % 8 == 0;
    if (hidden_form) {
      // Only where it costs no resident block: run 27 measured the float32 forward of
      // mace-medium 2.6x slower with a slice that left one block per multiprocessor instead of
      // four, and the float64 backward 1.25x faster with one that left it one block as before.
      const int slice = round_up(problem.fused_hidden() * w4_slice_stride(sm) * elem, 16);
      const int warps_bytes = sm.bytes_per_warp * options.warps_per_block;
      const int threads = options.warps_per_block * kWarpSize;
      if (slice <= options.fused_w4_slice_bytes &&
          slice + warps_bytes <= limits.max_shared_per_block &&
          (options.fused_w4_slice_any_occupancy ||
           blocks_per_sm(limits, slice + warps_bytes, threads) >=
               blocks_per_sm(limits, warps_bytes, threads)))
        sm.w4_slice_bytes = slice;
    }

    LaunchConfig& lc = ps.launch;
    lc.warps_per_block = options.warps_per_block;
    lc.threads_per_block = options.warps_per_block * kWarpSize;
    lc.shared_bytes = sm.w4_slice_bytes + sm.bytes_per_warp * options.warps_per_block;
    lc.streams = std::clamp(
        int(ps.groups.size()), 1,
        std::max(1, is_receiver_pass(pass) ? options.receiver_streams : options.sender_streams));
    lc.order = is_receiver_pass(pass) ? options.receiver_launch_order : LaunchOrder::kGroupOrder;
    if (lc.shared_bytes > limits.max_shared_per_block)
      throw CapacityError(
          to_string(pass) + " pass: " + std::to_string(lc.shared_bytes) +
          " bytes of shared memory per block (" + std::to_string(options.warps_per_block) +
          " warps x " + std::to_string(sm.bytes_per_warp) + ") exceed the device's " +
          std::to_string(limits.max_shared_per_block) + "; retry with fewer warps per block");
    s.passes.push_back(std::move(ps));
  }
  if (problem.accumulation() == Accumulation::kAtomic)
    s.strategy = WarpPerEdgeTile{s.passes[0].smem.tile};
  else
    s.strategy = WarpPerNode{s.passes[0].smem.tile};
  return s;
}

std::string Schedule::str() const {
  std::ostringstream os;
  if (std::holds_alternative<WarpPerEdgeTile>(strategy))
    os << "WarpPerEdgeTile(" << std::get<WarpPerEdgeTile>(strategy).edges_per_tile << ")";
  else
    os << "WarpPerNode(" << std::get<WarpPerNode>(strategy).edges_per_stage << ")";
  os << " on " << limits.arch();
  for (const PassSchedule& p : passes) {
    os << "; " << to_string(p.pass) << ": " << p.groups.size() << " groups, " << p.units()
       << " units, tile " << p.smem.tile << ", " << p.launch.warps_per_block << " warps, "
       << p.launch.shared_bytes << " B shared";
    if (p.smem.sub_tile > 0) os << ", fused radial sub-tile " << p.smem.sub_tile;
    if (p.smem.w4_slice_bytes > 0) os << ", W4 slice " << p.smem.w4_slice_bytes << " B";
    if (p.smem.radial_mma) os << ", radial DMMA";
    // Sender streams are launch-only and not printed (LaunchConfig::streams); the receiver
    // streams were printed before that rule and stay, so that cached modules keep their keys.
    if (p.launch.streams > 1 && is_receiver_pass(p.pass))
      os << ", " << p.launch.streams << " streams";
    int mma = 0;
    for (const Group& g : p.groups) mma += g.on_tensor_cores();
    if (mma > 0) os << ", " << mma << " mma groups";
  }
  return os.str();
}

}  // namespace clebsch::cuda
