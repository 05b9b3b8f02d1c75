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

// The one-matrix mapping of plan_cublas_gemm for the m x n x k problem of @p in's strides (its
// batch fields ignored), with @p stride_a / @p stride_b / @p stride_c the elements between batch
// entries of in.a / in.b / in.c: they follow their operand when A and B trade places.
std::optional<CublasGemmPlan> plan_matrix(const GemmArgs& in, long long stride_a,
                                          long long stride_b, long long stride_c) {
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
    std::swap(stride_a, stride_b);
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
  p.a = g.b, p.lda = static_cast<int>(b.ld), p.stride_a = stride_b;
  p.b = g.a, p.ldb = static_cast<int>(a.ld), p.stride_b = stride_a;
  p.c = g.c, p.ldc = static_cast<int>(c.ld), p.stride_c = stride_c;
  p.alpha = g.alpha, p.beta = g.beta;
  return p;
}

}  // namespace

std::optional<CublasGemmPlan> plan_cublas_gemm(const GemmArgs& in) {
  if (in.a_rows || in.c_rows || in.b_select || in.batch < 1) return std::nullopt;
  if (in.m < 1 || in.n < 1 || in.k < 1 || !in.a || !in.b || !in.c) return std::nullopt;
  if (in.batch == 1) return plan_matrix(in, 0, 0, 0);
  // A batch of whole matrices (unit stride inside each, the batch stride between them: the
  // per-m matrices of a batch-major copy): cuBLAS's strided batch over the batch index.
  if ((in.a_col == 1 || in.lda == 1) && (in.c_col == 1 || in.ldc == 1) && in.a_batch != 1 &&
      in.c_batch != 1 && fits_int(in.batch)) {
    std::optional<CublasGemmPlan> p = plan_matrix(in, in.a_batch, in.b_batch, in.c_batch);
    if (p) {
      p->batch = static_cast<int>(in.batch);
      return p;
    }
  }
  // A batch (the m index of e3nn linear blocks): per row i, the small problem
  // C_i(bt, j) = sum_k A_i(bt, k) B(k, j) with A_i(bt, k) = a[i lda + k a_col + bt a_batch],
  // C_i(bt, j) = c[i ldc + j c_col + bt c_batch]: the batch index is its row index. B must be the
  // same for every bt; the rows i become cuBLAS's batch, B shared between them.
  if (in.b_batch != 0 || !fits_int(in.m)) return std::nullopt;
  // A single row needs no stride. Negative row strides (never set by the engines) are left to
  // the generic kernel rather than trusted to cuBLAS's batch arithmetic.
  const bool one = in.m == 1;
  if (!one && (in.lda < 0 || in.ldc < 0)) return std::nullopt;
  GemmArgs row = in;
  row.m = in.batch, row.batch = 1;
  row.lda = in.a_batch, row.ldc = in.c_batch;
  std::optional<CublasGemmPlan> p = plan_matrix(row, one ? 0 : in.lda, 0, one ? 0 : in.ldc);
  if (p) p->batch = static_cast<int>(in.m);
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
    const auto* a = static_cast<const double*>(p.a);
    const auto* b = static_cast<const double*>(p.b);
    auto* c = static_cast<double*>(p.c);
    if (p.batch == 1)
      check(api.Dgemm(h, ta, tb, p.m, p.n, p.k, &alpha, a, p.lda, b, p.ldb, &beta, c, p.ldc),
            "cublasDgemm");
    else
      check(api.DgemmStridedBatched(h, ta, tb, p.m, p.n, p.k, &alpha, a, p.lda, p.stride_a, b,
                                    p.ldb, p.stride_b, &beta, c, p.ldc, p.stride_c, p.batch),
            "cublasDgemmStridedBatched");
  } else {
    const float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
    const auto* a = static_cast<const float*>(p.a);
    const auto* b = static_cast<const float*>(p.b);
    auto* c = static_cast<float*>(p.c);
    if (p.batch == 1)
      check(api.Sgemm(h, ta, tb, p.m, p.n, p.k, &alpha, a, p.lda, b, p.ldb, &beta, c, p.ldc),
            "cublasSgemm");
    else
      check(api.SgemmStridedBatched(h, ta, tb, p.m, p.n, p.k, &alpha, a, p.lda, p.stride_a, b,
                                    p.ldb, p.stride_b, &beta, c, p.ldc, p.stride_c, p.batch),
            "cublasSgemmStridedBatched");
  }
}

}  // namespace clebsch::cuda
