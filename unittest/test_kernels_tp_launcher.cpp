// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// GPU tests of the generated convolution kernels (skipped without a device): forward,
// backward and double backward equal the float64 host reference (src/o3/convolution.h) within
// kTolFloat64 / kTolFloat32, with fresh random inputs and outputs poisoned with NaN before each
// run (an unwritten value fails); deterministic mode is bitwise identical across runs; bad edge
// indices are reported through the status word; can_run rejects what run cannot do. Swept over
// the coverage shapes, float32 / float64, atomic / deterministic and sorted / shuffled receivers.
#include <gtest/gtest.h>

#include "clebsch/cuda/generator/tp_launcher.h"
#include "clebsch/o3/convolution.h"
#include "clebsch/support/error.h"
#include "kernels/kernel_test_util.h"

namespace clebsch::cuda {
namespace {

using test::DeviceBuffer;

struct GpuCase {
  std::string shape;
  DType dtype;
  Accumulation acc;
  bool sorted;          ///< receivers sorted (the neighbour-list order)
  bool looped = false;  ///< every instruction looped (loop_cg_above 0): the matrix form and the
                        ///< looped double passes on small shapes
  /// every float64 matrix group on the tensor cores: the forward (TensorCoreUse::kAlways) and
  /// the sender passes' grad_Y pair products (mma_backward kAlways, mma_double_backward)
  bool mma = false;
};

void PrintTo(const GpuCase& c, std::ostream* os) {
  *os << c.shape << " " << to_string(c.dtype) << " " << to_string(c.acc)
      << (c.sorted ? " sorted" : " shuffled") << (c.looped ? " looped" : "")
      << (c.mma ? " tensor cores" : "");
}

TensorProduct shape_tp(const std::string& name) {
  for (const auto& s : coverage_shapes())
    if (s.name == name) return s.tp;
  throw Error("no coverage shape " + name);
}

// Host data (already rounded to the device type), its device copies and the buffers struct.
template <typename T>
struct Problem {
  Problem(const TensorProduct& tp, const test::Graph& g, std::uint64_t seed)
      : edges(g.num_nodes, g.num_nodes, g.sender, g.receiver) {
    const std::size_t n = g.num_nodes, e = g.sender.size();
    x = test::rounded<T>(test::randn(n * tp.dim_in1(), seed + 1));
    y = test::rounded<T>(test::randn(e * tp.dim_in2(), seed + 2));
    w = test::rounded<T>(test::randn(e * tp.weight_numel(), seed + 3));
    g_out = test::rounded<T>(test::randn(n * tp.dim_out(), seed + 4));
    dx = test::rounded<T>(test::randn(x.size(), seed + 5));
    dy = test::rounded<T>(test::randn(y.size(), seed + 6));
    dw = test::rounded<T>(test::randn(w.size(), seed + 7));
    d_x = DeviceBuffer(test::cast<T>(x));
    d_y = DeviceBuffer(test::cast<T>(y));
    d_w = DeviceBuffer(test::cast<T>(w));
    d_g = DeviceBuffer(test::cast<T>(g_out));
    d_dx = DeviceBuffer(test::cast<T>(dx));
    d_dy = DeviceBuffer(test::cast<T>(dy));
    d_dw = DeviceBuffer(test::cast<T>(dw));
    d_sender = DeviceBuffer(g.sender);
    d_receiver = DeviceBuffer(g.receiver);
    d_rptr = DeviceBuffer(edges.receiver_ptr());
    d_rorder = DeviceBuffer(edges.by_receiver());
    d_sptr = DeviceBuffer(edges.sender_ptr());
    d_sorder = DeviceBuffer(edges.by_sender());
    out = DeviceBuffer(n * tp.dim_out() * sizeof(T));
    ggo = DeviceBuffer(n * tp.dim_out() * sizeof(T));
    gx = DeviceBuffer(n * tp.dim_in1() * sizeof(T));
    gy = DeviceBuffer(e * tp.dim_in2() * sizeof(T));
    gw = DeviceBuffer(e * tp.weight_numel() * sizeof(T));
    b.num_senders = b.num_receivers = g.num_nodes;
    b.num_edges = static_cast<std::int64_t>(e);
    b.sender = d_sender.as<int>(), b.receiver = d_receiver.as<int>();
    b.receiver_ptr = d_rptr.as<int>(), b.receiver_order = d_rorder.as<int>();
    b.sender_ptr = d_sptr.as<int>(), b.sender_order = d_sorder.as<int>();
    b.x = d_x.get(), b.y = d_y.get(), b.w = d_w.get(), b.grad_out = d_g.get();
    b.dx = d_dx.get(), b.dy = d_dy.get(), b.dw = d_dw.get();
    b.out = out.get(), b.grad_x = gx.get(), b.grad_y = gy.get(), b.grad_w = gw.get();
    b.grad_grad_out = ggo.get();
  }
  void poison() const {
    for (const DeviceBuffer* d : {&out, &ggo, &gx, &gy, &gw}) d->poison();
  }
  std::vector<double> get(const DeviceBuffer& d) const { return test::widen(d.download<T>()); }

