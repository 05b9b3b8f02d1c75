// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The 3xTF32 GEMM (kernels/device/tf32x3_gemm.h, kernels/templates/dense_tf32x3.cuh.in):
//   - the routing rule (host only): which GemmArgs take the tensor-core kernel (float32 plain
//     dense forms with both B layouts, from kTf32x3MinRows rows), which keep their route
//     (float64, batches, gathers, weight selection, transposed A or C, overlapping rows, k = 0),
//     which kernel and launch shape, and CLEBSCH_NO_TF32X3 / GemmRoute::kGeneric through
//     GenericKernels;
//   - TF32 rounding (cvt.rna.tf32.f32, the shim's emulation on the emulated backend) against an
//     arithmetic definition of round-to-nearest, ties away from zero;
//   - the kernel against a float64 host reference on the radial MLP's shapes scaled down and on
//     tails, both B layouts, alpha != 1, beta 0 and 1, padded and misaligned operands, with a
//     per-element float32-accuracy bound (kBoundUnits below), and a control: plain TF32 on the
//     same data breaks that bound;
//   - beta = 0 never reads C and nothing outside C's elements is written;
//   - gemm()'s timing record: kernel name, MxNxK detail and floor;
//   - on a GPU only: the radial shapes at full size (794,988 edges), checked on sampled rows.
// On the emulated backend always, on the CUDA backend when a GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "clebsch/cuda/device/cuda_driver.h"
#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/device/kernel_timing.h"
#include "clebsch/cuda/device/mlp_mma_fragments.h"
#include "clebsch/cuda/device/tf32x3_gemm.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda {
namespace {

// ---------------------------------------------------------------- host models

// TF32 rounding by its definition: keep 11 significant bits (10 explicit), the last one of weight
// ulp = 2^(max(exponent, -126) - 10), rounding to nearest with ties away from zero; 2^128 and
// above become infinity. Arithmetic in float64 (|x| / ulp has at most 13 fractional bits and
// 14 integer ones: exact), independent of the bit trick of the emulation shim.
float tf32_reference(float x) {
  if (!std::isfinite(x) || x == 0.0f) return x;
  int e = 0;
  std::frexp(x, &e);  // |x| = f 2^e, 1/2 <= f < 1: the leading bit has weight 2^(e - 1)
  const double ulp = std::ldexp(1.0, std::max(e - 1, -126) - 10);
  const double r = std::floor(std::fabs(double(x)) / ulp + 0.5) * ulp;
  return static_cast<float>(std::copysign(r, double(x)));
}

// The per-element bound a float32-accurate GEMM must meet, in units of 2^-21 |alpha| S with
// S = sum_k |A(i,k)| |B(k,j)|, plus 2^-22 |beta C0| for the final scale-and-add:
//   - the 3xTF32 split drops a_small b_small and the splits' residuals
//     (|a - a_big - a_small| <= 2^-22 |a|, likewise b): at most 3 2^-22 |a||b| a product, 1.5
//     units;
//   - float32 accumulation of the 3 k products (sequential fmas on the emulated backend, the
//     tensor core's adder on a GPU, which rounds once per MMA of 8 products, possibly toward
//     zero): the worst case of recursive summation in round-to-nearest, gamma_3k S =
//     3 k 2^-24 S, is 24 units at k = 64, so with the split 25.5 units cover every k <= 64. It
//     grows with k, while the errors of sums with terms of both signs grow like sqrt(k) (Higham
//     and Mary's probabilistic analysis); at k = 512 and 1280 the bound relies on that.
// 32 units, 2^-16 S. Measured on the emulated backend: at most 0.035 of the bound (about 1.1
// units) on every case. Plain TF32 (big * big alone) drops up to 2^-10 |a||b| a product: on the
// same random operands it breaks the bound 2.6 times over at k = 1280, 13 times at k = 64 and
// 25 times at k = 13 (the control in MatchesTheFloat64ReferenceWithinTheFloat32Bound).
constexpr double kBoundUnits = 32.0;
double bound(double alpha, double sum_abs, double beta, double c0) {
  return kBoundUnits * std::ldexp(std::fabs(alpha) * sum_abs, -21) +
         std::ldexp(std::fabs(beta * c0), -22);
}

// A plain dense GEMM as the engines call it, on buffers with room around the operands: A row-major
// with lda = k + pad_a from element off_a; B row-major (ldb = n + pad_b) or stored transposed
// (ldb = 1, b_col = k + pad_b: a weight W[n][k] read as W^T) from off_b; C row-major with
// ldc = n + pad_c from off_c.
struct Case {
  long long m, n, k;
  bool b_transposed;
  double alpha, beta;
  long long pad_a = 0, pad_b = 0, pad_c = 0, off_a = 0, off_b = 0, off_c = 0;
  bool control = false;  ///< also check that plain TF32 breaks the bound on this data

