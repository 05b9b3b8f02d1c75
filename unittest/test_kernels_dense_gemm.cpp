// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The cuBLAS route of GenericKernels::gemm (kernels/device/dense_gemm.h,
// kernels/device/cublas_loader.h):
//   - the loader fails cleanly (an error, no crash) when the library is missing or is not cuBLAS;
//   - the routing rule: which GemmArgs become a cuBLAS call (plain dense GEMMs: one gemm; per-m
//     batches of e3nn linear blocks: one gemmStridedBatched over the rows), and that the
//     row-major -> column-major mapping is right, checked on the host by evaluating the planned
//     column-major call against the GemmArgs definition (no GPU needed);
//   - the emulated backend always uses the generic kernel;
//   - on a GPU: the cuBLAS route against the generic kernel on random dense GEMMs of every layout
//     the engines use (fp64 1e-12, fp32 1e-5 relative), beta = 0 never reading C, and
//     CLEBSCH_NO_CUBLAS=1 forcing the generic kernel;
//   - the ir_linear kernel (kernels/device/ir_linear.h), which gemm() gives the per-m GEMMs of
//     e3nn linear blocks on mul_ir rows: its routing rule and tile plan (host only), and on every
//     backend each of its tiles against the host definition in float64 and against the generic
//     kernel, over d = 1..9, multiplicities 1, 37, 64, 128, row tails, both layouts of B, alpha
//     and beta, blocks inside wider rows, with everything outside the operands' blocks poisoned
//     (never read) and left untouched.
// Suites are named GenericKernels* so the engine test filter picks them up.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "clebsch/cuda/device/cublas_loader.h"
#include "clebsch/cuda/device/cuda_driver.h"
#include "clebsch/cuda/device/dense_gemm.h"
#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/device/ir_linear.h"
#include "clebsch/support/error.h"

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
  EXPECT_NE(l.api.DgemmStridedBatched, nullptr);
  EXPECT_NE(l.api.SgemmStridedBatched, nullptr);
}

// ---------------------------------------------------------------- GEMM cases

// A GEMM on three buffers: GemmArgs with null pointers, and where each operand starts in its
// buffer (elements), so that the same problem binds to host vectors and device arrays.
struct Problem {
  std::string name;
  GemmArgs g;
  long long off_a, off_b, off_c;
  std::size_t size_a, size_b, size_c;
};

template <class T>
GemmArgs bind(const Problem& p, const T* A, const T* B, T* C) {
  GemmArgs g = p.g;
  g.a = A + p.off_a, g.b = B + p.off_b, g.c = C + p.off_c;
  return g;
}

// A plain GEMM of the engines' layouts: each operand row-major (unit column stride) or
// transposed (unit row stride), with padded leading dimensions.
struct Case {
  long long m, n, k;
  bool a_t, b_t, c_t;
  long long pad;
  double alpha, beta;
};

Problem problem(const Case& c) {
  Problem p{};
  GemmArgs& g = p.g;
  g.m = c.m, g.n = c.n, g.k = c.k, g.batch = 1;
  if (!c.a_t)
    g.lda = c.k + c.pad, g.a_col = 1, p.size_a = c.m * g.lda;
  else
    g.lda = 1, g.a_col = c.m + c.pad, p.size_a = c.k * g.a_col;
  if (!c.b_t)
    g.ldb = c.n + c.pad, g.b_col = 1, p.size_b = c.k * g.ldb;
  else
    g.ldb = 1, g.b_col = c.k + c.pad, p.size_b = c.n * g.b_col;
  if (!c.c_t)
    g.ldc = c.n + c.pad, g.c_col = 1, p.size_c = c.m * g.ldc;
  else
    g.ldc = 1, g.c_col = c.m + c.pad, p.size_c = c.n * g.c_col;
  g.alpha = c.alpha, g.beta = c.beta;
  p.name = std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
           " a_t=" + std::to_string(c.a_t) + " b_t=" + std::to_string(c.b_t) +
           " c_t=" + std::to_string(c.c_t) + " pad=" + std::to_string(c.pad) +
           " beta=" + std::to_string(c.beta);
  return p;
}

// One l > 0 block of an e3nn o3.Linear on mul_ir rows, built as DeviceLinear::run builds it:
// batch = 2l+1 (the m index, unit stride), A's block of k*(2l+1) and C's of n*(2l+1) starting
// at off_x / off_y in rows of x_extra / y_extra more elements (a block inside a wider row),
// the weights W[mul_in][mul_out] shared by the batch. transpose: the backward g W^T.
struct LinearCase {
  long long rows;
  int l;
  long long mul_in, mul_out;
  bool transpose;
  long long off_x, x_extra, off_y, y_extra;
  double beta;
};

Problem problem(const LinearCase& c) {
  Problem p{};
  GemmArgs& g = p.g;
  const long long d = 2 * c.l + 1;
  const long long k = c.transpose ? c.mul_out : c.mul_in, n = c.transpose ? c.mul_in : c.mul_out;
  g.m = c.rows, g.n = n, g.k = k, g.batch = d;
  g.a_batch = 1, g.c_batch = 1, g.b_batch = 0;
  g.a_col = d, g.c_col = d;
  g.lda = c.off_x + k * d + c.x_extra, g.ldc = c.off_y + n * d + c.y_extra;
  if (!c.transpose)
    g.ldb = c.mul_out, g.b_col = 1;
  else
    g.ldb = 1, g.b_col = c.mul_out;
  g.alpha = 1.0, g.beta = c.beta;
  p.off_a = c.off_x, p.off_b = 0, p.off_c = c.off_y;
  p.size_a = c.rows * g.lda, p.size_b = c.mul_in * c.mul_out, p.size_c = c.rows * g.ldc;
  p.name = "linear rows=" + std::to_string(c.rows) + " l=" + std::to_string(c.l) + " " +
           std::to_string(c.mul_in) + "->" + std::to_string(c.mul_out) +
           (c.transpose ? " backward" : " forward") + " lda=" + std::to_string(g.lda) +
           " ldc=" + std::to_string(g.ldc) + " beta=" + std::to_string(c.beta);
  return p;
}

