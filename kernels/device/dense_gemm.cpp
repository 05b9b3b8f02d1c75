// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The cuBLAS route of GenericKernels::gemm (see dense_gemm.h).
#include "clebsch/cuda/device/dense_gemm.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "clebsch/cuda/device/cublas_loader.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda {
namespace {

bool fits_int(long long v) { return v >= 0 && v <= INT_MAX; }

// An operand X (rows x cols) with X(r, c) = x[r * ld + c * col], as a column-major cuBLAS operand
// equal to X^T (cols x rows): unit column stride -> the storage is X^T with leading dimension ld
// (no transpose); unit row stride -> the storage is X with leading dimension col (transpose).
// A stride along a dimension of size 1 is never used, so it counts as anything (and is replaced
// by a leading dimension cuBLAS accepts: it checks ld >= rows of the stored matrix even where ld
// is unused). A leading dimension below that is refused (overlapping rows).
struct Operand {
  bool ok = false, trans = false;
  long long ld = 0;
};
Operand as_transposed(long long rows, long long cols, long long ld, long long col) {
  Operand o;
  if ((col == 1 || cols == 1) && (rows == 1 || ld >= std::max(1LL, cols))) {
    o.ok = true, o.trans = false, o.ld = rows == 1 ? std::max(1LL, cols) : ld;
  } else if ((ld == 1 || rows == 1) && (cols == 1 || col >= std::max(1LL, rows))) {
    o.ok = true, o.trans = true, o.ld = cols == 1 ? std::max(1LL, rows) : col;
  }
  return o;
}

bool no_cublas_requested() {
  const char* e = std::getenv("CLEBSCH_NO_CUBLAS");
  return e && *e && std::strcmp(e, "0") != 0;
}

}  // namespace

std::optional<CublasGemmPlan> plan_cublas_gemm(const GemmArgs& in) {
  if (in.a_rows || in.c_rows || in.b_select || in.batch != 1) return std::nullopt;
  if (in.m < 1 || in.n < 1 || in.k < 1 || !in.a || !in.b || !in.c) return std::nullopt;
  GemmArgs g = in;
  // C^T (n x m) must be a plain column-major matrix: unit column stride in C. With a unit row
  // stride instead, compute C^T = B^T A^T (swap A and B, m and n), whose C has unit column stride.
  Operand c = as_transposed(g.m, g.n, g.ldc, g.c_col);
  if (!c.ok) return std::nullopt;
  if (c.trans) {
    GemmArgs t = g;
    t.m = g.n, t.n = g.m;
    t.a = g.b, t.lda = g.b_col, t.a_col = g.ldb;
    t.b = g.a, t.ldb = g.a_col, t.b_col = g.lda;
    t.ldc = g.c_col, t.c_col = g.ldc;
    g = t;
    c = as_transposed(g.m, g.n, g.ldc, g.c_col);
    if (!c.ok || c.trans) return std::nullopt;
  }
  // Column-major C^T (n x m, ldc) = op(B^T) (n x k) op(A^T) (k x m).
  const Operand b = as_transposed(g.k, g.n, g.ldb, g.b_col);  // B is k x n -> B^T n x k
  const Operand a = as_transposed(g.m, g.k, g.lda, g.a_col);  // A is m x k -> A^T k x m
  if (!a.ok || !b.ok) return std::nullopt;
  for (long long v : {g.m, g.n, g.k, a.ld, b.ld, c.ld})
    if (!fits_int(v)) return std::nullopt;
  CublasGemmPlan p;
  p.trans_a = b.trans, p.trans_b = a.trans;
  p.m = static_cast<int>(g.n), p.n = static_cast<int>(g.m), p.k = static_cast<int>(g.k);
  p.a = g.b, p.lda = static_cast<int>(b.ld);
  p.b = g.a, p.ldb = static_cast<int>(a.ld);
  p.c = g.c, p.ldc = static_cast<int>(c.ld);
  p.alpha = g.alpha, p.beta = g.beta;
  return p;
}

std::unique_ptr<DenseGemm> DenseGemm::create(DeviceBackend& backend, std::string* why) {
  auto say = [&](std::string s) {
    if (why) *why = std::move(s);
    return nullptr;
  };
  if (backend.emulated()) return say("emulated backend: generic GEMM kernel");
  if (no_cublas_requested()) return say("CLEBSCH_NO_CUBLAS set: generic GEMM kernel");
  const CublasLoad& l = cublas();
  if (!l.ok()) return say(l.error);
  cublasHandle_t h = nullptr;
  // cuBLAS binds the handle to the context current now: the backend's (primary) context.
  if (const cublasStatus_t st = l.api.Create(&h); st != CUBLAS_STATUS_SUCCESS)
    return say(std::string("cublasCreate failed: ") + cublas_status_name(st) +
               " (the generic GEMM kernel is used instead)");
  // Explicit, whatever the library default becomes: no TF32 for SGEMM (see dense_gemm.h).
  if (const cublasStatus_t st = l.api.SetMathMode(h, CUBLAS_DEFAULT_MATH);
      st != CUBLAS_STATUS_SUCCESS) {
    l.api.Destroy(h);
    return say(std::string("cublasSetMathMode failed: ") + cublas_status_name(st));
  }
  if (why) *why = "cuBLAS (" + l.path + ")";
  return std::unique_ptr<DenseGemm>(new DenseGemm(h));
}

DenseGemm::~DenseGemm() {
  if (handle_) cublas().api.Destroy(static_cast<cublasHandle_t>(handle_));
}

void DenseGemm::run(DType t, const CublasGemmPlan& p, Stream s) const {
  const CublasApi& api = cublas().api;
  auto h = static_cast<cublasHandle_t>(handle_);
  auto check = [](cublasStatus_t st, const char* what) {
    if (st != CUBLAS_STATUS_SUCCESS)
      throw CudaError(std::string(what) + " failed: " + cublas_status_name(st));
  };
  // Set on every call: the engines pass their stream per call (CUstream == cudaStream_t).
  check(api.SetStream(h, static_cast<cudaStream_t>(s)), "cublasSetStream");
  const cublasOperation_t ta = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  // beta == 0: cuBLAS does not read C (as the generic kernel), so NaN-poisoned outputs are fine.
  if (t == DType::kFloat64) {
    const double alpha = p.alpha, beta = p.beta;
    check(api.Dgemm(h, ta, tb, p.m, p.n, p.k, &alpha, static_cast<const double*>(p.a), p.lda,
                    static_cast<const double*>(p.b), p.ldb, &beta, static_cast<double*>(p.c),
                    p.ldc),
          "cublasDgemm");
  } else {
    const float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
    check(api.Sgemm(h, ta, tb, p.m, p.n, p.k, &alpha, static_cast<const float*>(p.a), p.lda,
                    static_cast<const float*>(p.b), p.ldb, &beta, static_cast<float*>(p.c),
                    p.ldc),
          "cublasSgemm");
  }
}

}  // namespace clebsch::cuda