  GemmArgs args() const {
    GemmArgs g{};
    g.m = m, g.n = n, g.k = k, g.batch = 1;
    g.lda = k + pad_a, g.a_col = 1;
    if (b_transposed)
      g.ldb = 1, g.b_col = k + pad_b;
    else
      g.ldb = n + pad_b, g.b_col = 1;
    g.ldc = n + pad_c, g.c_col = 1;
    g.alpha = alpha, g.beta = beta;
    return g;
  }
  std::size_t size_a() const { return std::size_t(off_a + m * (k + pad_a)); }
  std::size_t size_b() const {
    return std::size_t(off_b + (b_transposed ? n * (k + pad_b) : k * (n + pad_b)));
  }
  std::size_t size_c() const { return std::size_t(off_c + m * (n + pad_c)); }
  long long a_at(long long i, long long l) const { return off_a + i * (k + pad_a) + l; }
  long long b_at(long long l, long long j) const {
    return off_b + (b_transposed ? j * (k + pad_b) + l : l * (n + pad_b) + j);
  }
  long long c_at(long long i, long long j) const { return off_c + i * (n + pad_c) + j; }
  std::string name() const {
    return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
           (b_transposed ? " B^T" : " B") + " alpha=" + std::to_string(alpha) +
           " beta=" + std::to_string(beta) + " pads " + std::to_string(pad_a) + "," +
           std::to_string(pad_b) + "," + std::to_string(pad_c) + " offsets " +
           std::to_string(off_a) + "," + std::to_string(off_b) + "," + std::to_string(off_c);
  }
};

// Uniform in [-1, 1) with 24 random bits (splitmix64: the full-size GPU operands are 10^9 values).
std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::uint64_t state = 0x9e3779b97f4a7c15ull * (seed + 1);
  std::vector<float> v(n);
  for (float& x : v) {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    x = std::ldexp(float(z >> 40), -23) - 1.0f;
  }
  return v;
}

// The worst element of C (rows @p rows) against the float64 reference, in units of the bound;
// with @p tf32_only, the same for a plain TF32 GEMM modelled on the host (TF32 operands, exact
// products summed in float64: what a single TF32 MMA per product would give before its own
// float32 accumulation).
struct Worst {
  double ratio = 0, error = 0;
  long long i = -1, j = -1;
};
Worst worst(const Case& c, const std::vector<float>& A, const std::vector<float>& B,
            const std::vector<float>& C0, const std::vector<float>& C,
            const std::vector<long long>& rows, bool tf32_only = false) {
  Worst w;
  std::vector<long double> ref(std::size_t(c.n)), abs(std::size_t(c.n)), one(std::size_t(c.n));
  for (long long i : rows) {
    std::fill(ref.begin(), ref.end(), 0.0L);
    std::fill(abs.begin(), abs.end(), 0.0L);
    std::fill(one.begin(), one.end(), 0.0L);
    for (long long l = 0; l < c.k; ++l) {
      const float a = A[std::size_t(c.a_at(i, l))], ta = tf32_reference(a);
      for (long long j = 0; j < c.n; ++j) {
        const float b = B[std::size_t(c.b_at(l, j))];
        ref[std::size_t(j)] += (long double)a * b;
        abs[std::size_t(j)] += std::fabs((long double)a * b);
        if (tf32_only) one[std::size_t(j)] += (long double)ta * tf32_reference(b);
      }
    }
    for (long long j = 0; j < c.n; ++j) {
      const double c0 = c.beta != 0.0 ? double(C0[std::size_t(c.c_at(i, j))]) : 0.0;
      const double r = c.alpha * double(ref[std::size_t(j)]) + c.beta * c0;
      const double got = tf32_only ? c.alpha * double(one[std::size_t(j)]) + c.beta * c0
                                   : double(C[std::size_t(c.c_at(i, j))]);
      const double e = std::isfinite(got) ? std::fabs(got - r) : HUGE_VAL;
      const double b = bound(c.alpha, double(abs[std::size_t(j)]), c.beta, c0);
      const double q = e == 0.0 ? 0.0 : (b > 0.0 ? e / b : HUGE_VAL);
      if (q > w.ratio || w.i < 0) w = {q, e, i, j};
    }
  }
  return w;
}