// The elements of C that @p p writes (indices into its buffer).
std::vector<long long> written(const Problem& p) {
  const GemmArgs& g = p.g;
  std::vector<long long> e;
  for (long long b = 0; b < g.batch; ++b)
    for (long long i = 0; i < g.m; ++i)
      for (long long j = 0; j < g.n; ++j)
        e.push_back(p.off_c + i * g.ldc + j * g.c_col + b * g.c_batch);
  return e;
}

// The GemmArgs definition on the host (generic_kernels.cuh.in's clebsch_gemm; no gathers).
std::vector<double> reference(const Problem& p, const std::vector<double>& A,
                              const std::vector<double>& B, std::vector<double> C) {
  const GemmArgs& g = p.g;
  for (long long b = 0; b < g.batch; ++b)
    for (long long i = 0; i < g.m; ++i)
      for (long long j = 0; j < g.n; ++j) {
        long double acc = 0;
        for (long long k = 0; k < g.k; ++k)
          acc += (long double)A.at(p.off_a + i * g.lda + k * g.a_col + b * g.a_batch) *
                 B.at(p.off_b + k * g.ldb + j * g.b_col + b * g.b_batch);
        double& c = C.at(p.off_c + i * g.ldc + j * g.c_col + b * g.c_batch);
        c = g.alpha * double(acc) + (g.beta != 0 ? g.beta * c : 0.0);
      }
  return C;
}

