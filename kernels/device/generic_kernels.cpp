// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Host side of the generic kernels (see generic_kernels.h).
#include "clebsch/cuda/device/generic_kernels.h"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "clebsch/cuda/device/ir_linear.h"
#include "kernel_templates.h"

namespace clebsch::cuda {
namespace {

const char* suffix(DType t) { return t == DType::kFloat32 ? "f32" : "f64"; }

// A GEMM's detail in its kernel-timing record (DeviceBackend::set_timing_detail): "MxNxK" (the
// row-major C[m][n] = A[m][k] B[k][n]), then " x<batch>" when batched, " gather" with row
// gathers, " select" with per-row weights: what tells the linears of a layer apart. Written
// into @p buf, so that a timed step allocates nothing for it.
std::string_view gemm_detail(const GemmArgs& a, char (&buf)[96]) {
  char batch[24] = "";
  if (a.batch != 1) std::snprintf(batch, sizeof batch, " x%lld", a.batch);
  const int n = std::snprintf(buf, sizeof buf, "%lldx%lldx%lld%s%s%s", a.m, a.n, a.k, batch,
                              a.a_rows || a.c_rows ? " gather" : "", a.b_select ? " select" : "");
  return std::string_view(buf, std::size_t(std::clamp(n, 0, int(sizeof buf) - 1)));
}

double size_of_type(DType t) { return t == DType::kFloat64 ? 8.0 : 4.0; }

// A GEMM's floor: A, B and C each moved once (C also read when beta != 0; B once, or once per
// batch when it has a batch stride: a species-selected B counts once, a lower bound), the row
// indices once, 2 m n k flops per batch.
KernelFloor gemm_floor(DType t, const GemmArgs& a) {
  const double e = size_of_type(t), batch = double(a.batch), m = double(a.m), n = double(a.n),
               k = double(a.k);
  const double c = m * n * batch * (a.beta != 0.0 ? 2.0 : 1.0);
  const double b = k * n * (a.b_batch ? batch : 1.0);
  const double rows = 4.0 * m * ((a.a_rows ? 1 : 0) + (a.c_rows ? 1 : 0) + (a.b_select ? 1 : 0));
  return {e * (m * k * batch + b + c) + rows, 2.0 * m * n * k * batch};
}

}  // namespace

LaunchDims grid_for(long long n, unsigned threads) {
  LaunchDims d;
  d.threads = threads;
  // Grid-stride loops: a capped grid covers any n; 65536 blocks saturate any current GPU.
  const long long blocks = std::min<long long>((n + threads - 1) / threads, 65536);
  d.grid_x = static_cast<unsigned>(std::max<long long>(blocks, n > 0 ? 1 : 0));
  return d;
}

std::string generic_kernels_source() {
  return std::string("// Clebsch generic kernels\n") + templates::k_device_args + "\n" +
         templates::k_generic_kernels + ir_linear_source();
}

std::vector<KernelSpec> generic_kernel_specs() {
  std::vector<KernelSpec> specs;
  const char* one[][2] = {{"gemm", "GemmArgs"},
                          {"fill", "FillArgs"},
                          {"act_forward", "ActArgs"},
                          {"act_backward", "ActArgs"},
                          {"scale_rows", "ScaleRowsArgs"},
                          {"row_dot", "RowDotArgs"},
                          {"gate_forward", "GateArgs"},
                          {"gate_backward", "GateArgs"},
                          {"layer_norm_forward", "LayerNormArgs"},
                          {"layer_norm_backward", "LayerNormArgs"}};
  for (auto& k : one)
    for (const char* s : {"f32", "f64"})
      specs.push_back({std::string("clebsch_") + k[0] + "_" + s, k[1], false, 0});
  const char* two[][2] = {{"axpby", "AxpbyArgs"}, {"segment_sum", "SegmentSumArgs"}};
  for (auto& k : two)
    for (const char* s : {"f32_f32", "f32_f64", "f64_f32", "f64_f64"})
      specs.push_back({std::string("clebsch_") + k[0] + "_" + s, k[1], false, 0});
  for (KernelSpec& s : ir_linear_kernel_specs()) specs.push_back(std::move(s));
  return specs;
}

GenericKernels::GenericKernels(DeviceBackend& backend, GemmRoute route) : backend_(backend) {
  total_bounds_.name("generic kernels: total's bounds", BufferScale::kFixed);
  module_ = backend_.load({"clebsch_generic.cu", generic_kernels_source(), generic_kernel_specs()});
  // After load(): the backend has made its context current, which the cuBLAS handle binds to.
  if (route == GemmRoute::kAuto)
    dense_ = DenseGemm::create(backend_, &gemm_route_);
  else
    gemm_route_ = "generic GEMM kernel (requested)";
}

const DeviceKernel& GenericKernels::k(const std::string& base, DType t) const {
  return module_->kernel("clebsch_" + base + "_" + suffix(t));
}
const DeviceKernel& GenericKernels::k2(const std::string& base, DType tx, DType ty) const {
  return module_->kernel("clebsch_" + base + "_" + suffix(tx) + "_" + suffix(ty));
}

bool GenericKernels::ir_mul_route(const GemmArgs& a) {
  // The per-m GEMMs of a linear block on mul_ir rows: per row a d x k by k x n product, which
  // cuBLAS could only take as one tiny GEMM per row or through permuted copies of the rows.
  return a.batch >= 1 && a.batch <= kIrLinearMaxDim && a.a_batch == 1 && a.c_batch == 1 &&
         a.b_batch == 0 && a.a_col == a.batch && a.c_col == a.batch && !a.a_rows && !a.c_rows &&
         !a.b_select && a.m > 0 && a.k > 0 && a.n > 0;
}

void GenericKernels::gemm_ir_linear(DType t, const GemmArgs& a, Stream s, int tile) const {
  if (backend_.kernel_timing()) {
    char detail[96];
    backend_.set_timing_detail(gemm_detail(a, detail));
    const KernelFloor f = gemm_floor(t, a);
    backend_.set_timing_floor(f.bytes, f.flops);
  }
  launch_ir_linear(backend_, *module_, t, a, s, tile);
}

void GenericKernels::gemm(DType t, const GemmArgs& a, Stream s) const {
  if (ir_mul_route(a) && (a.batch > 1 || !dense_)) return gemm_ir_linear(t, a, s);
  const bool timing = backend_.kernel_timing();
  char detail[96];
  if (dense_)
    if (const std::optional<CublasGemmPlan> p = plan_cublas_gemm(a)) {
      if (!timing) return dense_->run(t, *p, s);
      // cuBLAS launches its own kernels, past launch(): bracketed here as one record, named after
      // the call (gemm or gemmStridedBatched) with the GemmArgs shape as detail.
      backend_.set_timing_detail(gemm_detail(a, detail));
      const KernelFloor f = gemm_floor(t, a);
      backend_.set_timing_floor(f.bytes, f.flops);
      const bool f32 = t == DType::kFloat32;
      const char* what = p->batch == 1 ? (f32 ? "cublas sgemm" : "cublas dgemm")
                                       : (f32 ? "cublas sgemm batched" : "cublas dgemm batched");
      const std::size_t mark = backend_.begin_timed_region(what, s);
      dense_->run(t, *p, s);
      return backend_.end_timed_region(mark, s);
    }
  const LaunchDims d = grid_for(a.batch * a.m * a.n);
  // The detail goes to the launch's record; an empty grid launches nothing and records nothing.
  if (timing && d.grid_x > 0) {
    backend_.set_timing_detail(gemm_detail(a, detail));
    const KernelFloor f = gemm_floor(t, a);
    backend_.set_timing_floor(f.bytes, f.flops);
  }
  backend_.launch(k("gemm", t), d, s, a);
}
// The element-wise kernels' floors: each operand read once, each result written once.
void GenericKernels::fill(DType t, void* x, long long n, double value, Stream s) const {
  backend_.set_timing_floor(size_of_type(t) * double(n));
  backend_.launch(k("fill", t), grid_for(n), s, FillArgs{x, n, value});
}
void GenericKernels::axpby(DType tx, DType ty, const AxpbyArgs& a, Stream s) const {
  const double n = double(a.rows) * double(a.cols);
  backend_.set_timing_floor(n * (size_of_type(tx) + size_of_type(ty) * (a.beta != 0.0 ? 2 : 1)) +
                            4.0 * double(a.rows) * ((a.x_rows ? 1 : 0) + (a.y_rows ? 1 : 0)));
  backend_.launch(k2("axpby", tx, ty), grid_for(a.rows * a.cols), s, a);
}
void GenericKernels::act_forward(DType t, const ActArgs& a, Stream s) const {
  // z read, a written (z also written back with a bias).
  backend_.set_timing_floor(size_of_type(t) * double(a.rows) * double(a.c1 - a.c0) *
                            (a.bias ? 3.0 : 2.0));
  backend_.launch(k("act_forward", t), grid_for(a.rows * (a.c1 - a.c0)), s, a);
}
void GenericKernels::act_backward(DType t, const ActArgs& a, Stream s) const {
  backend_.set_timing_floor(size_of_type(t) * double(a.rows) * double(a.c1 - a.c0) * 3.0);
  backend_.launch(k("act_backward", t), grid_for(a.rows * (a.c1 - a.c0)), s, a);
}
void GenericKernels::total(const double* x, long long n, double* out, Stream s) const {
  if (n != total_n_) {
    const int bounds[2] = {0, static_cast<int>(n)};
    total_bounds_.upload(bounds, 2, s);
    backend_.synchronize(s);  // the upload reads a local
    total_n_ = n;
  }
  segment_sum(DType::kFloat64, DType::kFloat64,
              SegmentSumArgs{x, out, total_bounds_.data(), 1, 1, 0, 0}, s);
}

void GenericKernels::segment_sum(DType tx, DType tout, const SegmentSumArgs& a, Stream s) const {
  backend_.launch(k2("segment_sum", tx, tout), grid_for(a.rows), s, a);
}
void GenericKernels::scale_rows(DType t, const ScaleRowsArgs& a, Stream s) const {
  backend_.set_timing_floor(size_of_type(t) * double(a.rows) * (2.0 * double(a.cols) + 1.0));
  backend_.launch(k("scale_rows", t), grid_for(a.rows * a.cols), s, a);
}
void GenericKernels::row_dot(DType t, const RowDotArgs& a, Stream s) const {
  backend_.set_timing_floor(size_of_type(t) * double(a.rows) * (2.0 * double(a.cols) + 1.0),
                            2.0 * double(a.rows) * double(a.cols));
  backend_.launch(k("row_dot", t), grid_for(a.rows), s, a);
}
void GenericKernels::gate_forward(DType t, const GateArgs& a, Stream s) const {
  backend_.launch(k("gate_forward", t), grid_for(a.rows * a.dim_out), s, a);
}
void GenericKernels::gate_backward(DType t, const GateArgs& a, Stream s) const {
  backend_.launch(k("gate_backward", t), grid_for(a.rows * a.dim_in), s, a);
}
void GenericKernels::layer_norm_forward(DType t, const LayerNormArgs& a, Stream s) const {
  backend_.set_timing_floor(size_of_type(t) * double(a.rows) * double(a.cols) * 2.0);
  backend_.launch(k("layer_norm_forward", t), grid_for(a.rows), s, a);
}
void GenericKernels::layer_norm_backward(DType t, const LayerNormArgs& a, Stream s) const {
  backend_.set_timing_floor(size_of_type(t) * double(a.rows) * double(a.cols) * 3.0);
  backend_.launch(k("layer_norm_backward", t), grid_for(a.rows), s, a);
}

GemmArgs GenericKernels::dense(const void* A, const void* B, void* C, long long m, long long n,
                               long long k, double alpha, double beta) {
  GemmArgs g{};
  g.a = A, g.b = B, g.c = C;
  g.m = m, g.n = n, g.k = k, g.batch = 1;
  g.lda = k, g.a_col = 1;
  g.ldb = n, g.b_col = 1;
  g.ldc = n, g.c_col = 1;
  g.alpha = alpha, g.beta = beta;
  return g;
}

AxpbyArgs GenericKernels::vector(const void* x, void* y, long long n, double alpha, double beta) {
  AxpbyArgs a{};
  a.x = x, a.y = y;
  a.rows = 1, a.cols = n, a.ldx = n, a.ldy = n;
  a.alpha = alpha, a.beta = beta;
  return a;
}

}  // namespace clebsch::cuda