// ---------------------------------------------------------------- routing rule (host only)

GemmArgs dense_f32(long long m, long long n, long long k) {
  static float h = 0;
  return GenericKernels::dense(&h, &h, &h, m, n, k);
}

TEST(Tf32x3Route, Float32PlainDenseFormsRouteWithEitherBLayout) {
  const long long m = kTf32x3MinRows;
  // The radial MLP's last layer (x W) and its backward (g W^T: W[64][1280] read transposed).
  GemmArgs g = dense_f32(m, 1280, 64);
  EXPECT_TRUE(tf32x3_route(DType::kFloat32, g));
  std::optional<Tf32x3Plan> p = plan_tf32x3_gemm(DType::kFloat32, g);
  ASSERT_TRUE(p);
  EXPECT_STREQ(p->kernel->name, "clebsch_gemm_tf32x3_128x128_nn");
  g = dense_f32(m, 64, 1280);
  g.ldb = 1, g.b_col = 1280;
  EXPECT_TRUE(tf32x3_route(DType::kFloat32, g));
  p = plan_tf32x3_gemm(DType::kFloat32, g);
  ASSERT_TRUE(p);
  EXPECT_STREQ(p->kernel->name, "clebsch_gemm_tf32x3_128x64_nt");
  // Padded leading dimensions, any alpha and beta, odd sizes.
  g = dense_f32(m + 3, 37, 13);
  g.lda = 20, g.ldb = 41, g.ldc = 39, g.alpha = -0.5, g.beta = 1.0;
  EXPECT_TRUE(tf32x3_route(DType::kFloat32, g));
  // A single column of B needs no stride between columns; a single k-row none between rows.
  g = dense_f32(m, 1, 8);
  g.b_col = 99;
  EXPECT_TRUE(tf32x3_route(DType::kFloat32, g));
  g = dense_f32(m, 8, 1);
  g.ldb = 5, g.b_col = 3;
  ASSERT_TRUE(tf32x3_route(DType::kFloat32, g));
  EXPECT_TRUE(plan_tf32x3_gemm(DType::kFloat32, g)->kernel->b_transposed);
}

TEST(Tf32x3Route, OtherFormsKeepTheirRoute) {
  const long long m = kTf32x3MinRows;
  const GemmArgs base = dense_f32(m, 64, 64);
  ASSERT_TRUE(tf32x3_route(DType::kFloat32, base));
  EXPECT_FALSE(tf32x3_route(DType::kFloat64, base));  // float64 stays exact (cuBLAS, generic)
  // Fewer rows: the form is taken (gemm_tf32x3 runs it), the routing rule leaves it.
  GemmArgs g = dense_f32(m - 1, 64, 64);
  EXPECT_TRUE(plan_tf32x3_gemm(DType::kFloat32, g));
  EXPECT_FALSE(tf32x3_route(DType::kFloat32, g));
  int idx = 0;
  g = base, g.a_rows = &idx;
  EXPECT_FALSE(tf32x3_route(DType::kFloat32, g));
  g = base, g.c_rows = &idx;
  EXPECT_FALSE(tf32x3_route(DType::kFloat32, g));
  g = base, g.b_select = &idx, g.b_select_stride = 64 * 64;  // species-selected weights
  EXPECT_FALSE(tf32x3_route(DType::kFloat32, g));
  g = base, g.batch = 3, g.a_batch = 1, g.c_batch = 1, g.a_col = 3, g.c_col = 3;  // per-m linear
  EXPECT_FALSE(tf32x3_route(DType::kFloat32, g));
  g = base, g.batch = 2, g.a_batch = m * 64, g.c_batch = m * 64;  // whole-matrix batch
  EXPECT_FALSE(tf32x3_route(DType::kFloat32, g));
  g = base, g.lda = 1, g.a_col = m;  // A transposed
  EXPECT_FALSE(tf32x3_route(DType::kFloat32, g));
  g = base, g.ldc = 1, g.c_col = m;  // C transposed
  EXPECT_FALSE(tf32x3_route(DType::kFloat32, g));
  g = base, g.ldb = 3 * 64, g.b_col = 3;  // no unit stride in B (an l = 1 block)
  EXPECT_FALSE(tf32x3_route(DType::kFloat32, g));
  g = base, g.lda = 32;  // overlapping rows
  EXPECT_FALSE(tf32x3_route(DType::kFloat32, g));
  g = base, g.ldc = 63;
  EXPECT_FALSE(tf32x3_route(DType::kFloat32, g));
  g = base, g.ldb = 16;
  EXPECT_FALSE(tf32x3_route(DType::kFloat32, g));
  g = base, g.ldb = 1, g.b_col = 32;
  EXPECT_FALSE(tf32x3_route(DType::kFloat32, g));
  g = base, g.lda = -64;  // rows running backwards
  EXPECT_FALSE(tf32x3_route(DType::kFloat32, g));
  g = base, g.k = 0;  // DeviceLinear's block zeroing
  EXPECT_FALSE(tf32x3_route(DType::kFloat32, g));
  g = base, g.n = 0;
  EXPECT_FALSE(tf32x3_route(DType::kFloat32, g));
  g = base, g.c = nullptr;
  EXPECT_FALSE(tf32x3_route(DType::kFloat32, g));
}

