// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Kernel benchmark of the generated tensor-product convolutions on the problems of
// docs/kernels.md (CUTLASS-example style: Options, Result; verify, then time). For each
// problem, dtype and accumulation mode: build the launcher (compile or cache), draw fresh random
// inputs (never zeros), poison the outputs, run forward, backward and double backward once and
// compare sampled output rows exactly against the float64 host reference (src/o3/convolution.h on
// the sub-graph of the sampled rows), then time forward, forward+backward and double backward
// with CUDA events (warm-up, median of --reps runs), and report time / byte floor, the extra
// device memory the engine took, registers per kernel and the schedule. Output: JSON lines and
// a table. --precompile compiles every module into the kernel cache without a GPU.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.h"
#include "clebsch/cuda/device/cuda_driver.h"
#include "clebsch/cuda/device/nvrtc_module.h"
#include "clebsch/cuda/generator/conv_shapes.h"
#include "clebsch/cuda/generator/emit_conv.h"
#include "clebsch/cuda/generator/tp_launcher.h"
#include "clebsch/o3/convolution.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda::bench {
namespace {

using json = nlohmann::json;

struct Options {
  std::vector<std::string> problems = {"mace-medium", "mace-large", "nequip-benzene",
                                       "nequip-water"};
  std::vector<DType> dtypes = {DType::kFloat32, DType::kFloat64};
  std::vector<Accumulation> modes = {Accumulation::kAtomic, Accumulation::kDeterministic};
  std::vector<std::string> ops = {"fwd", "fb", "db"};
  int reps = 20;
  int warmup = 3;
  int verify_rows = 256;
  /// Edges per problem times this (nodes unchanged): the extra device memory at two edge counts
  /// shows whether anything the engine holds grows with E.
  double edge_factor = 1.0;
  std::uint64_t seed = 2024;
  /// Measured device copy bandwidth (read + write) for the byte floors; 0: measure it here.
  double copy_bandwidth = 0;
  std::string json_path;
  bool precompile = false;
  bool coverage = false;     ///< --precompile: also the coverage shapes of the tests
  bool ptxas_log = false;    ///< --precompile: print ptxas's per-kernel resource lines
  bool cached_only = false;  ///< skip configurations whose module is not in the kernel cache
  bool group_times = false;  ///< also time each group kernel alone (json "group_times")
  /// Tuning knobs (--prefetch-registers, --loop-cg-above, --budget32, --budget64).
  ScheduleOptions schedule;
  std::string variant = "default";  ///< label of the tuning variant in the output
  int threads = 0;
  /// > 0: the fused radial form (TpProblem::with_fused_radial) with this many hidden values per
  /// edge: the forward and backward make W = h W4 per edge tile and write dE/dh.
  int fused_hidden = 0;
};

// The problem a configuration runs (in the fused radial form with --fused-hidden).
TpProblem make_problem(const Options& o, const TensorProduct& tp, DType d, Accumulation a) {
  const TpProblem p = TpProblem::from_tensor_product(tp, d, a);
  return o.fused_hidden > 0 ? p.with_fused_radial(o.fused_hidden) : p;
}

// The value of an --mma flag: 0 (never), 1 (register-limited groups) or 2 (always).
TensorCoreUse tensor_core_use(const std::string& flag, const std::string& value) {
  const int v = std::stoi(value);
  if (v < 0 || v > 2) throw Error(flag + " takes 0, 1 or 2");
  return static_cast<TensorCoreUse>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return clebsch::bench::option_value(argc, argv, i); };
    if (a == "--problems") {
      o.problems = clebsch::bench::split_list(value());
      if (o.problems.size() == 1 && o.problems[0] == "all") {
        o.problems.clear();
        for (const ConvShape& s : benchmark_shapes()) o.problems.push_back(s.name);
      }
    } else if (a == "--dtypes") {
      o.dtypes.clear();
      for (const std::string& d : clebsch::bench::split_list(value()))
        o.dtypes.push_back(d == "float64" || d == "f64" ? DType::kFloat64 : DType::kFloat32);
    } else if (a == "--modes") {
      o.modes.clear();
      for (const std::string& m : clebsch::bench::split_list(value()))
        o.modes.push_back(m.rfind("det", 0) == 0 ? Accumulation::kDeterministic
                                                 : Accumulation::kAtomic);
    } else if (a == "--ops") {
      o.ops = clebsch::bench::split_list(value());
    } else if (a == "--reps") {
      o.reps = std::stoi(value());
    } else if (a == "--warmup") {
      o.warmup = std::stoi(value());
    } else if (a == "--verify-rows") {
      o.verify_rows = std::stoi(value());
    } else if (a == "--edge-factor") {
      o.edge_factor = std::stod(value());
      if (!(o.edge_factor > 0)) throw Error("--edge-factor must be positive");
    } else if (a == "--seed") {
      o.seed = std::stoull(value());
    } else if (a == "--copy-bandwidth") {
      o.copy_bandwidth = std::stod(value());
    } else if (a == "--json") {
      o.json_path = value();
    } else if (a == "--precompile") {
      o.precompile = true;
    } else if (a == "--coverage") {
      o.coverage = true;
    } else if (a == "--ptxas-log") {
      o.ptxas_log = true;
    } else if (a == "--group-times") {
      o.group_times = true;
    } else if (a == "--cached-only") {
      o.cached_only = true;
    } else if (a == "--variant") {
      o.variant = value();
    } else if (a == "--prefetch-registers") {
      o.schedule.prefetch_registers = std::stoi(value());
    } else if (a == "--sender-split-registers") {
      o.schedule.sender_split_registers = std::stoi(value());
    } else if (a == "--fused-hidden") {
      o.fused_hidden = std::stoi(value());
    } else if (a == "--fused-w4-slice-bytes") {
      o.schedule.fused_w4_slice_bytes = std::stoi(value());
    } else if (a == "--fused-sub-tile") {
      o.schedule.fused_sub_tile = std::stoi(value());
    } else if (a == "--fused-mma") {
      o.schedule.fused_mma_float64 = std::stoi(value()) != 0;
    } else if (a == "--fused-w4-slice-any-occupancy") {
      o.schedule.fused_w4_slice_any_occupancy = std::stoi(value()) != 0;
    } else if (a == "--loop-cg-above") {
      o.schedule.loop_cg_above = std::stoi(value());
    } else if (a == "--warps") {
      o.schedule.warps_per_block = std::stoi(value());
    } else if (a == "--max-tile") {
      o.schedule.max_tile = o.schedule.max_tile_atomic = std::stoi(value());
    } else if (a == "--lane-channels") {
      o.schedule.max_lane_channels = std::stoi(value());
    } else if (a == "--lane-registers") {
      o.schedule.matrix_lane_registers = o.schedule.matrix_lane_registers_float64 =
          o.schedule.matrix_lane_registers_float64_double_forward =
              o.schedule.matrix_lane_registers_float64_double_backward = std::stoi(value());
    } else if (a == "--lane-registers-df64") {
      o.schedule.matrix_lane_registers_float64_double_forward = std::stoi(value());
    } else if (a == "--lane-registers-db64") {
      o.schedule.matrix_lane_registers_float64_double_backward = std::stoi(value());
    } else if (a == "--matrix-cg") {
      o.schedule.looped_cg_form = std::stoi(value()) != 0 ? CgForm::kMatrix : CgForm::kLooped;
    } else if (a == "--matrix-cg-double") {
      o.schedule.looped_cg_form_double =
          std::stoi(value()) != 0 ? CgForm::kMatrix : CgForm::kLooped;
    } else if (a == "--forward-budget32") {
      o.schedule.forward_budget_float32 = std::stoi(value());
    } else if (a == "--budget32") {
      o.schedule.budget_float32 = std::stoi(value());
    } else if (a == "--budget64") {
      o.schedule.budget_float64 = std::stoi(value());
    } else if (a == "--matrix-prefetch-registers") {
      o.schedule.matrix_prefetch_registers = std::stoi(value());
    } else if (a == "--streams") {
      o.schedule.receiver_streams = std::stoi(value());
    } else if (a == "--receiver-longest-first") {
      o.schedule.receiver_launch_order =
          std::stoi(value()) != 0 ? LaunchOrder::kLongestFirst : LaunchOrder::kGroupOrder;
    } else if (a == "--sender-streams") {
      o.schedule.sender_streams = std::stoi(value());
    } else if (a == "--mma-backward") {
      o.schedule.mma_backward = tensor_core_use(a, value());
    } else if (a == "--mma-double-backward") {
      o.schedule.mma_double_backward = tensor_core_use(a, value());
    } else if (a == "--mma") {
      o.schedule.mma_float64 = tensor_core_use(a, value());
    } else if (a == "--mma-all-share") {
      o.schedule.mma_all_share = std::stod(value());
    } else if (a == "--mma-double-forward") {
      o.schedule.mma_double_forward = tensor_core_use(a, value());
    } else if (a == "--threads") {
      o.threads = std::stoi(value());
    } else {
      throw Error(
          "unknown option " + a +
          " (--problems a,b|all --dtypes f32,f64 --modes atomic,det --ops fwd,fb,db "
          "--reps N --warmup N --verify-rows N --edge-factor F --seed N --copy-bandwidth "
          "B/s --json "
          "FILE --cached-only --group-times --prefetch-registers N --sender-split-registers N "
          "--fused-hidden H --fused-w4-slice-bytes N --fused-w4-slice-any-occupancy 0|1 "
          "--fused-mma 0|1 --fused-sub-tile N "
          "--loop-cg-above N "
          "--matrix-cg 0|1 "
          "--matrix-cg-double 0|1 "
          "--warps N --max-tile N --lane-channels N --lane-registers N "
          "--lane-registers-df64 N --lane-registers-db64 N --forward-budget32 N "
          "--budget32 N --budget64 N --streams N --receiver-longest-first 0|1 "
          "--sender-streams N "
          "--matrix-prefetch-registers N "
          "--mma 0|1|2 --mma-all-share X --mma-double-forward 0|1|2 --mma-backward 0|1|2 "
          "--mma-double-backward 0|1|2 "
          "--precompile [--coverage] [--ptxas-log] [--threads N])");
    }
  }
  if (o.reps < 20 && !o.precompile)
    std::cerr << "note: --reps " << o.reps << " is below the method's 20 runs\n";
  return o;
}

