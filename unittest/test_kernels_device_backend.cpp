// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The device layer (device_backend.h, device_array.h, generic_kernels.h, conv_runner.h) against
// plain host loops and the host convolution, on the emulated backend always (no GPU needed: the
// device source is compiled by the host compiler) and on the CUDA backend when a GPU is present.
// The generic module is also compiled by NVRTC for sm_90 without a GPU, so a kernel that only
// the host compiler accepts fails here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <tuple>

#include "clebsch/cuda/device/cuda_driver.h"
#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/device/nvrtc_module.h"
#include "clebsch/cuda/engine/conv_runner.h"
#include "clebsch/engine/mace_kernels.h"
#include "clebsch/engine/radial_spline.h"
#include "clebsch/model/model.h"
#include "clebsch/o3/convolution.h"
#include "clebsch/support/error.h"
#include "kernels/kernel_test_util.h"

namespace clebsch::cuda {
namespace {

TEST(GenericKernels, CompileWithNvrtcForSm90) {
  CompileOptions o;
  o.arch = "sm_90";
  o.cache_dir = "off";
  const Cubin c = compile_cubin(generic_kernels_source(), "clebsch_generic.cu", o);
  EXPECT_GT(c.image.size(), 1000u);
}

TEST(CudaBackend, WithoutDriverThrowsAnActionableMessage) {
  if (device_available()) GTEST_SKIP() << "a CUDA device is present";
  try {
    make_cuda_backend(0);
    FAIL() << "no exception";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("device cpu"), std::string::npos) << e.what();
  }
}

TEST(CudaBackend, DeviceForLocalRankSpreadsRanksOverTheNodesDevices) {
  for (const char* n : {"OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                        "MPI_LOCALRANKID", "SLURM_LOCALID", "PMI_LOCAL_RANK"})
    unsetenv(n);
  EXPECT_EQ(device_for_local_rank(4), 0);
  setenv("SLURM_LOCALID", "6", 1);
  EXPECT_EQ(device_for_local_rank(4), 2);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);  // the first variable found wins
  EXPECT_EQ(device_for_local_rank(4), 3);
  EXPECT_EQ(device_for_local_rank(1), 0);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1);  // not a number: the next one
  EXPECT_EQ(device_for_local_rank(4), 2);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("SLURM_LOCALID");
}

std::unique_ptr<DeviceBackend> backend_named(const std::string& name) {
  if (name == "emulated") return make_emulated_backend();
  return make_cuda_backend(0);
}

class Backend : public ::testing::TestWithParam<std::string> {
 public:
  void SetUp() override {
    if (GetParam() == "cuda" && !device_available()) GTEST_SKIP() << "no CUDA device";
    backend_ = backend_named(GetParam());
    kernels_ = std::make_unique<GenericKernels>(*backend_);
  }
  template <class T>
  DeviceArray<T> up(const std::vector<T>& v) {
    DeviceArray<T> d(*backend_);
    d.upload(v);
    return d;
  }
  // A graph's index arrays on the device and the ConvBuffers fields that name them.
  struct DeviceGraph {
    DeviceArray<int> snd, rcv, rptr, rord, sptr, sord;
    ConvBuffers buffers(std::size_t num_nodes) const {
      ConvBuffers b;
      b.num_senders = b.num_receivers = static_cast<std::int64_t>(num_nodes);
      b.num_edges = static_cast<std::int64_t>(snd.size());
      b.sender = snd.data(), b.receiver = rcv.data();
      b.receiver_ptr = rptr.data(), b.receiver_order = rord.data();
      b.sender_ptr = sptr.data(), b.sender_order = sord.data();
      return b;
    }
  };
  DeviceGraph up_graph(const test::Graph& g, const EdgeIndex& edges) {
    return {up<int>(g.sender),
            up<int>(g.receiver),
            up<int>(edges.receiver_ptr()),
            up<int>(edges.by_receiver()),
            up<int>(edges.sender_ptr()),
            up<int>(edges.by_sender())};
  }
  std::unique_ptr<DeviceBackend> backend_;
  std::unique_ptr<GenericKernels> kernels_;
};

std::vector<double> randv(std::size_t n, int seed) { return test::randn(n, seed); }

template <class T>
double max_rel(const std::vector<T>& a, const std::vector<double>& b) {
  std::vector<double> w(a.begin(), a.end());
  return test::rel_error(w, b);
}

// A strided, batched GEMM with row gathers, per-row weight selection and beta: the shape of an
// e3nn linear on mul_ir rows (batch over m, column stride 2l+1) with species-selected weights.
template <class T>
void check_gemm(Backend& t, DeviceBackend& be, GenericKernels& k, double tol) {
  const long long rows = 7, m = 5, n = 4, kk = 3, batch = 3, S = 2;
  const long long lda = 20, ldc = 17;
  std::vector<double> A = randv(rows * lda, 1), B = randv(S * kk * n * 2, 2),
                      C0 = randv(rows * ldc, 3);
  std::vector<int> a_rows = {6, 0, 3, 2, 5}, c_rows = {1, 4, 0, 6, 2}, sel = {1, 0, 1, 1, 0};
  GemmArgs g{};
  g.m = m, g.n = n, g.k = kk, g.batch = batch;
  g.lda = lda, g.a_col = 3, g.a_batch = 1;
  g.ldb = n * 2, g.b_col = 2, g.b_batch = 0, g.b_select_stride = kk * n * 2;
  g.ldc = ldc, g.c_col = 3, g.c_batch = 1;
  g.alpha = 0.5, g.beta = -1.25;
  std::vector<double> ref = C0;
  for (long long b = 0; b < batch; ++b)
    for (long long i = 0; i < m; ++i)
      for (long long j = 0; j < n; ++j) {
        double acc = 0;
        for (long long q = 0; q < kk; ++q)
          acc += A[a_rows[i] * lda + q * 3 + b] * B[sel[i] * g.b_select_stride + q * g.ldb + j * 2];
        double& c = ref[c_rows[i] * ldc + j * 3 + b];
        c = 0.5 * acc - 1.25 * c;
      }
  auto dA = t.template up<T>(test::cast<T>(A));
  auto dB = t.template up<T>(test::cast<T>(B));
  auto dC = t.template up<T>(test::cast<T>(C0));
  auto dar = t.template up<int>(a_rows), dcr = t.template up<int>(c_rows),
       dsel = t.template up<int>(sel);
  g.a = dA.data(), g.b = dB.data(), g.c = dC.data();
  g.a_rows = dar.data(), g.c_rows = dcr.data(), g.b_select = dsel.data();
  k.gemm(dtype_of<T>(), g, nullptr);
  EXPECT_LE(max_rel(dC.download(), ref), tol);
  (void)be;
}

TEST_P(Backend, GemmMatchesHostLoops) {
  check_gemm<double>(*this, *backend_, *kernels_, 1e-15);
  check_gemm<float>(*this, *backend_, *kernels_, 1e-6);
}

TEST_P(Backend, AxpbyGathersScattersAndConverts) {
  const std::vector<double> x = randv(5 * 4, 4);
  std::vector<double> y0 = randv(6 * 3, 5);
  auto dx = up<double>(x);
  auto dy = up<float>(test::cast<float>(y0));
  auto rows_x = up<int>({4, 1, 0}), rows_y = up<int>({5, 5, 2});
  AxpbyArgs a{};
  a.x = dx.data(), a.y = dy.data(), a.x_rows = rows_x.data(), a.y_rows = rows_y.data();
  a.rows = 3, a.cols = 3, a.ldx = 4, a.ldy = 3, a.alpha = 2.0, a.beta = 0, a.scatter_add = 1;
  kernels_->axpby(DType::kFloat64, DType::kFloat32, a, nullptr);
  std::vector<double> ref = test::widen(test::cast<float>(y0));
  const int rx[] = {4, 1, 0}, ry[] = {5, 5, 2};
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < 3; ++c) ref[ry[i] * 3 + c] += 2.0 * x[rx[i] * 4 + c];
  EXPECT_LE(max_rel(dy.download(), ref), 1e-6);
}

