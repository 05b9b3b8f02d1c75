// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// CPU benchmark of the MACE host engine (src/engine/mace_engine.h): energy + forces of one
// structure, timed per atom-step. The structure comes from a small safetensors file (positions
// [N,3], cell [3,3] rows = lattice vectors, species [N], fully periodic) written by
// bench_mace_cpu.py, which also times mace-torch on the same structure and checks this program's
// forces against it. Following the CUTLASS examples: an Options struct from the command line, a
// Result per precision; the float64 result is checked first (forces must be the negative gradient:
// a central finite difference along a random displacement), then every precision is warmed up and
// timed, and the median is reported as JSON on stdout (and the float64 forces optionally written as
// raw little-endian float64 [N,3] for the Python side to compare). Wall and CPU time (all threads)
// are both reported: on a shared machine the first includes time other processes held the cores.
//
//   bench_mace_cpu --model m.safetensors --structure s.safetensors [--precision fp64,fp32,mixed]
//                  [--repeat 3] [--warmup 1] [--forces-out f.bin] [--no-check]
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_structure.h"
#include "clebsch/engine/engine.h"
#include "clebsch/engine/mace_engine.h"
#include "clebsch/model/model_reader.h"
#include "clebsch/model/safetensors.h"
#include "clebsch/support/error.h"

namespace {

using clebsch::AtomGraph;
using clebsch::EngineResult;
using clebsch::MaceEngine;
using clebsch::Precision;
using clebsch::bench::Graph;
using clebsch::bench::neighbour_list;
using clebsch::bench::read_structure;
using clebsch::bench::Structure;

struct Options {
  std::string model, structure, forces_out;
  std::vector<Precision> precisions{Precision::kFloat64};
  int repeat = 3, warmup = 1;
  bool check = true;

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
      else if (a == "--no-check")
        o.check = false;
      else if (a == "--precision") {
        o.precisions.clear();
        std::stringstream s(next());
        std::string item;
        while (std::getline(s, item, ','))
          o.precisions.push_back(clebsch::precision_from_string(item));
      } else {
        throw clebsch::Error("unknown option " + a);
      }
    }
    if (o.model.empty() || o.structure.empty())
      throw clebsch::Error("usage: bench_mace_cpu --model M --structure S [--precision ...]");
    return o;
  }
};

struct Result {
  Precision precision = Precision::kFloat64;
  double median_s = 0, min_s = 0, energy = 0, cpu_s = 0;
  std::vector<double> times, cpu_times;
};

// CPU time of the process (all threads): on a shared machine it shows the work done, where
// wall time also counts the time other processes held the cores.
double cpu_seconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + 1e-6 * u.ru_utime.tv_usec + u.ru_stime.tv_sec +
         1e-6 * u.ru_stime.tv_usec;
}

// Peak resident memory of this program. /proc's VmHWM starts afresh at exec; getrusage's
// ru_maxrss does not (Linux carries it over from the parent, e.g. a Python process holding
// mace-torch), so it is only the fallback.
double peak_rss_mb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

double run_once(MaceEngine& engine, const AtomGraph& g, EngineResult& r, double* cpu) {
  const double c0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  engine.compute(g, r, nullptr);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (cpu) *cpu = cpu_seconds() - c0;
  return wall;
}