TEST(Tf32x3Route, LaunchShapeCoversEveryTileInOneGridDimension) {
  // 794,988 edges: 6,211 row tiles, 10 column tiles of 128.
  std::optional<Tf32x3Plan> p = plan_tf32x3_gemm(DType::kFloat32, dense_f32(794988, 1280, 64));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->dims.grid_x, 6211u * 10u);
  EXPECT_EQ(p->dims.grid_y, 1u);
  EXPECT_EQ(p->dims.threads, 256u);
  EXPECT_EQ(p->dims.shared_bytes, p->kernel->shared_bytes());
  // n <= 64: the 128 x 64 tile, 4 warps; n = 65: two 128-wide column tiles.
  p = plan_tf32x3_gemm(DType::kFloat32, dense_f32(130, 64, 1280));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->kernel->bn, 64);
  EXPECT_EQ(p->dims.grid_x, 2u);
  EXPECT_EQ(p->dims.threads, 128u);
  p = plan_tf32x3_gemm(DType::kFloat32, dense_f32(130, 65, 8));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->kernel->bn, 128);
  EXPECT_EQ(p->dims.grid_x, 2u);
  // More tiles than one grid dimension holds: not taken.
  EXPECT_FALSE(plan_tf32x3_gemm(DType::kFloat32, dense_f32(1LL << 40, 1280, 64)));
}

TEST(Tf32x3Route, EveryKernelFitsTwoBlocksAnSmAndIsInTheGenericModule) {
  const std::string src = generic_kernels_source();
  const std::vector<KernelSpec> specs = generic_kernel_specs();
  for (const Tf32x3Kernel& k : tf32x3_kernels()) {
    SCOPED_TRACE(k.name);
    // 2 x (bytes + 1 KB reserved) within an H100/H200 SM's 228 KB.
    EXPECT_LE(2 * (k.shared_bytes() + 1024), 228u * 1024u);
    EXPECT_LE(k.threads() * 2, 512);
    EXPECT_NE(src.find(std::string("CLEBSCH_TF32X3_KERNEL(") + k.name + ","), std::string::npos);
    const auto s = std::find_if(specs.begin(), specs.end(),
                                [&](const KernelSpec& x) { return x.name == k.name; });
    ASSERT_NE(s, specs.end());
    EXPECT_TRUE(s->warp_synchronous);
    EXPECT_EQ(s->max_shared_bytes, k.shared_bytes());
  }
}

