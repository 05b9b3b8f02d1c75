// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Model-level benchmark driver: energy + forces of one MACE model on one periodic structure
// through the Engine interface (src/engine/engine.h), for each requested engine (the host engine of
// src/, the CUDA engine of kernels/) and precision. bench_mace_model.py builds the model and the
// structure, times mace-torch on the same GPU and compares the forces this program writes.
// Following the CUTLASS examples: Options from the command line, one Result per (engine,
// precision); each engine is built (its setup time reported), warmed up, then timed (wall clock
// around compute(), which returns results on the host, so device work is included); the median
// is reported as JSON on stdout, and the forces are written as raw little-endian float64 [N,3].
// For the CUDA engine the device memory in use is sampled (cuMemGetInfo, every 0.2 ms on a
// second thread) from before the engine is built to after the last run: the peak over that
// baseline is what the engine took, whatever allocator it uses.
//
//   bench_mace_model --model m.safetensors --structure s.safetensors [--engine host,cuda]
//                    [--precision fp64,fp32,mixed] [--repeat 10] [--warmup 2]
//                    [--forces-out PREFIX] [--atomic] [--edge-batch N]
//                    [--kernel-profile FILE] [--backend cuda|emulated]
//                    [--spline-intervals N] [--ledger-only] [--kept-rows auto|all|batch]
//
// Engines: host, cuda (the CUDA engine with its default options), cuda-fused and cuda-unfused
// (CudaEngineOptions::fused_radial forced on or off: the radial MLP's last layer inside the
// convolution or made into per-edge weights first; A/B runs whatever the default).
// host-spline and cuda-spline: those engines on the model with its radial MLPs tabulated
// (`radial spline N`, engine/radial_spline.h) on --spline-intervals intervals (default 1000);
// cuda-spline-stored: cuda-spline with CudaEngineOptions::fused_spline off (the tables write the
// weights the convolution reads, instead of the convolution interpolating them per edge tile).
// --edge-batch: edges per batch of the CUDA engine's weight stage (CudaEngineOptions::
// edge_batch; 0, the default, lets the engine choose).
// --kept-rows: what the CUDA engine keeps from the forward to the backward (CudaEngineOptions::
// kept_rows: auto, the default; all, every atom's and edge's rows; batch, one edge batch's,
// made again in the backward).
// --kernel-profile: after the timed calls, one more call of each CUDA engine with kernel timing
// on (kernels/device/kernel_timing.h: events around every launch, copy, memset and cuBLAS GEMM
// on its stream), written to FILE as JSON (write_kernel_profile says what it holds) and as a
// table of the 25 largest on stderr (stdout carries the results JSON that bench_mace_model.py
// reads).
// Every CUDA result carries the engine's memory ledger after its first call
// (device_bytes_by_buffer: name, bytes, per atom|edge|fixed, bytes per atom and per edge; the
// allocated total and the call's peak), from the backend's own count (so also emulated).
// --ledger-only: that first call only (no timing), for the ledger on the emulated backend.
// --backend emulated: the CUDA engine on the emulated backend (device code run on the host: no
// GPU needed, times meaningless), to check the profile's plumbing.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_structure.h"
#include "clebsch/engine/engine.h"
#include "clebsch/engine/host_engine.h"
#include "clebsch/engine/radial_spline.h"
#include "clebsch/model/model_reader.h"
#include "clebsch/support/error.h"

#if defined(CLEBSCH_BENCH_CUDA)
#include "clebsch/cuda/device/cuda_driver.h"
// The CUDA engine (kernels/engine/cuda_engine.h: clebsch::cuda::make_cuda_engine(const
// model::Model&, Precision, const CudaEngineOptions&)) landed on main after this benchmark
// branched; it is included when present. Built without it, the driver still runs the host engine
// and reports the CUDA engine as not run.
#if __has_include("clebsch/cuda/engine/cuda_engine.h")
#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/engine/cuda_engine.h"
#define CLEBSCH_BENCH_HAVE_CUDA_ENGINE 1
#endif
#endif