TEST_P(Backend, ActivationsMatchTheHostEngine) {
  const std::vector<double> z0 = randv(4 * 6, 6), bias = randv(6, 7), g0 = randv(4 * 6, 8);
  for (int kind = 0; kind < 5; ++kind) {
    mace_detail::ScalarAct act;
    act.kind = static_cast<mace_detail::ScalarAct::Kind>(kind);
    act.cst = 1.7;
    auto z = up<double>(z0), a = up<double>(std::vector<double>(24, 0.0)), b = up<double>(bias),
         g = up<double>(g0);
    ActArgs p{};
    p.z = z.data(), p.a = a.data(), p.g = g.data(), p.bias = b.data();
    p.rows = 4, p.ld = 6, p.c0 = 1, p.c1 = 5, p.kind = kind, p.cst = 1.7, p.out_scale = 0.5;
    kernels_->act_forward(DType::kFloat64, p, nullptr);
    p.bias = nullptr;
    kernels_->act_backward(DType::kFloat64, p, nullptr);
    std::vector<double> ra(24, 0.0), rg = g0;
    for (int i = 0; i < 4; ++i)
      for (int c = 1; c < 5; ++c) {
        double d;
        const double v = act.value_and_derivative(z0[i * 6 + c] + bias[c], &d);
        ra[i * 6 + c] = 0.5 * v;
        rg[i * 6 + c] *= 0.5 * d;
      }
    EXPECT_LE(max_rel(a.download(), ra), 1e-15) << "kind " << kind;
    EXPECT_LE(max_rel(g.download(), rg), 1e-15) << "kind " << kind;
  }
}