TEST(Tf32x3Route, BesideCublasTheWideFormsAndTheLongTransposedOnes) {
  // The radial MLP's last layer and its backward g W^T (W[64][1280] read transposed).
  EXPECT_TRUE(tf32x3_beside_cublas(dense_f32(794988, 1280, 64)));
  EXPECT_TRUE(tf32x3_beside_cublas(dense_f32(794988, kTf32x3MinColumnsBesideCublas, 64)));
  GemmArgs g = dense_f32(794988, 64, 1280);
  g.ldb = 1, g.b_col = 1280;
  EXPECT_TRUE(tf32x3_beside_cublas(g));
  g = dense_f32(794988, 64, kTf32x3MinDepthBesideCublas);
  g.ldb = 1, g.b_col = kTf32x3MinDepthBesideCublas;
  EXPECT_TRUE(tf32x3_beside_cublas(g));
  // Narrow with B row-major, shallow transposed, narrow and shallow: cuBLAS.
  EXPECT_FALSE(tf32x3_beside_cublas(dense_f32(794988, 64, 1280)));
  g = dense_f32(794988, 64, kTf32x3MinDepthBesideCublas - 1);
  g.ldb = 1, g.b_col = kTf32x3MinDepthBesideCublas - 1;
  EXPECT_FALSE(tf32x3_beside_cublas(g));
  EXPECT_FALSE(tf32x3_beside_cublas(dense_f32(794988, 64, 64)));
}

TEST(Tf32x3Route, EnvironmentVariableIsReadAsAFlag) {
  const char* old = std::getenv("CLEBSCH_NO_TF32X3");
  const std::string saved = old ? old : "";
  unsetenv("CLEBSCH_NO_TF32X3");
  EXPECT_FALSE(tf32x3_disabled_by_env());
  setenv("CLEBSCH_NO_TF32X3", "0", 1);
  EXPECT_FALSE(tf32x3_disabled_by_env());
  setenv("CLEBSCH_NO_TF32X3", "", 1);
  EXPECT_FALSE(tf32x3_disabled_by_env());
  setenv("CLEBSCH_NO_TF32X3", "1", 1);
  EXPECT_TRUE(tf32x3_disabled_by_env());
  if (old)
    setenv("CLEBSCH_NO_TF32X3", saved.c_str(), 1);
  else
    unsetenv("CLEBSCH_NO_TF32X3");
}

// ---------------------------------------------------------------- on a backend

class Tf32x3Gemm : public ::testing::TestWithParam<std::string> {
 public:
  void SetUp() override {
    if (GetParam() == "cuda" && !device_available()) GTEST_SKIP() << "no CUDA device";
    backend_ = GetParam() == "emulated" ? make_emulated_backend() : make_cuda_backend(0);
  }
  std::unique_ptr<DeviceBackend> backend_;
};

// y = clebsch_tf32_round(x) elementwise, in a module of the generic source (which holds the
// device version; the emulated backend's shim holds its own).
struct RoundArgs {
  const float* x;
  float* y;
  long long n;
};

TEST_P(Tf32x3Gemm, Tf32RoundingIsNearestWithTiesAwayFromZero) {
  DeviceBackend& be = *backend_;
  const std::string src = generic_kernels_source() + R"(
struct RoundArgs { const float* x; float* y; long long n; };
extern "C" __global__ void tf32_round_test(RoundArgs a) {
  CLEBSCH_GRID_LOOP(i, a.n) a.y[i] = clebsch_tf32_round(a.x[i]);
}
)";
  std::vector<KernelSpec> specs = generic_kernel_specs();
  specs.push_back({"tf32_round_test", "RoundArgs", false, 0});
  const std::unique_ptr<DeviceModule> mod = be.load({"tf32_round_test.cu", src, specs});
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.0f, FLT_MAX, -FLT_MAX, 3.0e38f, FLT_MIN};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-120, 120);
  for (int t = 0; t < 4000; ++t) {
    const float v = std::ldexp(u(rng), ex(rng)) * (t % 2 ? -1.0f : 1.0f);
    x.push_back(v);
    // The tie above a TF32 value and its float32 neighbours: half its ulp added.
    const float t32 = tf32_reference(v);
    int e = 0;
    std::frexp(t32, &e);
    const float tie = t32 + std::copysign(std::ldexp(1.0f, e - 12), t32);
    x.push_back(tie);
    x.push_back(std::nextafter(tie, 0.0f));
    x.push_back(std::nextafter(tie, tie * 2.0f));
  }
  DeviceArray<float> dx(be), dy(be, x.size());
  dx.upload(x);
  be.launch(mod->kernel("tf32_round_test"), grid_for((long long)x.size()), nullptr,
            RoundArgs{dx.data(), dy.data(), (long long)x.size()});
  const std::vector<float> y = dy.download();
  int bad = 0;
  for (std::size_t i = 0; i < x.size() && bad < 5; ++i) {
    const float want = tf32_reference(x[i]);
    if (std::memcmp(&want, &y[i], sizeof want) != 0) {
      ++bad;
      ADD_FAILURE() << "tf32(" << x[i] << ") = " << y[i] << ", expected " << want;
    }
    // The host rounding that splits the MLP chains' packed weights (mlp_mma_fragments.h) must
    // be the device's, bit for bit.
    const float host = tf32_round_host(x[i]);
    if (std::memcmp(&host, &y[i], sizeof host) != 0) {
      ++bad;
      ADD_FAILURE() << "tf32_round_host(" << x[i] << ") = " << host << ", device " << y[i];
    }
  }
  // The definition itself, on cases worked out by hand: ties go away from zero.
  EXPECT_EQ(tf32_reference(1.0f + std::ldexp(1.0f, -11)), 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(tf32_reference(-1.0f - std::ldexp(1.0f, -11)), -1.0f - std::ldexp(1.0f, -10));
  EXPECT_EQ(tf32_reference(1.0f + std::ldexp(1.0f, -12)), 1.0f);
  EXPECT_EQ(tf32_reference(FLT_MAX), std::numeric_limits<float>::infinity());
}

