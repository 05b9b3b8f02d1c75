// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The CUDA MACE engine (kernels/engine/cuda_engine.h) on a GPU, checked against the host engine,
// then timed. Following the CUTLASS examples: verify, then time.
//   1. Every MACE model of --models-dir (the exported_models fixture) and the bundled model, on a
//      small rattled fcc cell: device fp64 / fp32 / mixed against the host engine at the same
//      precision (max |dE|/atom, max |dF|), deterministic mode bitwise stable over two runs.
//   2. The bundled model on fcc supercells of --sizes (n x n x n conventional cells, 4 n^3
//      atoms, two species at random): errors against host fp64 and the median wall time of one
//      compute() (graph in, energies and dE/dvector out, orderings built on the host; warm-up
//      first) per precision and accumulation mode, host fp64 time beside it.
// Prints a table and, with --json, one JSON object per result line.
//
//   bench_mace_gpu --model potentials/bundled/cuau-mace.safetensors [--models-dir DIR]
//                  [--sizes 3,8,14] [--repeat 10] [--json out.jsonl]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "clebsch/cuda/device/cuda_driver.h"
#include "clebsch/cuda/engine/cuda_engine.h"
#include "clebsch/engine/mace_engine.h"
#include "clebsch/model/model_reader.h"
#include "clebsch/support/error.h"

namespace {

using namespace clebsch;
using Vec = std::vector<double>;

struct System {
  Vec pos, cell = Vec(9, 0.0), vec;
  std::vector<int> species, center, neighbor;
  std::size_t n() const { return species.size(); }
};

// Conventional fcc cells (a = 3.8 A), rattled by +-0.1 A, species at random.
System fcc(int n, int num_species, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> r(-0.1, 0.1);
  std::uniform_int_distribution<int> sp(0, num_species - 1);
  const double a = 3.8;
  System s;
  s.cell = {n * a, 0, 0, 0, n * a, 0, 0, 0, n * a};
  const double basis[4][3] = {{0, 0, 0}, {0.5, 0.5, 0}, {0.5, 0, 0.5}, {0, 0.5, 0.5}};
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k)
        for (auto& b : basis) {
          s.pos.push_back((i + b[0]) * a + r(gen));
          s.pos.push_back((j + b[1]) * a + r(gen));
          s.pos.push_back((k + b[2]) * a + r(gen));
          s.species.push_back(sp(gen));
        }
  return s;
}

// Full neighbour list of an orthorhombic periodic box by cell lists (any box >= cutoff: images
// are enumerated, so small cells see their own images).
void neighbours(System& s, double cutoff) {
  const double L[3] = {s.cell[0], s.cell[4], s.cell[8]};
  int nc[3], reps[3];
  for (int d = 0; d < 3; ++d) {
    nc[d] = std::max(1, static_cast<int>(L[d] / cutoff));
    reps[d] = static_cast<int>(std::ceil(cutoff / (L[d] / nc[d])));
  }
  std::vector<std::vector<int>> cells(nc[0] * nc[1] * nc[2]);
  auto cell_of = [&](int i, int d) {
    double x = s.pos[3 * i + d] / L[d];
    x -= std::floor(x);
    return std::min(nc[d] - 1, static_cast<int>(x * nc[d]));
  };
  for (std::size_t i = 0; i < s.n(); ++i)
    cells[(cell_of(i, 0) * nc[1] + cell_of(i, 1)) * nc[2] + cell_of(i, 2)].push_back(int(i));
  const double c2 = cutoff * cutoff;
  for (std::size_t i = 0; i < s.n(); ++i) {
    const int ci[3] = {cell_of(i, 0), cell_of(i, 1), cell_of(i, 2)};
    for (int dx = -reps[0]; dx <= reps[0]; ++dx)
      for (int dy = -reps[1]; dy <= reps[1]; ++dy)
        for (int dz = -reps[2]; dz <= reps[2]; ++dz) {
          const int raw[3] = {ci[0] + dx, ci[1] + dy, ci[2] + dz};
          int c[3], img[3];
          for (int d = 0; d < 3; ++d) {
            img[d] = static_cast<int>(std::floor(double(raw[d]) / nc[d]));
            c[d] = raw[d] - img[d] * nc[d];
          }
          for (int j : cells[(c[0] * nc[1] + c[1]) * nc[2] + c[2]]) {
            double d[3], r2 = 0;
            for (int k = 0; k < 3; ++k) {
              // Wrapped positions: shift j into the image cell relative to i's wrapped cell.
              const double pj = s.pos[3 * j + k] - std::floor(s.pos[3 * j + k] / L[k]) * L[k];
              const double pi = s.pos[3 * i + k] - std::floor(s.pos[3 * i + k] / L[k]) * L[k];
              d[k] = pj + img[k] * L[k] - pi;
              r2 += d[k] * d[k];
            }
            if (r2 < c2 && r2 > 1e-12) {
              s.center.push_back(int(i));
              s.neighbor.push_back(j);
              s.vec.insert(s.vec.end(), d, d + 3);
            }
          }
        }
  }
}