// A planned cuBLAS call evaluated on the host with cuBLAS's column-major definition (batch
// entries at the plan's strides): @p C updated. @p C is the buffer the plan's C points into.
std::vector<double> evaluate(const CublasGemmPlan& p, const std::vector<double>& A,
                             const std::vector<double>& B, const std::vector<double>& C) {
  // The plan's pointers point into A, B or C: map them back to (vector, offset).
  auto host = [&](const void* ptr) -> std::pair<const std::vector<double>*, long long> {
    const auto* q = static_cast<const double*>(ptr);
    for (const std::vector<double>* v :
         std::initializer_list<const std::vector<double>*>{&A, &B, &C})
      if (q >= v->data() && q < v->data() + v->size()) return {v, q - v->data()};
    throw std::runtime_error("plan operand outside A, B and C");
  };
  const auto [PA, oa] = host(p.a);
  const auto [PB, ob] = host(p.b);
  const auto [PC, oc] = host(p.c);
  EXPECT_EQ(PC, &C);
  EXPECT_GE(p.batch, 1);
  std::vector<double> out = C;
  for (long long bt = 0; bt < p.batch; ++bt)
    for (int i = 0; i < p.m; ++i)
      for (int j = 0; j < p.n; ++j) {
        const long long a0 = oa + bt * p.stride_a, b0 = ob + bt * p.stride_b;
        long double acc = 0;
        for (int l = 0; l < p.k; ++l) {
          const double a = p.trans_a ? PA->at(a0 + l + (long long)i * p.lda)
                                     : PA->at(a0 + i + (long long)l * p.lda);
          const double b = p.trans_b ? PB->at(b0 + j + (long long)l * p.ldb)
                                     : PB->at(b0 + l + (long long)j * p.ldb);
          acc += (long double)a * b;
        }
        const long long ci = oc + bt * p.stride_c + i + (long long)j * p.ldc;
        out.at(ci) = p.alpha * double(acc) + (p.beta != 0 ? p.beta * C.at(ci) : 0.0);
      }
  return out;
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

// The elements @p idx of @p v, as doubles.
template <class V>
std::vector<double> pick(const V& v, const std::vector<long long>& idx) {
  std::vector<double> e;
  e.reserve(idx.size());
  for (long long i : idx) e.push_back(double(v[i]));
  return e;
}

// Every layout combination, square-ish and MLP-shaped (rows >> widths; the radial MLP's
// forward x W and backward g W^T), beta 0 and 1, with and without padding.
std::vector<Problem> dense_problems(bool large) {
  std::vector<Case> out;
  const long long shapes[][3] = {{7, 5, 3}, {1, 9, 4}, {6, 1, 8}, {5, 4, 1}, {33, 17, 29}};
  for (auto& s : shapes)
    for (int bits = 0; bits < 8; ++bits)
      for (double beta : {0.0, 1.0})
        out.push_back({s[0], s[1], s[2], bool(bits & 1), bool(bits & 2), bool(bits & 4),
                       (bits & 1) ? 2 : 0, 0.75, beta});
  if (large) {
    out.push_back({50000, 64, 10, false, false, false, 0, 1.0, 0.0});      // MLP layer 0
    out.push_back({50000, 64, 64, false, false, false, 0, 1.0, 0.0});      // MLP hidden
    out.push_back({50000, 1536, 64, false, false, false, 0, 1.0, 0.0});    // MLP last
    out.push_back({50000, 64, 1536, false, true, false, 0, 1.0, 0.0});     // backward g W^T
    out.push_back({10000, 128, 128, false, false, false, 384, 1.0, 1.0});  // l=0 linear block
  }
  std::vector<Problem> p;
  for (const Case& c : out) p.push_back(problem(c));
  return p;
}

// The per-m linear blocks: l = 1, 2, 3, forward and backward, multiplicities of 1 (degenerate
// dimensions) and more, whole rows and blocks inside wider rows, beta 0 and 1. large: the MACE
// shapes (128x0e+128x1o+128x2e+128x3o rows, 10192 nodes) and a row count past 65535.
std::vector<Problem> linear_problems(bool large) {
  std::vector<LinearCase> out;
  const long long muls[][2] = {{4, 6}, {1, 3}, {5, 1}, {8, 8}};
  for (long long rows : {1LL, 7LL})
    for (int l = 1; l <= 3; ++l)
      for (auto& mu : muls)
        for (bool tr : {false, true})
          for (int wide = 0; wide < 2; ++wide)
            for (double beta : {0.0, 1.0})
              out.push_back({rows, l, mu[0], mu[1], tr, wide ? 3 : 0, wide ? 5 : 0, wide ? 7 : 0,
                             wide ? 2 : 0, beta});
  if (large) {
    const long long width = 128 * 16, off[4] = {0, 128, 128 * 4, 128 * 9};
    for (int l = 1; l <= 3; ++l)
      for (bool tr : {false, true})
        out.push_back({10192, l, 128, 128, tr, off[l], width - off[l] - 128 * (2 * l + 1), off[l],
                       width - off[l] - 128 * (2 * l + 1), tr ? 1.0 : 0.0});
    out.push_back({70000, 1, 16, 16, false, 0, 0, 0, 0, 0.0});
    out.push_back({70000, 2, 16, 16, true, 0, 0, 0, 0, 1.0});
  }
  std::vector<Problem> p;
  for (const LinearCase& c : out) p.push_back(problem(c));
  return p;
}

// ---------------------------------------------------------------- routing rule (host only)

// Every problem of @p ps gets a plan whose host evaluation is the GemmArgs definition, on the
// written elements and on the rest of C (left alone).
void expect_plans_match(const std::vector<Problem>& ps) {
  for (const Problem& pr : ps) {
    SCOPED_TRACE(pr.name);
    const std::vector<double> A = random_vector(pr.size_a, 1), B = random_vector(pr.size_b, 2),
                              C0 = random_vector(pr.size_c, 3);
    std::vector<double> C = C0;
    const GemmArgs g = bind(pr, A.data(), B.data(), C.data());
    const std::optional<CublasGemmPlan> p = plan_cublas_gemm(g);
    ASSERT_TRUE(p.has_value());
    EXPECT_LE(max_rel(evaluate(*p, A, B, C), reference(pr, A, B, C0)), 1e-14);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(GenericKernelsCublasRoute, PlanMatchesGemmDefinitionOnHost) {
  expect_plans_match(dense_problems(false));
}

TEST(GenericKernelsCublasRoute, PerMLinearPlanMatchesGemmDefinitionOnHost) {
  expect_plans_match(linear_problems(false));
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
  EXPECT_EQ(p->batch, 1);
  // DeviceMlp::backward: gx = g W^T with B(k, j) = W[j][k] (ldb = 1, b_col = h_out).
  GemmArgs bw = GenericKernels::dense(&A, &B, &C, 1000, 10, 64);
  bw.ldb = 1, bw.b_col = 64;
  p = plan_cublas_gemm(bw);
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->trans_a);
  EXPECT_FALSE(p->trans_b);
  EXPECT_EQ(p->lda, 64);
  EXPECT_EQ(p->batch, 1);
}

TEST(GenericKernelsCublasRoute, PerMLinearMapsToOneStridedBatchedCallOverRows) {
  // The l = 2 block of 128x0e+128x1o+128x2e+128x3o rows (forward: 128 -> 96).
  std::vector<double> X(10 * 2048), W(128 * 96), Y(10 * 1600);
  Problem pr = problem(LinearCase{10, 2, 128, 96, false, 512, 896, 384, 736, 0.0});
  ASSERT_EQ(pr.g.lda, 2048);
  ASSERT_EQ(pr.g.ldc, 1600);
  auto p = plan_cublas_gemm(bind(pr, X.data(), W.data(), Y.data()));
  ASSERT_TRUE(p);
  // Per row i: C_i (5 x 96, ld 5) = X_i (5 x 128, ld 5) W, X_i and C_i a row apart.
  EXPECT_EQ(p->batch, 10);
  EXPECT_EQ(p->m, 5);
  EXPECT_EQ(p->n, 96);
  EXPECT_EQ(p->k, 128);
  EXPECT_EQ(p->a, X.data() + 512);
  EXPECT_FALSE(p->trans_a);
  EXPECT_EQ(p->lda, 5);
  EXPECT_EQ(p->stride_a, 2048);
  EXPECT_EQ(p->b, W.data());  // W[u][w] column-major is W^T (96 x 128, ld 96): transposed
  EXPECT_TRUE(p->trans_b);
  EXPECT_EQ(p->ldb, 96);
  EXPECT_EQ(p->stride_b, 0);
  EXPECT_EQ(p->c, Y.data() + 384);
  EXPECT_EQ(p->ldc, 5);
  EXPECT_EQ(p->stride_c, 1600);
  // Backward (gX = gY W^T): W is already W^T's transpose, no transposes.
  std::vector<double> gY(10 * 1600), gX(10 * 2048);
  pr = problem(LinearCase{10, 2, 128, 96, true, 384, 736, 512, 896, 1.0});
  p = plan_cublas_gemm(bind(pr, gY.data(), W.data(), gX.data()));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->batch, 10);
  EXPECT_EQ(p->m, 5);
  EXPECT_EQ(p->n, 128);
  EXPECT_EQ(p->k, 96);
  EXPECT_EQ(p->a, gY.data() + 384);
  EXPECT_FALSE(p->trans_a);
  EXPECT_EQ(p->stride_a, 1600);
  EXPECT_FALSE(p->trans_b);
  EXPECT_EQ(p->ldb, 96);
  EXPECT_EQ(p->stride_c, 2048);
  EXPECT_EQ(p->beta, 1.0);
  // A single row: one plain call.
  pr = problem(LinearCase{1, 3, 4, 4, false, 0, 0, 0, 0, 0.0});
  p = plan_cublas_gemm(bind(pr, X.data(), W.data(), Y.data()));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->batch, 1);
  EXPECT_EQ(p->m, 7);
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
  // A batch over overlapping rows (batch stride 1 along a unit column stride): no matrix.
  g = base, g.batch = 3, g.a_batch = 1, g.c_batch = 1;
  EXPECT_FALSE(plan_cublas_gemm(g));
  g = base, g.k = 0;  // DeviceLinear's block zeroing
  EXPECT_FALSE(plan_cublas_gemm(g));
  // An l = 1 block of an e3nn linear in mul_ir rows without its batch: neither stride of A or C
  // is 1.
  g = base, g.lda = 3 * 8 + 5, g.a_col = 3, g.ldc = 3 * 8 + 7, g.c_col = 3;
  EXPECT_FALSE(plan_cublas_gemm(g));
  // Leading dimension below the width (overlapping rows): cuBLAS would reject it.
  g = base, g.ldb = 4;
  EXPECT_FALSE(plan_cublas_gemm(g));
  g = base, g.m = 3'000'000'000LL;  // beyond cuBLAS's int
  EXPECT_FALSE(plan_cublas_gemm(g));
  EXPECT_TRUE(plan_cublas_gemm(base));

  // The per-m batch of an l = 1 block takes the batched route, and stays generic with:
  std::vector<double> X(7 * 40), W(64), Y(7 * 40);
  const GemmArgs lin =
      bind(problem(LinearCase{7, 1, 8, 8, false, 0, 16, 0, 16, 0.0}), X.data(), W.data(), Y.data());
  ASSERT_TRUE(plan_cublas_gemm(lin));
  g = lin, g.a_rows = &idx;  // a row gather
  EXPECT_FALSE(plan_cublas_gemm(g));
  g = lin, g.c_rows = &idx;  // a row scatter
  EXPECT_FALSE(plan_cublas_gemm(g));
  g = lin, g.b_select = &idx, g.b_select_stride = 64;  // species weights (NequIP self-connection)
  EXPECT_FALSE(plan_cublas_gemm(g));
  g = lin, g.b_batch = 64;  // weights changing with m
  EXPECT_FALSE(plan_cublas_gemm(g));
  g = lin, g.k = 0;
  EXPECT_FALSE(plan_cublas_gemm(g));
  // No unit stride in m (every other m of a twice wider block, in A or in C).
  g = lin, g.a_batch = 2, g.a_col = 6;
  EXPECT_FALSE(plan_cublas_gemm(g));
  g = lin, g.c_batch = 2, g.c_col = 6;
  EXPECT_FALSE(plan_cublas_gemm(g));
  // m's stride equal to the multiplicity stride (overlapping elements) is no matrix either.
  g = lin, g.a_col = 1;
  EXPECT_FALSE(plan_cublas_gemm(g));
  g = lin, g.lda = -40;  // rows running backwards
  EXPECT_FALSE(plan_cublas_gemm(g));
  g = lin, g.m = 3'000'000'000LL;  // a batch count beyond cuBLAS's int
  EXPECT_FALSE(plan_cublas_gemm(g));
}