// Moves every atom by eps * d (d random, |d|_inf = 1), rebuilding only the edge vectors (the
// edge list is kept: valid for displacements far below the skin of the list).
double energy_displaced(MaceEngine& engine, const Structure& s, const Graph& g,
                        const std::vector<double>& d, double eps) {
  std::vector<double> vec = g.vector;
  for (std::size_t e = 0; e < g.center.size(); ++e)
    for (int k = 0; k < 3; ++k)
      vec[3 * e + k] += eps * (d[3 * g.neighbor[e] + k] - d[3 * g.center[e] + k]);
  AtomGraph ag{
      s.n, s.n, s.species.data(), g.center.size(), g.center.data(), g.neighbor.data(), vec.data()};
  EngineResult r;
  engine.compute(ag, r, nullptr);
  return r.energy;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options opt = Options::parse(argc, argv);
  const clebsch::model::Model model = clebsch::read_model(opt.model);
  const Structure s = read_structure(opt.structure);
  nlohmann::json out;
  out["model"] = opt.model;
  out["atoms"] = s.n;
  out["threads"] = omp_get_max_threads();

  const auto tn = std::chrono::steady_clock::now();
  const Graph g = neighbour_list(s, model.r_max);
  out["neighbour_list_s"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - tn).count();
  out["edges"] = g.center.size();
  const AtomGraph ag{s.n,
                     s.n,
                     s.species.data(),
                     g.center.size(),
                     g.center.data(),
                     g.neighbor.data(),
                     g.vector.data()};

  std::vector<double> forces_fp64;
  for (Precision p : opt.precisions) {
    MaceEngine engine(model, p);
    EngineResult r;
    Result res;
    res.precision = p;
    for (int w = 0; w < opt.warmup; ++w) run_once(engine, ag, r, nullptr);
    for (int k = 0; k < opt.repeat; ++k) {
      double cpu = 0;
      res.times.push_back(run_once(engine, ag, r, &cpu));
      res.cpu_times.push_back(cpu);
    }
    std::vector<double> sorted = res.times;
    std::sort(sorted.begin(), sorted.end());
    res.median_s = sorted[sorted.size() / 2];
    res.min_s = sorted.front();
    sorted = res.cpu_times;
    std::sort(sorted.begin(), sorted.end());
    res.cpu_s = sorted[sorted.size() / 2];
    res.energy = r.energy;
    std::vector<double> forces(3 * s.n, 0.0);
    for (std::size_t e = 0; e < g.center.size(); ++e)
      for (int k = 0; k < 3; ++k) {
        forces[3 * g.center[e] + k] += r.edge_gradient[3 * e + k];
        forces[3 * g.neighbor[e] + k] -= r.edge_gradient[3 * e + k];
      }
    nlohmann::json j;
    j["precision"] = clebsch::to_string(p);
    j["median_s"] = res.median_s;
    j["min_s"] = res.min_s;
    j["times_s"] = res.times;
    j["cpu_s"] = res.cpu_s;
    j["us_per_atom_step"] = 1e6 * res.median_s / s.n;
    j["energy"] = res.energy;
    if (p == Precision::kFloat64) {
      forces_fp64 = forces;
      if (opt.check) {
        // Forces are -dE/dx: check F.d against a central difference along a random d.
        std::mt19937 rng(7);
        std::uniform_real_distribution<double> u(-1, 1);
        std::vector<double> d(3 * s.n);
        for (double& x : d) x = u(rng);
        const double eps = 1e-4;
        const double fd =
            -(energy_displaced(engine, s, g, d, eps) - energy_displaced(engine, s, g, d, -eps)) /
            (2 * eps);
        double an = 0;
        for (std::size_t k = 0; k < d.size(); ++k) an += forces[k] * d[k];
        const double rel = std::abs(fd - an) / std::max(1e-12, std::abs(an));
        j["check_fd_directional_rel"] = rel;
        j["check"] = rel < 1e-5 ? "pass" : "FAIL";
      }
    } else if (!forces_fp64.empty()) {
      double df = 0;
      for (std::size_t k = 0; k < forces.size(); ++k)
        df = std::max(df, std::abs(forces[k] - forces_fp64[k]));
      j["max_abs_force_diff_vs_fp64"] = df;
    }
    out["results"].push_back(j);
  }
  out["max_rss_mb"] = peak_rss_mb();
  if (!opt.forces_out.empty() && !forces_fp64.empty()) {
    std::ofstream f(opt.forces_out, std::ios::binary);
    f.write(reinterpret_cast<const char*>(forces_fp64.data()), forces_fp64.size() * sizeof(double));
  }
  std::cout << out.dump(1) << std::endl;
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench_mace_cpu: " << e.what() << std::endl;
  return 1;
}
