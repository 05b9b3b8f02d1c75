// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Host side of the generic kernels (see generic_kernels.h).
#include "clebsch/cuda/device/generic_kernels.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "clebsch/cuda/device/ir_linear.h"
#include "clebsch/cuda/device/mlp_mma_fragments.h"
#include "clebsch/cuda/device/tf32x3_gemm.h"
#include "clebsch/support/error.h"
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

// templates/mlp_chain.cuh.in's tile: kMlpRows rows a block, kMlpStride values a feature.
constexpr int kMlpRows = 32, kMlpThreads = 128, kMlpStride = kMlpRows + 4;
// templates/mlp_chain_mma.cuh.in: 4 warps of 8 (float64) or 16 (float32) rows, every layer 64
// wide, and per layer each lane's 16 float64 / 32 float32 phi'(z) in the backward (float64: but
// the last layer's, whose gy phi' the forward's epilogue makes at once).
constexpr int kMmaThreads = 128, kMmaPhiBytes = 16 * 8 * kMmaThreads;

bool simt_chain_requested() {
  const char* e = std::getenv("CLEBSCH_MLP_SIMT");
  return e && *e && std::strcmp(e, "0") != 0;
}
// Whether float32 forwards take the tensor-core chain (CLEBSCH_MLP_F32_FORWARD=mma) instead of
// the SIMT one (H100 run 29: the step even with it, 27.92 against 27.90 ms at 10k atoms).
bool f32_forward_on_mma() {
  const char* e = std::getenv("CLEBSCH_MLP_F32_FORWARD");
  return e && std::strcmp(e, "mma") == 0;
}
// What the chain kernels may ask for (DeviceMlp keeps its chains within it).
constexpr unsigned kMlpMaxShared = 200 * 1024;

// A chain's floor: x (and gy, gx in the backward) and y moved once, the weights once; 2 flops a
// multiply-add, the backward's forward made again and its transposed products counted.
KernelFloor mlp_floor(DType t, const MlpChainArgs& a, bool backward) {
  const double e = size_of_type(t), rows = double(a.rows);
  double weights = 0, fma = 0;
  for (int l = 0; l < a.num_layers; ++l) {
    const double w = double(a.dims[l]) * double(a.dims[l + 1]);
    weights += w * (backward ? 2 : 1) + (a.b_off[l] >= 0 ? a.dims[l + 1] : 0);
    fma += w * (backward ? 2 : 1);
  }
  const double io = double(a.dims[0]) * (backward ? 2 : 1) + double(a.dims[a.num_layers]);
  return {e * (rows * io + weights), 2.0 * rows * fma};
}
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

std::string generic_helpers_source() {
  return std::string("// Clebsch generic kernels\n") + templates::k_device_args + "\n" +
         templates::k_generic_kernels;
}

std::string generic_kernels_source() {
  return generic_helpers_source() + "\n" + templates::k_mlp_chain + ir_linear_source() +
         tf32x3_kernels_source() + "\n" + templates::k_mlp_chain_mma;
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
  // Block barriers and shared tiles: run as whole blocks by the emulator.
  for (const char* k : {"mlp_forward", "mlp_backward", "mlp_mma_forward", "mlp_mma_backward"})
    for (const char* s : {"f32", "f64"})
      specs.push_back({std::string("clebsch_") + k + "_" + s, "MlpChainArgs", true, kMlpMaxShared});
  for (KernelSpec& s : tf32x3_kernel_specs()) specs.push_back(std::move(s));
  for (KernelSpec& s : ir_linear_kernel_specs()) specs.push_back(std::move(s));
  return specs;
}