// A batch of whole matrices (each component m an n x k block of a batch-major ir_mul copy) is
// one strided-batched call over the batch, and its plan is the GemmArgs definition.
TEST(GenericKernelsCublasRoute, WholeMatrixBatchesMapToOneStridedBatchedCallOverTheBatch) {
  for (bool transpose : {false, true}) {
    SCOPED_TRACE(transpose ? "backward" : "forward");
    Problem pr{};
    GemmArgs& g = pr.g;
    const long long d = 5, rows = 9, k = 6, n = 4;
    g.m = rows, g.n = n, g.k = k, g.batch = d;
    g.lda = k, g.a_col = 1, g.a_batch = rows * k;
    if (!transpose)
      g.ldb = n, g.b_col = 1;
    else
      g.ldb = 1, g.b_col = k;
    g.b_batch = 0;
    g.ldc = n, g.c_col = 1, g.c_batch = rows * n;
    g.alpha = 1.0, g.beta = 0.0;
    pr.size_a = d * rows * k, pr.size_b = k * n, pr.size_c = d * rows * n;
    const std::vector<double> A = random_vector(pr.size_a, 1), B = random_vector(pr.size_b, 2),
                              C0 = random_vector(pr.size_c, 3);
    std::vector<double> C = C0;
    const std::optional<CublasGemmPlan> p =
        plan_cublas_gemm(bind(pr, A.data(), B.data(), C.data()));
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->batch, d);
    EXPECT_LE(max_rel(evaluate(*p, A, B, C), reference(pr, A, B, C0)), 1e-14);
  }
}

// ---------------------------------------------------------------- ir_linear: rule and plan

TEST(GenericKernelsIrLinearRoute, TakesThePerMFormOfLinearBlocksOnly) {
  double h = 0;
  // DeviceLinearBlock's forward and transpose, any row count, l = 0 .. 15 (l = 0: d = 1).
  for (bool tr : {false, true})
    for (long long rows : {1LL, 7LL, 10192LL})
      for (int l : {0, 1, 2, 3, 15}) {
        const Problem pr = problem(LinearCase{rows, l, 128, 96, tr, 512, 768, 384, 736, 0.0});
        EXPECT_TRUE(GenericKernels::ir_mul_route(bind(pr, &h, &h, &h))) << pr.name;
      }
  const GemmArgs lin = bind(problem(LinearCase{7, 1, 8, 8, false, 0, 16, 0, 16, 0.0}), &h, &h, &h);
  int idx = 0;
  GemmArgs g = lin;
  g.b_select = &idx;  // species weights: the generic kernel's
  EXPECT_FALSE(GenericKernels::ir_mul_route(g));
  g = lin, g.a_rows = &idx;
  EXPECT_FALSE(GenericKernels::ir_mul_route(g));
  g = lin, g.c_rows = &idx;
  EXPECT_FALSE(GenericKernels::ir_mul_route(g));
  g = lin, g.b_batch = 64;  // weights changing with m
  EXPECT_FALSE(GenericKernels::ir_mul_route(g));
  g = lin, g.a_batch = 2, g.a_col = 6;  // every other m of a wider block
  EXPECT_FALSE(GenericKernels::ir_mul_route(g));
  g = lin, g.c_batch = 2, g.c_col = 6;
  EXPECT_FALSE(GenericKernels::ir_mul_route(g));
  g = lin, g.a_col = 1;  // ir_mul rows (m-major): not this layout
  EXPECT_FALSE(GenericKernels::ir_mul_route(g));
  g = lin, g.k = 0;  // DeviceLinear's block zeroing
  EXPECT_FALSE(GenericKernels::ir_mul_route(g));
  g = lin, g.m = 0;
  EXPECT_FALSE(GenericKernels::ir_mul_route(g));
  g = lin, g.n = 0;
  EXPECT_FALSE(GenericKernels::ir_mul_route(g));
  // l = 16: d = 33 components, more than the smallest tile holds.
  g = bind(problem(LinearCase{7, 16, 8, 8, false, 0, 0, 0, 0, 0.0}), &h, &h, &h);
  EXPECT_FALSE(GenericKernels::ir_mul_route(g));
  // A plain dense GEMM (MLP layers) is no linear block: cuBLAS's or the generic kernel's.
  EXPECT_FALSE(GenericKernels::ir_mul_route(GenericKernels::dense(&h, &h, &h, 100, 8, 8)));
}

