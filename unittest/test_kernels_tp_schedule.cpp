// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Tests of kernels/tp_schedule (no GPU): every path is computed exactly once per pass, groups
// hold one multiplicity and respect the live-value budget, the shared-memory plan is aligned
// and fits the device, launch shapes follow the strategy, and a device with too little shared
// memory gives CapacityError that a retry with fewer warps resolves.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "clebsch/cuda/generator/conv_shapes.h"
#include "clebsch/cuda/generator/tp_schedule.h"
#include "clebsch/support/error.h"
#include "kernels/kernel_test_util.h"

namespace clebsch::cuda {
namespace {

using test::test_shapes;

class ScheduleShapes : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(ScheduleShapes, CoversEveryPathOnceAndRespectsTheBudget) {
  const auto [name, dtype] = GetParam();
  const ConvShape shape = benchmark_shape(name);
  const TpProblem p =
      TpProblem::from_tensor_product(shape_tensor_product(shape), dtype, Accumulation::kAtomic);
  const ScheduleOptions opt;
  const Schedule s = schedule(p, DeviceLimits::h200(), opt);
  const int budget = dtype == DType::kFloat32 ? opt.budget_float32 : opt.budget_float64;
  ASSERT_EQ(s.passes.size(), std::size_t(kNumPasses));
  for (const PassSchedule& ps : s.passes) {
    std::vector<int> seen(p.paths().size(), 0);
    std::set<int> outs;
    const bool matrix = uses_matrix_cg(p, opt, ps.pass);
    for (const Group& g : ps.groups) {
      // Several channels per lane only in the matrix form, within its register estimate.
      EXPECT_EQ(g.chunks, (g.mul + 32 * g.lane_channels - 1) / (32 * g.lane_channels));
      EXPECT_TRUE(g.lane_channels == 1 || (matrix && g.lane_channels <= opt.max_lane_channels &&
                                           g.live_values * size_of(dtype) / 4 <=
                                               matrix_lane_registers(dtype, ps.pass, opt)))
          << to_string(ps.pass) << " " << g.lane_channels;
      if (matrix) EXPECT_EQ(g.out_blocks.size(), 1u);
      const int pass_budget = ps.pass == Pass::kForward && dtype == DType::kFloat32
                                  ? opt.forward_budget_float32
                                  : budget;
      if (g.out_blocks.size() > 1) EXPECT_LE(g.live_values, pass_budget) << to_string(ps.pass);
      for (int o : g.out_blocks) {
        EXPECT_EQ(p.out()[o].mul, g.mul);
        // Only sender passes split a block (its instructions over several groups).
        if (ps.pass == Pass::kForward || ps.pass == Pass::kDoubleForward)
          EXPECT_TRUE(outs.insert(o).second) << "output block in two groups";
      }
      for (int n : g.paths) {
        ++seen[n];
        const TpPath& path = p.paths()[n];
        EXPECT_NE(std::find(g.out_blocks.begin(), g.out_blocks.end(), path.out),
                  g.out_blocks.end());
        EXPECT_NE(std::find(g.in1_blocks.begin(), g.in1_blocks.end(), path.in1),
                  g.in1_blocks.end());
        EXPECT_NE(std::find(g.in2_blocks.begin(), g.in2_blocks.end(), path.in2),
                  g.in2_blocks.end());
      }
    }
    for (std::size_t n = 0; n < seen.size(); ++n)
      EXPECT_EQ(seen[n], 1) << to_string(ps.pass) << " path " << n;
    const SharedMemoryPlan& sm = ps.smem;
    EXPECT_EQ(sm.y_offset % 16, 0);
    EXPECT_EQ(sm.bytes_per_warp % 16, 0);
    EXPECT_GE(sm.y_offset, 12 * sm.tile);
    EXPECT_LE(ps.launch.shared_bytes, DeviceLimits::h200().max_shared_per_block);
    EXPECT_EQ(ps.launch.shared_bytes, sm.bytes_per_warp * ps.launch.warps_per_block);
    const bool dbl = ps.pass == Pass::kDoubleForward || ps.pass == Pass::kDoubleBackward;
    EXPECT_EQ(sm.dy_offset >= 0, dbl);
  }
}

INSTANTIATE_TEST_SUITE_P(
    BenchmarkShapes, ScheduleShapes,
    ::testing::Combine(::testing::Values("mace-medium", "mace-large", "nequip-benzene",
                                         "nequip-water", "high-l-4", "high-l-8", "e3nn-summed-l3"),
                       ::testing::Values(DType::kFloat32, DType::kFloat64)),
    [](const auto& info) {
      std::string n =
          std::get<0>(info.param) + (std::get<1>(info.param) == DType::kFloat32 ? "_f32" : "_f64");
      for (char& c : n)
        if (c == '-') c = '_';
      return n;
    });

TEST(Schedule, StrategyFollowsTheAccumulationMode) {
  const TensorProduct tp = test_shapes()[0].tp;
  const Schedule a =
      schedule(TpProblem::from_tensor_product(tp, DType::kFloat32, Accumulation::kAtomic),
               DeviceLimits::h200());
  const Schedule d =
      schedule(TpProblem::from_tensor_product(tp, DType::kFloat32, Accumulation::kDeterministic),
               DeviceLimits::h200());
  EXPECT_TRUE(std::holds_alternative<WarpPerEdgeTile>(a.strategy));
  EXPECT_TRUE(std::holds_alternative<WarpPerNode>(d.strategy));
}

TEST(Schedule, MaceMediumForwardIsOneGroupOfFourChunks) {
  // 26 accumulators + 4 x values + 16 Y values + 5 temporaries fit the float32 budget: one
  // pass over the edges per 32-channel chunk.
  const ConvShape s = benchmark_shape("mace-medium");
  const Schedule sch = schedule(
      TpProblem::from_tensor_product(conv_tensor_product(s.node_irreps, s.edge_irreps, s.target),
                                     DType::kFloat32, Accumulation::kAtomic),
      DeviceLimits::h200());
  const PassSchedule& f = sch.pass(Pass::kForward);
  ASSERT_EQ(f.groups.size(), 1u);
  EXPECT_EQ(f.units(), 4);
  EXPECT_EQ(f.smem.tile, 64);  // atomic mode: long tiles, fewer rows split between two tiles
}

// The matrix form of high l: one output block per group; in float32 the forward lanes take all
// four 32-channel slices of a 128-channel block (one chunk); in float64 8e x 8e -> 8e fits two.
// Backward a lane also keeps the grad_x sums and grad_out of each channel and a batch of pair
// products: 8e x 8e -> 8e fits two channels in float32, one in float64.
TEST(Schedule, HighLMatrixGroupsTakeSeveralChannelsPerLane) {
  const ConvShape shape = benchmark_shape("high-l-8");
  const TensorProduct tp = conv_tensor_product(shape.node_irreps, shape.edge_irreps, shape.target);
  for (DType d : {DType::kFloat32, DType::kFloat64}) {
    const TpProblem p = TpProblem::from_tensor_product(tp, d, Accumulation::kDeterministic);
    const Schedule s = schedule(p, DeviceLimits::h200());
    // The SIMT matrix form (the tensor cores' form is tested below): lanes hold whole
    // channels.
    ScheduleOptions simt;
    simt.mma_float64 = TensorCoreUse::kNever;
    const Schedule s_simt = schedule(p, DeviceLimits::h200(), simt);
    const int f32 = d == DType::kFloat32;
    auto largest = [&](const Group& g) {
      const TpPath& path = p.paths()[g.paths.at(0)];
      return p.in1()[path.in1].dim() == 17 && p.out()[path.out].dim() == 17;
    };
    EXPECT_EQ(s.pass(Pass::kForward).groups.size(), p.out().size());
    for (const Group& g : s_simt.pass(Pass::kForward).groups) {
      // 8e x 8e -> 8e: 17 x values, 17 accumulators and a weight per channel.
      if (f32 || largest(g)) EXPECT_EQ(g.lane_channels, f32 ? 4 : 2);
      EXPECT_EQ(g.chunks, 4 / g.lane_channels);
    }
    for (const Group& g : s.pass(Pass::kBackward).groups)
      if (largest(g)) EXPECT_EQ(g.lane_channels, f32 ? 2 : 1);
    for (const Group& g : s.pass(Pass::kBackward).groups) EXPECT_GE(g.lane_channels, 1);
    EXPECT_EQ(s.pass(Pass::kBackward).groups.front().lane_channels, 4)
        << "the 0e x 0e -> 0e block is small";
    // The double passes keep dx and dW beside x and W: never more channels per lane (than the
    // forward's without the tensor cores, whose lanes hold fragments instead of channels).
    for (const auto& [dbl, single] : {std::pair{Pass::kDoubleForward, Pass::kForward},
                                      std::pair{Pass::kDoubleBackward, Pass::kBackward}}) {
      const std::vector<Group>&d2 = s.pass(dbl).groups, &d1 = s_simt.pass(single).groups;
      ASSERT_EQ(d2.size(), d1.size());
      for (std::size_t b = 0; b < d1.size(); ++b) {
        EXPECT_GE(d2[b].lane_channels, 1);
        EXPECT_LE(d2[b].lane_channels, d1[b].lane_channels);
      }
    }
    ScheduleOptions one;
    one.max_lane_channels = 1;
    const Schedule single = schedule(p, DeviceLimits::h200(), one);
    for (const Group& g : single.pass(Pass::kForward).groups) EXPECT_EQ(g.lane_channels, 1);
  }
}

// The float64 double passes (x, dx, W and dW per channel) take their lane channels from their own
// register estimates, matrix_lane_registers_float64_double_forward and _backward, each only its
// pass's; the forward, the backward and every float32 pass keep theirs.
TEST(Schedule, Float64DoublePassesHaveTheirOwnLaneRegisterEstimate) {
  const ConvShape shape = benchmark_shape("high-l-6");
  const TensorProduct tp = conv_tensor_product(shape.node_irreps, shape.edge_irreps, shape.target);
  for (Pass lowered : {Pass::kDoubleForward, Pass::kDoubleBackward}) {
    ScheduleOptions fewer;
    (lowered == Pass::kDoubleForward ? fewer.matrix_lane_registers_float64_double_forward
                                     : fewer.matrix_lane_registers_float64_double_backward) = 128;
    for (DType d : {DType::kFloat32, DType::kFloat64}) {
      const TpProblem p = TpProblem::from_tensor_product(tp, d, Accumulation::kDeterministic);
      const Schedule s = schedule(p, DeviceLimits::h200());
      const Schedule f = schedule(p, DeviceLimits::h200(), fewer);
      int reduced = 0;
      for (Pass pass :
           {Pass::kForward, Pass::kBackward, Pass::kDoubleForward, Pass::kDoubleBackward}) {
        const std::vector<Group>&a = s.pass(pass).groups, &b = f.pass(pass).groups;
        ASSERT_EQ(a.size(), b.size());
        const bool own = d == DType::kFloat64 && pass == lowered;
        const std::string where = to_string(lowered) + " lowered, " + to_string(pass);
        for (std::size_t g = 0; g < a.size(); ++g) {
          if (!own) {
            EXPECT_EQ(a[g].lane_channels, b[g].lane_channels) << where << " " << g;
            EXPECT_EQ(a[g].on_tensor_cores(), b[g].on_tensor_cores()) << where << " " << g;
            continue;
          }
          if (!a[g].on_tensor_cores() && !b[g].on_tensor_cores()) {
            EXPECT_LE(b[g].lane_channels, a[g].lane_channels) << where << " " << g;
            if (b[g].lane_channels > 1) EXPECT_LE(b[g].live_values * 2, 128) << where << " " << g;
          }
          reduced += a[g].lane_channels != b[g].lane_channels ||
                     a[g].on_tensor_cores() != b[g].on_tensor_cores();
        }
      }
      if (d == DType::kFloat64)
        EXPECT_GT(reduced, 0) << to_string(lowered);
      else
        EXPECT_EQ(reduced, 0) << to_string(lowered);
    }
  }
  // The defaults as measured (bench/NOTES.md, run 16): the double backward's estimate above the
  // double forward's, which is the forward's.
  const ScheduleOptions o;
  EXPECT_EQ(o.matrix_lane_registers_float64_double_forward, o.matrix_lane_registers_float64);
  EXPECT_GT(o.matrix_lane_registers_float64_double_backward, o.matrix_lane_registers_float64);
}

// Every pass spreads its groups over streams: receiver_streams for the receiver passes (their
// groups write disjoint output blocks), sender_streams for the sender passes (whose order the
// launcher keeps where two groups share a gradient block, group_overlap()). The sender streams
// are launch-only: they are not in the summary that heads the module source, so that changing
// them reuses the cached module.
TEST(Schedule, PassesSpreadTheirGroupsOverStreams) {
  const ConvShape shape = benchmark_shape("high-l-5");
  const TpProblem p = TpProblem::from_tensor_product(
      conv_tensor_product(shape.node_irreps, shape.edge_irreps, shape.target), DType::kFloat32,
      Accumulation::kDeterministic);
  const Schedule s = schedule(p, DeviceLimits::h200());
  ASSERT_GT(s.pass(Pass::kForward).groups.size(), 8u);
  for (Pass pass : {Pass::kForward, Pass::kDoubleForward, Pass::kBackward, Pass::kDoubleBackward})
    EXPECT_EQ(s.pass(pass).launch.streams, 8) << to_string(pass);
  ScheduleOptions three;
  three.receiver_streams = 3;
  three.sender_streams = 1;
  const Schedule t = schedule(p, DeviceLimits::h200(), three);
  EXPECT_EQ(t.pass(Pass::kForward).launch.streams, 3);
  EXPECT_EQ(t.pass(Pass::kBackward).launch.streams, 1);
  EXPECT_EQ(t.pass(Pass::kDoubleBackward).launch.streams, 1);
  ScheduleOptions serial_senders;
  serial_senders.sender_streams = 1;
  EXPECT_EQ(schedule(p, DeviceLimits::h200(), serial_senders).str(), s.str());
  EXPECT_NE(t.str(), s.str());
  // Never more streams than groups.
  const ConvShape medium = benchmark_shape("mace-medium");
  const Schedule m =
      schedule(TpProblem::from_tensor_product(
                   conv_tensor_product(medium.node_irreps, medium.edge_irreps, medium.target),
                   DType::kFloat32, Accumulation::kAtomic),
               DeviceLimits::h200());
  EXPECT_EQ(m.pass(Pass::kForward).launch.streams, 1);
}

// The float64 forward's matrix groups run on the tensor cores where the SIMT form's registers
// cap a lane below max_lane_channels (TensorCoreUse::kRegisterLimited, the default), or every one
// (TensorCoreUse::kAlways, or once the limited groups are mma_all_share of the pass);
// lane_channels is bounded by the fragments' register estimate, and no other pass, type or
// pre-sm_80 device uses them.
TEST(Schedule, Float64ForwardMatrixGroupsUseTheTensorCores) {
  const ConvShape shape = benchmark_shape("high-l-8");
  const TensorProduct tp = conv_tensor_product(shape.node_irreps, shape.edge_irreps, shape.target);
  const TpProblem p = TpProblem::from_tensor_product(tp, DType::kFloat64, Accumulation::kAtomic);
  ScheduleOptions never, always, share;
  never.mma_float64 = TensorCoreUse::kNever;
  always.mma_float64 = TensorCoreUse::kAlways;
  share.mma_all_share = 0.15;
  const Schedule s = schedule(p, DeviceLimits::h200());
  const Schedule simt = schedule(p, DeviceLimits::h200(), never);
  const Schedule all = schedule(p, DeviceLimits::h200(), always);
  const std::vector<Group>& g = s.pass(Pass::kForward).groups;
  int limited = 0;
  for (std::size_t b = 0; b < g.size(); ++b) {
    const bool capped = simt.pass(Pass::kForward).groups[b].lane_channels < 4;
    EXPECT_EQ(g[b].on_tensor_cores(), capped) << b;
    limited += capped;
    EXPECT_TRUE(all.pass(Pass::kForward).groups[b].on_tensor_cores());
    if (!g[b].on_tensor_cores()) continue;
    EXPECT_LE(g[b].live_values * 2, ScheduleOptions().mma_lane_registers);
    EXPECT_EQ(g[b].chunks, 4 / g[b].lane_channels);
    const int d3 = p.out()[std::size_t(g[b].out_blocks.at(0))].dim();
    // 8e x 8e -> 8e: per row tile of 8 channels 3 column tiles (6 accumulators), 5 x entries
    // and a W; 5 x 3 B entries: 63 values for one 32-channel slice, 111 for two.
    if (d3 == 17 && p.in1()[std::size_t(g[b].in1_blocks.at(0))].dim() == 17)
      EXPECT_EQ(g[b].lane_channels, 1);
  }
  EXPECT_GT(limited, 0);
  EXPECT_LT(limited, int(g.size())) << "small blocks keep four channels per lane in SIMT";
  // By default the limited ones only (40 of 215 at high-l-8, 12 of 154 at high-l-7), as measured
  // with the groups launched longest first; every group once they are a share of the pass.
  const Schedule shared = schedule(p, DeviceLimits::h200(), share);
  for (const Group& h : shared.pass(Pass::kForward).groups) EXPECT_TRUE(h.on_tensor_cores());
  EXPECT_GE(limited, share.mma_all_share * double(g.size()));
  const ConvShape seven = benchmark_shape("high-l-7");
  const TpProblem p7 = TpProblem::from_tensor_product(
      conv_tensor_product(seven.node_irreps, seven.edge_irreps, seven.target), DType::kFloat64,
      Accumulation::kAtomic);
  const Schedule s7 = schedule(p7, DeviceLimits::h200()),
                 s7_simt = schedule(p7, DeviceLimits::h200(), never);
  const std::vector<Group>&g7 = s7.pass(Pass::kForward).groups,
        &simt7 = s7_simt.pass(Pass::kForward).groups;
  int limited7 = 0;
  for (std::size_t b = 0; b < g7.size(); ++b) {
    EXPECT_EQ(g7[b].on_tensor_cores(), simt7[b].lane_channels < 4) << "high-l-7 group " << b;
    limited7 += g7[b].on_tensor_cores();
  }
  EXPECT_GT(limited7, 0);
  EXPECT_LT(limited7, ScheduleOptions().mma_all_share * double(g7.size()));
  // The double forward by its own option: by default its register-limited groups (no share
  // rule), which at l = 8 are more than the forward's (x, dx, W, dW per channel).
  ScheduleOptions double_never = never;
  double_never.mma_double_forward = TensorCoreUse::kNever;
  const Schedule double_simt = schedule(p, DeviceLimits::h200(), double_never);
  const std::vector<Group>&d = s.pass(Pass::kDoubleForward).groups,
        &d_simt = double_simt.pass(Pass::kDoubleForward).groups;
  ASSERT_EQ(d.size(), d_simt.size());
  int on_double = 0;
  for (std::size_t b = 0; b < d.size(); ++b) {
    EXPECT_FALSE(d_simt[b].on_tensor_cores());
    EXPECT_EQ(d[b].on_tensor_cores(), d_simt[b].lane_channels < 4) << "double forward group " << b;
    // One 32-channel slice per warp is the least; more only within the register estimate.
    if (d[b].on_tensor_cores() && d[b].lane_channels > 1)
      EXPECT_LE(d[b].live_values * 2, ScheduleOptions().mma_lane_registers);
    on_double += d[b].on_tensor_cores();
  }
  EXPECT_GT(on_double, limited);
  EXPECT_LT(on_double, int(d.size()));
  DeviceLimits volta = DeviceLimits::h200();
  volta.sm_major = 7;
  for (const Schedule& without :
       {schedule(p, volta, always), simt,
        schedule(TpProblem::from_tensor_product(tp, DType::kFloat32, Accumulation::kAtomic),
                 DeviceLimits::h200(), always)})
    for (const Group& h : without.pass(Pass::kForward).groups) EXPECT_FALSE(h.on_tensor_cores());
  ScheduleOptions double_always;
  double_always.mma_double_forward = TensorCoreUse::kAlways;
  for (const Schedule& without :
       {schedule(p, volta, double_always),
        schedule(TpProblem::from_tensor_product(tp, DType::kFloat32, Accumulation::kAtomic),
                 DeviceLimits::h200(), double_always)})
    for (const Group& h : without.pass(Pass::kDoubleForward).groups)
      EXPECT_FALSE(h.on_tensor_cores());
  const Schedule double_all = schedule(p, DeviceLimits::h200(), double_always);
  for (const Group& h : double_all.pass(Pass::kDoubleForward).groups)
    EXPECT_TRUE(h.on_tensor_cores());
}

// By default the float64 backward's and double backward's groups whose SIMT lanes would hold one
// channel of several sum grad_Y's pair products on the tensor cores (and may then take more
// channels), the others keep the shuffles; float32 and pre-sm_80 devices never use them.
TEST(Schedule, Float64BackwardGroupsOfOneChannelPerLaneUseTheTensorCores) {
  const ConvShape shape = benchmark_shape("high-l-8");
  const TensorProduct tp = conv_tensor_product(shape.node_irreps, shape.edge_irreps, shape.target);
  const TpProblem p = TpProblem::from_tensor_product(tp, DType::kFloat64, Accumulation::kAtomic);
  ScheduleOptions never, every;
  never.mma_backward = never.mma_double_backward = TensorCoreUse::kNever;
  every.mma_backward = TensorCoreUse::kAlways;
  every.mma_double_backward = TensorCoreUse::kAlways;
  const Schedule s = schedule(p, DeviceLimits::h200()),
                 simt = schedule(p, DeviceLimits::h200(), never);
  const std::vector<Group>&g = s.pass(Pass::kBackward).groups,
        &g_simt = simt.pass(Pass::kBackward).groups;
  ASSERT_EQ(g.size(), g_simt.size());
  int on = 0;
  for (std::size_t b = 0; b < g.size(); ++b) {
    EXPECT_EQ(g[b].on_tensor_cores(), g_simt[b].lane_channels == 1)
        << "block " << g[b].out_blocks.at(0);
    EXPECT_GE(g[b].lane_channels, g_simt[b].lane_channels);
    on += g[b].on_tensor_cores();
    // 8e x 8e -> 8e: the channel's x, grad_x sums, grad_out and W (52 values) beside 3 x 3
    // tiles of P (18 values) and one k-step's 6 fragments: still one channel per lane.
    const TpPath& path = p.paths()[std::size_t(g[b].paths.at(0))];
    if (p.in1()[path.in1].l == 8 && p.in2()[path.in2].l == 8 && p.out()[path.out].l == 8) {
      EXPECT_TRUE(g[b].on_tensor_cores());
      EXPECT_EQ(g[b].live_values, 52 + 24);
      EXPECT_EQ(g[b].lane_channels, 1);
    }
  }
  EXPECT_GT(on, 0);
  EXPECT_LT(on, int(g.size())) << "blocks of several channels per lane keep the shuffles";
  // The double backward (x, dx, W, dW per channel) has more such groups than the backward.
  const std::vector<Group>&d = s.pass(Pass::kDoubleBackward).groups,
        &d_simt = simt.pass(Pass::kDoubleBackward).groups;
  ASSERT_EQ(d.size(), d_simt.size());
  int on_double = 0;
  for (std::size_t b = 0; b < d.size(); ++b) {
    EXPECT_EQ(d[b].on_tensor_cores(), d_simt[b].lane_channels == 1 && d_simt[b].chunks > 1)
        << "block " << d[b].out_blocks.at(0);
    on_double += d[b].on_tensor_cores();
  }
  EXPECT_GT(on_double, on);
  EXPECT_LT(on_double, int(d.size()));
  const Schedule all = schedule(p, DeviceLimits::h200(), every);
  for (Pass pass : {Pass::kBackward, Pass::kDoubleBackward})
    for (const Group& h : all.pass(pass).groups) EXPECT_TRUE(h.on_tensor_cores());
  DeviceLimits volta = DeviceLimits::h200();
  volta.sm_major = 7;
  const TpProblem p32 = TpProblem::from_tensor_product(tp, DType::kFloat32, Accumulation::kAtomic);
  for (const Schedule& without :
       {simt, schedule(p, volta, every), schedule(p32, DeviceLimits::h200(), every)})
    for (Pass pass : {Pass::kBackward, Pass::kDoubleBackward})
      for (const Group& h : without.pass(pass).groups) EXPECT_FALSE(h.on_tensor_cores());
}

TEST(Schedule, MaceGroupsGatherEachNodeFeatureOnce) {
  // Every MACE output block has one instruction: grouping by the feeding x block means the
  // groups of the forward pass read disjoint x blocks.
  for (const char* name : {"mace-medium", "mace-large"})
    for (DType d : {DType::kFloat32, DType::kFloat64}) {
      const ConvShape s = benchmark_shape(name);
      const TpProblem p = TpProblem::from_tensor_product(
          conv_tensor_product(s.node_irreps, s.edge_irreps, s.target), d, Accumulation::kAtomic);
      std::vector<int> reads(p.in1().size(), 0);
      const Schedule sch = schedule(p, DeviceLimits::h200());
      for (const Group& g : sch.pass(Pass::kForward).groups)
        for (int a : g.in1_blocks) ++reads[a];
      int total = 0;
      for (int r : reads) total += r;
      EXPECT_LE(total, int(p.in1().size()) + (d == DType::kFloat64 ? 2 : 0)) << name;
    }
}

TEST(Schedule, NonUniformMultiplicitiesGetTheirOwnChunkCounts) {
  const TensorProduct tp = conv_tensor_product(Irreps("128x0e+64x1o+32x2e"), Irreps("0e+1o+2e"),
                                               Irreps("128x0e+64x1o+32x2e"));
  const Schedule s =
      schedule(TpProblem::from_tensor_product(tp, DType::kFloat32, Accumulation::kAtomic),
               DeviceLimits::h200());
  // Idle lanes only in partial chunks: 4 + 2 + 1 chunks, never 4 for every block.
  EXPECT_EQ(s.pass(Pass::kForward).units(), 7);
}

TEST(Schedule, ThrowsCapacityErrorWhenSharedMemoryDoesNotFitAndRetrySucceeds) {
  const ConvShape s = benchmark_shape("high-l-8");
  const TpProblem p =
      TpProblem::from_tensor_product(conv_tensor_product(s.node_irreps, s.edge_irreps, s.target),
                                     DType::kFloat64, Accumulation::kAtomic);
  DeviceLimits small = DeviceLimits::h200();
  small.max_shared_per_block = 32 * 1024;
  ScheduleOptions o;
  o.warps_per_block = 8;
  try {
    schedule(p, small, o);
    FAIL() << "expected CapacityError";
  } catch (const CapacityError& e) {
    EXPECT_NE(std::string(e.what()).find("fewer warps"), std::string::npos) << e.what();
  }
  o.warps_per_block = 1;
  EXPECT_NO_THROW(schedule(p, small, o));
}

// A block that sums many instructions (e3nn's form) is split over the sender passes' groups
// when it would keep more registers live than ScheduleOptions::sender_split_registers: in
// float64 the double backward of e3nn-summed-l3 kept ~160 values (320 registers) per lane in one
// group per block and compiled to spilling kernels; the receiver passes keep one group per block
// (their groups store the block), and float32 (one register per value) needs no split.
TEST(Schedule, SenderPassesSplitBlocksOfManyInstructions) {
  const TensorProduct tp = shape_tensor_product(benchmark_shape("e3nn-summed-l3"));
  const ScheduleOptions opt;
  for (DType d : {DType::kFloat32, DType::kFloat64}) {
    const TpProblem p = TpProblem::from_tensor_product(tp, d, Accumulation::kDeterministic);
    const Schedule s = schedule(p, DeviceLimits::h200(), opt);
    const int cap = opt.sender_split_registers * 4 / size_of(d);
    for (const PassSchedule& ps : s.passes) {
      std::map<int, int> groups_of_block;
      for (const Group& g : ps.groups) {
        for (int o : g.out_blocks) ++groups_of_block[o];
        const bool sender = ps.pass == Pass::kBackward || ps.pass == Pass::kDoubleBackward;
        // A split group holds more than one instruction only while it fits the cap.
        if (sender && d == DType::kFloat64 && g.paths.size() > 1)
          EXPECT_LE(g.live_values, cap) << to_string(ps.pass);
      }
      const bool split =
          d == DType::kFloat64 && (ps.pass == Pass::kBackward || ps.pass == Pass::kDoubleBackward);
      int most = 0;
      for (const auto& [o, n] : groups_of_block) most = std::max(most, n);
      if (split)
        EXPECT_GT(most, 1) << to_string(ps.pass);
      else
        EXPECT_EQ(most, 1) << to_string(ps.pass) << " " << to_string(d);
    }
  }
  // 0 keeps one group per block.
  ScheduleOptions never = opt;
  never.sender_split_registers = 0;
  const Schedule s =
      schedule(TpProblem::from_tensor_product(tp, DType::kFloat64, Accumulation::kDeterministic),
               DeviceLimits::h200(), never);
  EXPECT_EQ(s.pass(Pass::kDoubleBackward).groups.size(), 8u);
}

// Resident blocks per multiprocessor of the H200 (228 KB of shared memory, 1 KB reserved per
// block, 2048 threads, 32 blocks).
TEST(Schedule, BlocksPerMultiprocessor) {
  const DeviceLimits h200 = DeviceLimits::h200();
  EXPECT_EQ(blocks_per_sm(h200, 51 * 1024, 128), 4);
  EXPECT_EQ(blocks_per_sm(h200, 116 * 1024, 128), 1);
  EXPECT_EQ(blocks_per_sm(h200, 113 * 1024, 128), 2);
  EXPECT_EQ(blocks_per_sm(h200, 0, 128), 16);  // by threads
  EXPECT_EQ(blocks_per_sm(h200, 0, 32), 32);   // by blocks
  EXPECT_EQ(blocks_per_sm(h200, 6 * 1024, 32), 32);
  EXPECT_EQ(blocks_per_sm(h200, 7 * 1024, 32), 28);
}

// The fused radial form's W4 slice: the forward and backward passes of a problem with hidden
// rows stage hidden x (the widest group's weights x 32 + 1) values per block, ahead of the warps'
// regions, when that fits ScheduleOptions::fused_w4_slice_bytes and the device and leaves as
// many blocks resident per multiprocessor; the double passes (which read W) and the spline form
// (whose table is not a W4) never do.
TEST(Schedule, FusedPassesStageTheirW4SliceWhereItCostsNoResidentBlock) {
  const TensorProduct tp = shape_tensor_product(benchmark_shape("mace-medium"));
  const DeviceLimits h200 = DeviceLimits::h200();
  for (DType d : {DType::kFloat32, DType::kFloat64}) {
    const TpProblem p =
        TpProblem::from_tensor_product(tp, d, Accumulation::kDeterministic).with_fused_radial(64);
    const ScheduleOptions opt;
    const Schedule s = schedule(p, h200, opt);
    for (const PassSchedule& ps : s.passes) {
      const SharedMemoryPlan& sm = ps.smem;
      const int warps_bytes = sm.bytes_per_warp * ps.launch.warps_per_block;
      const int threads = ps.launch.threads_per_block;
      EXPECT_EQ(ps.launch.shared_bytes, sm.w4_slice_bytes + warps_bytes) << to_string(ps.pass);
      if (!fused_pass(p, ps.pass)) {
        EXPECT_EQ(sm.w4_slice_bytes, 0) << to_string(ps.pass);
        continue;
      }
      const int full = (64 * (sm.ws_stride + 1) * size_of(d) + 15) / 16 * 16;
      const bool fits = full <= opt.fused_w4_slice_bytes &&
                        full + warps_bytes <= h200.max_shared_per_block &&
                        blocks_per_sm(h200, full + warps_bytes, threads) >=
                            blocks_per_sm(h200, warps_bytes, threads);
      EXPECT_EQ(sm.w4_slice_bytes, fits ? full : 0) << to_string(ps.pass) << " " << to_string(d);
    }
    // As measured in run 27: float32's forward keeps its four blocks (no slice); float64's
    // backward has one block either way (a slice of 64 x 129 values).
    if (d == DType::kFloat32) EXPECT_EQ(s.pass(Pass::kForward).smem.w4_slice_bytes, 0);
    if (d == DType::kFloat64) EXPECT_EQ(s.pass(Pass::kBackward).smem.w4_slice_bytes, 64 * 129 * 8);
    // Forced (fused_w4_slice_any_occupancy), a fused pass stages its slice wherever it fits
    // the budget and the block: the float32 forward too.
    ScheduleOptions forced = opt;
    forced.fused_w4_slice_any_occupancy = true;
    for (const PassSchedule& ps : schedule(p, h200, forced).passes) {
      const int full = (64 * (ps.smem.ws_stride + 1) * size_of(d) + 15) / 16 * 16;
      const bool fits =
          fused_pass(p, ps.pass) && full <= opt.fused_w4_slice_bytes &&
          full + ps.smem.bytes_per_warp * ps.launch.warps_per_block <= h200.max_shared_per_block;
      EXPECT_EQ(ps.smem.w4_slice_bytes, fits ? full : 0) << to_string(ps.pass);
    }
    if (d == DType::kFloat32)
      EXPECT_GT(schedule(p, h200, forced).pass(Pass::kForward).smem.w4_slice_bytes, 0);
    // A budget below the backward's slice, or none: every pass reads W4 from memory.
    for (int budget : {s.pass(Pass::kBackward).smem.w4_slice_bytes - 16, 0}) {
      ScheduleOptions small = opt;
      small.fused_w4_slice_bytes = budget;
      for (const PassSchedule& ps : schedule(p, h200, small).passes)
        EXPECT_EQ(ps.smem.w4_slice_bytes, 0) << to_string(ps.pass) << " budget " << budget;
    }
    // float64's fused passes make their weights on the tensor cores (fused_mma_float64).
    ScheduleOptions simt = opt;
    simt.fused_mma_float64 = false;
    for (const PassSchedule& ps : s.passes)
      EXPECT_EQ(ps.smem.radial_mma, d == DType::kFloat64 && fused_pass(p, ps.pass))
          << to_string(ps.pass);
    for (const PassSchedule& ps : schedule(p, h200, simt).passes)
      EXPECT_FALSE(ps.smem.radial_mma) << to_string(ps.pass);
    // The spline form stages nothing.
    const TpProblem spline = TpProblem::from_tensor_product(tp, d, Accumulation::kDeterministic)
                                 .with_fused_spline(100, 0.0, 5.0);
    for (const PassSchedule& ps : schedule(spline, h200, opt).passes)
      EXPECT_EQ(ps.smem.w4_slice_bytes, 0) << to_string(ps.pass);
  }
}

TEST(Schedule, IsAPureFunction) {
  const TpProblem p = TpProblem::from_tensor_product(test_shapes()[1].tp, DType::kFloat64,
                                                     Accumulation::kDeterministic);
  EXPECT_EQ(schedule(p, DeviceLimits::h200()).str(), schedule(p, DeviceLimits::h200()).str());
}

}  // namespace
}  // namespace clebsch::cuda