// The radial MLP's shapes scaled down (794,988 edges -> 1000 and 777 rows; n = 1280, 512 and 37;
// k = 64, 8 and 13; the backward's k = 1280 and 512 with W read transposed), row and column
// tails, padded leading dimensions (odd pads take the element-wise copies and stores), operands
// off 16-byte alignment, alpha != 1, beta 0 and 1.
std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({1000, 1280, 64, false, 1.0, 0.0});  // forward, last layer
  c.back().control = true;
  c.push_back({1000, 64, 1280, true, 1.0, 0.0});  // its backward, g W^T
  c.back().control = true;
  c.push_back({777, 512, 64, false, 0.75, 1.0, 3, 0, 5});  // unaligned A rows, odd ldc
  c.push_back({777, 64, 512, true, -1.5, 1.0, 4, 4, 2});   // padded, aligned
  c.push_back({1000, 37, 13, false, 1.0, 1.0, 0, 2, 1, 0, 0, 3});
  c.back().control = true;
  c.push_back({777, 1280, 8, true, 2.0, 0.0, 0, 0, 0, 1, 0, 0});  // A off 16-byte alignment
  c.push_back({777, 37, 13, true, 0.5, 0.0, 1, 1, 0, 0, 1, 0});   // B off alignment
  c.push_back({130, 65, 33, false, 1.0, 1.0, 0, 0, 0, 0, 0, 0});  // tails in m, n (wide), k
  c.push_back({129, 63, 31, true, 1.0, 0.0});                     // tails, narrow
  // More K slices than pipeline stages (3), the last one short: a reused stage's
  // stale columns past k must have been zero-filled.
  c.push_back({200, 150, 101, false, 1.0, 0.0});
  c.push_back({200, 50, 133, true, 1.0, 0.0, 1, 0, 0});
  c.push_back({5, 3, 2, true, -1.0, 1.0});
  c.push_back({1, 1, 1, false, 1.0, 0.0});
  return c;
}