TEST(GenericKernelsIrLinearRoute, TilesAreConsistentAndTheirSpecsOptInToLargeSharedMemory) {
  const std::vector<KernelSpec> specs = ir_linear_kernel_specs();
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    const std::vector<IrLinearTile>& tiles = ir_linear_tiles(t);
    ASSERT_GE(tiles.size(), 1u);
    EXPECT_FALSE(tiles.back().mma);
    EXPECT_GE(tiles.back().bm, kIrLinearMaxDim);  // the smallest holds a row of any routed d
    for (std::size_t i = 0; i < tiles.size(); ++i) {
      const IrLinearTile& x = tiles[i];
      const std::string& name = ir_linear_kernel_name(t, int(i));
      SCOPED_TRACE(name);
      EXPECT_EQ(x.threads() % 32, 0);
      const int unit = x.mma ? 8 : IrLinearTile::vector(t);
      EXPECT_EQ(x.tm % unit, 0);
      EXPECT_EQ(x.tn % unit, 0);
      EXPECT_TRUE(!x.mma || t == DType::kFloat64);
      EXPECT_GE(x.shared_bytes(t), unsigned(x.bm * x.slab(t) * size_of(t)));
      EXPECT_LE(x.shared_bytes(t), 227u * 1024u);
      const auto spec = std::find_if(specs.begin(), specs.end(),
                                     [&](const KernelSpec& k) { return k.name == name; });
      ASSERT_NE(spec, specs.end());
      EXPECT_TRUE(spec->warp_synchronous);
      EXPECT_EQ(spec->args_type, "GemmArgs");
      if (x.shared_bytes(t) > 48u * 1024u) EXPECT_GE(spec->max_shared_bytes, x.shared_bytes(t));
      if (i > 0) EXPECT_LE(x.bm * x.bn, tiles[i - 1].bm * tiles[i - 1].bn);  // largest first
    }
  }
  EXPECT_EQ(ir_linear_kernel_name(DType::kFloat32, 0), "clebsch_ir_linear_f32_128x128");
  EXPECT_EQ(ir_linear_kernel_name(DType::kFloat64, 0), "clebsch_ir_linear_f64_mma_64x128");
}

TEST(GenericKernelsIrLinearRoute, PlanGivesEveryMultiprocessorABlockAndCoversTheRows) {
  double h = 0;
  BackendLimits h200;  // sm_90, 132 multiprocessors
  ASSERT_EQ(h200.num_sms, 132);
  ASSERT_EQ(h200.sm_major, 9);
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(to_string(t));
    const std::vector<IrLinearTile>& tiles = ir_linear_tiles(t);
    // MACE's l = 1 block at 10192 atoms: the largest tile; at 864 atoms a smaller one.
    GemmArgs g =
        bind(problem(LinearCase{10192, 1, 128, 128, false, 128, 0, 128, 0, 0.0}), &h, &h, &h);
    IrLinearPlan p = plan_ir_linear(t, g, h200);
    EXPECT_EQ(p.tile, 0);
    const IrLinearTile& x = tiles[0];
    EXPECT_EQ(p.dims.grid_x, unsigned((10192 + x.bm / 3 - 1) / (x.bm / 3)));
    EXPECT_EQ(p.dims.threads, unsigned(x.threads()));
    EXPECT_EQ(p.dims.shared_bytes, x.shared_bytes(t));
    g.m = 864;
    p = plan_ir_linear(t, g, h200);
    EXPECT_GT(p.tile, 0);
    EXPECT_TRUE(p.dims.grid_x >= 132 || p.tile == int(tiles.size()) - 1) << p.dims.grid_x;
    // Column tiles: 512 outputs on 128-wide tiles are 4 blocks per row tile.
    g.m = 10192, g.n = 512;
    p = plan_ir_linear(t, g, h200);
    const IrLinearTile& y = tiles[std::size_t(p.tile)];
    EXPECT_EQ(p.dims.grid_x, unsigned((10192 + y.bm / 3 - 1) / (y.bm / 3) * (512 / y.bn)));
    // 37 outputs: no tile with more than half its columns empty unless it is the last resort.
    g.n = 37;
    BackendLimits one = h200;
    one.num_sms = 1;
    p = plan_ir_linear(t, g, one);
    EXPECT_LT(tiles[std::size_t(p.tile)].bn, 2 * 37);
    // Forced tiles, and a tile that cannot hold a row of d components.
    for (int i = 0; i < int(tiles.size()); ++i) EXPECT_EQ(plan_ir_linear(t, g, h200, i).tile, i);
    EXPECT_THROW(plan_ir_linear(t, g, h200, int(tiles.size())), Error);
    // No DMMA before sm_80: never planned, refused when forced.
    BackendLimits turing = h200;
    turing.sm_major = 7, turing.sm_minor = 5;
    g.n = 128;
    EXPECT_FALSE(tiles[std::size_t(plan_ir_linear(t, g, turing).tile)].mma);
    for (int i = 0; i < int(tiles.size()); ++i)
      if (tiles[std::size_t(i)].mma) EXPECT_THROW(plan_ir_linear(t, g, turing, i), Error);
    g.batch = g.a_col = g.c_col = tiles[0].bm + 1;
    EXPECT_THROW(plan_ir_linear(t, g, h200, 0), Error);
    g.batch = g.a_col = g.c_col = 2 * tiles[0].bm;
    EXPECT_THROW(plan_ir_linear(t, g, h200), Error);
  }
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