  EdgeIndex edges;
  std::vector<double> x, y, w, g_out, dx, dy, dw;
  DeviceBuffer d_x, d_y, d_w, d_g, d_dx, d_dy, d_dw;
  DeviceBuffer d_sender, d_receiver, d_rptr, d_rorder, d_sptr, d_sorder;
  DeviceBuffer out, ggo, gx, gy, gw;
  ConvBuffers b;
};

class KernelVsHost : public ::testing::TestWithParam<GpuCase> {
 protected:
  template <typename T>
  void check(double tol) {
    const GpuCase c = GetParam();
    const TensorProduct tp = shape_tp(c.shape);
    ScheduleOptions so;
    if (c.looped) so.loop_cg_above = 0;
    if (c.mma)
      so.mma_float64 = so.mma_double_forward = so.mma_backward = so.mma_double_backward =
          TensorCoreUse::kAlways;
    const TpLauncher launcher = TpLauncher::create(tp, c.dtype, c.acc, {}, so);
    const bool det = c.acc == Accumulation::kDeterministic;
    // Two draws: the kernels must compute the function on any input, not on one.
    for (std::uint64_t seed : {11u, 97u}) {
      const test::Graph graph = test::random_graph(37, 600, c.sorted, seed);
      Problem<T> p(tp, graph, seed * 1000);
      const std::size_t n = graph.num_nodes, e = graph.sender.size();

      // Forward.
      std::vector<double> ref(n * tp.dim_out());
      convolution_forward<double>(tp, p.edges, p.x.data(), p.y.data(), p.w.data(), ref.data());
      p.poison();
      launcher.run(nullptr, Pass::kForward, p.b);
      EXPECT_EQ(launcher.take_status(nullptr), 0u);
      EXPECT_LE(test::rel_error(p.get(p.out), ref), tol) << "forward, seed " << seed;
      const auto fwd_bits = p.out.bytes_copy();

      // Backward.
      std::vector<double> rgx(n * tp.dim_in1()), rgy(e * tp.dim_in2()), rgw(e * tp.weight_numel());
      convolution_backward<double>(tp, p.edges, p.x.data(), p.y.data(), p.w.data(), p.g_out.data(),
                                   rgx.data(), rgy.data(), rgw.data());
      p.poison();
      launcher.run(nullptr, Pass::kBackward, p.b);
      EXPECT_EQ(launcher.take_status(nullptr), 0u);
      EXPECT_LE(test::rel_error(p.get(p.gx), rgx), tol) << "backward grad_x, seed " << seed;
      EXPECT_LE(test::rel_error(p.get(p.gy), rgy), tol) << "backward grad_Y, seed " << seed;
      EXPECT_LE(test::rel_error(p.get(p.gw), rgw), tol) << "backward grad_W, seed " << seed;
      const auto bwd_bits = p.gx.bytes_copy(), bwd_y_bits = p.gy.bytes_copy();

      // Double backward.
      std::vector<double> dgx(rgx.size()), dgy(rgy.size()), dgw(rgw.size()), dggo(ref.size());
      convolution_double_backward<double>(tp, p.edges, p.x.data(), p.y.data(), p.w.data(),
                                          p.g_out.data(), p.dx.data(), p.dy.data(), p.dw.data(),
                                          dgx.data(), dgy.data(), dgw.data(), dggo.data());
      p.poison();
      launcher.run_double_backward(nullptr, p.b);
      EXPECT_EQ(launcher.take_status(nullptr), 0u);
      EXPECT_LE(test::rel_error(p.get(p.ggo), dggo), tol) << "double backward grad_grad_out";
      EXPECT_LE(test::rel_error(p.get(p.gx), dgx), tol) << "double backward grad_x";
      EXPECT_LE(test::rel_error(p.get(p.gy), dgy), tol) << "double backward grad_Y";
      EXPECT_LE(test::rel_error(p.get(p.gw), dgw), tol) << "double backward grad_W";

      if (det) {
        // Bitwise reproducible: the same bits after a re-poisoned second run.
        p.poison();
        launcher.run(nullptr, Pass::kForward, p.b);
        launcher.run(nullptr, Pass::kBackward, p.b);
        launcher.take_status(nullptr);
        EXPECT_TRUE(p.out.bytes_copy() == fwd_bits) << "forward not reproducible";
        EXPECT_TRUE(p.gx.bytes_copy() == bwd_bits) << "backward grad_x not reproducible";
        EXPECT_TRUE(p.gy.bytes_copy() == bwd_y_bits) << "backward grad_Y not reproducible";
      }
    }
  }
};

TEST_P(KernelVsHost, ForwardBackwardDoubleBackward) {
  CLEBSCH_REQUIRE_GPU();
  if (GetParam().dtype == DType::kFloat32)
    check<float>(test::kTolFloat32);
  else
    check<double>(test::kTolFloat64);
}

std::vector<GpuCase> gpu_cases() {
  std::vector<GpuCase> cases;
  for (const auto& s : coverage_shapes())
    for (DType d : {DType::kFloat32, DType::kFloat64}) {
      cases.push_back({s.name, d, Accumulation::kAtomic, true});
      cases.push_back({s.name, d, Accumulation::kDeterministic, true});
    }
  cases.push_back({"MaceLike", DType::kFloat32, Accumulation::kAtomic, false});
  cases.push_back({"NonUniform", DType::kFloat64, Accumulation::kAtomic, false});
  for (const char* shape : {"MaceLike", "NonUniform", "WeightlessMul2"})
    for (DType d : {DType::kFloat32, DType::kFloat64})
      for (Accumulation a : {Accumulation::kAtomic, Accumulation::kDeterministic})
        cases.push_back({shape, d, a, true, true});
  // The float64 forward and the sender passes' pair products on the tensor cores in every
  // matrix group (by default only the register-limited forward and backward groups of large l
  // use them): the looped small shapes and HighL8.
  for (Accumulation a : {Accumulation::kAtomic, Accumulation::kDeterministic}) {
    for (const char* shape : {"MaceLike", "NonUniform", "WeightlessMul2"})
      cases.push_back({shape, DType::kFloat64, a, true, true, true});
    cases.push_back({"HighL8", DType::kFloat64, a, true, false, true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Coverage, KernelVsHost, ::testing::ValuesIn(gpu_cases()),
                         [](const auto& info) {
                           const GpuCase& c = info.param;
                           return c.shape + (c.dtype == DType::kFloat32 ? "_f32" : "_f64") +
                                  (c.acc == Accumulation::kAtomic ? "_atomic" : "_det") +
                                  (c.sorted ? "" : "_shuffled") + (c.looped ? "_looped" : "") +
                                  (c.mma ? "_mma" : "");
                         });

// Every pass's group kernels overlap on side streams (the sender passes' in the order
// group_overlap() keeps): the result must not depend on it (deterministic mode: the same bits as
// one kernel after the other), and work queued on the caller's stream after run() must see
// every group's output (the join).
TEST(LauncherStreams, OverlappedGroupsGiveTheBitsOfSerialGroups) {
  CLEBSCH_REQUIRE_GPU();
  const TensorProduct tp = shape_tp("MaceLike");
  ScheduleOptions overlapped, serial;
  overlapped.loop_cg_above = serial.loop_cg_above = 0;  // one kernel per output block
  serial.receiver_streams = serial.sender_streams = 1;
  const TpLauncher a =
      TpLauncher::create(tp, DType::kFloat64, Accumulation::kDeterministic, {}, overlapped);
  const TpLauncher b =
      TpLauncher::create(tp, DType::kFloat64, Accumulation::kDeterministic, {}, serial);
  for (Pass pass : {Pass::kForward, Pass::kBackward, Pass::kDoubleBackward}) {
    ASSERT_GT(a.schedule().pass(pass).launch.streams, 1) << to_string(pass);
    ASSERT_EQ(b.schedule().pass(pass).launch.streams, 1) << to_string(pass);
  }
  const test::Graph graph = test::random_graph(37, 600, true, 23);
  Problem<double> p(tp, graph, 23);
  auto run = [&](const TpLauncher& l) {
    p.poison();
    l.run(nullptr, Pass::kForward, p.b);
    l.run(nullptr, Pass::kDoubleForward, p.b);
    EXPECT_EQ(l.take_status(nullptr), 0u);
    std::vector<std::vector<unsigned char>> bits = {p.out.bytes_copy(), p.ggo.bytes_copy()};
    p.poison();
    l.run(nullptr, Pass::kBackward, p.b);
    for (const DeviceBuffer* d : {&p.gx, &p.gy, &p.gw}) bits.push_back(d->bytes_copy());
    p.poison();
    l.run(nullptr, Pass::kDoubleBackward, p.b);
    EXPECT_EQ(l.take_status(nullptr), 0u);
    for (const DeviceBuffer* d : {&p.gx, &p.gy, &p.gw}) bits.push_back(d->bytes_copy());
    return bits;
  };
  const auto serial_bits = run(b);
  const char* names[] = {"forward",
                         "double forward",
                         "backward grad_x",
                         "backward grad_Y",
                         "backward grad_W",
                         "double backward grad_x",
                         "double backward grad_Y",
                         "double backward grad_W"};
  for (int rep = 0; rep < 3; ++rep) {
    const auto bits = run(a);
    for (std::size_t k = 0; k < bits.size(); ++k)
      EXPECT_TRUE(bits[k] == serial_bits[k]) << names[k] << ", repetition " << rep;
  }
}

// Vector clocks of an overlap: clock[g][s] is the last group of stream s that has finished
// before group g starts (-1: none).
std::vector<std::vector<int>> happens_before(const GroupOverlap& o, int streams) {
  std::vector<std::vector<int>> clock(o.stream.size(), std::vector<int>(std::size_t(streams), -1));
  std::vector<int> last_on(std::size_t(streams), -1);
  for (std::size_t g = 0; g < o.stream.size(); ++g) {
    auto merge = [&](int before) {
      for (int s = 0; s < streams; ++s)
        clock[g][std::size_t(s)] =
            std::max(clock[g][std::size_t(s)], clock[std::size_t(before)][std::size_t(s)]);
      const auto s = std::size_t(o.stream[std::size_t(before)]);
      clock[g][s] = std::max(clock[g][s], before);
    };
    const auto s = std::size_t(o.stream[g]);
    if (last_on[s] >= 0) merge(last_on[s]);
    for (int before : o.waits[g]) {
      EXPECT_LT(before, int(g));
      EXPECT_NE(o.stream[std::size_t(before)], o.stream[g]) << "a wait on the group's own stream";
      EXPECT_TRUE(o.signals[std::size_t(before)]) << "a wait for a group that records no event";
      merge(before);
    }
    last_on[s] = int(g);
  }
  return clock;
}

// A sender-pass group adds into grad_x of its in1 blocks and grad_Y of its in2 blocks: every
// two groups that share one keep their order (the sums, and the bits, of one stream), while
// groups that share none overlap. Receiver-pass groups go round-robin with no waits.
// The floor of a one-instruction product's groups, counted here by hand: 4x0e (x) 0e -> 4x0e,
// one CG non-zero, 4 weights per edge; forward x, Y, W read and out written once, backward also
// grad_out read and grad_x, grad_Y, grad_W written; the int32 edge arrays and row pointers.
TEST(ConvGroupFloor, CountsEachOperandOnceAndTheMultiplyAdds) {
  const TpProblem p = TpProblem::from_tensor_product(
      conv_tensor_product(Irreps("4x0e"), Irreps("0e"), Irreps("4x0e")), DType::kFloat64,
      Accumulation::kDeterministic);
  const Schedule s = schedule(p, DeviceLimits::h200());
  ConvBuffers b;
  b.num_senders = 10, b.num_receivers = 7, b.num_edges = 50;
  const double E = 50;
  const PassSchedule& fwd = s.pass(Pass::kForward);
  ASSERT_EQ(fwd.groups.size(), 1u);
  const KernelFloor f = conv_group_floor(p, fwd, 0, b);
  EXPECT_DOUBLE_EQ(f.bytes, 8.0 * (10 * 4 + E * (1 + 4) + 7 * 4) + 4.0 * (2 * E + 7 + 1));
  EXPECT_DOUBLE_EQ(f.flops, 2.0 * E * 4 * (1 + 1));
  int dummy = 0;
  b.grad_x = b.grad_y = b.grad_w = &dummy;
  const KernelFloor g = conv_group_floor(p, s.pass(Pass::kBackward), 0, b);
  EXPECT_DOUBLE_EQ(g.bytes, 8.0 * (10 * 4 + E * (1 + 4) + 7 * 4 + 10 * 4 + E * 1 + E * 4) +
                                4.0 * (2 * E + 10 + 1));
  EXPECT_DOUBLE_EQ(g.flops, 2.0 * E * 4 * (2 + 2 + 1));
  // Without grad_Y the pass writes less.
  b.grad_y = nullptr;
  EXPECT_DOUBLE_EQ(conv_group_floor(p, s.pass(Pass::kBackward), 0, b).bytes, g.bytes - 8.0 * E);
}

TEST(GroupOverlap, SenderGroupsThatShareAGradientBlockKeepTheirOrder) {
  for (const char* name : {"high-l-5", "mace-large", "nequip-benzene"}) {
    const ConvShape shape = benchmark_shape(name);
    const TpProblem problem = TpProblem::from_tensor_product(
        conv_tensor_product(shape.node_irreps, shape.edge_irreps, shape.target), DType::kFloat64,
        Accumulation::kDeterministic);
    const Schedule s = schedule(problem, DeviceLimits::h200());
    for (const PassSchedule& ps : s.passes) {
      const int streams = ps.launch.streams;
      const GroupOverlap o = group_overlap(ps, streams);
      ASSERT_EQ(o.stream.size(), ps.groups.size());
      if (is_receiver_pass(ps.pass)) {
        for (std::size_t k = 0; k < o.order.size(); ++k) {
          EXPECT_EQ(o.stream[std::size_t(o.order[k])], int(k % std::size_t(streams)));
          EXPECT_TRUE(o.waits[k].empty());
        }
        continue;
      }
      const auto clock = happens_before(o, streams);
      int ordered = 0, concurrent = 0;
      for (std::size_t j = 0; j < ps.groups.size(); ++j)
        for (std::size_t i = 0; i < j; ++i) {
          auto shares = [](const std::vector<int>& a, const std::vector<int>& b) {
            for (int v : a)
              if (std::find(b.begin(), b.end(), v) != b.end()) return true;
            return false;
          };
          const bool conflict = shares(ps.groups[i].in1_blocks, ps.groups[j].in1_blocks) ||
                                shares(ps.groups[i].in2_blocks, ps.groups[j].in2_blocks);
          const bool before = clock[j][std::size_t(o.stream[i])] >= int(i);
          if (conflict) {
            EXPECT_TRUE(before) << name << " " << to_string(ps.pass) << ": group " << j
                                << " may overtake group " << i;
            ++ordered;
          } else if (!before) {
            ++concurrent;
          }
        }
      if (ps.groups.size() > 2) {
        EXPECT_GT(streams, 1) << name << " " << to_string(ps.pass);
        EXPECT_GT(concurrent, 0) << name << " " << to_string(ps.pass);
      }
      // One stream: everything in group order, nothing to wait for.
      const GroupOverlap one = group_overlap(ps, 1);
      for (std::size_t g = 0; g < ps.groups.size(); ++g) {
        EXPECT_EQ(one.stream[g], 0);
        EXPECT_TRUE(one.waits[g].empty());
      }
    }
  }
}

// receiver_launch_order kLongestFirst (the default): a receiver pass launches every group once, by
// non-increasing lane work (the chain of one grid row), round-robin over the streams in that
// order, so that the largest l no longer starts last; the sender passes keep group order (their
// waits need it), and so does every pass with the option off.
TEST(GroupOverlap, ReceiverGroupsLaunchLongestChainFirst) {
  const ConvShape shape = benchmark_shape("high-l-6");
  const TpProblem problem = TpProblem::from_tensor_product(
      conv_tensor_product(shape.node_irreps, shape.edge_irreps, shape.target), DType::kFloat64,
      Accumulation::kDeterministic);
  ScheduleOptions in_block_order;
  in_block_order.receiver_launch_order = LaunchOrder::kGroupOrder;
  const Schedule s = schedule(problem, DeviceLimits::h200());
  const Schedule off = schedule(problem, DeviceLimits::h200(), in_block_order);
  EXPECT_EQ(s.str(), off.str()) << "launch-only";
  for (const PassSchedule& ps : off.passes) {
    const GroupOverlap o = group_overlap(ps, ps.launch.streams);
    for (std::size_t k = 0; k < o.order.size(); ++k) EXPECT_EQ(o.order[k], int(k));
  }
  for (const PassSchedule& ps : s.passes) {
    const GroupOverlap o = group_overlap(ps, ps.launch.streams);
    ASSERT_EQ(o.order.size(), ps.groups.size());
    std::vector<int> sorted = o.order;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t k = 0; k < sorted.size(); ++k) ASSERT_EQ(sorted[k], int(k));
    if (!is_receiver_pass(ps.pass)) {
      for (std::size_t k = 0; k < o.order.size(); ++k) EXPECT_EQ(o.order[k], int(k));
      continue;
    }
    for (std::size_t k = 0; k < o.order.size(); ++k) {
      const Group& g = ps.groups[std::size_t(o.order[k])];
      EXPECT_GT(g.lane_work, 0);
      if (k > 0) EXPECT_GE(ps.groups[std::size_t(o.order[k - 1])].lane_work, g.lane_work);
      EXPECT_EQ(o.stream[std::size_t(o.order[k])], int(k % std::size_t(ps.launch.streams)));
      EXPECT_TRUE(o.waits[std::size_t(o.order[k])].empty());
    }
    // Output-block order puts the largest l last; longest first does not.
    EXPECT_NE(o.order.front(), 0);
    EXPECT_NE(o.order.back(), int(o.order.size()) - 1);
  }
}

class LauncherChecks : public ::testing::TestWithParam<Accumulation> {};

TEST_P(LauncherChecks, BadEdgeIndicesAreReportedAndSkipped) {
  CLEBSCH_REQUIRE_GPU();
  const TensorProduct tp = shape_tp("MaceLike");
  const TpLauncher launcher = TpLauncher::create(tp, DType::kFloat64, GetParam());
  test::Graph graph = test::random_graph(37, 600, true, 5);
  Problem<double> p(tp, graph, 5);
  // Corrupt one sender on the device only (the host EdgeIndex would reject it).
  std::vector<int> bad = graph.sender;
  bad[17] = 1000;
  DeviceBuffer d_bad(bad);
  p.b.sender = d_bad.as<int>();
  p.poison();
  launcher.run(nullptr, Pass::kForward, p.b);
  EXPECT_EQ(launcher.take_status(nullptr) & 1u, 1u);
  for (double v : p.get(p.out)) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(launcher.take_status(nullptr), 0u);  // cleared by the read
}

TEST_P(LauncherChecks, CanRunExplainsWhatIsMissing) {
  CLEBSCH_REQUIRE_GPU();
  const TpLauncher launcher = TpLauncher::create(shape_tp("MaceLike"), DType::kFloat32, GetParam());
  ConvBuffers b;
  b.num_senders = b.num_receivers = 4;
  b.num_edges = 8;
  std::string why;
  EXPECT_FALSE(launcher.can_run(Pass::kForward, b, &why));
  EXPECT_NE(why.find("forward pass"), std::string::npos) << why;
  EXPECT_THROW(launcher.run(nullptr, Pass::kForward, b), CapacityError);
  b.num_edges = -1;
  EXPECT_FALSE(launcher.can_run(Pass::kBackward, b, &why));
  EXPECT_NE(why.find("negative"), std::string::npos) << why;
}

TEST_P(LauncherChecks, NoEdgesGiveZeroOutput) {
  CLEBSCH_REQUIRE_GPU();
  const TensorProduct tp = shape_tp("NonUniform");
  const TpLauncher launcher = TpLauncher::create(tp, DType::kFloat32, GetParam());
  const test::Graph empty{5, {}, {}};
  Problem<float> p(tp, empty, 3);
  p.poison();
  launcher.run(nullptr, Pass::kForward, p.b);
  launcher.run(nullptr, Pass::kBackward, p.b);
  EXPECT_EQ(launcher.take_status(nullptr), 0u);
  for (double v : p.get(p.out)) ASSERT_EQ(v, 0.0);
  for (double v : p.get(p.gx)) ASSERT_EQ(v, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Modes, LauncherChecks,
                         ::testing::Values(Accumulation::kAtomic, Accumulation::kDeterministic),
                         [](const auto& info) {
                           return std::string(
                               info.param == Accumulation::kAtomic ? "Atomic" : "Deterministic");
                         });

}  // namespace
}  // namespace clebsch::cuda
