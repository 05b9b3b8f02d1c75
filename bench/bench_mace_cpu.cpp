// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// CPU benchmark of the MACE host engine (src/mace_engine.h): energy + forces of one structure,
// timed per atom-step. The structure comes from a small safetensors file (positions [N,3],
// cell [3,3] rows = lattice vectors, species [N], fully periodic) written by bench_mace_cpu.py,
// which also times mace-torch on the same structure and checks this program's forces against
// it. Following the CUTLASS examples: an Options struct from the command line, a Result per
// precision; the float64 result is checked first (forces must be the negative gradient: a
// central finite difference along a random displacement), then every precision is warmed up
// and timed, and the median is reported as JSON on stdout (and the float64 forces optionally
// written as raw little-endian float64 [N,3] for the Python side to compare). Wall and CPU time
// (all threads) are both reported: on a shared machine the first includes time other processes
// held the cores.
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

#include "engine.h"
#include "error.h"
#include "mace_engine.h"
#include "model_reader.h"
#include "safetensors.h"

namespace {

using clebsch::AtomGraph;
using clebsch::EngineResult;
using clebsch::MaceEngine;
using clebsch::Precision;

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
      if (a == "--model") o.model = next();
      else if (a == "--structure") o.structure = next();
      else if (a == "--forces-out") o.forces_out = next();
      else if (a == "--repeat") o.repeat = std::stoi(next());
      else if (a == "--warmup") o.warmup = std::stoi(next());
      else if (a == "--no-check") o.check = false;
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

struct Structure {
  std::vector<double> positions, cell;
  std::vector<int> species;
  std::size_t n = 0;
};

// Periodic full neighbour list by binning (cell no shorter than the cutoff in each direction is
// not required: images are enumerated as far as the cutoff needs).
struct Graph {
  std::vector<int> center, neighbor;
  std::vector<double> vector;
};

Graph neighbour_list(const Structure& s, double cutoff) {
  // Fractional coordinates; image ranges from the plane spacings.
  const double* c = s.cell.data();
  auto cross = [](const double* a, const double* b, double* o) {
    o[0] = a[1] * b[2] - a[2] * b[1];
    o[1] = a[2] * b[0] - a[0] * b[2];
    o[2] = a[0] * b[1] - a[1] * b[0];
  };
  double n0[3], n1[3], n2[3];
  cross(c + 3, c + 6, n0);
  cross(c + 6, c + 0, n1);
  cross(c + 0, c + 3, n2);
  const double vol = c[0] * n0[0] + c[1] * n0[1] + c[2] * n0[2];
  const double* normals[3] = {n0, n1, n2};
  int nbin[3], reps[3];
  for (int d = 0; d < 3; ++d) {
    const double nn = std::sqrt(normals[d][0] * normals[d][0] + normals[d][1] * normals[d][1] +
                                normals[d][2] * normals[d][2]);
    const double height = std::abs(vol) / nn;
    nbin[d] = std::max(1, static_cast<int>(height / cutoff));
    reps[d] = static_cast<int>(std::ceil(cutoff / (height / nbin[d])));
  }
  // Inverse cell (rows of inv^T are normals / vol).
  std::vector<double> frac(3 * s.n);
  for (std::size_t i = 0; i < s.n; ++i)
    for (int d = 0; d < 3; ++d) {
      const double* p = s.positions.data() + 3 * i;
      double f = (p[0] * normals[d][0] + p[1] * normals[d][1] + p[2] * normals[d][2]) / vol;
      f -= std::floor(f);
      frac[3 * i + d] = f;
    }
  const int nb = nbin[0] * nbin[1] * nbin[2];
  std::vector<std::vector<int>> bins(nb);
  auto bin_of = [&](std::size_t i, int d) {
    return std::min(nbin[d] - 1, static_cast<int>(frac[3 * i + d] * nbin[d]));
  };
  for (std::size_t i = 0; i < s.n; ++i)
    bins[(bin_of(i, 0) * nbin[1] + bin_of(i, 1)) * nbin[2] + bin_of(i, 2)].push_back(int(i));
  Graph g;
  const double rc2 = cutoff * cutoff;
  for (std::size_t i = 0; i < s.n; ++i) {
    const int b[3] = {bin_of(i, 0), bin_of(i, 1), bin_of(i, 2)};
    for (int dx = -reps[0]; dx <= reps[0]; ++dx)
      for (int dy = -reps[1]; dy <= reps[1]; ++dy)
        for (int dz = -reps[2]; dz <= reps[2]; ++dz) {
          const int d[3] = {dx, dy, dz};
          int bb[3], shift[3];
          for (int k = 0; k < 3; ++k) {
            const int raw = b[k] + d[k];
            shift[k] = static_cast<int>(std::floor(double(raw) / nbin[k]));
            bb[k] = raw - shift[k] * nbin[k];
          }
          for (int j : bins[(bb[0] * nbin[1] + bb[1]) * nbin[2] + bb[2]]) {
            double v[3];
            for (int k = 0; k < 3; ++k) {
              // x = frac @ cell; image shift adds shift @ cell.
              double fj = frac[3 * j + 0] + shift[0] - frac[3 * i + 0];
              double fk = frac[3 * j + 1] + shift[1] - frac[3 * i + 1];
              double fl = frac[3 * j + 2] + shift[2] - frac[3 * i + 2];
              v[k] = fj * c[k] + fk * c[3 + k] + fl * c[6 + k];
            }
            const double r2 = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
            if (r2 >= rc2 || r2 == 0) continue;
            g.center.push_back(int(i));
            g.neighbor.push_back(j);
            g.vector.insert(g.vector.end(), v, v + 3);
          }
        }
  }
  return g;
}

Structure read_structure(const std::string& path) {
  const auto f = clebsch::SafetensorsFile::read(path);
  Structure s;
  s.positions = f.to_double("positions");
  s.cell = f.to_double("cell", {3, 3});
  const auto sp = f.to_double("species");
  s.n = sp.size();
  if (s.positions.size() != 3 * s.n)
    throw clebsch::Error(path + ": positions and species disagree");
  for (double x : sp) s.species.push_back(static_cast<int>(x));
  return s;
}

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
  AtomGraph ag{s.n, s.n, s.species.data(), g.center.size(), g.center.data(), g.neighbor.data(),
               vec.data()};
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
  const AtomGraph ag{s.n, s.n, s.species.data(), g.center.size(), g.center.data(),
                     g.neighbor.data(), g.vector.data()};

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
        const double fd = -(energy_displaced(engine, s, g, d, eps) -
                            energy_displaced(engine, s, g, d, -eps)) / (2 * eps);
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