// Runs @p c through gemm_tf32x3 on random operands; C's buffer poisoned (NaN) when beta == 0,
// random when not. Every element of C within the bound, every other element of its buffer
// untouched (bitwise).
void expect_case(DeviceBackend& be, const GenericKernels& gk, const Case& c, unsigned seed,
                 double* worst_ratio) {
  SCOPED_TRACE(c.name());
  const std::vector<float> A = random_floats(c.size_a(), seed),
                           B = random_floats(c.size_b(), seed + 1);
  std::vector<float> C0 = random_floats(c.size_c(), seed + 2);
  if (c.beta == 0.0) std::fill(C0.begin(), C0.end(), std::numeric_limits<float>::quiet_NaN());
  DeviceArray<float> dA(be), dB(be), dC(be);
  dA.upload(A), dB.upload(B), dC.upload(C0);
  GemmArgs g = c.args();
  g.a = dA.data() + c.off_a, g.b = dB.data() + c.off_b, g.c = dC.data() + c.off_c;
  gk.gemm_tf32x3(g, nullptr);
  const std::vector<float> C = dC.download();
  std::vector<long long> rows(std::size_t(c.m));
  for (long long i = 0; i < c.m; ++i) rows[std::size_t(i)] = i;
  const Worst w = worst(c, A, B, C0, C, rows);
  EXPECT_LE(w.ratio, 1.0) << "C(" << w.i << ", " << w.j << ") off by " << w.error;
  *worst_ratio = std::max(*worst_ratio, w.ratio);
  std::vector<char> inside(C.size(), 0);
  for (long long i = 0; i < c.m; ++i)
    for (long long j = 0; j < c.n; ++j) inside[std::size_t(c.c_at(i, j))] = 1;
  long long touched = 0;
  for (std::size_t e = 0; e < C.size(); ++e)
    if (!inside[e] && std::memcmp(&C[e], &C0[e], sizeof(float)) != 0) ++touched;
  EXPECT_EQ(touched, 0) << "elements outside C written";
  if (c.control) {
    const Worst one = worst(c, A, B, C0, C, rows, true);
    std::cout << "      " << c.name() << ": 3xTF32 max error / bound " << w.ratio
              << ", plain TF32 would be " << one.ratio << "\n";
    EXPECT_GT(one.ratio, 2.0) << "the bound would not catch plain TF32 here";
  }
}

TEST_P(Tf32x3Gemm, MatchesTheFloat64ReferenceWithinTheFloat32Bound) {
  GenericKernels gk(*backend_);
  double worst_ratio = 0;
  unsigned seed = 100;
  for (const Case& c : cases()) {
    expect_case(*backend_, gk, c, seed += 10, &worst_ratio);
    if (HasFailure()) return;
  }
  std::cout << "      worst error / bound over the cases: " << worst_ratio << "\n";
}

// gemm() takes the route with its record (kernel name, MxNxK detail, the GEMM's floor); fewer
// rows, float64, GemmRoute::kGeneric and CLEBSCH_NO_TF32X3=1 keep the old route.
TEST_P(Tf32x3Gemm, GemmRoutesWithItsTimingRecordAndTheOverridesRestoreTheOldRoute) {
  DeviceBackend& be = *backend_;
  // n = kTf32x3MinColumnsBesideCublas: a form gemm() routes on every backend.
  const long long m = kTf32x3MinRows + 44, n = kTf32x3MinColumnsBesideCublas, k = 64;
  DeviceArray<float> A(be), B(be), C(be, std::size_t(m * n));
  A.upload(random_floats(std::size_t(m * k), 1));
  B.upload(random_floats(std::size_t(k * n), 2));
  DeviceArray<double> A64(be, std::size_t(m * k)), B64(be, std::size_t(k * n)),
      C64(be, std::size_t(m * n));
  const char* old = std::getenv("CLEBSCH_NO_TF32X3");
  const std::string saved = old ? old : "";
  unsetenv("CLEBSCH_NO_TF32X3");
  GenericKernels routed(be), generic(be, GenericKernels::GemmRoute::kGeneric);
  setenv("CLEBSCH_NO_TF32X3", "1", 1);
  GenericKernels forced(be);
  if (old)
    setenv("CLEBSCH_NO_TF32X3", saved.c_str(), 1);
  else
    unsetenv("CLEBSCH_NO_TF32X3");
  EXPECT_TRUE(routed.uses_tf32x3());
  EXPECT_FALSE(generic.uses_tf32x3());
  EXPECT_FALSE(forced.uses_tf32x3());

  auto record = [&](const GenericKernels& gk, DType t, const GemmArgs& g) {
    be.set_kernel_timing(true);
    gk.gemm(t, g, nullptr);
    std::vector<KernelTiming> r = be.take_kernel_timings();
    be.set_kernel_timing(false);
    EXPECT_EQ(r.size(), 1u);
    return r.empty() ? KernelTiming{} : r[0];
  };
  const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x64";
  GemmArgs g = GenericKernels::dense(A.data(), B.data(), C.data(), m, n, k, 1.0, 1.0);
  KernelTiming t = record(routed, DType::kFloat32, g);
  EXPECT_EQ(t.name, "clebsch_gemm_tf32x3_128x128_nn " + shape);
  EXPECT_EQ(t.threads, 256u);
  // Fewer columns: the 3xTF32 kernel where cuBLAS is missing (the emulated backend), cuBLAS
  // where it loads (measured no faster there, run 28).
  const GemmArgs narrow = GenericKernels::dense(A.data(), B.data(), C.data(), m, 64, k);
  EXPECT_EQ(record(routed, DType::kFloat32, narrow).name,
            std::string(be.emulated() ? "clebsch_gemm_tf32x3_128x64_nn " : "cublas sgemm ") +
                std::to_string(m) + "x64x64");
  // A, B and C once, C read too (beta = 1); 2 m n k flops.
  EXPECT_DOUBLE_EQ(t.floor.bytes, 4.0 * double(m * k + k * n + 2 * m * n));
  EXPECT_DOUBLE_EQ(t.floor.flops, 2.0 * double(m * n * k));
  // The old route: cuBLAS on a GPU, the generic kernel on the emulated backend.
  const std::string old_route = be.emulated() ? "clebsch_gemm_f32 " : "cublas sgemm ";
  EXPECT_EQ(record(forced, DType::kFloat32, g).name, old_route + shape);
  EXPECT_EQ(record(generic, DType::kFloat32, g).name, "clebsch_gemm_f32 " + shape);
  const GemmArgs few =
      GenericKernels::dense(A.data(), B.data(), C.data(), kTf32x3MinRows - 1, n, k);
  EXPECT_EQ(record(routed, DType::kFloat32, few).name,
            old_route + std::to_string(kTf32x3MinRows - 1) + "x" + std::to_string(n) + "x64");
  const GemmArgs f64 = GenericKernels::dense(A64.data(), B64.data(), C64.data(), m, n, k);
  EXPECT_EQ(record(routed, DType::kFloat64, f64).name,
            (be.emulated() ? "clebsch_gemm_f64 " : "cublas dgemm ") + shape);
  // gemm_tf32x3 refuses a form it cannot run.
  GemmArgs t_a = g;
  t_a.lda = 1, t_a.a_col = m;
  EXPECT_THROW(routed.gemm_tf32x3(t_a, nullptr), Error);
}

