// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Kernel benchmark of the ir_linear kernel (kernels/device/ir_linear.h): the l > 0 blocks of an
// e3nn o3.Linear on MACE-sized node rows (CUTLASS-example style: Options, Result; verify, then
// time). Rows of 128x0e+128x1o+128x2e+128x3o (mul_ir, 2,048 values), for each dtype and l: the
// forward (x W, B row-major, beta 0) and the transpose (g W^T, B read with unit row stride,
// beta 1). Each route (every tile of the kernel, the planned one, and cuBLAS: a strided batch
// with one small GEMM per row, the route before the permuted copies; for l = 0, --ls 0, the
// one plain GEMM that gemm() gives such blocks where cuBLAS loads) is first checked against
// the generic GEMM kernel on the whole output (fresh random inputs, outputs poisoned), then
// timed from the backend's kernel records (CUDA events; warm-up, median of --reps runs) and
// reported beside its floor: bytes over the measured device copy bandwidth and flops.
// --backend emulated runs the same on the host (small --rows: a smoke test, no timings worth
// reading). Output: a table and, with --json, JSON lines.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "bench_cli.h"
#include "clebsch/cuda/device/dense_gemm.h"
#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/device/ir_linear.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda::bench {
namespace {

using json = nlohmann::json;

struct Options {
  long long rows = 10192;
  long long mul = 128;
  std::vector<int> ls = {1, 2, 3};
  std::vector<DType> dtypes = {DType::kFloat32, DType::kFloat64};
  int reps = 20;
  int warmup = 3;
  std::string backend = "cuda";
  std::string json_path;
  std::uint64_t seed = 2024;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return clebsch::bench::option_value(argc, argv, i); };
    if (a == "--rows") {
      o.rows = std::stoll(value());
    } else if (a == "--mul") {
      o.mul = std::stoll(value());
    } else if (a == "--ls") {
      o.ls.clear();
      for (const std::string& l : clebsch::bench::split_list(value())) o.ls.push_back(std::stoi(l));
    } else if (a == "--dtypes") {
      o.dtypes.clear();
      for (const std::string& d : clebsch::bench::split_list(value()))
        o.dtypes.push_back(d == "float64" || d == "f64" ? DType::kFloat64 : DType::kFloat32);
    } else if (a == "--reps") {
      o.reps = std::stoi(value());
    } else if (a == "--warmup") {
      o.warmup = std::stoi(value());
    } else if (a == "--backend") {
      o.backend = value();
    } else if (a == "--json") {
      o.json_path = value();
    } else if (a == "--seed") {
      o.seed = std::stoull(value());
    } else {
      throw Error("unknown option " + a +
                  " (--rows N --mul N --ls 1,2,3 --dtypes float32,float64 --reps N --warmup N "
                  "--backend cuda|emulated --json FILE --seed N)");
    }
  }
  if (o.rows < 1 || o.mul < 1 || o.reps < 1 || o.warmup < 0) throw Error("bad sizes or counts");
  return o;
}

struct Result {
  std::string dtype, direction, route;
  int l = 0;
  double max_rel = 0, median_ms = 0, floor_ms = 0, flops = 0;
  bool pass = false;
};

// Device copy bandwidth (read + write, bytes per second): the median of 5 timed copies of
// 256 MB (16 MB in the emulation).
double copy_bandwidth(DeviceBackend& be) {
  const std::size_t bytes = std::size_t(be.emulated() ? 16 : 256) << 20;
  DeviceArray<unsigned char> a(be, bytes), b(be, bytes);
  a.zero();
  be.copy(b.data(), a.data(), bytes, nullptr);
  be.set_kernel_timing(true);
  for (int i = 0; i < 5; ++i) be.copy(b.data(), a.data(), bytes, nullptr);
  be.set_kernel_timing(false);
  std::vector<double> t;
  for (const KernelTiming& k : be.take_kernel_timings()) t.push_back(k.seconds);
  std::sort(t.begin(), t.end());
  return 2.0 * double(bytes) / t[t.size() / 2];
}