// The routed GenericKernels is made with CLEBSCH_NO_TF32X3=1: the float32 GEMMs of many rows
// would otherwise take the 3xTF32 kernel (tf32x3_gemm.h; test_kernels_tf32x3_gemm holds it to
// its own bound), and these tests are about the cuBLAS route.
template <class T>
void compare_routes(DeviceBackend& be, const std::vector<Problem>& problems, double tol) {
  const char* old = std::getenv("CLEBSCH_NO_TF32X3");
  const std::string saved = old ? old : "";
  setenv("CLEBSCH_NO_TF32X3", "1", 1);
  GenericKernels routed(be);
  if (old)
    setenv("CLEBSCH_NO_TF32X3", saved.c_str(), 1);
  else
    unsetenv("CLEBSCH_NO_TF32X3");
  GenericKernels generic(be, GenericKernels::GemmRoute::kGeneric);
  for (const Problem& pr : problems) {
    SCOPED_TRACE(pr.name);
    // Every problem here must leave the generic kernel where it can (else this compares
    // nothing): per-m linear blocks for the ir_linear kernel on every backend, the rest for
    // cuBLAS on a GPU.
    double h = 0;
    const GemmArgs hg = bind(pr, &h, &h, &h);
    if (!GenericKernels::ir_mul_route(hg) && routed.uses_cublas())
      EXPECT_TRUE(plan_cublas_gemm(hg)) << "stays on the generic kernel";
    const std::vector<double> A = random_vector(pr.size_a, 11), B = random_vector(pr.size_b, 12),
                              C0 = random_vector(pr.size_c, 13);
    auto up = [&](const std::vector<double>& v) {
      DeviceArray<T> d(be);
      d.upload(std::vector<T>(v.begin(), v.end()));
      return d;
    };
    DeviceArray<T> dA = up(A), dB = up(B), c_routed = up(C0), c_generic = up(C0);
    // beta = 0 must not read C: poison it (NaN) in the routed run.
    if (pr.g.beta == 0) c_routed.poison();
    routed.gemm(dtype_of<T>(), bind(pr, dA.data(), dB.data(), c_routed.data()), nullptr);
    generic.gemm(dtype_of<T>(), bind(pr, dA.data(), dB.data(), c_generic.data()), nullptr);
    const std::vector<T> r = c_routed.download(), gen = c_generic.download();
    // The written elements of C only (the rest of a poisoned C stays NaN).
    const std::vector<long long> idx = written(pr);
    const std::vector<double> rd = pick(r, idx), gd = pick(gen, idx);
    EXPECT_LE(max_rel(rd, gd), tol) << "routed vs generic";
    if (pr.g.batch * pr.g.m * pr.g.n * pr.g.k <= 1'000'000) {  // the large ones: too slow here
      const std::vector<double> ref = pick(reference(pr, A, B, C0), idx);
      EXPECT_LE(max_rel(gd, ref), tol) << "generic vs host";
      EXPECT_LE(max_rel(rd, ref), tol) << "routed vs host";
    }
    if (::testing::Test::HasFailure()) return;
  }
}

TEST_P(GenericKernelsCublas, RandomDenseGemmsFp64) {
  compare_routes<double>(*backend_, dense_problems(!backend_->emulated()), 1e-12);
}
TEST_P(GenericKernelsCublas, RandomDenseGemmsFp32) {
  compare_routes<float>(*backend_, dense_problems(!backend_->emulated()), 1e-5);
}
TEST_P(GenericKernelsCublas, RandomPerMLinearGemmsFp64) {
  compare_routes<double>(*backend_, linear_problems(!backend_->emulated()), 1e-12);
}
TEST_P(GenericKernelsCublas, RandomPerMLinearGemmsFp32) {
  compare_routes<float>(*backend_, linear_problems(!backend_->emulated()), 1e-5);
}

// ---------------------------------------------------------------- ir_linear on a backend

// One ir_linear problem: @p rows rows of a mul_ir block (d components, k inputs -> n outputs)
// inside wider rows of A and C (the block at off_a / off_c, extra_a / extra_c more values
// after it), B row-major (k x n, row pitch n + pad_b) or, with b_t, stored transposed (n x k,
// row pitch k + pad_b: the backward of a linear reads its weights so).
struct IrCase {
  long long rows, d, k, n;
  bool b_t;
  double alpha, beta;
  long long off_a, extra_a, off_c, extra_c, pad_b;
};

Problem problem(const IrCase& c) {
  Problem p{};
  GemmArgs& g = p.g;
  g.m = c.rows, g.n = c.n, g.k = c.k, g.batch = c.d;
  g.a_batch = 1, g.c_batch = 1, g.b_batch = 0;
  g.a_col = c.d, g.c_col = c.d;
  g.lda = c.off_a + c.k * c.d + c.extra_a, g.ldc = c.off_c + c.n * c.d + c.extra_c;
  if (!c.b_t)
    g.ldb = c.n + c.pad_b, g.b_col = 1, p.size_b = c.k * g.ldb;
  else
    g.ldb = 1, g.b_col = c.k + c.pad_b, p.size_b = c.n * g.b_col;
  g.alpha = c.alpha, g.beta = c.beta;
  p.off_a = c.off_a, p.off_b = 0, p.off_c = c.off_c;
  p.size_a = c.rows * g.lda, p.size_c = c.rows * g.ldc;
  p.name = "rows=" + std::to_string(c.rows) + " d=" + std::to_string(c.d) + " " +
           std::to_string(c.k) + "->" + std::to_string(c.n) + (c.b_t ? " B^T" : " B") +
           " lda=" + std::to_string(g.lda) + " ldc=" + std::to_string(g.ldc) +
           " ldb=" + std::to_string(g.ldb) + " b_col=" + std::to_string(g.b_col) +
           " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta);
  return p;
}

// The elements of A and B that @p p reads (indices into their buffers).
std::vector<long long> read_a(const Problem& p) {
  std::vector<long long> e;
  for (long long i = 0; i < p.g.m; ++i)
    for (long long q = 0; q < p.g.k * p.g.batch; ++q) e.push_back(p.off_a + i * p.g.lda + q);
  return e;
}
std::vector<long long> read_b(const Problem& p) {
  std::vector<long long> e;
  for (long long k = 0; k < p.g.k; ++k)
    for (long long j = 0; j < p.g.n; ++j) e.push_back(p.off_b + k * p.g.ldb + j * p.g.b_col);
  return e;
}

// The sweep: d = 1, 3, 5, 7, 9; multiplicities @p muls (128, 64, 37: no tile's multiple, 1) on
// both sides; both layouts of B; beta 0 and 1 (and -0.5), alpha 0.75 (and -1.25); the block
// inside wider rows (three in four cases) or filling them. @p rows: the row counts. Without
// @p every_layout, each (rows, d, k, n) takes one of the four (layout of B, beta), in turn.
std::vector<IrCase> ir_cases(const std::vector<long long>& rows,
                             const std::vector<long long>& muls = {128, 64, 37, 1},
                             bool every_layout = true) {
  std::vector<IrCase> out;
  int n = 0, turn = 0;
  for (long long r : rows)
    for (long long d : {1, 3, 5, 7, 9})
      for (long long k : muls)
        for (long long nn : muls) {
          ++turn;
          for (bool b_t : {false, true})
            for (double beta : {0.0, 1.0}) {
              if (!every_layout && (turn & 3) != 2 * int(b_t) + int(beta != 0)) continue;
              const bool wide = n % 4 != 0;
              const double alpha = n % 7 == 3 ? -1.25 : 0.75;
              out.push_back({r, d, k, nn, b_t, alpha, n % 11 == 5 ? -0.5 : beta, wide ? 3 : 0,
                             wide ? 5 : 0, wide ? 7 : 0, wide ? 2 : 0, wide ? 3 : 0});
              ++n;
            }
        }
  return out;
}