namespace {

using clebsch::AtomGraph;
using clebsch::Engine;
using clebsch::EngineResult;
using clebsch::Precision;
using clebsch::bench::Graph;
using clebsch::bench::Structure;

struct Options {
  std::string model, structure, forces_out;
  std::vector<std::string> engines{"host"};
  std::vector<Precision> precisions{Precision::kFloat64};
  int repeat = 10, warmup = 2;
  bool deterministic = true;  // the CUDA engine's default: bitwise reproducible
  std::size_t edge_batch = 0;
  std::string kept_rows = "auto";  // --kept-rows: CudaEngineOptions::kept_rows
  int spline_intervals = 1000;     // --spline-intervals: of the *-spline engines
  std::string kernel_profile;      // --kernel-profile FILE ("" none)
  std::string backend = "cuda";    // --backend: the CUDA engine's backend (cuda, emulated)
  bool ledger_only = false;        // --ledger-only: one call per engine, for its memory ledger

  static std::vector<std::string> split(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream s(text);
    std::string item;
    while (std::getline(s, item, ',')) out.push_back(item);
    return out;
  }

  static Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw clebsch::Error("option " + a + " needs a value");
        return argv[++i];
      };
      if (a == "--model")
        o.model = next();
      else if (a == "--structure")
        o.structure = next();
      else if (a == "--forces-out")
        o.forces_out = next();
      else if (a == "--repeat")
        o.repeat = std::stoi(next());
      else if (a == "--warmup")
        o.warmup = std::stoi(next());
      else if (a == "--atomic")
        o.deterministic = false;
      else if (a == "--edge-batch")
        o.edge_batch = std::stoull(next());
      else if (a == "--kept-rows")
        o.kept_rows = next();
      else if (a == "--spline-intervals")
        o.spline_intervals = std::stoi(next());
      else if (a == "--kernel-profile")
        o.kernel_profile = next();
      else if (a == "--backend")
        o.backend = next();
      else if (a == "--ledger-only")
        o.ledger_only = true;
      else if (a == "--engine")
        o.engines = split(next());
      else if (a == "--precision") {
        o.precisions.clear();
        for (const auto& p : split(next()))
          o.precisions.push_back(clebsch::precision_from_string(p));
      } else {
        throw clebsch::Error("unknown option " + a);
      }
    }
    if (o.model.empty() || o.structure.empty())
      throw clebsch::Error("usage: bench_mace_model --model M --structure S [--engine host,cuda]");
    for (const auto& e : o.engines)
      if (e != "host" && e != "cuda" && e != "cuda-fused" && e != "cuda-unfused" &&
          e != "host-spline" && e != "cuda-spline" && e != "cuda-spline-stored")
        throw clebsch::Error("unknown engine '" + e + "'");
    if (o.repeat < 1) throw clebsch::Error("--repeat must be at least 1");
    if (o.kept_rows != "auto" && o.kept_rows != "all" && o.kept_rows != "batch")
      throw clebsch::Error("--kept-rows must be auto, all or batch, not '" + o.kept_rows + "'");
    if (o.backend != "cuda" && o.backend != "emulated")
      throw clebsch::Error("--backend must be cuda or emulated, not '" + o.backend + "'");
    return o;
  }
};

// The one place that knows how the CUDA engine is made.
std::unique_ptr<Engine> make_cuda(const clebsch::model::Model& model, Precision precision,
                                  const Options& opt, const std::string& kind) {
#if defined(CLEBSCH_BENCH_HAVE_CUDA_ENGINE)
  clebsch::cuda::CudaEngineOptions options;
  options.deterministic = opt.deterministic;
  if (kind == "cuda-fused" || kind == "cuda-unfused") options.fused_radial = kind == "cuda-fused";
  if (kind == "cuda-spline-stored") options.fused_spline = false;
  options.edge_batch = opt.edge_batch;
  using clebsch::cuda::KeptRows;
  options.kept_rows = opt.kept_rows == "all"     ? KeptRows::kAll
                      : opt.kept_rows == "batch" ? KeptRows::kBatch
                                                 : KeptRows::kAuto;
  if (opt.backend == "emulated") options.backend = clebsch::cuda::make_emulated_backend();
  return clebsch::cuda::make_cuda_engine(model, precision, options);
#else
  (void)model;
  (void)precision;
  (void)opt;
  (void)kind;
  throw clebsch::Error(
#if defined(CLEBSCH_BENCH_CUDA)
      "engine cuda: kernels/ has no CUDA engine header yet (cuda_engine.h); rebuild once "
      "make_cuda_engine lands"
#else
      "engine cuda: this build has no CUDA (configure with -DCLEBSCH_ENABLE_CUDA=ON)"
#endif
  );
#endif
}