template <class T>
std::vector<Result> run_case(DeviceBackend& be, const GenericKernels& gk,
                             const GenericKernels& generic, const DenseGemm* cublas,
                             const Options& o, int l, bool transpose, double bandwidth) {
  const DType t = std::is_same_v<T, float> ? DType::kFloat32 : DType::kFloat64;
  const long long d = 2 * l + 1, width = o.mul * 16, off = o.mul * l * l;
  GemmArgs g{};
  g.m = o.rows, g.n = o.mul, g.k = o.mul, g.batch = d;
  g.a_batch = 1, g.c_batch = 1, g.b_batch = 0, g.a_col = d, g.c_col = d;
  g.lda = width, g.ldc = width;
  if (!transpose)
    g.ldb = o.mul, g.b_col = 1;
  else
    g.ldb = 1, g.b_col = o.mul;
  g.alpha = 1.0, g.beta = transpose ? 1.0 : 0.0;

  std::mt19937_64 rng(o.seed + 97 * l + (transpose ? 1 : 0));
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  auto random = [&](std::size_t n) {
    std::vector<T> v(n);
    for (T& x : v) x = T(u(rng));
    return v;
  };
  DeviceArray<T> A(be), B(be), C0(be), C(be), R(be);
  A.upload(random(std::size_t(o.rows * width)));
  B.upload(random(std::size_t(o.mul * o.mul)));
  C0.upload(random(std::size_t(o.rows * width)));
  auto bind = [&](T* c) {
    GemmArgs h = g;
    h.a = A.data() + off, h.b = B.data(), h.c = c + off;
    return h;
  };
  auto reset = [&](DeviceArray<T>& c) {
    c.resize(C0.size());
    if (g.beta == 0)
      c.poison();
    else
      be.copy(c.data(), C0.data(), C0.bytes(), nullptr);
  };
  // Reference: the generic kernel (the GemmArgs definition, one output per thread).
  reset(R);
  generic.gemm(t, bind(R.data()), nullptr);
  const std::vector<T> ref = R.download();

  const double bytes =
      double(sizeof(T)) * double(o.rows * d * o.mul * (transpose ? 3 : 2) + o.mul * o.mul);
  const double flops = 2.0 * double(o.rows) * double(d) * double(o.mul) * double(o.mul);
  std::vector<Result> out;
  auto measure = [&](const std::string& route, const std::function<void()>& launch) {
    Result r;
    r.dtype = to_string(t), r.direction = transpose ? "transpose" : "forward", r.route = route;
    r.l = l, r.flops = flops, r.floor_ms = bytes / bandwidth * 1e3;
    reset(C);
    launch();
    const std::vector<T> c = C.download();
    double err = 0, scale = 0;
    for (long long i = 0; i < o.rows; ++i)
      for (long long q = 0; q < width; ++q) {
        const std::size_t e = std::size_t(i * width + q);
        const bool block = q >= off && q < off + o.mul * d;
        if (!block) continue;  // (the tests check the rest; poison makes it NaN here)
        const double x = double(c[e]), y = double(ref[e]);
        err = std::isfinite(x) ? std::max(err, std::abs(x - y)) : INFINITY;
        scale = std::max(scale, std::abs(y));
      }
    r.max_rel = err / std::max(scale, 1e-300);
    r.pass = r.max_rel <= (t == DType::kFloat64 ? 1e-12 : 1e-5);
    for (int i = 0; i < o.warmup; ++i) launch();
    be.synchronize(nullptr);
    be.set_kernel_timing(true);
    for (int i = 0; i < o.reps; ++i) launch();
    be.set_kernel_timing(false);
    std::vector<double> s;
    for (const KernelTiming& k : be.take_kernel_timings()) s.push_back(k.seconds);
    std::sort(s.begin(), s.end());
    r.median_ms = s.empty() ? 0 : s[s.size() / 2] * 1e3;
    out.push_back(r);
  };
  const GemmArgs hg = bind(C.data());
  const IrLinearPlan plan = plan_ir_linear(t, hg, be.limits());
  measure("planned (" + ir_linear_kernel_name(t, plan.tile) + ")",
          [&] { gk.gemm_ir_linear(t, bind(C.data()), nullptr); });
  for (int i = 0; i < int(ir_linear_tiles(t).size()); ++i) {
    const IrLinearTile& x = ir_linear_tiles(t)[std::size_t(i)];
    if (x.bm < d || (x.mma && be.limits().sm_major < 8)) continue;
    measure(ir_linear_kernel_name(t, i), [&] { gk.gemm_ir_linear(t, bind(C.data()), nullptr, i); });
  }
  // The plan is made at each launch: measure() (re)allocates C, and a plan holds its pointer.
  if (cublas && plan_cublas_gemm(hg))
    measure(d == 1 ? "cublas gemm" : "cublas batched per row", [&] {
      const CublasGemmPlan p = *plan_cublas_gemm(bind(C.data()));
      if (!be.kernel_timing()) return cublas->run(t, p, nullptr);
      const std::size_t mark = be.begin_timed_region("cublas", nullptr);
      cublas->run(t, p, nullptr);
      be.end_timed_region(mark, nullptr);
    });
  return out;
}