// ---------------------------------------------------------------------------------------------
// Precompilation: every module into the cache, no GPU needed.

int precompile(const Options& o) {
  struct Job {
    std::string name;
    TensorProduct tp;
    DType dtype;
    Accumulation acc;
  };
  std::vector<Job> jobs;
  for (const std::string& p : o.problems) {
    const ConvShape s = benchmark_shape(p);
    for (DType d : o.dtypes)
      for (Accumulation a : o.modes) jobs.push_back({p, shape_tensor_product(s), d, a});
  }
  if (o.coverage)
    for (const CoverageShape& s : coverage_shapes())
      for (DType d : {DType::kFloat32, DType::kFloat64})
        for (Accumulation a : {Accumulation::kAtomic, Accumulation::kDeterministic})
          jobs.push_back({s.name, s.tp, d, a});
  std::mutex mutex;
  std::size_t next = 0;
  int failures = 0;
  const int n = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  auto worker = [&]() {
    for (;;) {
      std::size_t k;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (next >= jobs.size()) return;
        k = next++;
      }
      const Job& j = jobs[k];
      std::string line;
      try {
        const TpProblem p = make_problem(o, j.tp, j.dtype, j.acc);
        const Schedule s = schedule(p, DeviceLimits::h200(), o.schedule);
        CompileOptions co;
        co.arch = "sm_90";
        co.verbose = true;
        // n modules at a time share the machine's threads.
        co.threads = std::max(1, int(std::thread::hardware_concurrency()) / n);
        const Cubin c = compile_cubin(emit_conv_module(p, s), j.name + ".cu", co);
        int max_regs = 0, spill = 0;
        std::istringstream log(c.log);
        for (std::string l; std::getline(log, l);) {
          if (auto at = l.find("Used "); at != std::string::npos)
            max_regs = std::max(max_regs, std::atoi(l.c_str() + at + 5));
          if (auto at = l.find("bytes spill stores"); at != std::string::npos) {
            auto comma = l.rfind(',', at);
            spill = std::max(spill, std::atoi(l.c_str() + comma + 1));
          }
        }
        char buf[256];
        std::snprintf(buf, sizeof buf, "%-16s %-7s %-13s %7.1f s %s max regs %3d, max spill %d B",
                      j.name.c_str(), to_string(j.dtype).c_str(), to_string(j.acc).c_str(),
                      c.seconds, c.from_cache ? "(cache)" : "       ", max_regs, spill);
        line = buf;
        if (o.ptxas_log) line += "\n" + c.log;
      } catch (const std::exception& e) {
        line = j.name + ": FAILED: " + e.what();
        std::lock_guard<std::mutex> lock(mutex);
        ++failures;
      }
      std::lock_guard<std::mutex> lock(mutex);
      std::cout << line << std::endl;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < n; ++t) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  std::cout << "cache: " << default_cache_dir() << "\n";
  return failures ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------
// Device helpers.

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes) CLEBSCH_CU_CHECK(MemAlloc(&ptr_, bytes));
  }
  template <typename T>
  explicit Buffer(const std::vector<T>& h) : Buffer(h.size() * sizeof(T)) {
    if (bytes_) CLEBSCH_CU_CHECK(MemcpyHtoD(ptr_, h.data(), bytes_));
  }
  ~Buffer() {
    if (ptr_) driver().MemFree(ptr_);
  }
  Buffer(Buffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0; }
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  void* get() const { return reinterpret_cast<void*>(ptr_); }
  CUdeviceptr ptr() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  void poison() const {
    if (bytes_) CLEBSCH_CU_CHECK(MemsetD8(ptr_, 0xff, bytes_));
  }
  // Rows [row][dim] of the given indices, widened to double.
  template <typename T>
  std::vector<double> rows(const std::vector<int>& idx, int dim) const {
    std::vector<T> tmp(dim);
    std::vector<double> out;
    out.reserve(idx.size() * dim);
    for (int r : idx) {
      if (dim)
        CLEBSCH_CU_CHECK(
            MemcpyDtoH(tmp.data(), ptr_ + std::size_t(r) * dim * sizeof(T), dim * sizeof(T)));
      out.insert(out.end(), tmp.begin(), tmp.end());
    }
    return out;
  }

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
};

