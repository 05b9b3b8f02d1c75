// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The generated kernels, run without a GPU: each module's source is compiled by the host
// compiler against kernels/cuda_emulation.inc (warps of 32 threads, shuffles and __syncwarp as
// barriers) and executed through the launcher's own plan_launch(), then compared with the
// float64 host reference exactly as the GPU tests do (forward, backward, double backward,
// poisoned outputs, bitwise reproducibility in deterministic mode). This catches generator and
// template bugs in CI, where no GPU is present; timing means nothing here.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "clebsch/cuda/generator/emit_conv.h"
#include "clebsch/cuda/generator/tp_launcher.h"
#include "clebsch/o3/convolution.h"
#include "clebsch/support/error.h"
#include "kernels/kernel_test_util.h"

namespace clebsch::cuda {
namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A generated module built for the host and loaded with dlopen.
class EmulatedModule {
 public:
  using LaunchFn = void (*)(void*, unsigned, unsigned, unsigned, unsigned, const void*);

  EmulatedModule(const TpProblem& problem, const Schedule& schedule, const std::string& tag)
      : schedule_(schedule) {
    std::string src = emit_conv_module(problem, schedule);
    // The device declaration of the dynamic shared memory becomes the emulation's pointer.
    const std::string decl = "extern __shared__ __align__(16) unsigned char clebsch_smem[];";
    const auto at = src.find(decl);
    if (at == std::string::npos) throw Error("generated source lacks " + decl);
    src.replace(at, decl.size(), "");
    dir_ =
        fs::temp_directory_path() / ("clebsch-emulated-" + std::to_string(::getpid()) + "-" + tag);
    fs::create_directories(dir_);
    const fs::path cpp = dir_ / "module.cpp", so = dir_ / "module.so";
    std::ofstream(cpp) << read_text(CLEBSCH_EMULATION_SHIM) << src << kTail;
    const std::string cmd = std::string(CLEBSCH_TEST_CXX) +
                            " -std=c++20 -O1 -w -shared -fPIC -pthread -o " + so.string() + " " +
                            cpp.string() + " 2> " + (dir_ / "log.txt").string();
    if (std::system(cmd.c_str()) != 0)
      throw Error("host compilation of the generated module failed:\n" +
                  read_text((dir_ / "log.txt").string()).substr(0, 4000));
    handle_ = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) throw Error(std::string("dlopen: ") + dlerror());
    launch_ = reinterpret_cast<LaunchFn>(dlsym(handle_, "clebsch_emulate_launch"));
    for (const PassSchedule& ps : schedule.passes)
      for (std::size_t g = 0; g < ps.groups.size(); ++g) {
        void* f = dlsym(handle_, kernel_name(ps.pass, int(g)).c_str());
        if (!f) throw Error("missing kernel " + kernel_name(ps.pass, int(g)));
        kernels_[int(ps.pass)].push_back(f);
      }
  }
  ~EmulatedModule() {
    if (handle_) dlclose(handle_);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // TpLauncher::run with host memory: the same plan, memset for the clears.
  void run(const TpProblem& problem, Pass pass, const ConvBuffers& b) {
    const std::string why = check_buffers(problem, pass, b);
    if (!why.empty()) throw CapacityError(why);
    const LaunchPlan plan = plan_launch(problem, schedule_, pass, b, &status_);
    for (int c = 0; c < plan.num_clears; ++c)
      std::memset(plan.clears[c].ptr, 0, plan.clears[c].bytes);
    const PassSchedule& ps = schedule_.pass(pass);
    for (int g : launch_order(ps, plan.num_launches))
      launch_(kernels_[int(pass)][g], plan.grid_x, plan.grid_y(ps, g), plan.threads,
              plan.shared_bytes, &plan.args);
  }
  // The groups one after the other in an order the GPU may run them in when they overlap
  // (group_overlap()): the streams drained last to first, each as far as its waits allow. A
  // missing wait lets a later group store over (or add before) an earlier one, which the
  // comparisons with the host reference see.
  static std::vector<int> launch_order(const PassSchedule& ps, int launches) {
    const GroupOverlap o = group_overlap(ps, ps.launch.streams);
    std::vector<std::vector<int>> queue(std::size_t(ps.launch.streams));
    for (int k = 0; k < launches; ++k) {
      const int g = o.order[std::size_t(k)];
      queue[std::size_t(o.stream[std::size_t(g)])].push_back(g);
    }
    std::vector<char> done(std::size_t(launches), 0);
    std::vector<std::size_t> head(queue.size(), 0);
    std::vector<int> order;
    while (int(order.size()) < launches) {
      const std::size_t before = order.size();
      for (std::size_t s = queue.size(); s-- > 0;)
        while (head[s] < queue[s].size()) {
          const int g = queue[s][head[s]];
          bool ready = true;
          for (int w : o.waits[std::size_t(g)]) ready = ready && done[std::size_t(w)];
          if (!ready) break;
          done[std::size_t(g)] = 1, order.push_back(g), ++head[s];
        }
      if (order.size() == before) throw Error("group_overlap: the waits form a cycle");
    }
    return order;
  }
  unsigned take_status() { return std::exchange(status_, 0u); }

 private:
  static constexpr const char* kTail = R"(
// ---- emulation launcher ----
extern "C" void clebsch_emulate_launch(void* kernel, unsigned gx, unsigned gy, unsigned threads,
                                       unsigned smem, const void* args) {
  const ConvArgs a = *static_cast<const ConvArgs*>(args);
  auto fn = reinterpret_cast<void (*)(ConvArgs)>(kernel);
  std::vector<unsigned char> shared(smem + 16);
  for (unsigned by = 0; by < gy; ++by)
    for (unsigned bx = 0; bx < gx; ++bx) {
      // A block's threads at once (its W4 slice is staged behind __syncthreads).
      std::unique_ptr<ClebschWarp[]> warp(new ClebschWarp[threads / 32]);
      std::barrier<> block(threads);
      std::vector<std::thread> lanes;
      for (unsigned i = 0; i < threads; ++i)
        lanes.emplace_back([&, i] {
          threadIdx = {i, 0, 0};
          blockIdx = {bx, by, 0};
          blockDim = {threads, 1, 1};
          clebsch_smem = shared.data();
          clebsch_warp = &warp[i / 32];
          clebsch_block_barrier = &block;
          fn(a);
          block.arrive_and_drop();
        });
      for (auto& t : lanes) t.join();
    }
}
)";
  Schedule schedule_;
  fs::path dir_;
  void* handle_ = nullptr;
  LaunchFn launch_ = nullptr;
  std::vector<void*> kernels_[kNumPasses];
  unsigned status_ = 0;
};