TEST_P(Backend, SegmentSumsScaleRowsAndRowDots) {
  const std::vector<double> x = randv(7 * 2, 9);
  auto dx = up<double>(x);
  auto ptr = up<int>({0, 3, 3, 7});
  DeviceArray<double> out(*backend_, 3);
  SegmentSumArgs s{dx.data(), out.data(), ptr.data(), 3, 2, 1, 0};
  kernels_->segment_sum(DType::kFloat64, DType::kFloat64, s, nullptr);
  const std::vector<double> ref = {x[1] + x[3] + x[5], 0.0, x[7] + x[9] + x[11] + x[13]};
  EXPECT_LE(max_rel(out.download(), ref), 1e-15);

  auto y = up<double>(x);
  auto sc = up<double>({0.5, 2.0, -3.0, 1.0, 0.0, 4.0, 1.5});
  kernels_->scale_rows(DType::kFloat64, ScaleRowsArgs{y.data(), sc.data(), 7, 2, 2, 1}, nullptr);
  const double f[] = {0.5, 2.0, -3.0, 1.0, 0.0, 4.0, 1.5};
  std::vector<double> ry = x;
  for (int i = 0; i < 7; ++i)
    for (int c = 0; c < 2; ++c) ry[i * 2 + c] /= 1.0 + f[i];
  EXPECT_LE(max_rel(y.download(), ry), 1e-15);

  DeviceArray<double> dots(*backend_, 7);
  kernels_->fill(DType::kFloat64, dots.data(), 7, 1.0, nullptr);
  kernels_->row_dot(DType::kFloat64,
                    RowDotArgs{dx.data(), y.data(), dots.data(), 7, 2, 2, 2, -1.0, 2.0}, nullptr);
  std::vector<double> rd(7);
  for (int i = 0; i < 7; ++i) rd[i] = 2.0 - (x[2 * i] * ry[2 * i] + x[2 * i + 1] * ry[2 * i + 1]);
  EXPECT_LE(max_rel(dots.download(), rd), 1e-15);
}