std::unique_ptr<Engine> make_engine(const std::string& kind, const clebsch::model::Model& model,
                                    Precision precision, const Options& opt) {
  if (kind == "host" || kind == "host-spline") return clebsch::make_host_engine(model, precision);
  return make_cuda(model, precision, opt, kind);
}

// Device memory in use (total - free) on the current context, sampled on a second thread.
class DeviceMemorySampler {
 public:
  explicit DeviceMemorySampler(bool enabled) : enabled_(enabled) {
    if (!enabled_) return;
    baseline_ = used();
    peak_ = baseline_;
    thread_ = std::thread([this] {
      ensure();
      while (!stop_.load()) {
        const long long u = used();
        long long p = peak_.load();
        while (u > p && !peak_.compare_exchange_weak(p, u)) {
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
  }
  ~DeviceMemorySampler() { stop(); }
  void stop() {
    if (thread_.joinable()) {
      stop_ = true;
      thread_.join();
    }
  }
  long long peak_extra() const { return enabled_ ? peak_.load() - baseline_ : -1; }
  long long held_extra() const { return enabled_ ? used() - baseline_ : -1; }

 private:
  static void ensure() {
#if defined(CLEBSCH_BENCH_CUDA)
    clebsch::cuda::ensure_context();
#endif
  }
  static long long used() {
#if defined(CLEBSCH_BENCH_CUDA)
    ensure();
    std::size_t free = 0, total = 0;
    CLEBSCH_CU_CHECK(MemGetInfo(&free, &total));
    return static_cast<long long>(total - free);
#else
    return 0;
#endif
  }
  bool enabled_;
  long long baseline_ = 0;
  std::atomic<long long> peak_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The CUDA engine on a graph already on the device (compute_device, as the Kokkos style calls
// it and as the peers are timed: no host-device copies of the graph or the results), the same
// warm-ups and repeats, each call closed by a stream synchronisation. The forces' scatter of the
// edge gradients is left to the caller there (the Kokkos style's own kernel): not timed here.
// The engine's device memory after a call, buffer by buffer (Engine::memory_usage: the
// backend's ledger), with each buffer's bytes per atom and per edge of this graph, and the peak
// of the call; the backend's own count, so that it holds on the emulated backend too.
nlohmann::json memory_ledger(const Engine& engine, std::size_t atoms, std::size_t edges) {
  const clebsch::EngineMemory m = engine.memory_usage();
  nlohmann::json j, list = nlohmann::json::array();
  for (const clebsch::EngineMemory::Buffer& b : m.device_buffers)
    list.push_back({{"name", b.name},
                    {"bytes", b.bytes},
                    {"per", b.per},
                    {"bytes_per_atom", atoms ? double(b.bytes) / atoms : 0.0},
                    {"bytes_per_edge", edges ? double(b.bytes) / edges : 0.0}});
  j["device_bytes_by_buffer"] = list;
  j["device_allocated_bytes"] = m.device_bytes;
  j["device_peak_allocated_bytes"] = m.device_peak_bytes;
  j["device_allocated_bytes_per_atom"] = atoms ? double(m.device_bytes) / atoms : 0.0;
  j["device_peak_allocated_bytes_per_atom"] = atoms ? double(m.device_peak_bytes) / atoms : 0.0;
  return j;
}

nlohmann::json time_device_graph(Engine& engine, const AtomGraph& ag, const Options& opt) {
  nlohmann::json j;
#if defined(CLEBSCH_BENCH_HAVE_CUDA_ENGINE)
  auto* ce = dynamic_cast<clebsch::cuda::CudaEngine*>(&engine);
  if (!ce) throw clebsch::Error("not a CUDA engine");
  clebsch::cuda::DeviceBackend& b = ce->backend();
  using clebsch::cuda::DeviceArray;
  DeviceArray<int> species(b), center(b), neighbor(b);
  DeviceArray<double> vector(b), energy(b, 1), edge_gradient(b, 3 * ag.num_edges);
  species.upload(ag.species, ag.num_nodes);
  center.upload(ag.center, ag.num_edges);
  neighbor.upload(ag.neighbor, ag.num_edges);
  vector.upload(ag.vector, 3 * ag.num_edges);
  const clebsch::cuda::DeviceAtomGraph dg{ag.num_local,   ag.num_nodes,  ag.num_edges,
                                          species.data(), center.data(), neighbor.data(),
                                          vector.data()};
  const clebsch::cuda::DeviceResult dr{energy.data(), nullptr, edge_gradient.data()};
  auto call = [&] {
    ce->compute_device(dg, dr, nullptr, nullptr);
    b.synchronize(nullptr);
  };
  for (int w = 0; w < std::max(opt.warmup, 1); ++w) call();
  std::vector<double> times;
  for (int k = 0; k < opt.repeat; ++k) {
    const auto t1 = std::chrono::steady_clock::now();
    call();
    times.push_back(seconds_since(t1));
  }
  std::sort(times.begin(), times.end());
  j["median_s"] = times[times.size() / 2];
  j["min_s"] = times.front();
  j["energy"] = energy.download()[0];
#else
  (void)engine, (void)ag, (void)opt;
  throw clebsch::Error("this build has no CUDA engine");
#endif
  return j;
}

// One more energy + forces call of a CUDA engine with kernel timing on: the profile of one
// (engine, precision) for the --kernel-profile file (see write_kernel_profile), and its table.
nlohmann::json kernel_profile(Engine& engine, const AtomGraph& ag, const nlohmann::json& result) {
#if defined(CLEBSCH_BENCH_HAVE_CUDA_ENGINE)
  namespace cu = clebsch::cuda;
  auto* cuda = dynamic_cast<cu::CudaEngine*>(&engine);
  if (!cuda) throw clebsch::Error("kernel profile: not a CUDA engine");
  cu::DeviceBackend& be = cuda->backend();
  EngineResult r;
  be.set_kernel_timing(true);
  const auto t0 = std::chrono::steady_clock::now();
  engine.compute(ag, r, nullptr);  // returns results on the host: the device work is done
  const double wall = seconds_since(t0);
  be.set_kernel_timing(false);
  const std::vector<cu::KernelTiming> records = be.take_kernel_timings();
  double busy = 0;
  for (const cu::KernelTiming& t : records) busy += t.seconds;
  nlohmann::json p;
  p["engine"] = result["engine"];
  p["precision"] = result["precision"];
  p["backend"] = be.name();
  p["wall_ms"] = wall * 1e3;
  p["kernel_ms"] = busy * 1e3;
  p["gap_ms"] = (wall - busy) * 1e3;
  p["untimed_median_ms"] = result.value("median_s", 0.0) * 1e3;
  p["records"] = records.size();
  // Largest first; share = of the step's wall time in this call.
  auto rows = [&](cu::TimingKey key) {
    std::vector<cu::KernelTimingTotal> totals = cu::aggregate_kernel_timings(records, key);
    std::stable_sort(totals.begin(), totals.end(),
                     [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
    return totals;
  };
  const std::vector<cu::KernelTimingTotal> by_phase = rows(cu::TimingKey::kLabelAndName);
  for (const cu::TimingKey key : {cu::TimingKey::kLabelAndName, cu::TimingKey::kName}) {
    nlohmann::json list = nlohmann::json::array();
    for (const cu::KernelTimingTotal& t : key == cu::TimingKey::kName ? rows(key) : by_phase) {
      nlohmann::json k;
      if (key == cu::TimingKey::kLabelAndName) k["label"] = t.label;
      k["name"] = t.name;
      k["calls"] = t.calls;
      k["total_ms"] = t.seconds * 1e3;
      k["mean_ms"] = t.mean_seconds() * 1e3;
      k["share"] = wall > 0 ? t.seconds / wall : 0.0;
      k["bytes"] = t.bytes;
      k["floor_bytes"] = t.floor.bytes;
      k["flops"] = t.floor.flops;
      list.push_back(k);
    }
    p[key == cu::TimingKey::kName ? "by_name" : "kernels"] = list;
  }
  nlohmann::json issued = nlohmann::json::array();
  for (const cu::KernelTiming& t : records)
    issued.push_back({{"label", t.label},
                      {"name", t.name},
                      {"grid", {t.grid_x, t.grid_y, t.grid_z}},
                      {"threads", t.threads},
                      {"shared_bytes", t.shared_bytes},
                      {"bytes", t.bytes},
                      {"floor_bytes", t.floor.bytes},
                      {"flops", t.floor.flops},
                      {"us", t.seconds * 1e6}});
  p["launches"] = issued;

  std::fprintf(stderr,
               "kernel profile: %s %s on %s: wall %.3f ms, kernels %.3f ms (%.1f%%), gaps %.3f "
               "ms, %zu records (untimed median %.3f ms)\n",
               p["engine"].get<std::string>().c_str(), p["precision"].get<std::string>().c_str(),
               be.name().c_str(), wall * 1e3, busy * 1e3, wall > 0 ? 100 * busy / wall : 0.0,
               (wall - busy) * 1e3, records.size(), p["untimed_median_ms"].get<double>());
  std::fprintf(stderr, "  %10s %6s %6s  %s\n", "total ms", "share", "calls", "phase / kernel");
  for (std::size_t i = 0; i < by_phase.size() && i < 25; ++i) {
    const cu::KernelTimingTotal& t = by_phase[i];
    std::fprintf(stderr, "  %10.4f %5.1f%% %6lld  %s / %s\n", t.seconds * 1e3,
                 wall > 0 ? 100 * t.seconds / wall : 0.0, t.calls,
                 t.label.empty() ? "-" : t.label.c_str(), t.name.c_str());
  }
  return p;
#else
  (void)engine, (void)ag, (void)result;
  throw clebsch::Error("kernel profile: this build has no CUDA engine");
#endif
}

// The --kernel-profile file: the run's inputs and one profile per (CUDA engine, precision):
//   {"model", "structure", "atoms", "edges", "deterministic", "edge_batch",
//    "profiles": [{"engine", "precision", "backend", "wall_ms" (the timed call, wall clock),
//                  "kernel_ms" (sum of the records), "gap_ms" (wall - sum: idle device),
//                  "untimed_median_ms" (the timed calls without kernel timing), "records",
//                  "kernels": [{"label" (engine phase), "name", "calls", "total_ms", "mean_ms",
//                               "share" (of wall_ms), "bytes", "floor_bytes", "flops"
//                               (KernelFloor: 0 where not known)}, ...] largest first,
//                  "by_name": the same summed over phases (no "label"),
//                  "launches": [{"label", "name", "grid", "threads", "shared_bytes", "bytes",
//                                "floor_bytes", "flops", "us"}, ...] in issue order}, ...]}
void write_kernel_profile(const Options& opt, const nlohmann::json& out,
                          const nlohmann::json& profiles) {
  nlohmann::json f;
  f["model"] = opt.model;
  f["structure"] = opt.structure;
  f["atoms"] = out["atoms"];
  f["edges"] = out["edges"];
  f["deterministic"] = opt.deterministic;
  f["edge_batch"] = opt.edge_batch;
  f["kept_rows"] = opt.kept_rows;
  f["profiles"] = profiles;
  std::ofstream file(opt.kernel_profile);
  file << f.dump(1) << "\n";
  if (!file) throw clebsch::Error("cannot write " + opt.kernel_profile);
}

}  // namespace

int main(int argc, char** argv) try {
  const Options opt = Options::parse(argc, argv);
  const clebsch::model::Model model = clebsch::read_model(opt.model);
  const Structure s = clebsch::bench::read_structure(opt.structure);
  nlohmann::json out;
  out["model"] = opt.model;
  out["atoms"] = s.n;
  // The *-spline engines' model: the same weights, the radial MLPs tabulated.
  clebsch::model::Model spline_model;
  for (const std::string& kind : opt.engines)
    if (kind.find("-spline") != std::string::npos && !spline_model.mace) {
      const auto ts = std::chrono::steady_clock::now();
      spline_model = model;
      clebsch::tabulate_radial_functions(spline_model, opt.spline_intervals);
      out["spline_intervals"] = opt.spline_intervals;
      out["spline_tabulation_s"] = seconds_since(ts);
    }
  const auto tn = std::chrono::steady_clock::now();
  const Graph g = clebsch::bench::neighbour_list(s, model.r_max);
  out["neighbour_list_s"] = seconds_since(tn);
  out["edges"] = g.center.size();
  const AtomGraph ag{s.n,
                     s.n,
                     s.species.data(),
                     g.center.size(),
                     g.center.data(),
                     g.neighbor.data(),
                     g.vector.data()};
  nlohmann::json profiles = nlohmann::json::array();

  for (const std::string& kind : opt.engines) {
    for (Precision p : opt.precisions) {
      nlohmann::json j;
      j["engine"] = kind;
      j["precision"] = clebsch::to_string(p);
      try {
        // Constructing the sampler makes the context current first, so the baseline holds it.
        const bool cuda = kind != "host" && kind != "host-spline";
        const bool spline = kind.find("-spline") != std::string::npos;
        DeviceMemorySampler memory(cuda && opt.backend == "cuda");
        const auto t0 = std::chrono::steady_clock::now();
        std::unique_ptr<Engine> engine = make_engine(kind, spline ? spline_model : model, p, opt);
        EngineResult r;
        engine->compute(ag, r, nullptr);  // the first call may compile or load kernels
        j["setup_s"] = seconds_since(t0);
        if (cuda) j.update(memory_ledger(*engine, s.n, g.center.size()));
        if (opt.ledger_only) {
          j["energy"] = r.energy;
          out["results"].push_back(j);
          std::cerr << j.dump() << std::endl;
          continue;
        }
        for (int w = 1; w < opt.warmup; ++w) engine->compute(ag, r, nullptr);
        std::vector<double> times;
        for (int k = 0; k < opt.repeat; ++k) {
          const auto t1 = std::chrono::steady_clock::now();
          engine->compute(ag, r, nullptr);
          times.push_back(seconds_since(t1));
        }
        memory.stop();
        std::vector<double> sorted = times;
        std::sort(sorted.begin(), sorted.end());
        j["median_s"] = sorted[sorted.size() / 2];
        j["min_s"] = sorted.front();
        j["times_s"] = times;
        j["energy"] = r.energy;
        j["peak_device_extra_bytes"] = memory.peak_extra();
        j["held_device_extra_bytes"] = memory.held_extra();
        std::vector<double> forces(3 * s.n, 0.0);
        for (std::size_t e = 0; e < g.center.size(); ++e)
          for (int k = 0; k < 3; ++k) {
            forces[3 * g.center[e] + k] += r.edge_gradient[3 * e + k];
            forces[3 * g.neighbor[e] + k] -= r.edge_gradient[3 * e + k];
          }
        if (!opt.forces_out.empty()) {
          const std::string path =
              opt.forces_out + "." + kind + "." + clebsch::to_string(p) + ".bin";
          std::ofstream f(path, std::ios::binary);
          f.write(reinterpret_cast<const char*>(forces.data()), forces.size() * sizeof(double));
          j["forces"] = path;
        }
        if (cuda) {
          try {
            j["device_graph"] = time_device_graph(*engine, ag, opt);
          } catch (const std::exception& e) {
            j["device_graph"] = {{"error", std::string("not run: ") + e.what()}};
          }
        }
        if (!opt.kernel_profile.empty() && cuda) {
          try {
            profiles.push_back(kernel_profile(*engine, ag, j));
            j["kernel_profile_wall_s"] = profiles.back()["wall_ms"].get<double>() * 1e-3;
            j["kernel_profile_kernel_s"] = profiles.back()["kernel_ms"].get<double>() * 1e-3;
          } catch (const std::exception& e) {
            j["kernel_profile_error"] = e.what();
          }
        }
      } catch (const std::exception& e) {
        // One engine's failure (e.g. no CUDA engine in this build) is a result; the rest run.
        j["error"] = std::string("not run: ") + e.what();
      }
      out["results"].push_back(j);
      std::cerr << j.dump() << std::endl;
    }
  }
  if (!opt.kernel_profile.empty()) {
    write_kernel_profile(opt, out, profiles);
    out["kernel_profile"] = opt.kernel_profile;
  }
  std::cout << out.dump(1) << std::endl;
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench_mace_model: " << e.what() << std::endl;
  return 1;
}