struct Case {
  std::string shape;
  DType dtype;
  Accumulation acc;
  bool prefetch = true;  ///< false: the schedule never prefetches (the other load loop)
  bool looped = false;   ///< true: every instruction in the looped CG form (loop_cg_above 0)
  bool matrix = true;    ///< false (with looped): no matrix form in the forward and backward
  bool matrix_prefetch = false;  ///< true (with matrix): its groups prefetch the next edge
  bool matrix_double = true;     ///< false (with matrix): the double passes stay looped
  /// true (float64, matrix): the forward and the sender passes' pair products on the tensor
  /// cores in every group (else never)
  bool mma = false;
  /// true: sender passes split every output block's instructions over groups (a tiny
  /// ScheduleOptions::sender_split_registers)
  bool split = false;
};

std::string case_name(const Case& c) {
  return c.shape + (c.dtype == DType::kFloat32 ? "_f32" : "_f64") +
         (c.acc == Accumulation::kAtomic ? "_atomic" : "_det") + (c.prefetch ? "" : "_noprefetch") +
         (c.looped ? "_looped" : "") + (c.looped && !c.matrix ? "_nomatrix" : "") +
         (c.looped && c.matrix && c.matrix_prefetch ? "_matrixprefetch" : "") +
         (c.looped && c.matrix && !c.matrix_double ? "_loopeddouble" : "") + (c.mma ? "_mma" : "") +
         (c.split ? "_split" : "");
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.shape << " " << to_string(c.dtype) << " " << to_string(c.acc)
      << (c.prefetch ? "" : " no prefetch") << (c.looped ? " looped" : "")
      << (c.looped && !c.matrix ? " no matrix" : "")
      << (c.looped && c.matrix && c.matrix_prefetch ? " matrix prefetch" : "")
      << (c.looped && c.matrix && !c.matrix_double ? " looped double" : "")
      << (c.mma ? " tensor cores" : "") << (c.split ? " split blocks" : "");
}