AtomGraph graph_of(const System& s) {
  return AtomGraph{s.n(),           s.n(),           s.species.data(),
                   s.center.size(), s.center.data(), s.neighbor.data(),
                   s.vec.data()};
}

Vec forces(const System& s, const EngineResult& r) {
  Vec f(3 * s.n(), 0.0);
  for (std::size_t e = 0; e < s.center.size(); ++e)
    for (int a = 0; a < 3; ++a) {
      f[3 * s.center[e] + a] += r.edge_gradient[3 * e + a];
      f[3 * s.neighbor[e] + a] -= r.edge_gradient[3 * e + a];
    }
  return f;
}

struct Errors {
  double de_per_atom, df, fscale;
};
Errors compare(const System& s, const EngineResult& a, const EngineResult& ref) {
  const Vec fa = forces(s, a), fr = forces(s, ref);
  double df = 0, fs = 0;
  for (std::size_t i = 0; i < fa.size(); ++i) {
    df = std::max(df, std::isfinite(fa[i]) ? std::abs(fa[i] - fr[i]) : INFINITY);
    fs = std::max(fs, std::abs(fr[i]));
  }
  return {std::abs(a.energy - ref.energy) / s.n(), df, fs};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Median wall time of compute(); @p first gets the warm-up's result, @p r the last one's.
double median_time(Engine& e, const System& s, int repeat, EngineResult& r, EngineResult& first) {
  e.compute(graph_of(s), first, nullptr);  // warm-up
  std::vector<double> t;
  for (int k = 0; k < repeat; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    e.compute(graph_of(s), r, nullptr);
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::ofstream json;
bool all_pass = true;
// --emulated: run on the emulated backend (a dry run of this program without a GPU).
std::shared_ptr<cuda::DeviceBackend> backend;

std::unique_ptr<cuda::CudaEngine> device_engine(const model::Model& m, Precision p,
                                                bool deterministic = true, bool profile = false) {
  cuda::CudaEngineOptions o;
  o.deterministic = deterministic;
  o.profile = profile;
  o.backend = backend;
  return cuda::make_cuda_engine(m, p, o);
}

void report(const std::string& line_text, const std::string& json_text, bool pass) {
  std::cout << line_text << (pass ? "  PASS" : "  FAIL") << std::endl;
  if (json) json << json_text << "\n";
  all_pass = all_pass && pass;
}

std::string fmt(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3e", x);
  return b;
}

void check_model(const std::string& name, const model::Model& m,
                 const std::vector<Precision>& precisions) {
  System s = fcc(2, m.num_species(), 5);
  neighbours(s, m.r_max * 0.999);
  for (Precision p : precisions) {
    MaceEngine host(m, p);
    auto dev = device_engine(m, p);
    EngineResult ref, a, b;
    host.compute(graph_of(s), ref, nullptr);
    dev->compute(graph_of(s), a, nullptr);
    dev->compute(graph_of(s), b, nullptr);
    const Errors e = compare(s, a, ref);
    const bool bitwise =
        a.energy == b.energy && std::memcmp(a.edge_gradient.data(), b.edge_gradient.data(),
                                            a.edge_gradient.size() * sizeof(double)) == 0;
    const double tol_e = p == Precision::kFloat64 ? 1e-10 : 1e-5;
    const double tol_f = p == Precision::kFloat64 ? 1e-10 : 1e-4;
    const bool pass = e.de_per_atom <= tol_e && e.df <= tol_f * std::max(1.0, e.fscale) && bitwise;
    std::ostringstream line, js;
    line << "check " << name << " " << to_string(p) << " atoms " << s.n() << " edges "
         << s.center.size() << " |dE|/atom " << fmt(e.de_per_atom) << " max|dF| " << fmt(e.df)
         << " (max|F| " << fmt(e.fscale) << ") bitwise-repeat " << (bitwise ? "yes" : "NO");
    js << "{\"kind\":\"check\",\"model\":\"" << name << "\",\"precision\":\"" << to_string(p)
       << "\",\"atoms\":" << s.n() << ",\"edges\":" << s.center.size()
       << ",\"dE_per_atom\":" << e.de_per_atom << ",\"max_dF\":" << e.df
       << ",\"max_F\":" << e.fscale << ",\"bitwise_repeat\":" << (bitwise ? "true" : "false")
       << "}";
    report(line.str(), js.str(), pass);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, models_dir, json_path;
  std::vector<int> sizes = {3, 8, 14};
  int repeat = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return std::string(argv[++i]); };
    if (a == "--model")
      model_path = next();
    else if (a == "--models-dir")
      models_dir = next();
    else if (a == "--json")
      json_path = next();
    else if (a == "--repeat")
      repeat = std::stoi(next());
    else if (a == "--emulated")
      backend = cuda::make_emulated_backend();
    else if (a == "--sizes") {
      sizes.clear();
      std::stringstream ss(next());
      std::string item;
      while (std::getline(ss, item, ',')) sizes.push_back(std::stoi(item));
    }
  }
  if (!json_path.empty()) json.open(json_path);
  try {
    if (!backend) backend = cuda::make_cuda_backend(0);
    std::cout << "device: " << backend->name() << ", host threads: " << omp_get_max_threads()
              << std::endl;
    if (!models_dir.empty())
      for (const auto& f : std::filesystem::directory_iterator(models_dir)) {
        const std::string p = f.path().string();
        if (f.path().filename().string().rfind("mace_", 0) != 0 ||
            p.find(".golden.") != std::string::npos || f.path().extension() != ".safetensors")
          continue;
        // float64 only here: the emulated CI test covers every precision of these models.
        check_model(f.path().stem().string(), read_model(p), {Precision::kFloat64});
      }
    const model::Model m = read_model(model_path);
    check_model("bundled", m, {Precision::kFloat64, Precision::kFloat32, Precision::kMixed});
    for (int n : sizes) {
      System s = fcc(n, m.num_species(), 7);
      neighbours(s, m.r_max * 0.999);
      MaceEngine host(m, Precision::kFloat64);
      EngineResult ref, ref0;
      const double t_host = median_time(host, s, 1, ref, ref0);
      for (Precision p : {Precision::kFloat64, Precision::kFloat32, Precision::kMixed})
        for (bool det : {true, false}) {
          const auto t0 = std::chrono::steady_clock::now();
          auto dev = device_engine(m, p, det);
          const double t_build = seconds_since(t0);
          EngineResult r, r0;
          const double t = median_time(*dev, s, repeat, r, r0);
          const Errors e = compare(s, r, ref);
          const bool bitwise =
              r.energy == r0.energy && std::memcmp(r.edge_gradient.data(), r0.edge_gradient.data(),
                                                   r.edge_gradient.size() * sizeof(double)) == 0;
          const double tol_e = p == Precision::kFloat64 ? 1e-10 : 1e-4;
          const double tol_f = p == Precision::kFloat64 ? 1e-10 : 1e-3;
          const bool pass = e.de_per_atom <= tol_e && e.df <= tol_f * std::max(1.0, e.fscale) &&
                            (!det || bitwise);
          std::ostringstream line, js;
          line << "time bundled " << to_string(p) << (det ? " det   " : " atomic") << " atoms "
               << s.n() << " edges " << s.center.size() << " gpu " << fmt(t * 1e3) << " ms"
               << " host-fp64 " << fmt(t_host * 1e3) << " ms (x" << fmt(t_host / t)
               << ") vs host fp64: |dE|/atom " << fmt(e.de_per_atom) << " max|dF| " << fmt(e.df)
               << " bitwise-repeat " << (bitwise ? "yes" : "no") << " setup " << fmt(t_build)
               << " s";
          js << "{\"kind\":\"time\",\"precision\":\"" << to_string(p)
             << "\",\"deterministic\":" << (det ? "true" : "false") << ",\"atoms\":" << s.n()
             << ",\"edges\":" << s.center.size() << ",\"gpu_ms\":" << t * 1e3
             << ",\"host_fp64_ms\":" << t_host * 1e3
             << ",\"host_threads\":" << omp_get_max_threads()
             << ",\"dE_per_atom_vs_fp64\":" << e.de_per_atom << ",\"max_dF_vs_fp64\":" << e.df
             << ",\"bitwise_repeat\":" << (bitwise ? "true" : "false") << ",\"setup_s\":" << t_build
             << "}";
          report(line.str(), js.str(), pass);
        }
      // Where the time goes: one profiled call per precision (phases synchronised).
      for (Precision p : {Precision::kFloat64, Precision::kFloat32}) {
        auto dev = device_engine(m, p, true, true);
        EngineResult r;
        dev->compute(graph_of(s), r, nullptr);
        dev->compute(graph_of(s), r, nullptr);
        std::ostringstream line, js;
        line << "phases " << to_string(p) << " atoms " << s.n() << ":";
        js << "{\"kind\":\"phases\",\"precision\":\"" << to_string(p) << "\",\"atoms\":" << s.n();
        for (const auto& [name, sec] : dev->phase_seconds()) {
          line << "\n    " << name << " " << fmt(sec * 1e3) << " ms";
          js << ",\"" << name << "\":" << sec * 1e3;
        }
        js << "}";
        std::cout << line.str() << std::endl;
        if (json) json << js.str() << "\n";
      }
    }
  } catch (const std::exception& ex) {
    std::cerr << "error: " << ex.what() << std::endl;
    return 2;
  }
  std::cout << (all_pass ? "ALL PASS" : "SOME FAILED") << std::endl;
  return all_pass ? 0 : 1;
}