class Events {
 public:
  Events() {
    CLEBSCH_CU_CHECK(EventCreate(&start_, CU_EVENT_DEFAULT));
    CLEBSCH_CU_CHECK(EventCreate(&stop_, CU_EVENT_DEFAULT));
  }
  ~Events() {
    driver().EventDestroy(start_);
    driver().EventDestroy(stop_);
  }
  template <typename F>
  double time_ms(F&& f) {
    CLEBSCH_CU_CHECK(EventRecord(start_, nullptr));
    f();
    CLEBSCH_CU_CHECK(EventRecord(stop_, nullptr));
    CLEBSCH_CU_CHECK(EventSynchronize(stop_));
    float ms = 0;
    CLEBSCH_CU_CHECK(EventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  CUevent start_, stop_;
};

std::size_t free_memory() {
  std::size_t free = 0, total = 0;
  CLEBSCH_CU_CHECK(MemGetInfo(&free, &total));
  return free;
}

double measure_copy_bandwidth() {
  const std::size_t bytes = std::size_t(2) << 30;
  Buffer a(bytes), b(bytes);
  CLEBSCH_CU_CHECK(MemsetD8(a.ptr(), 1, bytes));
  Events ev;
  std::vector<double> t;
  for (int r = 0; r < 12; ++r)
    t.push_back(
        ev.time_ms([&] { CLEBSCH_CU_CHECK(MemcpyDtoDAsync(b.ptr(), a.ptr(), bytes, nullptr)); }));
  std::sort(t.begin() + 2, t.end());
  return 2.0 * bytes / (t[2 + (t.size() - 2) / 2] * 1e-3);  // read + write
}

struct Timing {
  double median = 0, min = 0, max = 0;
  int runs = 0;
};

template <typename F>
Timing time_op(const Options& o, F&& f) {
  Events ev;
  for (int w = 0; w < o.warmup; ++w) f();
  CLEBSCH_CU_CHECK(CtxSynchronize());
  std::vector<double> t;
  for (int r = 0; r < o.reps; ++r) t.push_back(ev.time_ms(f));
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), t.back(), int(t.size())};
}