GenericKernels::GenericKernels(DeviceBackend& backend, GemmRoute route) : backend_(backend) {
  total_bounds_.name("generic kernels: total's bounds", BufferScale::kFixed);
  module_ = backend_.load({"clebsch_generic.cu", generic_kernels_source(), generic_kernel_specs()});
  tf32x3_ = route == GemmRoute::kAuto && !tf32x3_disabled_by_env() &&
            backend_.limits().sm_major >= 8;  // TF32 MMAs and cp.async
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

void GenericKernels::gemm_tf32x3(const GemmArgs& a, Stream s) const {
  const std::optional<Tf32x3Plan> p = plan_tf32x3_gemm(DType::kFloat32, a);
  if (!p)
    throw Error("gemm_tf32x3: the " + std::to_string(a.m) + "x" + std::to_string(a.n) + "x" +
                std::to_string(a.k) +
                " GEMM is not a form the 3xTF32 kernels take (batch 1, no gathers or "
                "selection, unit column strides in A and C, a unit stride in B)");
  if (backend_.kernel_timing()) {
    char detail[96];
    backend_.set_timing_detail(gemm_detail(a, detail));
    const KernelFloor f = gemm_floor(DType::kFloat32, a);
    backend_.set_timing_floor(f.bytes, f.flops);
  }
  backend_.launch(module_->kernel(p->kernel->name), p->dims, s, a);
}

void GenericKernels::gemm(DType t, const GemmArgs& a, Stream s) const {
  if (tf32x3_ && tf32x3_route(t, a) && (!dense_ || tf32x3_beside_cublas(a)))
    return gemm_tf32x3(a, s);
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
unsigned GenericKernels::mlp_shared_bytes(DType t, const MlpChainArgs& a, bool backward) {
  long long tiles = 2LL * a.max_width;
  if (backward)
    for (int l = 0; l < a.num_layers; ++l) tiles += a.dims[l + 1];
  return static_cast<unsigned>(tiles * kMlpStride * static_cast<long long>(size_of_type(t)));
}
void GenericKernels::mlp_forward(DType t, const MlpChainArgs& a, Stream s) const {
  launch_mlp(t, a, false, s);
}
void GenericKernels::mlp_backward(DType t, const MlpChainArgs& a, Stream s) const {
  launch_mlp(t, a, true, s);
}
bool GenericKernels::mlp_mma_route(const MlpChainArgs& a, const BackendLimits& limits,
                                   bool emulated) {
  if (simt_chain_requested() || (!emulated && limits.sm_major < 8)) return false;
  return mlp_mma_shapes(a) && a.wf_off[0] >= 0;
}

bool GenericKernels::mlp_chain_pays(const MlpChainArgs& a, const BackendLimits& limits,
                                    bool emulated) {
  return simt_chain_requested() || mlp_mma_route(a, limits, emulated);
}

void GenericKernels::launch_mlp(DType t, const MlpChainArgs& a, bool backward, Stream s) const {
  if (a.rows <= 0) return;
  const KernelFloor f = mlp_floor(t, a, backward);
  // float32 forwards stay on the SIMT chain (0.71 ms per radial MLP on an H100; the 3xTF32
  // chain's forward was slower in run 28 and even in run 29), backwards on the tensor cores
  // (1.18 ms against the SIMT chain's 2.6).
  if (mlp_mma_route(a, backend_.limits(), backend_.emulated()) &&
      (backward || t == DType::kFloat64 || f32_forward_on_mma())) {
    const long long rows = t == DType::kFloat64 ? 32 : 64;
    LaunchDims d;
    d.threads = kMmaThreads;
    d.grid_x = static_cast<unsigned>(std::min<long long>((a.rows + rows - 1) / rows, 1 << 20));
    const int tiles = t == DType::kFloat64 ? a.num_layers - 1 : a.num_layers;
    d.shared_bytes = backward ? static_cast<unsigned>(tiles * kMmaPhiBytes) : 0;
    backend_.set_timing_floor(f.bytes, f.flops);
    return backend_.launch(k(backward ? "mlp_mma_backward" : "mlp_mma_forward", t), d, s, a);
  }
  LaunchDims d;
  d.threads = kMlpThreads;
  d.grid_x =
      static_cast<unsigned>(std::min<long long>((a.rows + kMlpRows - 1) / kMlpRows, 1 << 20));
  d.shared_bytes = mlp_shared_bytes(t, a, backward);
  if (d.shared_bytes > kMlpMaxShared)
    throw Error("MLP chain: its tiles need " + std::to_string(d.shared_bytes) +
                " bytes of shared memory, more than " + std::to_string(kMlpMaxShared));
  backend_.set_timing_floor(f.bytes, f.flops);
  backend_.launch(k(backward ? "mlp_backward" : "mlp_forward", t), d, s, a);
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