double eps_of(DType t) {
  return t == DType::kFloat64 ? std::numeric_limits<double>::epsilon()
                              : double(std::numeric_limits<float>::epsilon());
}

class GenericKernelsIrLinear : public ::testing::TestWithParam<std::string> {
 public:
  void SetUp() override {
    if (GetParam() == "cuda" && !device_available()) GTEST_SKIP() << "no CUDA device";
    backend_ = GetParam() == "emulated" ? make_emulated_backend() : make_cuda_backend(0);
  }
  std::unique_ptr<DeviceBackend> backend_;
};

// Each case of @p cases on the ir_linear kernel with each tile of @p tiles (-1: the plan's),
// against the GemmArgs definition in float64 and, with @p generic, the generic GEMM kernel:
//   - every written element within eps (k + 2) S of the definition, S = |alpha| sum_u |A B| +
//     |beta C| (sequential rounding of a k-term sum), and for float64 within 1e-13 relative
//     (largest error over largest value) as well; the generic kernel within the same bound, the
//     two within twice it;
//   - everything outside the blocks of A and C and B's padding NaN: a read of it would spread
//     NaN into C; beta = 0: C's block NaN as well (never read);
//   - every element of C outside the block, random values, bitwise unchanged.
template <class T>
void expect_ir_linear(DeviceBackend& be, const std::vector<IrCase>& cases,
                      const std::vector<int>& tiles, bool generic) {
  const DType t = dtype_of<T>();
  GenericKernels gk(be);
  GenericKernels gen(be, GenericKernels::GemmRoute::kGeneric);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  unsigned seed = 100;
  for (const IrCase& c : cases) {
    const Problem pr = problem(c);
    SCOPED_TRACE(pr.name);
    T h{};
    ASSERT_TRUE(GenericKernels::ir_mul_route(bind(pr, &h, &h, &h)));
    // Operands in T (the device's values), as doubles for the definition.
    auto in_t = [](std::vector<double> v) {
      for (double& x : v) x = double(T(x));
      return v;
    };
    std::vector<double> A(pr.size_a, nan), B(pr.size_b, nan);
    std::vector<double> C0 = in_t(random_vector(pr.size_c, seed++));
    const std::vector<double> ra = in_t(random_vector(pr.size_a, seed++)),
                              rb = in_t(random_vector(pr.size_b, seed++));
    for (long long i : read_a(pr)) A[i] = ra[i];
    for (long long i : read_b(pr)) B[i] = rb[i];
    const std::vector<long long> out = written(pr);
    if (c.beta == 0)
      for (long long i : out) C0[i] = nan;
    const std::vector<double> ref = reference(pr, A, B, C0);
    // S per written element: the definition on |A|, |B|, |alpha|, |beta| and |C|.
    std::vector<double> aA(A), aB(B), aC(C0);
    for (double& x : aA) x = std::abs(x);
    for (double& x : aB) x = std::abs(x);
    for (double& x : aC) x = std::abs(x);
    Problem apr = pr;
    apr.g.alpha = std::abs(c.alpha), apr.g.beta = std::abs(c.beta);
    const std::vector<double> S = reference(apr, aA, aB, aC);
    const double bound = eps_of(t) * double(c.k + 2);

    auto up = [&](const std::vector<double>& v) {
      DeviceArray<T> d(be);
      d.upload(std::vector<T>(v.begin(), v.end()));
      return d;
    };
    DeviceArray<T> dA = up(A), dB = up(B);
    // Checks @p got (a downloaded C) against the definition, the rest of C against C0.
    auto check = [&](const std::vector<T>& got, const char* what) {
      std::vector<char> in_block(got.size(), 0);
      double err = 0, scale = 0;
      int bad = 0;
      for (long long i : out) {
        in_block[i] = 1;
        const double x = double(got[i]), e = std::abs(x - ref[i]);
        err = std::max(err, e), scale = std::max(scale, std::abs(ref[i]));
        if (!(e <= bound * S[i]) && bad++ < 3)
          ADD_FAILURE() << what << ": C[" << i << "] = " << x << ", definition " << ref[i]
                        << " (error " << e << ", bound " << bound * S[i] << ")";
      }
      if (t == DType::kFloat64)
        EXPECT_LE(err, 1e-13 * scale) << what << ": largest error over largest value";
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (in_block[i]) continue;
        const T want = T(C0[i]);
        if (std::memcmp(&got[i], &want, sizeof(T)) != 0 && bad++ < 6)
          ADD_FAILURE() << what << ": C[" << i << "] outside the block changed to " << got[i];
      }
    };
    for (int tile : tiles) {
      const IrLinearTile& x = ir_linear_tiles(t)[tile < 0 ? 0 : std::size_t(tile)];
      if (tile >= 0 && x.bm < c.d) continue;
      SCOPED_TRACE(tile < 0 ? std::string("planned tile") : ir_linear_kernel_name(t, tile));
      DeviceArray<T> dC = up(C0);
      gk.gemm_ir_linear(t, bind(pr, dA.data(), dB.data(), dC.data()), nullptr, tile);
      check(dC.download(), "ir_linear");
    }
    if (generic) {
      DeviceArray<T> dC = up(C0), dG = up(C0);
      gen.gemm(t, bind(pr, dA.data(), dB.data(), dG.data()), nullptr);
      const std::vector<T> g = dG.download();
      check(g, "generic kernel");
      gk.gemm(t, bind(pr, dA.data(), dB.data(), dC.data()), nullptr);  // gemm()'s route
      const std::vector<T> r = dC.download();
      for (long long i : out)
        EXPECT_LE(std::abs(double(r[i]) - double(g[i])), 2 * bound * S[i])
            << "routed vs generic kernel, C[" << i << "]";
    }
    if (::testing::Test::HasFailure()) return;
  }
}