double rel_error(const std::vector<double>& a, const std::vector<double>& b, bool& finite) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) finite = false;
    err = std::max(err, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return err / std::max(scale, 1e-300);
}

// Each group kernel of the passes of o.ops timed alone on one stream (median of o.reps), with
// its shape, registers and local memory (spills): where a pass's time goes, free of the overlap
// of the receiver streams. bf: the buffers of the forward and backward (the fused radial form's,
// else b).
json group_times(const Options& o, const TpLauncher& L, const ConvBuffers& b,
                 const ConvBuffers& bf) {
  std::vector<Pass> passes;
  for (const std::string& op : o.ops) {
    if (op == "fwd" || op == "fb") passes.push_back(Pass::kForward);
    if (op == "fb") passes.push_back(Pass::kBackward);
    if (op == "db") passes.insert(passes.end(), {Pass::kDoubleForward, Pass::kDoubleBackward});
  }
  std::sort(passes.begin(), passes.end());
  passes.erase(std::unique(passes.begin(), passes.end()), passes.end());
  const TpProblem& p = L.problem();
  json out;
  for (Pass pass : passes) {
    json rows = json::array();
    const PassSchedule& ps = L.schedule().pass(pass);
    for (std::size_t g = 0; g < ps.groups.size(); ++g) {
      const Group& G = ps.groups[g];
      const TpPath& path = p.paths()[std::size_t(G.paths.at(0))];
      const CUfunction f = L.kernels(pass)[g];
      int regs = 0, local = 0;
      CLEBSCH_CU_CHECK(FuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
      CLEBSCH_CU_CHECK(FuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f));
      const ConvBuffers& pb = pass == Pass::kForward || pass == Pass::kBackward ? bf : b;
      const Timing t = time_op(o, [&] { L.run_group(nullptr, pass, pb, int(g)); });
      rows.push_back({{"group", g},
                      {"l",
                       {p.in1()[std::size_t(path.in1)].l, p.in2()[std::size_t(path.in2)].l,
                        p.out()[std::size_t(path.out)].l}},
                      {"paths", G.paths.size()},
                      {"lane_channels", G.lane_channels},
                      {"mma", G.on_tensor_cores()},
                      {"live_values", G.live_values},
                      {"registers", regs},
                      {"local_bytes", local},
                      {"median_ms", t.median}});
    }
    out[to_string(pass)] = rows;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// One configuration.

template <typename T>
json run_config(const Options& o, const ConvShape& shape, DType dtype, Accumulation acc,
                double bandwidth) {
  const TensorProduct tp = shape_tensor_product(shape);
  const int N = shape.num_nodes;
  const double edges_wanted = std::round(shape.num_edges * o.edge_factor);
  if (edges_wanted > std::numeric_limits<int>::max())
    throw Error("--edge-factor: more edges than the int32 edge indices hold");
  const int E = std::max(1, static_cast<int>(edges_wanted));
  const int d1 = tp.dim_in1(), d2 = tp.dim_in2(), dout = tp.dim_out(), nw = tp.weight_numel();
  std::mt19937_64 gen(o.seed);
  // Graph: receivers sorted (a neighbour list's order), senders random.
  std::uniform_int_distribution<int> node(0, N - 1);
  std::vector<int> sender(E), receiver(E);
  for (int e = 0; e < E; ++e) sender[e] = node(gen), receiver[e] = node(gen);
  std::sort(receiver.begin(), receiver.end());
  const EdgeIndex edges(N, N, sender, receiver);

  // Fresh random inputs, uniform in [-1, 1) and never zero: a counter-based generator, so that
  // gigabytes of weights are drawn in parallel in a fraction of a second.
  std::uint64_t stream = gen();
  auto random = [&](std::size_t n) {
    std::vector<T> v(n);
    const std::uint64_t key = stream++ * 0x9e3779b97f4a7c15ull;
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < n; ++i) {
      std::uint64_t z = key + i * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      v[i] = static_cast<T>((double(z >> 11) + 0.5) * 0x1.0p-52 - 1.0);
    }
    return v;
  };
  const std::vector<T> x = random(std::size_t(N) * d1), y = random(std::size_t(E) * d2),
                       g = random(std::size_t(N) * dout), dx = random(x.size()),
                       dy = random(y.size()), dw = random(std::size_t(E) * nw);
  // The fused radial form: hidden rows h and the last layer W4 (scaled so that W stays of order
  // one); W = h W4 (summed in double) for the reference and the double passes, which read W.
  const int H = o.fused_hidden;
  const std::vector<T> h = random(std::size_t(E) * H), w4_raw = random(std::size_t(H) * nw);
  std::vector<T> w4(w4_raw.size()), w4t(w4_raw.size());
  for (int k = 0; k < H; ++k)
    for (int c = 0; c < nw; ++c) {
      const T v = static_cast<T>(w4_raw[std::size_t(k) * nw + c] / std::sqrt(double(H)));
      w4[std::size_t(k) * nw + c] = w4t[std::size_t(c) * H + k] = v;
    }
  std::vector<T> w = H > 0 ? std::vector<T>(std::size_t(E) * nw) : random(std::size_t(E) * nw);
  if (H > 0) {
#pragma omp parallel for schedule(static)
    for (int e = 0; e < E; ++e)
      for (int c = 0; c < nw; ++c) {
        double acc = 0;
        for (int k = 0; k < H; ++k)
          acc += double(h[std::size_t(e) * H + k]) * double(w4[std::size_t(k) * nw + c]);
        w[std::size_t(e) * nw + c] = static_cast<T>(acc);
      }
  }

  Buffer d_x(x), d_y(y), d_w(w), d_g(g), d_dx(dx), d_dy(dy), d_dw(dw);
  const std::vector<T> none(1);
  Buffer d_h(H > 0 ? h : none), d_w4(H > 0 ? w4 : none), d_w4t(H > 0 ? w4t : none);
  Buffer d_s(sender), d_r(receiver), d_rptr(edges.receiver_ptr()), d_sptr(edges.sender_ptr()),
      d_sorder(edges.by_sender());
  const std::size_t el = sizeof(T);
  Buffer out(std::size_t(N) * dout * el), ggo(std::size_t(N) * dout * el),
      gx(std::size_t(N) * d1 * el), gy(std::size_t(E) * d2 * el), gw(std::size_t(E) * nw * el),
      grad_h(std::size_t(E) * std::max(H, 1) * el);
  ConvBuffers b;
  b.num_senders = b.num_receivers = N;
  b.num_edges = E;
  b.sender = static_cast<const int*>(d_s.get());
  b.receiver = static_cast<const int*>(d_r.get());
  b.receiver_ptr = static_cast<const int*>(d_rptr.get());
  b.receiver_order = nullptr;  // receivers are sorted: identity
  b.sender_ptr = static_cast<const int*>(d_sptr.get());
  b.sender_order = static_cast<const int*>(d_sorder.get());
  b.x = d_x.get(), b.y = d_y.get(), b.w = d_w.get(), b.grad_out = d_g.get();
  b.dx = d_dx.get(), b.dy = d_dy.get(), b.dw = d_dw.get();
  b.out = out.get(), b.grad_x = gx.get(), b.grad_y = gy.get(), b.grad_w = gw.get();
  b.grad_grad_out = ggo.get();
  // The fused form's forward and backward read h and W4 and write dE/dh, never grad_W; the
  // double passes (b) read W as before.
  ConvBuffers bf = b;
  if (H > 0) {
    bf.h = d_h.get(), bf.w4 = d_w4.get(), bf.w4t = d_w4t.get(), bf.grad_h = grad_h.get();
    bf.w = nullptr, bf.grad_w = nullptr;
  }

  json r;
  r["problem"] = shape.name;
  r["variant"] = o.variant;
  r["dtype"] = to_string(dtype);
  r["accumulation"] = to_string(acc);
  r["nodes"] = N;
  r["edges"] = E;
  r["paths"] = tp.paths().size();
  r["fused_hidden"] = H;

  // Engine construction: emit, compile or read the cache, load.
  CLEBSCH_CU_CHECK(CtxSynchronize());
  const std::size_t free_before = free_memory();
  const auto t0 = std::chrono::steady_clock::now();
  const TpProblem fused = make_problem(o, tp, dtype, acc);
  const TpLauncher L = H > 0 ? TpLauncher(fused, schedule(fused, query_device_limits(), o.schedule))
                             : TpLauncher::create(tp, dtype, acc, {}, o.schedule);
  r["setup_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r["from_cache"] = L.module().cubin().from_cache;
  r["problem_hash"] = L.problem().hash_hex();
  r["schedule"] = L.schedule().str();
  r["schedule_options"] = {
      {"prefetch_registers", o.schedule.prefetch_registers},
      {"budget_float32", o.schedule.budget_float32},
      {"budget_float64", o.schedule.budget_float64},
      {"mma_float64", static_cast<int>(o.schedule.mma_float64)},
      {"mma_all_share", o.schedule.mma_all_share},
      {"mma_double_forward", static_cast<int>(o.schedule.mma_double_forward)},
      {"mma_backward", static_cast<int>(o.schedule.mma_backward)},
      {"mma_double_backward", static_cast<int>(o.schedule.mma_double_backward)},
      {"receiver_streams", o.schedule.receiver_streams},
      {"receiver_longest_first", o.schedule.receiver_launch_order == LaunchOrder::kLongestFirst},
      {"matrix_lane_registers_float64_double_forward",
       o.schedule.matrix_lane_registers_float64_double_forward},
      {"matrix_lane_registers_float64_double_backward",
       o.schedule.matrix_lane_registers_float64_double_backward},
      {"sender_streams", o.schedule.sender_streams},
      {"fused_w4_slice_bytes", o.schedule.fused_w4_slice_bytes},
      {"fused_w4_slice_any_occupancy", o.schedule.fused_w4_slice_any_occupancy},
      {"fused_mma_float64", o.schedule.fused_mma_float64},
      {"fused_sub_tile", o.schedule.fused_sub_tile}};
  json prefetching;
  for (const PassSchedule& ps : L.schedule().passes) {
    int n = 0;
    for (const Group& g : ps.groups) n += g.operand_load == OperandLoad::kPrefetchNextEdge;
    prefetching[to_string(ps.pass)] = std::to_string(n) + "/" + std::to_string(ps.groups.size());
  }
  r["prefetching_groups"] = prefetching;
  json regs;
  for (int p = 0; p < kNumPasses; ++p) {
    int m = 0;
    for (CUfunction f : L.kernels(static_cast<Pass>(p))) {
      int v = 0;
      CLEBSCH_CU_CHECK(FuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
      m = std::max(m, v);
    }
    regs[to_string(static_cast<Pass>(p))] = m;
  }
  r["max_registers"] = regs;

  // ---- Verification: poisoned outputs, one run of each direction, sampled rows exact. ----
  auto poison_all = [&] {
    for (const Buffer* d : {&out, &ggo, &gx, &gy, &gw, &grad_h}) d->poison();
  };
  std::vector<int> rows(N);
  for (int i = 0; i < N; ++i) rows[i] = i;
  std::shuffle(rows.begin(), rows.end(), gen);
  rows.resize(std::min(N, o.verify_rows));
  std::sort(rows.begin(), rows.end());
  // Rows idx of a [rows][dim] array, widened to double (the host reference's inputs are exactly
  // the device's).
  auto gather = [](const std::vector<T>& v, const std::vector<int>& idx, int dim) {
    std::vector<double> r;
    r.reserve(idx.size() * dim);
    for (int i : idx)
      r.insert(r.end(), v.begin() + std::size_t(i) * dim, v.begin() + std::size_t(i + 1) * dim);
    return r;
  };
  auto widen = [](const std::vector<T>& v) { return std::vector<double>(v.begin(), v.end()); };
  const std::vector<double> xh = widen(x), gh = widen(g), dxh = widen(dx);
  const std::vector<T>&yh = y, &wh = w, &dyh = dy, &dwh = dw;
  // Receiver sub-graph: edges into the sampled rows, receivers renumbered 0..|rows|-1.
  std::vector<int> re, rs, rr;
  for (std::size_t k = 0; k < rows.size(); ++k)
    for (int n = edges.receiver_ptr()[rows[k]]; n < edges.receiver_ptr()[rows[k] + 1]; ++n) {
      const int e = edges.by_receiver()[n];
      re.push_back(e), rs.push_back(sender[e]), rr.push_back(int(k));
    }
  const EdgeIndex rsub(N, int(rows.size()), rs, rr);
  // Sender sub-graph: edges out of the sampled rows, senders renumbered.
  std::vector<int> se, ss, sr;
  for (std::size_t k = 0; k < rows.size(); ++k)
    for (int n = edges.sender_ptr()[rows[k]]; n < edges.sender_ptr()[rows[k] + 1]; ++n) {
      const int e = edges.by_sender()[n];
      se.push_back(e), ss.push_back(int(k)), sr.push_back(receiver[e]);
    }
  const EdgeIndex ssub(int(rows.size()), N, ss, sr);
  const double tol = dtype == DType::kFloat32 ? 1e-5 : 1e-12;
  json errors;
  bool pass = true, finite = true;
  auto check = [&](const char* name, const std::vector<double>& dev,
                   const std::vector<double>& ref) {
    const double err = rel_error(dev, ref, finite);
    errors[name] = err;
    pass = pass && err <= tol;
  };
  {
    poison_all();
    L.run(nullptr, Pass::kForward, bf);
    std::vector<double> ref(rows.size() * dout);
    convolution_forward<double>(tp, rsub, xh.data(), gather(yh, re, d2).data(),
                                gather(wh, re, nw).data(), ref.data());
    check("forward.out", out.rows<T>(rows, dout), ref);
  }
  {
    poison_all();
    L.run(nullptr, Pass::kBackward, bf);
    std::vector<double> rgx(rows.size() * d1), rgy(se.size() * d2), rgw(se.size() * nw);
    convolution_backward<double>(tp, ssub, gather(x, rows, d1).data(), gather(yh, se, d2).data(),
                                 gather(wh, se, nw).data(), gh.data(), rgx.data(), rgy.data(),
                                 rgw.data());
    check("backward.grad_x", gx.rows<T>(rows, d1), rgx);
    check("backward.grad_Y", gy.rows<T>(se, d2), rgy);
    if (H > 0) {
      // dE/dh = dE/dW W4^T.
      std::vector<double> rgh(se.size() * H, 0.0);
      for (std::size_t q = 0; q < se.size(); ++q)
        for (int c = 0; c < nw; ++c)
          for (int k = 0; k < H; ++k)
            rgh[q * H + k] += rgw[q * nw + c] * double(w4[std::size_t(k) * nw + c]);
      check("backward.grad_h", grad_h.rows<T>(se, H), rgh);
    } else {
      check("backward.grad_W", gw.rows<T>(se, nw), rgw);
    }
  }
  {
    poison_all();
    L.run_double_backward(nullptr, b);
    std::vector<double> rggo(rows.size() * dout);
    convolution_double_backward<double>(tp, rsub, xh.data(), gather(yh, re, d2).data(),
                                        gather(wh, re, nw).data(), gh.data(), dxh.data(),
                                        gather(dyh, re, d2).data(), gather(dwh, re, nw).data(),
                                        nullptr, nullptr, nullptr, rggo.data());
    check("double_backward.grad_grad_out", ggo.rows<T>(rows, dout), rggo);
    std::vector<double> rgx(rows.size() * d1), rgy(se.size() * d2), rgw(se.size() * nw);
    convolution_double_backward<double>(
        tp, ssub, gather(x, rows, d1).data(), gather(yh, se, d2).data(), gather(wh, se, nw).data(),
        gh.data(), gather(dx, rows, d1).data(), gather(dyh, se, d2).data(),
        gather(dwh, se, nw).data(), rgx.data(), rgy.data(), rgw.data(), nullptr);
    check("double_backward.grad_x", gx.rows<T>(rows, d1), rgx);
    check("double_backward.grad_Y", gy.rows<T>(se, d2), rgy);
    check("double_backward.grad_W", gw.rows<T>(se, nw), rgw);
  }
  const std::uint32_t status = L.take_status(nullptr);
  pass = pass && finite && status == 0;
  r["rel_errors"] = errors;
  r["tolerance"] = tol;
  r["verified_rows"] = rows.size();
  r["status_word"] = status;
  r["verify"] = pass ? "PASS" : "FAIL";

  // ---- Timing ----
  // Byte floors: every input read once, every output written once, int32 indices.
  const double xb = double(N) * d1 * el, yb = double(E) * d2 * el, wb = double(E) * nw * el,
               ob = double(N) * dout * el, ib = 2.0 * E * 4;
  // The fused radial form reads h (and W4 once) instead of W, writes dE/dh instead of dE/dW,
  // and makes W itself: 2 E H nw FLOPs per making (the backward makes it again and contracts
  // dE/dW with W4^T).
  const double hb = double(E) * H * el + double(H) * nw * el, gemm = 2.0 * E * H * nw;
  const double fw = H > 0 ? hb : wb;
  const double fwd_bytes = xb + yb + fw + ob + ib;
  const double bwd_bytes = xb + yb + fw + ob /*grad_out*/ + ib + xb + yb + fw /*grads*/;
  const double db_bytes = 2 * (xb + yb + wb) + ob + ib + ob + xb + yb + wb;
  json times;
  auto record = [&](const std::string& op, double bytes, double flops, auto&& f) {
    const Timing t = time_op(o, f);
    const double floor_ms = bytes / bandwidth * 1e3;
    times[op] = {{"median_ms", t.median},
                 {"min_ms", t.min},
                 {"max_ms", t.max},
                 {"runs", t.runs},
                 {"floor_ms", floor_ms},
                 {"floor_bytes", bytes},
                 {"time_over_floor", t.median / floor_ms}};
    if (flops > 0) {
      times[op]["weight_gemm_flops"] = flops;
      times[op]["weight_gemm_tflop_s"] = flops / (t.median * 1e-3) / 1e12;
    }
  };
  for (const std::string& op : o.ops) {
    if (op == "fwd")
      record("fwd", fwd_bytes, H > 0 ? gemm : 0.0, [&] { L.run(nullptr, Pass::kForward, bf); });
    else if (op == "fb")
      record("fb", fwd_bytes + bwd_bytes, H > 0 ? 3 * gemm : 0.0, [&] {
        L.run(nullptr, Pass::kForward, bf);
        L.run(nullptr, Pass::kBackward, bf);
      });
    else if (op == "db")
      record("db", db_bytes, 0.0, [&] { L.run_double_backward(nullptr, b); });
  }
  CLEBSCH_CU_CHECK(CtxSynchronize());
  r["times"] = times;
  if (o.group_times) r["group_times"] = group_times(o, L, b, bf);
  const std::size_t free_after = free_memory();
  r["extra_device_bytes"] = double(free_before) - double(free_after);
  r["status_after_timing"] = L.take_status(nullptr);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    if (o.precompile) return precompile(o);
    ensure_context();
    char name[256] = {};
    CLEBSCH_CU_CHECK(DeviceGetName(name, sizeof name, ensure_context()));
    int driver_version = 0;
    CLEBSCH_CU_CHECK(DriverGetVersion(&driver_version));
    const double bw = o.copy_bandwidth > 0 ? o.copy_bandwidth : measure_copy_bandwidth();
    json header = {{"gpu", name},
                   {"variant", o.variant},
                   {"driver", driver_version},
                   {"nvrtc", nvrtc_version()},
                   {"commit", std::getenv("CLEBSCH_COMMIT") ? std::getenv("CLEBSCH_COMMIT") : ""},
                   {"copy_bandwidth_Bps", bw},
                   {"generator_version", kGeneratorVersion},
                   {"reps", o.reps},
                   {"warmup", o.warmup}};
    std::ofstream js;
    if (!o.json_path.empty()) js.open(o.json_path);
    if (js) js << json{{"header", header}}.dump() << "\n";
    std::printf("# %s, driver %d, NVRTC %s, copy bandwidth %.2f TB/s (measured, read+write)\n",
                name, driver_version, nvrtc_version().c_str(), bw / 1e12);
    std::printf("%-15s %-7s %-13s %-5s %9s %9s %7s %9s %9s %7s %9s %9s %7s %10s %s\n", "problem",
                "dtype", "mode", "check", "fwd ms", "floor", "x", "f+b ms", "floor", "x", "dbl ms",
                "floor", "x", "extra MB", "max rel err");
    int failures = 0;
    for (const std::string& p : o.problems) {
      const ConvShape shape = benchmark_shape(p);
      for (DType d : o.dtypes)
        for (Accumulation a : o.modes) {
          json r;
          if (o.cached_only) {
            // The module a TpLauncher would build here (same problem, schedule and options).
            const TpProblem problem = make_problem(o, shape_tensor_product(shape), d, a);
            CompileOptions co;
            co.arch = query_device_limits().arch();
            const std::string src =
                emit_conv_module(problem, schedule(problem, query_device_limits(), o.schedule));
            if (!is_cached(src, co)) {
              std::printf("%-15s %-7s %-13s skipped (module not in the kernel cache)\n", p.c_str(),
                          to_string(d).c_str(), to_string(a).c_str());
              continue;
            }
          }
          try {
            r = d == DType::kFloat32 ? run_config<float>(o, shape, d, a, bw)
                                     : run_config<double>(o, shape, d, a, bw);
          } catch (const std::exception& e) {
            r = {{"problem", p},
                 {"dtype", to_string(d)},
                 {"accumulation", to_string(a)},
                 {"error", e.what()},
                 {"verify", "FAIL"}};
          }
          if (js) js << json{{"result", r}}.dump() << "\n";
          if (r["verify"] != "PASS") ++failures;
          if (r.contains("error")) {
            std::printf("%-15s %-7s %-13s ERROR %s\n", p.c_str(), to_string(d).c_str(),
                        to_string(a).c_str(), r["error"].get<std::string>().c_str());
            continue;
          }
          double max_err = 0;
          for (auto& [k, v] : r["rel_errors"].items()) max_err = std::max(max_err, v.get<double>());
          auto col = [&](const char* op, const char* key) {
            return r["times"].contains(op) ? r["times"][op][key].get<double>() : NAN;
          };
          std::printf(
              "%-15s %-7s %-13s %-5s %9.3f %9.3f %7.2f %9.3f %9.3f %7.2f %9.3f %9.3f %7.2f %10.1f "
              "%.2e\n",
              p.c_str(), to_string(d).c_str(), to_string(a).c_str(),
              r["verify"].get<std::string>().c_str(), col("fwd", "median_ms"),
              col("fwd", "floor_ms"), col("fwd", "time_over_floor"), col("fb", "median_ms"),
              col("fb", "floor_ms"), col("fb", "time_over_floor"), col("db", "median_ms"),
              col("db", "floor_ms"), col("db", "time_over_floor"),
              r["extra_device_bytes"].get<double>() / 1e6, max_err);
          std::fflush(stdout);
        }
    }
    return failures ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_conv: %s\n", e.what());
    return 2;
  }
}

}  // namespace clebsch::cuda::bench

int main(int argc, char** argv) { return clebsch::cuda::bench::main(argc, argv); }