// The generated convolution through ConvRunner, forward and fused backward, both modes.
TEST_P(Backend, ConvRunnerMatchesTheHostConvolution) {
  TensorProduct tp = test::test_shapes().front().tp;
  for (const auto& s : test::test_shapes())
    if (s.name == "MaceLike") tp = s.tp;
  for (Accumulation acc : {Accumulation::kDeterministic, Accumulation::kAtomic}) {
    ConvRunner conv(*backend_, tp, DType::kFloat64, acc);
    const test::Graph g = test::random_graph(9, 40, true, 3);
    const EdgeIndex edges(g.num_nodes, g.num_nodes, g.sender, g.receiver);
    const std::size_t n = g.num_nodes, e = g.sender.size();
    const auto x = randv(n * tp.dim_in1(), 1), y = randv(e * tp.dim_in2(), 2),
               w = randv(e * tp.weight_numel(), 3), go = randv(n * tp.dim_out(), 4);
    auto dx = up<double>(x), dy = up<double>(y), dw = up<double>(w), dgo = up<double>(go);
    const DeviceGraph dg = up_graph(g, edges);
    DeviceArray<double> out(*backend_, n * tp.dim_out()), gx(*backend_, x.size()),
        gy(*backend_, y.size()), gw(*backend_, w.size());
    out.poison(), gx.poison(), gy.poison(), gw.poison();
    ConvBuffers b = dg.buffers(n);
    b.x = dx.data(), b.y = dy.data(), b.w = dw.data(), b.grad_out = dgo.data();
    b.out = out.data(), b.grad_x = gx.data(), b.grad_y = gy.data(), b.grad_w = gw.data();
    conv.run(nullptr, Pass::kForward, b);
    conv.run(nullptr, Pass::kBackward, b);
    EXPECT_EQ(conv.take_status(nullptr), 0u);
    std::vector<double> ref(n * tp.dim_out()), rgx(x.size()), rgy(y.size()), rgw(w.size());
    convolution_forward<double>(tp, edges, x.data(), y.data(), w.data(), ref.data());
    convolution_backward<double>(tp, edges, x.data(), y.data(), w.data(), go.data(), rgx.data(),
                                 rgy.data(), rgw.data());
    EXPECT_LE(max_rel(out.download(), ref), 1e-12);
    EXPECT_LE(max_rel(gx.download(), rgx), 1e-12);
    EXPECT_LE(max_rel(gy.download(), rgy), 1e-12);
    EXPECT_LE(max_rel(gw.download(), rgw), 1e-12);
    // Accumulating (edge batches, several layers into one dE/dY): the pass adds to what grad_x
    // and grad_y hold, also in the blocks no path touches, and stores over neither.
    const auto px = randv(x.size(), 5), py = randv(y.size(), 6);
    auto agx = up<double>(px), agy = up<double>(py);
    b.grad_x = agx.data(), b.grad_y = agy.data();
    b.accumulate_grad_x = b.accumulate_grad_y = true;
    conv.run(nullptr, Pass::kBackward, b);
    EXPECT_EQ(conv.take_status(nullptr), 0u);
    for (std::size_t i = 0; i < x.size(); ++i) rgx[i] += px[i];
    for (std::size_t i = 0; i < y.size(); ++i) rgy[i] += py[i];
    EXPECT_LE(max_rel(agx.download(), rgx), 1e-12) << "grad_x accumulated";
    EXPECT_LE(max_rel(agy.download(), rgy), 1e-12) << "grad_y accumulated";
  }
}