TensorProduct shape_tp(const std::string& name) {
  for (const auto& s : coverage_shapes())
    if (s.name == name) return s.tp;
  throw Error("no coverage shape " + name);
}

template <typename T>
void poison(std::vector<T>& v) {
  std::memset(v.data(), 0xff, v.size() * sizeof(T));
}

template <typename T>
std::vector<double> widen(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

class Emulated : public ::testing::TestWithParam<Case> {
 protected:
  template <typename T>
  void check(double tol) {
    const Case c = GetParam();
    const TensorProduct tp = shape_tp(c.shape);
    const TpProblem problem = TpProblem::from_tensor_product(tp, c.dtype, c.acc);
    // A schedule with small tiles and two warps per block, so that tile boundaries, several
    // tiles per row and partially filled blocks all occur on a small graph.
    ScheduleOptions so;
    so.max_tile = 8;
    so.max_tile_atomic = 8;
    so.warps_per_block = 2;
    if (!c.prefetch) so.prefetch_registers = 0;
    if (c.looped) so.loop_cg_above = 0;
    so.looped_cg_form = c.matrix ? CgForm::kMatrix : CgForm::kLooped;
    if (c.matrix_prefetch) so.matrix_prefetch_registers = 1 << 20;
    so.looped_cg_form_double = c.matrix_double ? CgForm::kMatrix : CgForm::kLooped;
    so.mma_float64 = c.mma ? TensorCoreUse::kAlways : TensorCoreUse::kNever;
    so.mma_backward = c.mma ? TensorCoreUse::kAlways : TensorCoreUse::kNever;
    so.mma_double_backward = so.mma_double_forward =
        c.mma ? TensorCoreUse::kAlways : TensorCoreUse::kNever;
    if (c.split) so.sender_split_registers = 1;
    const Schedule sch = schedule(problem, DeviceLimits::h200(), so);
    const std::string tag = case_name(c);
    EmulatedModule m(problem, sch, tag);
    const bool det = c.acc == Accumulation::kDeterministic;

    const test::Graph g = test::random_graph(13, 150, true, 7);
    const EdgeIndex edges(g.num_nodes, g.num_nodes, g.sender, g.receiver);
    const std::size_t n = g.num_nodes, e = g.sender.size();
    auto draw = [&](std::size_t size, std::uint64_t seed) {
      return test::rounded<T>(test::randn(size, seed));
    };
    const auto x = draw(n * tp.dim_in1(), 1), y = draw(e * tp.dim_in2(), 2),
               w = draw(e * tp.weight_numel(), 3), go = draw(n * tp.dim_out(), 4),
               dx = draw(x.size(), 5), dy = draw(y.size(), 6), dw = draw(w.size(), 7);
    auto tx = test::cast<T>(x), ty = test::cast<T>(y), tw = test::cast<T>(w),
         tg = test::cast<T>(go), tdx = test::cast<T>(dx), tdy = test::cast<T>(dy),
         tdw = test::cast<T>(dw);
    std::vector<T> out(n * tp.dim_out()), ggo(out.size()), gx(x.size()), gy(y.size()), gw(w.size());
    ConvBuffers b;
    b.num_senders = b.num_receivers = g.num_nodes;
    b.num_edges = static_cast<std::int64_t>(e);
    b.sender = g.sender.data(), b.receiver = g.receiver.data();
    b.receiver_ptr = edges.receiver_ptr().data(), b.receiver_order = edges.by_receiver().data();
    b.sender_ptr = edges.sender_ptr().data(), b.sender_order = edges.by_sender().data();
    b.x = tx.data(), b.y = ty.data(), b.w = tw.data(), b.grad_out = tg.data();
    b.dx = tdx.data(), b.dy = tdy.data(), b.dw = tdw.data();
    b.out = out.data(), b.grad_x = gx.data(), b.grad_y = gy.data(), b.grad_w = gw.data();
    b.grad_grad_out = ggo.data();
    auto poison_all = [&] { poison(out), poison(ggo), poison(gx), poison(gy), poison(gw); };

    std::vector<double> ref(out.size());
    convolution_forward<double>(tp, edges, x.data(), y.data(), w.data(), ref.data());
    poison_all();
    m.run(problem, Pass::kForward, b);
    EXPECT_EQ(m.take_status(), 0u);
    EXPECT_LE(test::rel_error(widen(out), ref), tol) << "forward";
    const std::vector<T> fwd = out;

    std::vector<double> rgx(x.size()), rgy(y.size()), rgw(w.size());
    convolution_backward<double>(tp, edges, x.data(), y.data(), w.data(), go.data(), rgx.data(),
                                 rgy.data(), rgw.data());
    poison_all();
    m.run(problem, Pass::kBackward, b);
    EXPECT_EQ(m.take_status(), 0u);
    EXPECT_LE(test::rel_error(widen(gx), rgx), tol) << "backward grad_x";
    EXPECT_LE(test::rel_error(widen(gy), rgy), tol) << "backward grad_Y";
    EXPECT_LE(test::rel_error(widen(gw), rgw), tol) << "backward grad_W";
    const std::vector<T> bwd_x = gx, bwd_y = gy;

    std::vector<double> dgx(x.size()), dgy(y.size()), dgw(w.size()), dggo(out.size());
    convolution_double_backward<double>(tp, edges, x.data(), y.data(), w.data(), go.data(),
                                        dx.data(), dy.data(), dw.data(), dgx.data(), dgy.data(),
                                        dgw.data(), dggo.data());
    poison_all();
    m.run(problem, Pass::kDoubleForward, b);
    m.run(problem, Pass::kDoubleBackward, b);
    EXPECT_EQ(m.take_status(), 0u);
    EXPECT_LE(test::rel_error(widen(ggo), dggo), tol) << "double backward grad_grad_out";
    EXPECT_LE(test::rel_error(widen(gx), dgx), tol) << "double backward grad_x";
    EXPECT_LE(test::rel_error(widen(gy), dgy), tol) << "double backward grad_Y";
    EXPECT_LE(test::rel_error(widen(gw), dgw), tol) << "double backward grad_W";

    if (det) {
      poison_all();
      m.run(problem, Pass::kForward, b);
      m.run(problem, Pass::kBackward, b);
      EXPECT_TRUE(std::memcmp(out.data(), fwd.data(), out.size() * sizeof(T)) == 0);
      EXPECT_TRUE(std::memcmp(gx.data(), bwd_x.data(), gx.size() * sizeof(T)) == 0);
      EXPECT_TRUE(std::memcmp(gy.data(), bwd_y.data(), gy.size() * sizeof(T)) == 0);
    }

    // A bad sender is reported through the status word and skipped.
    std::vector<int> bad = g.sender;
    bad[3] = 1000;
    ConvBuffers bb = b;
    bb.sender = bad.data();
    m.run(problem, Pass::kForward, bb);
    EXPECT_EQ(m.take_status() & 1u, 1u);
    for (T v : out) ASSERT_TRUE(std::isfinite(double(v)));
  }
};

TEST_P(Emulated, MatchesTheHostReference) {
  if (GetParam().dtype == DType::kFloat32)
    check<float>(test::kTolFloat32);
  else
    check<double>(test::kTolFloat64);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  // HighL8's emulated module takes minutes on a 2-core CI machine (32 threads per emulated warp);
  // it is compiled by NVRTC in test_kernels_nvrtc_module and run on the GPU by
  // test_kernels_tp_launcher. CLEBSCH_EMULATE_HIGH_L=1 emulates it too.
  const bool high_l = std::getenv("CLEBSCH_EMULATE_HIGH_L") != nullptr;
  for (const auto& s : coverage_shapes()) {
    if (s.name == "HighL8" && !high_l) continue;
    v.push_back({s.name, DType::kFloat64, Accumulation::kAtomic});
    v.push_back({s.name, DType::kFloat64, Accumulation::kDeterministic});
    v.push_back({s.name, DType::kFloat32, Accumulation::kDeterministic});
  }
  v.push_back({"MaceLike", DType::kFloat64, Accumulation::kDeterministic, false});
  v.push_back({"NequipLike", DType::kFloat32, Accumulation::kAtomic, false});
  // The looped CG form (emitted for high l) forced onto small problems: every pass, both types
  // and modes, with its matrix form in every pass (the default) and without;
  // WeightlessMul2 adds instructions without weights and a Y multiplicity of 2, MaceLike and
  // NonUniform several chunks (grad_Y summed over them) and multiplicities.
  for (DType d : {DType::kFloat32, DType::kFloat64})
    for (Accumulation a : {Accumulation::kAtomic, Accumulation::kDeterministic})
      v.push_back({"NequipLike", d, a, true, true});
  v.push_back({"WeightlessMul2", DType::kFloat64, Accumulation::kAtomic, true, true});
  v.push_back({"WeightlessMul2", DType::kFloat32, Accumulation::kDeterministic, true, true});
  v.push_back({"MaceLike", DType::kFloat64, Accumulation::kDeterministic, true, true});
  v.push_back({"NonUniform", DType::kFloat32, Accumulation::kAtomic, true, true});
  v.push_back({"NequipLike", DType::kFloat32, Accumulation::kAtomic, true, true, false});
  v.push_back({"WeightlessMul2", DType::kFloat64, Accumulation::kDeterministic, true, true, false});
  // The matrix groups' prefetch of the next edge (off by default).
  v.push_back({"MaceLike", DType::kFloat32, Accumulation::kDeterministic, true, true, true, true});
  // The double passes looped behind a forward and backward in the matrix form
  // (ScheduleOptions::looped_cg_form_double kLooped).
  v.push_back({"NonUniform", DType::kFloat64, Accumulation::kDeterministic, true, true, true, false,
               false});
  v.push_back(
      {"NequipLike", DType::kFloat32, Accumulation::kAtomic, true, true, true, false, false});
  // The float64 forward and the sender passes' grad_Y pair products on the tensor cores
  // (ScheduleOptions::mma_float64, mma_backward, mma_double_backward): both modes, partial
  // chunks and several multiplicities (NonUniform), instructions without weights and a Y
  // multiplicity of 2 (WeightlessMul2). Each MMA is two warp barriers here: few, small cases.
  v.push_back(
      {"NonUniform", DType::kFloat64, Accumulation::kAtomic, true, true, true, false, true, true});
  v.push_back({"WeightlessMul2", DType::kFloat64, Accumulation::kDeterministic, true, true, true,
               false, true, true});
  v.push_back({"WeightlessMul2", DType::kFloat64, Accumulation::kAtomic, true, true, true, false,
               true, true});
  // Blocks summed from several instructions, split over sender groups that share grad_out and
  // add into the same grad_x and grad_Y blocks (both modes and types).
  for (DType d : {DType::kFloat32, DType::kFloat64})
    for (Accumulation a : {Accumulation::kAtomic, Accumulation::kDeterministic})
      v.push_back({"SummedPaths", d, a, true, false, true, false, true, false, true});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Coverage, Emulated, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return case_name(info.param); });

}  // namespace
}  // namespace clebsch::cuda
