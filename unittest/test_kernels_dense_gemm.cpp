// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The cuBLAS route of GenericKernels::gemm (kernels/device/dense_gemm.h, kernels/device/cublas_loader.h):
//   - the loader fails cleanly (an error, no crash) when the library is missing or is not cuBLAS;
//   - the routing rule: which GemmArgs become a cuBLAS call, and that the row-major ->
//     column-major mapping is right, checked on the host by evaluating the planned column-major
//     call against the GemmArgs definition (no GPU needed);
//   - the emulated backend always uses the generic kernel;
//   - on a GPU: the cuBLAS route against the generic kernel on random dense GEMMs of every layout
//     the engines use (fp64 1e-12, fp32 1e-5 relative), beta = 0 never reading C, and
//     CLEBSCH_NO_CUBLAS=1 forcing the generic kernel.
// Suites are named GenericKernels* so the engine test filter picks them up.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>

#include "clebsch/cuda/device/cublas_loader.h"
#include "clebsch/cuda/device/cuda_driver.h"
#include "clebsch/cuda/device/dense_gemm.h"
#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/generic_kernels.h"

namespace clebsch::cuda {
namespace {

// ---------------------------------------------------------------- loader

TEST(GenericKernelsCublasLoader, MissingLibraryNamedByEnvFailsCleanly) {
  const char* old = std::getenv("CLEBSCH_CUBLAS_LIBRARY");
  const std::string saved = old ? old : "";
  setenv("CLEBSCH_CUBLAS_LIBRARY", "/nonexistent/dir/libcublas.so.13", 1);
  const std::vector<std::string> c = cublas_candidates();
  if (old)
    setenv("CLEBSCH_CUBLAS_LIBRARY", saved.c_str(), 1);
  else
    unsetenv("CLEBSCH_CUBLAS_LIBRARY");
  // A named file is the only candidate: no silent substitute.
  ASSERT_EQ(c, std::vector<std::string>{"/nonexistent/dir/libcublas.so.13"});
  const CublasLoad l = load_cublas(c);
  EXPECT_FALSE(l.ok());
  EXPECT_NE(l.error.find("/nonexistent/dir/libcublas.so.13"), std::string::npos) << l.error;
  EXPECT_NE(l.error.find("generic GEMM kernel"), std::string::npos) << l.error;
  EXPECT_EQ(l.api.Create, nullptr);
}

TEST(GenericKernelsCublasLoader, LibraryWithoutCublasSymbolsIsRefused) {
  const CublasLoad l = load_cublas({"libm.so.6"});
  EXPECT_FALSE(l.ok());
  EXPECT_NE(l.error.find("lacks cublasCreate_v2"), std::string::npos) << l.error;
  EXPECT_FALSE(load_cublas({}).ok());
}

TEST(GenericKernelsCublasLoader, DefaultCandidatesResolveEverySymbolWhenPresent) {
  const char* env = std::getenv("CLEBSCH_CUBLAS_LIBRARY");
  if (env && *env) GTEST_SKIP() << "CLEBSCH_CUBLAS_LIBRARY is set";
  const std::vector<std::string> c = cublas_candidates();
  ASSERT_GE(c.size(), 2u);
  EXPECT_EQ(c[0], "libcublas.so.13");
  EXPECT_EQ(c[1], "libcublas.so");
  const CublasLoad l = load_cublas(c);
  if (!l.ok()) GTEST_SKIP() << l.error;
  EXPECT_NE(l.api.Create, nullptr);
  EXPECT_NE(l.api.Destroy, nullptr);
  EXPECT_NE(l.api.SetStream, nullptr);
  EXPECT_NE(l.api.SetMathMode, nullptr);
  EXPECT_NE(l.api.Dgemm, nullptr);
  EXPECT_NE(l.api.Sgemm, nullptr);
}

// ---------------------------------------------------------------- GEMM cases

// A GEMM of the engines' layouts: each operand row-major (unit column stride) or transposed
// (unit row stride), with padded leading dimensions.
struct Case {
  long long m, n, k;
  bool a_t, b_t, c_t;
  long long pad;
  double alpha, beta;
};

struct Layout {
  long long lda, a_col, ldb, b_col, ldc, c_col, size_a, size_b, size_c;
};
Layout layout(const Case& c) {
  Layout l{};
  if (!c.a_t) l.lda = c.k + c.pad, l.a_col = 1, l.size_a = c.m * l.lda;
  else l.lda = 1, l.a_col = c.m + c.pad, l.size_a = c.k * l.a_col;
  if (!c.b_t) l.ldb = c.n + c.pad, l.b_col = 1, l.size_b = c.k * l.ldb;
  else l.ldb = 1, l.b_col = c.k + c.pad, l.size_b = c.n * l.b_col;
  if (!c.c_t) l.ldc = c.n + c.pad, l.c_col = 1, l.size_c = c.m * l.ldc;
  else l.ldc = 1, l.c_col = c.m + c.pad, l.size_c = c.n * l.c_col;
  return l;
}
GemmArgs args(const Case& c, const void* A, const void* B, void* C) {
  const Layout l = layout(c);
  GemmArgs g{};
  g.a = A, g.b = B, g.c = C;
  g.m = c.m, g.n = c.n, g.k = c.k, g.batch = 1;
  g.lda = l.lda, g.a_col = l.a_col, g.ldb = l.ldb, g.b_col = l.b_col;
  g.ldc = l.ldc, g.c_col = l.c_col;
  g.alpha = c.alpha, g.beta = c.beta;
  return g;
}

// The GemmArgs definition on the host (generic_kernels.cuh.in's clebsch_gemm, batch 1).
std::vector<double> reference(const GemmArgs& g, const std::vector<double>& A,
                              const std::vector<double>& B, std::vector<double> C) {
  for (long long i = 0; i < g.m; ++i)
    for (long long j = 0; j < g.n; ++j) {
      long double acc = 0;
      for (long long k = 0; k < g.k; ++k)
        acc += (long double)A[i * g.lda + k * g.a_col] * B[k * g.ldb + j * g.b_col];
      double& c = C[i * g.ldc + j * g.c_col];
      c = g.alpha * double(acc) + (g.beta != 0 ? g.beta * c : 0.0);
    }
  return C;
}

// A planned cuBLAS call evaluated on the host with cuBLAS's column-major definition.
std::vector<double> evaluate(const CublasGemmPlan& p, const std::vector<double>& A,
                             const std::vector<double>& B, std::vector<double> C,
                             const GemmArgs& g) {
  // The plan's pointers are the GemmArgs' ones: map them back to the host vectors.
  auto host = [&](const void* ptr) -> const std::vector<double>& {
    if (ptr == g.a) return A;
    if (ptr == g.b) return B;
    throw std::runtime_error("plan operand is neither A nor B");
  };
  const std::vector<double>& PA = host(p.a);
  const std::vector<double>& PB = host(p.b);
  EXPECT_EQ(p.c, g.c);
  for (int i = 0; i < p.m; ++i)
    for (int j = 0; j < p.n; ++j) {
      long double acc = 0;
      for (int l = 0; l < p.k; ++l) {
        const double a = p.trans_a ? PA.at(l + (long long)i * p.lda) : PA.at(i + (long long)l * p.lda);
        const double b = p.trans_b ? PB.at(j + (long long)l * p.ldb) : PB.at(l + (long long)j * p.ldb);
        acc += (long double)a * b;
      }
      double& c = C.at(i + (long long)j * p.ldc);
      c = p.alpha * double(acc) + (p.beta != 0 ? p.beta * c : 0.0);
    }
  return C;
}

std::vector<double> random_vector(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = u(rng);
  return v;
}

double max_rel(const std::vector<double>& x, const std::vector<double>& ref) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(x[i])) return std::numeric_limits<double>::infinity();
    err = std::max(err, std::abs(x[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return err / std::max(scale, 1e-300);
}

// Every layout combination, square-ish and MLP-shaped (rows >> widths; the radial MLP's
// forward x W and backward g W^T), beta 0 and 1, with and without padding.
std::vector<Case> cases(bool large) {
  std::vector<Case> out;
  const long long shapes[][3] = {{7, 5, 3}, {1, 9, 4}, {6, 1, 8}, {5, 4, 1}, {33, 17, 29}};
  for (auto& s : shapes)
    for (int bits = 0; bits < 8; ++bits)
      for (double beta : {0.0, 1.0})
        out.push_back({s[0], s[1], s[2], bool(bits & 1), bool(bits & 2), bool(bits & 4),
                       (bits & 1) ? 2 : 0, 0.75, beta});
  if (large) {
    out.push_back({50000, 64, 10, false, false, false, 0, 1.0, 0.0});   // MLP layer 0
    out.push_back({50000, 64, 64, false, false, false, 0, 1.0, 0.0});   // MLP hidden
    out.push_back({50000, 1536, 64, false, false, false, 0, 1.0, 0.0}); // MLP last
    out.push_back({50000, 64, 1536, false, true, false, 0, 1.0, 0.0});  // backward g W^T
    out.push_back({10000, 128, 128, false, false, false, 384, 1.0, 1.0}); // l=0 linear block
  }
  return out;
}

std::string name(const Case& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
         " a_t=" + std::to_string(c.a_t) + " b_t=" + std::to_string(c.b_t) +
         " c_t=" + std::to_string(c.c_t) + " pad=" + std::to_string(c.pad) +
         " beta=" + std::to_string(c.beta);
}

// ---------------------------------------------------------------- routing rule (host only)

TEST(GenericKernelsCublasRoute, PlanMatchesGemmDefinitionOnHost) {
  for (const Case& c : cases(false)) {
    SCOPED_TRACE(name(c));
    const Layout l = layout(c);
    const std::vector<double> A = random_vector(l.size_a, 1), B = random_vector(l.size_b, 2),
                              C0 = random_vector(l.size_c, 3);
    std::vector<double> C = C0;
    const GemmArgs g = args(c, A.data(), B.data(), C.data());
    const std::optional<CublasGemmPlan> p = plan_cublas_gemm(g);
    ASSERT_TRUE(p.has_value());
    EXPECT_LE(max_rel(evaluate(*p, A, B, C0, g), reference(g, A, B, C0)), 1e-14);
  }
}

TEST(GenericKernelsCublasRoute, DenseAndMlpBackwardMapToOneCall) {
  double A = 0, B = 0, C = 0;
  // Row-major C = A B -> column-major C^T = B^T A^T: B first, no transposes.
  GemmArgs d = GenericKernels::dense(&A, &B, &C, 1000, 64, 10);
  auto p = plan_cublas_gemm(d);
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->trans_a);
  EXPECT_FALSE(p->trans_b);
  EXPECT_EQ(p->a, &B);
  EXPECT_EQ(p->b, &A);
  EXPECT_EQ(p->m, 64);
  EXPECT_EQ(p->n, 1000);
  EXPECT_EQ(p->k, 10);
  EXPECT_EQ(p->lda, 64);
  EXPECT_EQ(p->ldb, 10);
  EXPECT_EQ(p->ldc, 64);
  // DeviceMlp::backward: gx = g W^T with B(k, j) = W[j][k] (ldb = 1, b_col = h_out).
  GemmArgs bw = GenericKernels::dense(&A, &B, &C, 1000, 10, 64);
  bw.ldb = 1, bw.b_col = 64;
  p = plan_cublas_gemm(bw);
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->trans_a);
  EXPECT_FALSE(p->trans_b);
  EXPECT_EQ(p->lda, 64);
}

TEST(GenericKernelsCublasRoute, GathersSelectionBatchesAndStridedBlocksStayGeneric) {
  double A = 0, B = 0, C = 0;
  int idx = 0;
  const GemmArgs base = GenericKernels::dense(&A, &B, &C, 100, 8, 8);
  GemmArgs g = base;
  g.a_rows = &idx;
  EXPECT_FALSE(plan_cublas_gemm(g));
  g = base, g.c_rows = &idx;
  EXPECT_FALSE(plan_cublas_gemm(g));
  g = base, g.b_select = &idx, g.b_select_stride = 64;  // species-selected linear
  EXPECT_FALSE(plan_cublas_gemm(g));
  g = base, g.batch = 3, g.a_batch = 1, g.c_batch = 1;
  EXPECT_FALSE(plan_cublas_gemm(g));
  g = base, g.k = 0;  // DeviceLinear's block zeroing
  EXPECT_FALSE(plan_cublas_gemm(g));
  // An l = 1 block of an e3nn linear in mul_ir rows: neither stride of A or C is 1.
  g = base, g.lda = 3 * 8 + 5, g.a_col = 3, g.ldc = 3 * 8 + 7, g.c_col = 3;
  EXPECT_FALSE(plan_cublas_gemm(g));
  // Leading dimension below the width (overlapping rows): cuBLAS would reject it.
  g = base, g.ldb = 4;
  EXPECT_FALSE(plan_cublas_gemm(g));
  g = base, g.m = 3'000'000'000LL;  // beyond cuBLAS's int
  EXPECT_FALSE(plan_cublas_gemm(g));
  EXPECT_TRUE(plan_cublas_gemm(base));
}

// ---------------------------------------------------------------- on a backend

class GenericKernelsCublas : public ::testing::TestWithParam<std::string> {
 public:
  void SetUp() override {
    if (GetParam() == "cuda" && !device_available()) GTEST_SKIP() << "no CUDA device";
    backend_ = GetParam() == "emulated" ? make_emulated_backend() : make_cuda_backend(0);
  }
  std::unique_ptr<DeviceBackend> backend_;
};

TEST_P(GenericKernelsCublas, RouteDecision) {
  GenericKernels gk(*backend_);
  if (backend_->emulated()) {
    EXPECT_FALSE(gk.uses_cublas());
    EXPECT_NE(gk.gemm_route().find("emulated"), std::string::npos) << gk.gemm_route();
    return;
  }
  // On a GPU host cuBLAS must load (the toolkit is there): a silent fallback would hide a
  // 100x slower engine.
  EXPECT_TRUE(gk.uses_cublas()) << gk.gemm_route();
  GenericKernels generic(*backend_, GenericKernels::GemmRoute::kGeneric);
  EXPECT_FALSE(generic.uses_cublas());
  setenv("CLEBSCH_NO_CUBLAS", "1", 1);
  GenericKernels forced(*backend_);
  unsetenv("CLEBSCH_NO_CUBLAS");
  EXPECT_FALSE(forced.uses_cublas());
  EXPECT_NE(forced.gemm_route().find("CLEBSCH_NO_CUBLAS"), std::string::npos);
}

template <class T>
void compare_routes(DeviceBackend& be, double tol) {
  GenericKernels routed(be);
  GenericKernels generic(be, GenericKernels::GemmRoute::kGeneric);
  const bool large = !be.emulated();
  for (const Case& c : cases(large)) {
    SCOPED_TRACE(name(c));
    const Layout l = layout(c);
    const std::vector<double> A = random_vector(l.size_a, 11), B = random_vector(l.size_b, 12),
                              C0 = random_vector(l.size_c, 13);
    auto up = [&](const std::vector<double>& v) {
      DeviceArray<T> d(be);
      d.upload(std::vector<T>(v.begin(), v.end()));
      return d;
    };
    DeviceArray<T> dA = up(A), dB = up(B), c_routed = up(C0), c_generic = up(C0);
    // beta = 0 must not read C: poison it (NaN) in the routed run.
    if (c.beta == 0) c_routed.poison();
    routed.gemm(dtype_of<T>(), args(c, dA.data(), dB.data(), c_routed.data()), nullptr);
    generic.gemm(dtype_of<T>(), args(c, dA.data(), dB.data(), c_generic.data()), nullptr);
    const std::vector<T> r = c_routed.download(), gen = c_generic.download();
    // The m x n elements of C only (the padding of a poisoned C stays NaN).
    const Layout lay = layout(c);
    auto elements = [&](const auto& v) {
      std::vector<double> e;
      for (long long i = 0; i < c.m; ++i)
        for (long long j = 0; j < c.n; ++j) e.push_back(double(v[i * lay.ldc + j * lay.c_col]));
      return e;
    };
    const std::vector<double> rd = elements(r), gd = elements(gen);
    EXPECT_LE(max_rel(rd, gd), tol) << "routed vs generic";
    if (c.m * c.n * c.k <= 1'000'000) {  // the host reference of the large cases is too slow
      const GemmArgs hg = args(c, A.data(), B.data(), nullptr);
      const std::vector<double> ref = elements(reference(hg, A, B, C0));
      EXPECT_LE(max_rel(gd, ref), tol) << "generic vs host";
      EXPECT_LE(max_rel(rd, ref), tol) << "routed vs host";
    }
    if (::testing::Test::HasFailure()) return;
  }
}

TEST_P(GenericKernelsCublas, RandomDenseGemmsFp64) { compare_routes<double>(*backend_, 1e-12); }
TEST_P(GenericKernelsCublas, RandomDenseGemmsFp32) { compare_routes<float>(*backend_, 1e-5); }

INSTANTIATE_TEST_SUITE_P(Backends, GenericKernelsCublas, ::testing::Values("emulated", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace clebsch::cuda