// The SIMT tiles of @p t, or every tile (with @p mma).
std::vector<int> simt_tiles(DType t, bool mma = false) {
  std::vector<int> v;
  for (int i = 0; i < int(ir_linear_tiles(t).size()); ++i)
    if (mma || !ir_linear_tiles(t)[std::size_t(i)].mma) v.push_back(i);
  return v;
}
// The tiles of the large sweeps: every tile on a GPU; the SIMT tiles in the emulation, where the
// DMMA tile has a smaller sweep of its own (the emulation exchanges every fragment between the
// lanes of a warp, which costs).
std::vector<int> sweep_tiles(const DeviceBackend& be, DType t) {
  return simt_tiles(t, !be.emulated());
}

TEST_P(GenericKernelsIrLinear, EveryTileMatchesTheDefinitionOnFewRowsFp64) {
  expect_ir_linear<double>(*backend_, ir_cases({1, 5}), sweep_tiles(*backend_, DType::kFloat64),
                           true);
}
TEST_P(GenericKernelsIrLinear, EveryTileMatchesTheDefinitionOnFewRowsFp32) {
  expect_ir_linear<float>(*backend_, ir_cases({1, 5}), sweep_tiles(*backend_, DType::kFloat32),
                          true);
}
// MACE's shapes (128 -> 128, l = 1 and 2, forward with B and beta 0, backward with B^T and
// beta 1) on 300 rows: the largest SIMT tile over several tiles of rows, and the planned one.
TEST_P(GenericKernelsIrLinear, LargestTileMatchesTheDefinitionOnMaceShapesFp64) {
  std::vector<IrCase> cases;
  for (long long d : {3, 5})
    for (bool bt : {false, true})
      cases.push_back({300, d, 128, 128, bt, 1.0, bt ? 1.0 : 0.0, 128, 384, 384, 128, 0});
  // The largest SIMT tile and the planned one; on a GPU the DMMA tile as well.
  std::vector<int> tiles = {simt_tiles(DType::kFloat64)[0], -1};
  for (int i : sweep_tiles(*backend_, DType::kFloat64))
    if (ir_linear_tiles(DType::kFloat64)[std::size_t(i)].mma) tiles.push_back(i);
  expect_ir_linear<double>(*backend_, cases, tiles, false);
}
TEST_P(GenericKernelsIrLinear, LargestTileMatchesTheDefinitionOnMaceShapesFp32) {
  std::vector<IrCase> cases;
  for (long long d : {3, 5})
    for (bool bt : {false, true})
      cases.push_back({300, d, 128, 128, bt, 1.0, bt ? 1.0 : 0.0, 128, 384, 384, 128, 0});
  expect_ir_linear<float>(*backend_, cases, {0, -1}, false);
}

// The float64 DMMA tile: every d, K and N tails (37, 1) on 5 rows and a single row with K = 128
// (eight chunks), the layouts in turn, and MACE's shapes on 100 rows (several tiles of rows,
// a partial last one).
TEST_P(GenericKernelsIrLinear, DmmaTileMatchesTheDefinitionFp64) {
  std::vector<int> mma;
  for (int i = 0; i < int(ir_linear_tiles(DType::kFloat64).size()); ++i)
    if (ir_linear_tiles(DType::kFloat64)[std::size_t(i)].mma) mma.push_back(i);
  ASSERT_FALSE(mma.empty());
  std::vector<IrCase> cases = ir_cases({5}, {37, 1}, false);
  for (const IrCase& c : ir_cases({1}, {128, 1}, false)) cases.push_back(c);
  cases.push_back({100, 3, 128, 128, false, 1.0, 0.0, 128, 384, 384, 128, 0});
  cases.push_back({100, 5, 128, 128, true, 1.0, 1.0, 128, 384, 384, 128, 0});
  expect_ir_linear<double>(*backend_, cases, mma, false);
}

// gemm() gives the per-m form to the ir_linear kernel on every backend (d = 1: only where there
// is no cuBLAS), with the GEMM's shape as its timing record's detail and its floor.
TEST_P(GenericKernelsIrLinear, GemmRoutesLinearBlocksToIt) {
  GenericKernels gk(*backend_);
  for (long long d : {1, 3}) {
    const Problem pr = problem(IrCase{5, d, 32, 64, false, 1.0, 1.0, 3, 5, 7, 2, 3});
    SCOPED_TRACE(pr.name);
    DeviceArray<double> dA(*backend_, pr.size_a), dB(*backend_, pr.size_b),
        dC(*backend_, pr.size_c);
    for (DeviceArray<double>* x : {&dA, &dB, &dC}) x->zero();
    backend_->set_kernel_timing(true);
    gk.gemm(DType::kFloat64, bind(pr, dA.data(), dB.data(), dC.data()), nullptr);
    backend_->set_kernel_timing(false);
    const std::vector<KernelTiming> r = backend_->take_kernel_timings();
    ASSERT_EQ(r.size(), 1u);
    if (d == 1 && gk.uses_cublas()) {
      EXPECT_EQ(r[0].name.rfind("cublas dgemm", 0), 0u) << r[0].name;
      continue;
    }
    const std::string detail = d == 1 ? " 5x64x32" : " 5x64x32 x3";
    EXPECT_EQ(r[0].name, "clebsch_ir_linear_f64_32x32" + detail);
    // A and C's blocks once, C also read (beta = 1), B once; 2 m n k d flops.
    EXPECT_EQ(r[0].floor.bytes, 8.0 * (5 * 32 * d + 32 * 64 + 2 * 5 * 64 * d));
    EXPECT_EQ(r[0].floor.flops, 2.0 * 5 * 64 * 32 * d);
  }
}

// 300 rows: many tiles of rows, a partial last one, for every tile and d (multiplicities 37
// and 1 and the layouts in turn: the emulation runs a block's threads as fibers, which costs).
TEST_P(GenericKernelsIrLinear, EveryTileMatchesTheDefinitionOnRowTailsFp64) {
  expect_ir_linear<double>(*backend_, ir_cases({300}, {37, 1}, false),
                           sweep_tiles(*backend_, DType::kFloat64), true);
}
TEST_P(GenericKernelsIrLinear, EveryTileMatchesTheDefinitionOnRowTailsFp32) {
  expect_ir_linear<float>(*backend_, ir_cases({300}, {37, 1}, false),
                          sweep_tiles(*backend_, DType::kFloat32), true);
}

INSTANTIATE_TEST_SUITE_P(Backends, GenericKernelsCublas, ::testing::Values("emulated", "cuda"),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Backends, GenericKernelsIrLinear, ::testing::Values("emulated", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace clebsch::cuda