// The fused radial form (TpProblem::fused_hidden): the convolution makes W = h W4 per edge
// tile and writes dE/dh, never W or dE/dW. Against the host convolution with W computed here
// from the same h and W4, and dE/dh = dE/dW W4^T. A hidden width that is not a multiple of 32
// and a 48-channel product (an idle half chunk), graphs whose receivers' edge runs cross the
// weight sub-tiles and the deterministic mode's tiles, both modes.
TEST_P(Backend, FusedRadialConvMatchesTheHostConvolution) {
  TensorProduct tp = test::test_shapes().front().tp;
  for (const auto& s : test::test_shapes())
    if (s.name == "MaceLike") tp = s.tp;
  const int nw = tp.weight_numel();
  // 40: hidden rows read 4 values at a time; 18: one at a time, and a lane without a second k.
  // slice: the block's warps share W4's columns in shared memory (the default), else each
  // sub-tile reads them from memory. 9 nodes: the last block has warps without a row, which
  // still take part in the slice's barriers.
  // mma: the weights and dE/dh on the tensor cores (float64, hidden a multiple of 8), else SIMT.
  for (auto [acc, edges_n, H, slice, mma] :
       {std::tuple{Accumulation::kDeterministic, 40, 40, true, true},
        std::tuple{Accumulation::kDeterministic, 300, 40, true, true},
        std::tuple{Accumulation::kDeterministic, 300, 40, false, true},
        std::tuple{Accumulation::kDeterministic, 300, 40, true, false},
        std::tuple{Accumulation::kAtomic, 40, 18, true, false},
        std::tuple{Accumulation::kAtomic, 300, 40, true, true},
        std::tuple{Accumulation::kAtomic, 300, 40, false, false},
        std::tuple{Accumulation::kAtomic, 300, 18, false, false}}) {
    SCOPED_TRACE(to_string(acc) + ", " + std::to_string(edges_n) + " edges, " + std::to_string(H) +
                 " hidden" + (slice ? ", W4 slice" : ", W4 from memory") +
                 (mma ? ", tensor cores" : ", SIMT"));
    ScheduleOptions options;
    if (!slice) options.fused_w4_slice_bytes = 0;
    options.fused_w4_slice_any_occupancy = slice;
    options.fused_mma_float64 = mma;
    ConvRunner conv(*backend_, tp, DType::kFloat64, acc, options, H);
    ASSERT_GT(conv.schedule().pass(Pass::kForward).smem.sub_tile, 0);
    for (Pass p : {Pass::kForward, Pass::kBackward}) {
      ASSERT_EQ(conv.schedule().pass(p).smem.w4_slice_bytes > 0, slice) << to_string(p);
      ASSERT_EQ(conv.schedule().pass(p).smem.radial_mma, mma) << to_string(p);
    }
    const test::Graph g = test::random_graph(9, edges_n, true, 3);
    const EdgeIndex edges(g.num_nodes, g.num_nodes, g.sender, g.receiver);
    const std::size_t n = g.num_nodes, e = g.sender.size();
    const auto x = randv(n * tp.dim_in1(), 1), y = randv(e * tp.dim_in2(), 2), h = randv(e * H, 3),
               w4 = randv(std::size_t(H) * nw, 5), go = randv(n * tp.dim_out(), 4);
    std::vector<double> w(e * nw, 0.0), w4t(w4.size());
    for (std::size_t q = 0; q < e; ++q)
      for (int k = 0; k < H; ++k)
        for (int c = 0; c < nw; ++c) w[q * nw + c] += h[q * H + k] * w4[std::size_t(k) * nw + c];
    for (int k = 0; k < H; ++k)
      for (int c = 0; c < nw; ++c) w4t[std::size_t(c) * H + k] = w4[std::size_t(k) * nw + c];
    auto dx = up<double>(x), dy = up<double>(y), dh = up<double>(h), dgo = up<double>(go);
    auto dw4 = up<double>(w4), dw4t = up<double>(w4t);
    const DeviceGraph dg = up_graph(g, edges);
    DeviceArray<double> out(*backend_, n * tp.dim_out()), gx(*backend_, x.size()),
        gy(*backend_, y.size()), gh(*backend_, h.size());
    out.poison(), gx.poison(), gy.poison(), gh.poison();
    ConvBuffers b = dg.buffers(n);
    b.x = dx.data(), b.y = dy.data(), b.grad_out = dgo.data();
    b.h = dh.data(), b.w4 = dw4.data(), b.w4t = dw4t.data();
    b.out = out.data(), b.grad_x = gx.data(), b.grad_y = gy.data(), b.grad_h = gh.data();
    conv.run(nullptr, Pass::kForward, b);
    conv.run(nullptr, Pass::kBackward, b);
    EXPECT_EQ(conv.take_status(nullptr), 0u);
    std::vector<double> ref(n * tp.dim_out()), rgx(x.size()), rgy(y.size()), rgw(w.size()),
        rgh(h.size(), 0.0);
    convolution_forward<double>(tp, edges, x.data(), y.data(), w.data(), ref.data());
    convolution_backward<double>(tp, edges, x.data(), y.data(), w.data(), go.data(), rgx.data(),
                                 rgy.data(), rgw.data());
    for (std::size_t q = 0; q < e; ++q)
      for (int k = 0; k < H; ++k)
        for (int c = 0; c < nw; ++c)
          rgh[q * H + k] += rgw[q * nw + c] * w4[std::size_t(k) * nw + c];
    EXPECT_LE(max_rel(out.download(), ref), 1e-12);
    EXPECT_LE(max_rel(gx.download(), rgx), 1e-12);
    EXPECT_LE(max_rel(gy.download(), rgy), 1e-12);
    EXPECT_LE(max_rel(gh.download(), rgh), 1e-12);
    // grad_w is not what a fused pass writes.
    ConvBuffers bad = b;
    bad.grad_w = gh.data();
    EXPECT_THROW(conv.run(nullptr, Pass::kBackward, bad), CapacityError);
  }
}