int run(const Options& o) {
  std::unique_ptr<DeviceBackend> be =
      o.backend == "emulated" ? make_emulated_backend() : make_cuda_backend(-1);
  std::cout << "device: " << be->name() << "\n";
  GenericKernels gk(*be);
  GenericKernels generic(*be, GenericKernels::GemmRoute::kGeneric);
  std::unique_ptr<DenseGemm> cublas = DenseGemm::create(*be);
  const double bandwidth = copy_bandwidth(*be);
  std::printf("copy bandwidth %.0f GB/s (read + write)\n", bandwidth * 1e-9);
  std::ofstream js;
  if (!o.json_path.empty()) js.open(o.json_path);
  std::printf("%-8s %-9s %2s %-40s %6s %9s %9s %7s %8s\n", "dtype", "direction", "l", "route",
              "check", "ms", "floor", "x", "TFLOP/s");
  bool all = true;
  for (DType t : o.dtypes)
    for (int l : o.ls)
      for (bool tr : {false, true}) {
        const std::vector<Result> rs =
            t == DType::kFloat32
                ? run_case<float>(*be, gk, generic, cublas.get(), o, l, tr, bandwidth)
                : run_case<double>(*be, gk, generic, cublas.get(), o, l, tr, bandwidth);
        for (const Result& r : rs) {
          all = all && r.pass;
          std::printf("%-8s %-9s %2d %-40s %6s %9.4f %9.4f %7.2f %8.2f\n", r.dtype.c_str(),
                      r.direction.c_str(), r.l, r.route.c_str(), r.pass ? "pass" : "FAIL",
                      r.median_ms, r.floor_ms, r.median_ms / r.floor_ms,
                      r.flops / (r.median_ms * 1e-3) * 1e-12);
          if (js.is_open())
            js << json{{"device", be->name()},
                       {"dtype", r.dtype},
                       {"direction", r.direction},
                       {"l", r.l},
                       {"rows", o.rows},
                       {"mul", o.mul},
                       {"route", r.route},
                       {"pass", r.pass},
                       {"max_rel", r.max_rel},
                       {"median_ms", r.median_ms},
                       {"byte_floor_ms", r.floor_ms},
                       {"time_over_byte_floor", r.median_ms / r.floor_ms},
                       {"tflops", r.flops / (r.median_ms * 1e-3) * 1e-12}}
                      .dump()
               << "\n";
        }
      }
  std::cout << (all ? "all routes pass\n" : "SOME ROUTES FAIL\n");
  return all ? 0 : 1;
}

}  // namespace
}  // namespace clebsch::cuda::bench

int main(int argc, char** argv) {
  try {
    return clebsch::cuda::bench::run(clebsch::cuda::bench::parse(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "bench_ir_linear: " << e.what() << "\n";
    return 2;
  }
}