// On a GPU: the radial MLP's GEMMs at full size (794,988 edges: 62,110 and 6,211 blocks), all of C
// finite and sampled rows (spread over the blocks, the last one included) within the bound.
TEST_P(Tf32x3Gemm, RadialShapesAtFullSize) {
  if (backend_->emulated()) GTEST_SKIP() << "hours on the emulated backend";
  GenericKernels gk(*backend_);
  double worst_ratio = 0;
  for (const Case& c :
       {Case{794988, 1280, 64, false, 1.0, 0.0}, Case{794988, 64, 1280, true, 1.0, 0.0}}) {
    SCOPED_TRACE(c.name());
    const std::vector<float> A = random_floats(c.size_a(), 7), B = random_floats(c.size_b(), 8);
    DeviceArray<float> dA(*backend_), dB(*backend_), dC(*backend_, c.size_c());
    dA.upload(A), dB.upload(B);
    dC.poison();
    GemmArgs g = c.args();
    g.a = dA.data(), g.b = dB.data(), g.c = dC.data();
    // (The route needs the operands: a form without pointers is no GEMM to run.)
    ASSERT_TRUE(tf32x3_route(DType::kFloat32, g));
    gk.gemm(DType::kFloat32, g, nullptr);
    const std::vector<float> C = dC.download();
    long long bad = 0;
    for (float v : C) bad += std::isfinite(v) ? 0 : 1;
    EXPECT_EQ(bad, 0) << "elements not finite (never written?)";
    std::vector<long long> rows;
    for (long long i = 0; i < c.m; i += 797) rows.push_back(i);
    rows.push_back(c.m - 1);
    const Worst w = worst(c, A, B, {}, C, rows);
    EXPECT_LE(w.ratio, 1.0) << "C(" << w.i << ", " << w.j << ") off by " << w.error;
    worst_ratio = std::max(worst_ratio, w.ratio);
  }
  std::cout << "      worst error / bound: " << worst_ratio << "\n";
}

INSTANTIATE_TEST_SUITE_P(Backends, Tf32x3Gemm, ::testing::Values("emulated", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace clebsch::cuda