// The fused spline form (TpProblem::with_fused_spline): the convolution interpolates a table of
// the radial functions per edge tile and writes dE/dr, never W or dE/dW. Against the host
// convolution with W and dE/dr from the host's SplineTable (radial_spline.h) on the same table:
// lengths inside the range, on a knot, below r_lo and above r_hi (the end intervals
// extrapolated, as on the host), both modes, a graph crossing the sub-tiles and tiles.
TEST_P(Backend, FusedSplineConvMatchesTheHostConvolution) {
  TensorProduct tp = test::test_shapes().front().tp;
  for (const auto& s : test::test_shapes())
    if (s.name == "MaceLike") tp = s.tp;
  const int nw = tp.weight_numel();
  model::RadialSpline rs;
  rs.r_lo = 0.5, rs.r_hi = 4.0, rs.intervals = 13, rs.width = nw;
  rs.values = randv(std::size_t(rs.intervals + 1) * 2 * nw, 7);
  const SplineTable<double> table(rs);
  for (auto [acc, edges_n] :
       {std::tuple{Accumulation::kDeterministic, 40}, std::tuple{Accumulation::kDeterministic, 300},
        std::tuple{Accumulation::kAtomic, 40}, std::tuple{Accumulation::kAtomic, 300}}) {
    SCOPED_TRACE(to_string(acc) + ", " + std::to_string(edges_n) + " edges");
    ConvRunner conv(*backend_, TpProblem::from_tensor_product(tp, DType::kFloat64, acc)
                                   .with_fused_spline(rs.intervals, rs.r_lo, rs.r_hi));
    ASSERT_GT(conv.schedule().pass(Pass::kBackward).smem.sub_tile, 0);
    const test::Graph g = test::random_graph(9, edges_n, true, 3);
    const EdgeIndex edges(g.num_nodes, g.num_nodes, g.sender, g.receiver);
    const std::size_t n = g.num_nodes, e = g.sender.size();
    const auto x = randv(n * tp.dim_in1(), 1), y = randv(e * tp.dim_in2(), 2),
               go = randv(n * tp.dim_out(), 4);
    std::vector<double> r(e);
    for (std::size_t q = 0; q < e; ++q) r[q] = 0.3 + 4.0 * double((q * 37) % 101) / 100.0;
    r[0] = rs.r_lo + 3 * (rs.r_hi - rs.r_lo) / rs.intervals;  // a knot
    std::vector<double> w(e * nw);
    for (std::size_t q = 0; q < e; ++q) table.value(r[q], w.data() + q * nw);
    auto dx = up<double>(x), dy = up<double>(y), dr = up<double>(r), dgo = up<double>(go);
    auto dtable = up<double>(rs.values);
    const DeviceGraph dg = up_graph(g, edges);
    DeviceArray<double> out(*backend_, n * tp.dim_out()), gx(*backend_, x.size()),
        gy(*backend_, y.size()), gr(*backend_, e);
    out.poison(), gx.poison(), gy.poison(), gr.poison();
    ConvBuffers b = dg.buffers(n);
    b.x = dx.data(), b.y = dy.data(), b.grad_out = dgo.data();
    b.h = dr.data(), b.w4 = dtable.data();
    b.out = out.data(), b.grad_x = gx.data(), b.grad_y = gy.data(), b.grad_h = gr.data();
    conv.run(nullptr, Pass::kForward, b);
    conv.run(nullptr, Pass::kBackward, b);
    EXPECT_EQ(conv.take_status(nullptr), 0u);
    std::vector<double> ref(n * tp.dim_out()), rgx(x.size()), rgy(y.size()), rgw(w.size()), rgr(e);
    convolution_forward<double>(tp, edges, x.data(), y.data(), w.data(), ref.data());
    convolution_backward<double>(tp, edges, x.data(), y.data(), w.data(), go.data(), rgx.data(),
                                 rgy.data(), rgw.data());
    for (std::size_t q = 0; q < e; ++q) rgr[q] = table.derivative_dot(r[q], rgw.data() + q * nw);
    EXPECT_LE(max_rel(out.download(), ref), 1e-12);
    EXPECT_LE(max_rel(gx.download(), rgx), 1e-12);
    EXPECT_LE(max_rel(gy.download(), rgy), 1e-12);
    EXPECT_LE(max_rel(gr.download(), rgr), 1e-12);
  }
}

INSTANTIATE_TEST_SUITE_P(All, Backend, ::testing::Values("emulated", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace clebsch::cuda
