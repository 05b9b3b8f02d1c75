// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The MACE engine's kernels (mace_kernels.h) against independent references, on every
// instruction set the CPU supports (baseline x86-64, AVX2, AVX-512): the packed GEMM against a
// triple loop (shapes with remainders, row index lists, accumulation); the MLP against the
// formula of FORMAT.md §4.3 and its backward against central differences; NodeLinear against
// §4.1 written out in e3nn's mul_ir layout; SpeciesLinear against the generic tensor product
// (tensor_product.h) fed a one-hot second input; the specialised uvu convolution ConvTp against
// the generic convolution (convolution.h), forward and backward (dx, dY, dW), including shapes
// that take the fixed-size paths (2l+1 <= 7), the general path (l = 4) and channel counts that
// leave a remainder after the vector lanes; exp_approx against std::exp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "clebsch/engine/mace_kernels.h"
#include "clebsch/model/model.h"
#include "clebsch/o3/convolution.h"
#include "clebsch/o3/tensor_product.h"
#include "clebsch/support/error.h"

namespace clebsch {
namespace mace_detail {
// gtest prints parameters through PrintTo, found by argument-dependent lookup.
void PrintTo(Simd simd, std::ostream* os) { *os << to_string(simd); }
}  // namespace mace_detail

namespace {

using mace_detail::ConvTp;
using mace_detail::Mlp;
using mace_detail::NodeLinear;
using mace_detail::PackedMatrix;
using mace_detail::Simd;
using mace_detail::SpeciesLinear;

constexpr double kTol64 = 1e-13;  // relative to the largest reference value
constexpr double kTol32 = 2e-5;

// Platform-independent random numbers (SplitMix64), uniform in [-1, 1).
struct Rng {
  std::uint64_t s;
  explicit Rng(std::uint64_t seed) : s(seed) {}
  double operator()() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * (2.0 / 9007199254740992.0) - 1.0;
  }
  std::vector<double> vec(std::size_t n) {
    std::vector<double> v(n);
    for (double& x : v) x = (*this)();
    return v;
  }
};

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

template <class T>
double max_diff(const std::vector<T>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < b.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

template <class T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Runs a test body once per instruction set this CPU has, restoring the level afterwards.
class SimdLevels : public ::testing::TestWithParam<Simd> {
 protected:
  void SetUp() override {
    saved_ = mace_detail::simd_level();
    try {
      mace_detail::set_simd_level(GetParam());
    } catch (const Error&) {
      GTEST_SKIP() << "CPU lacks " << mace_detail::to_string(GetParam());
    }
  }
  void TearDown() override { mace_detail::set_simd_level(saved_); }
  Simd saved_ = Simd::kBaseline;
};

std::string simd_name(const ::testing::TestParamInfo<Simd>& info) {
  return mace_detail::to_string(info.param);
}

// ---------------------------------------------------------------------------------------------
// GEMM
// ---------------------------------------------------------------------------------------------

template <class T>
void check_gemm(int M, int K, int N, bool accumulate, bool rows, std::uint64_t seed) {
  Rng rng(seed);
  const std::size_t lda = K + 3, ldc = N + 5, ldb = N + 2;
  const std::vector<double> A = rng.vec(static_cast<std::size_t>(M + 4) * lda);
  const std::vector<double> B = rng.vec(static_cast<std::size_t>(K) * ldb);
  const std::vector<double> C0 = rng.vec(static_cast<std::size_t>(M + 4) * ldc);
  std::vector<int> a_rows(M), c_rows(M);
  for (int r = 0; r < M; ++r) {
    a_rows[r] = (r * 7 + 3) % (M + 4);  // a permutation-like gather
    c_rows[r] = M + 3 - r;              // distinct rows, reversed
  }
  const double scale = 0.75;
  std::vector<double> ref = C0;
  for (int r = 0; r < M; ++r) {
    const std::size_t ar = rows ? a_rows[r] : r, cr = rows ? c_rows[r] : r;
    for (int j = 0; j < N; ++j) {
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += A[ar * lda + k] * scale * B[k * ldb + j];
      ref[cr * ldc + j] = accumulate ? C0[cr * ldc + j] + acc : acc;
    }
  }
  const PackedMatrix<T> P(K, N, B.data(), ldb, scale);
  const std::vector<T> At = cast<T>(A);
  std::vector<T> C = cast<T>(C0);
  mace_detail::gemm(P, M, At.data(), lda, rows ? a_rows.data() : nullptr, C.data(), ldc,
                    rows ? c_rows.data() : nullptr, accumulate);
  const double tol = (sizeof(T) == 8 ? kTol64 : kTol32) * std::max(1.0, max_abs(ref)) * K;
  EXPECT_LE(max_diff(C, ref), tol)
      << "M=" << M << " K=" << K << " N=" << N << " accumulate=" << accumulate << " rows=" << rows;
}

TEST_P(SimdLevels, GemmMatchesTripleLoop) {
  std::uint64_t seed = 1;
  for (int M : {1, 7, 8, 9, 33})
    for (int K : {1, 5, 64})
      for (int N : {1, 3, 16, 17, 70})
        for (bool acc : {false, true})
          for (bool rows : {false, true}) {
            check_gemm<double>(M, K, N, acc, rows, seed++);
            check_gemm<float>(M, K, N, acc, rows, seed++);
          }
}

TEST_P(SimdLevels, GemmTransposedPacking) {
  Rng rng(5);
  const int K = 6, N = 11;
  const std::vector<double> Bt = rng.vec(N * K);  // N x K
  const std::vector<double> A = rng.vec(3 * K);
  const PackedMatrix<double> P(K, N, Bt.data(), K, 2.0, /*transpose=*/true);
  std::vector<double> C(3 * N);
  mace_detail::gemm(P, 3, A.data(), K, nullptr, C.data(), N, nullptr, false);
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < N; ++j) {
      double ref = 0;
      for (int k = 0; k < K; ++k) ref += A[r * K + k] * 2.0 * Bt[j * K + k];
      EXPECT_NEAR(C[r * N + j], ref, 1e-14);
    }
}

// ---------------------------------------------------------------------------------------------
// MLP
// ---------------------------------------------------------------------------------------------

model::Activation activation(const std::string& name, double cst) {
  using K = model::Activation::Kind;
  const K kind = name == "silu"      ? K::kSilu
                 : name == "tanh"    ? K::kTanh
                 : name == "sigmoid" ? K::kSigmoid
                 : name == "abs"     ? K::kAbs
                                     : K::kSsp;
  return model::Activation{name, kind, cst};
}

model::Mlp random_mlp(const std::vector<int>& hs, const std::vector<std::string>& acts, bool bias,
                      Rng& rng) {
  model::Mlp m;
  for (std::size_t l = 0; l + 1 < hs.size(); ++l) {
    model::Mlp::Layer layer;
    layer.h_in = hs[l];
    layer.h_out = hs[l + 1];
    layer.weight = rng.vec(static_cast<std::size_t>(hs[l]) * hs[l + 1]);
    if (bias) layer.bias = rng.vec(hs[l + 1]);
    layer.weight_scale = 1.0 / std::sqrt(hs[l]);
    if (l + 2 < hs.size()) {
      layer.activation = activation(acts[l % acts.size()], 1.3);
      layer.out_scale = 0.9;
    }
    m.layers.push_back(layer);
  }
  return m;
}

double act_ref(const std::string& name, double x) {
  if (name == "silu") return x / (1 + std::exp(-x));
  if (name == "tanh") return std::tanh(x);
  if (name == "sigmoid") return 1 / (1 + std::exp(-x));
  if (name == "abs") return std::abs(x);
  return std::log1p(std::exp(x)) - std::log(2.0);  // ssp
}

std::vector<double> mlp_ref(const model::Mlp& m, const std::vector<double>& x, std::size_t rows) {
  std::vector<double> in = x;
  for (const auto& L : m.layers) {
    std::vector<double> out(rows * L.h_out);
    for (std::size_t r = 0; r < rows; ++r)
      for (int j = 0; j < L.h_out; ++j) {
        double z = 0;
        for (int i = 0; i < L.h_in; ++i) z += in[r * L.h_in + i] * L.weight[i * L.h_out + j];
        z *= L.weight_scale;
        if (!L.bias.empty()) z += L.bias[j];
        if (L.activation) z = L.out_scale * L.activation->cst * act_ref(L.activation->name, z);
        out[r * L.h_out + j] = z;
      }
    in = out;
  }
  return in;
}

TEST_P(SimdLevels, MlpMatchesFormulaAndFiniteDifferences) {
  Rng rng(11);
  for (bool bias : {false, true}) {
    const model::Mlp m =
        random_mlp({5, 9, 17, 4}, {"silu", "tanh", "sigmoid", "abs", "ssp"}, bias, rng);
    const model::Mlp m2 = random_mlp({3, 6, 6, 2}, {"ssp", "abs"}, bias, rng);
    for (const model::Mlp* mm : {&m, &m2}) {
      const std::size_t rows = 13;
      const int din = mm->layers.front().h_in, dout = mm->layers.back().h_out;
      const std::vector<double> x = rng.vec(rows * din);
      const std::vector<double> ref = mlp_ref(*mm, x, rows);
      const Mlp<double> net(*mm, "test");
      std::vector<double> y(rows * dout), scratch(net.scratch_size(rows));
      net.forward(rows, x.data(), y.data(), scratch.data());
      EXPECT_LE(max_diff(y, ref), kTol64 * std::max(1.0, max_abs(ref)));
      // Backward: gx = J^T gy, against central differences of <gy, mlp(x)>.
      const std::vector<double> gy0 = rng.vec(rows * dout);
      std::vector<double> gy = gy0, gx(rows * din),
                          work(2 * rows * static_cast<std::size_t>(net.max_width()));
      net.backward(rows, scratch.data(), gy.data(), gx.data(), work.data());
      const double h = 1e-6;
      for (std::size_t k = 0; k < x.size(); ++k) {
        std::vector<double> xp = x, xm = x;
        xp[k] += h;
        xm[k] -= h;
        const std::vector<double> yp = mlp_ref(*mm, xp, rows), ym = mlp_ref(*mm, xm, rows);
        double fd = 0;
        for (std::size_t i = 0; i < yp.size(); ++i) fd += gy0[i] * (yp[i] - ym[i]) / (2 * h);
        // abs has a kink at 0; random inputs stay away from it almost surely.
        EXPECT_NEAR(gx[k], fd, 1e-7 * std::max(1.0, std::abs(fd))) << "input " << k;
      }
      // float against double.
      const Mlp<float> netf(*mm, "test");
      const std::vector<float> xf = cast<float>(x);
      std::vector<float> yf(rows * dout), sf(netf.scratch_size(rows));
      netf.forward(rows, xf.data(), yf.data(), sf.data());
      EXPECT_LE(max_diff(yf, ref), kTol32 * std::max(1.0, max_abs(ref)));
    }
  }
}

TEST(MaceKernels, MlpRejectsInconsistentLayers) {
  Rng rng(3);
  model::Mlp m = random_mlp({2, 3, 1}, {"silu"}, false, rng);
  m.layers[1].h_in = 4;
  m.layers[1].weight.resize(4);
  try {
    Mlp<double> net(m, "radial_mlp");
    FAIL() << "expected ModelFormatError";
  } catch (const ModelFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("radial_mlp.layers[1]"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// NodeLinear
// ---------------------------------------------------------------------------------------------

// o3.Linear per FORMAT.md §4.1, in mul_ir layout.
std::vector<double> linear_ref(const model::Linear& lin, const std::vector<double>& x,
                               std::size_t rows) {
  const std::vector<int> oi = lin.irreps_in.offsets(), oo = lin.irreps_out.offsets();
  const int din = lin.irreps_in.dim(), dout = lin.irreps_out.dim();
  std::vector<double> y(rows * dout, 0.0);
  for (std::size_t r = 0; r < rows; ++r)
    for (const auto& ins : lin.instructions) {
      const int d = lin.irreps_in[ins.i_in].ir.dim();
      for (int w = 0; w < ins.mul_out; ++w)
        for (int m = 0; m < d; ++m) {
          double acc = 0;
          for (int u = 0; u < ins.mul_in; ++u)
            acc += lin.weight[ins.weight_offset + u * ins.mul_out + w] *
                   x[r * din + oi[ins.i_in] + u * d + m];
          y[r * dout + oo[ins.i_out] + w * d + m] += ins.path_weight * acc;
        }
    }
  return y;
}

template <class T>
std::vector<T> to_ir_mul_rows(const Irreps& irreps, const std::vector<double>& x,
                              std::size_t rows) {
  const std::size_t d = irreps.dim();
  std::vector<T> in = cast<T>(x), out(x.size());
  for (std::size_t r = 0; r < rows; ++r)
    mace_detail::mul_ir_to_ir_mul(irreps, in.data() + r * d, out.data() + r * d);
  return out;
}

template <class T>
std::vector<double> to_mul_ir_rows(const Irreps& irreps, const std::vector<T>& x,
                                   std::size_t rows) {
  const std::size_t d = irreps.dim();
  std::vector<T> out(x.size());
  for (std::size_t r = 0; r < rows; ++r)
    mace_detail::ir_mul_to_mul_ir(irreps, x.data() + r * d, out.data() + r * d);
  return std::vector<double>(out.begin(), out.end());
}

TEST_P(SimdLevels, NodeLinearMatchesFormula) {
  Rng rng(21);
  model::Linear lin;
  lin.irreps_in = Irreps("3x0e+2x1o+4x0e+3x2e");
  lin.irreps_out = Irreps("5x0e+7x1o+1x1e+2x2e");
  // Two instructions into 0e (repeats allowed), 1o, 2e; 1e gets none (stays zero).
  const int paths[][2] = {{0, 0}, {2, 0}, {1, 1}, {3, 3}};
  int offset = 0;
  for (const auto& p : paths) {
    const int mi = lin.irreps_in[p[0]].mul, mo = lin.irreps_out[p[1]].mul;
    lin.instructions.push_back({p[0], p[1], mi, mo, 0.3 + 0.1 * p[0], offset});
    offset += mi * mo;
  }
  lin.weight = rng.vec(offset);
  const std::size_t rows = 70;  // more than one parallel row block
  const std::vector<double> x = rng.vec(rows * lin.irreps_in.dim());
  const std::vector<double> ref = linear_ref(lin, x, rows);
  const NodeLinear<double> L(lin);
  std::vector<double> xi = to_ir_mul_rows<double>(lin.irreps_in, x, rows);
  std::vector<double> y(rows * lin.irreps_out.dim(), 99.0);
  L.forward(rows, xi.data(), lin.irreps_in.dim(), y.data(), lin.irreps_out.dim(), false);
  EXPECT_LE(max_diff(to_mul_ir_rows(lin.irreps_out, y, rows), ref), kTol64 * max_abs(ref));
  // Accumulation adds to what is there.
  std::vector<double> y2 = y;
  L.forward(rows, xi.data(), lin.irreps_in.dim(), y2.data(), lin.irreps_out.dim(), true);
  for (std::size_t k = 0; k < y.size(); ++k) EXPECT_NEAR(y2[k], 2 * y[k], 1e-13);
  // Backward is the transpose: <gy, L x> = <L^T gy, x>.
  const std::vector<double> gy = rng.vec(y.size());
  std::vector<double> gx(xi.size(), 5.0);
  L.backward(rows, gy.data(), lin.irreps_out.dim(), gx.data(), lin.irreps_in.dim(), false);
  double lhs = 0, rhs = 0;
  for (std::size_t k = 0; k < y.size(); ++k) lhs += gy[k] * y[k];
  for (std::size_t k = 0; k < xi.size(); ++k) rhs += gx[k] * xi[k];
  EXPECT_NEAR(lhs, rhs, 1e-12 * std::abs(lhs));
  // float.
  const NodeLinear<float> Lf(lin);
  std::vector<float> xf = to_ir_mul_rows<float>(lin.irreps_in, x, rows);
  std::vector<float> yf(y.size());
  Lf.forward(rows, xf.data(), lin.irreps_in.dim(), yf.data(), lin.irreps_out.dim(), false);
  EXPECT_LE(max_diff(to_mul_ir_rows(lin.irreps_out, yf, rows), ref), kTol32 * max_abs(ref));
}

// ---------------------------------------------------------------------------------------------
// SpeciesLinear (skip_tp with one-hot species)
// ---------------------------------------------------------------------------------------------

TEST_P(SimdLevels, SpeciesLinearMatchesGenericTensorProduct) {
  Rng rng(31);
  const int S = 3;
  const Irreps in1("4x0e+3x1o+2x2e"), in2("3x0e"), out("5x0e+2x1o+6x2e");
  const TensorProduct tp(
      in1, in2, out,
      {Instruction(0, 0, 0, "uvw"), Instruction(1, 0, 1, "uvw"), Instruction(2, 0, 2, "uvw")});
  model::TensorProduct mtp;
  mtp.descriptor = tp;
  mtp.external_weights = false;
  mtp.weight = rng.vec(tp.weight_numel());
  const std::size_t rows = 150;
  const std::vector<double> x = rng.vec(rows * in1.dim());
  std::vector<int> species(rows);
  std::vector<double> onehot(rows * S, 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    species[r] = static_cast<int>((r * 5 + r / 7) % S);
    onehot[r * S + species[r]] = 1.0;
  }
  std::vector<double> ref(rows * out.dim());
  tensor_product_forward<double>(tp, rows, x.data(), onehot.data(), mtp.weight.data(), ref.data());
  const SpeciesLinear<double> skip(mtp, S, "skip_tp");
  const std::vector<double> xi = to_ir_mul_rows<double>(in1, x, rows);
  std::vector<double> y(ref.size());
  skip.forward(rows, species.data(), xi.data(), in1.dim(), y.data(), out.dim(), false);
  EXPECT_LE(max_diff(to_mul_ir_rows(out, y, rows), ref), kTol64 * max_abs(ref));
  // Backward against the generic one.
  const std::vector<double> g = rng.vec(ref.size());
  std::vector<double> gx_ref(x.size());
  tensor_product_backward<double>(tp, rows, x.data(), onehot.data(), mtp.weight.data(), g.data(),
                                  gx_ref.data(), nullptr, nullptr);
  const std::vector<double> gi = to_ir_mul_rows<double>(out, g, rows);
  std::vector<double> gx(x.size());
  skip.backward(rows, species.data(), gi.data(), out.dim(), gx.data(), in1.dim(), false);
  EXPECT_LE(max_diff(to_mul_ir_rows(in1, gx, rows), gx_ref), kTol64 * max_abs(gx_ref));
}

TEST(MaceKernels, SpeciesLinearRejectsNonScalarSecondInput) {
  const TensorProduct tp("2x0e", "1x1o", "2x1o", {Instruction(0, 0, 0, "uvw")});
  model::TensorProduct mtp{tp, false, std::vector<double>(tp.weight_numel(), 0.1)};
  EXPECT_THROW(SpeciesLinear<double>(mtp, 1, "skip_tp"), ModelFormatError);
}

// ---------------------------------------------------------------------------------------------
// ConvTp against the generic convolution
// ---------------------------------------------------------------------------------------------

// A MACE-style uvu product: every (l1, l2) -> l_out path with l_out <= lmax_out and matching
// parity gets its own output block, in e3nn's sorted order.
TensorProduct mace_conv_tp(const Irreps& in1, int lmax_sh, int lmax_out) {
  const Irreps in2 = Irreps::spherical_harmonics(lmax_sh);
  std::vector<MulIrrep> out_items;
  std::vector<std::array<int, 3>> ins;
  for (std::size_t a = 0; a < in1.size(); ++a)
    for (std::size_t b = 0; b < in2.size(); ++b)
      for (const Irrep& ir : in1[a].ir* in2[b].ir)
        if (ir.l() <= lmax_out) {
          ins.push_back(
              {static_cast<int>(a), static_cast<int>(b), static_cast<int>(out_items.size())});
          out_items.push_back({in1[a].mul, ir});
        }
  const Irreps::Sorted sorted = Irreps(out_items).sort();
  std::vector<Instruction> instructions;
  for (auto& t : ins) instructions.emplace_back(t[0], t[1], sorted.p[t[2]], ConnectionMode::kUvu);
  TensorProductOptions options;
  options.shared_weights = false;
  return TensorProduct(in1, in2, sorted.irreps, instructions, options);
}

struct ConvCase {
  const char* in1;
  int lmax_sh, lmax_out;
};

template <class T>
void check_conv(const ConvCase& c, std::uint64_t seed) {
  Rng rng(seed);
  const TensorProduct tp = mace_conv_tp(Irreps(c.in1), c.lmax_sh, c.lmax_out);
  model::TensorProduct mtp{tp, true, {}};
  const ConvTp<T> conv(mtp, "conv_tp");
  ASSERT_EQ(conv.weight_numel(), tp.weight_numel());
  const int n_nodes = 7, E = 23;
  std::vector<int> sender(E), receiver(E);
  for (int e = 0; e < E; ++e) {
    sender[e] = (e * 3 + 1) % n_nodes;
    receiver[e] = (e * 5 + 2) % n_nodes;
  }
  const Irreps& in1 = tp.irreps_in1();
  const Irreps& out = tp.irreps_out();
  const int d1 = tp.dim_in1(), d2 = tp.dim_in2(), d3 = tp.dim_out(), nw = tp.weight_numel();
  const std::vector<double> x = rng.vec(n_nodes * d1), Y = rng.vec(E * d2), W = rng.vec(E * nw);
  const std::vector<double> g = rng.vec(n_nodes * d3);
  const EdgeIndex edges(n_nodes, n_nodes, sender, receiver);
  std::vector<double> out_ref(n_nodes * d3), gx_ref(x.size()), gY_ref(Y.size()), gW_ref(W.size());
  convolution_forward<double>(tp, edges, x.data(), Y.data(), W.data(), out_ref.data());
  convolution_backward<double>(tp, edges, x.data(), Y.data(), W.data(), g.data(), gx_ref.data(),
                               gY_ref.data(), gW_ref.data());

  const std::vector<T> xi = to_ir_mul_rows<T>(in1, x, n_nodes);
  const std::vector<T> gi = to_ir_mul_rows<T>(out, g, n_nodes);
  const std::vector<T> Yt = cast<T>(Y), Wt = cast<T>(W);
  std::vector<T> o(n_nodes * d3, T(0)), gx(x.size(), T(0)), gY(Y.size(), T(0)), gW(W.size());
  for (int e = 0; e < E; ++e) {
    conv.forward(xi.data() + sender[e] * d1, Yt.data() + e * d2, Wt.data() + e * nw,
                 o.data() + receiver[e] * d3);
    conv.backward(xi.data() + sender[e] * d1, Yt.data() + e * d2, Wt.data() + e * nw,
                  gi.data() + receiver[e] * d3, gx.data() + sender[e] * d1, gY.data() + e * d2,
                  gW.data() + e * nw);
  }
  const double tol = sizeof(T) == 8 ? kTol64 : kTol32;
  EXPECT_LE(max_diff(to_mul_ir_rows(out, o, n_nodes), out_ref), tol * max_abs(out_ref)) << c.in1;
  EXPECT_LE(max_diff(to_mul_ir_rows(in1, gx, n_nodes), gx_ref), tol * max_abs(gx_ref)) << c.in1;
  EXPECT_LE(max_diff(gY, gY_ref), tol * max_abs(gY_ref)) << c.in1;
  EXPECT_LE(max_diff(gW, gW_ref), tol * max_abs(gW_ref)) << c.in1;
  // Without gx the other gradients are unchanged.
  std::vector<T> gY2(Y.size(), T(0)), gW2(W.size());
  conv.backward(xi.data() + sender[0] * d1, Yt.data(), Wt.data(), gi.data() + receiver[0] * d3,
                nullptr, gY2.data(), gW2.data());
  for (int k = 0; k < nw; ++k) EXPECT_EQ(gW2[k], gW[k]);
}

TEST_P(SimdLevels, ConvTpMatchesGenericConvolution) {
  const ConvCase cases[] = {
      {"5x0e", 3, 3},                 // layer 0 of MACE: scalars only
      {"17x0e+17x1o", 3, 3},          // lanes + remainder, every fixed shape with l <= 3
      {"8x0e+8x1o+8x2e+8x3o", 3, 3},  // l1 = 3
      {"3x0e+3x0o+3x1o+3x1e", 2, 2},  // non-natural parity
      {"4x0e+4x2e+4x4e", 4, 4},       // l = 4: the general path
      {"33x0e+33x1o", 1, 1},          // more than one vector of channels
  };
  std::uint64_t seed = 100;
  for (const ConvCase& c : cases) {
    check_conv<double>(c, seed++);
    check_conv<float>(c, seed++);
  }
}

TEST(MaceKernels, ConvTpRejectsNonUvu) {
  TensorProductOptions options;
  options.shared_weights = false;
  const TensorProduct tp("2x0e", "1x0e", "2x0e", {Instruction(0, 0, 0, "uvw")}, options);
  model::TensorProduct mtp{tp, true, {}};
  EXPECT_THROW(ConvTp<double>(mtp, "conv_tp"), ModelFormatError);
  const TensorProduct tp2("2x0e", "1x0e", "2x0e", {Instruction(0, 0, 0, "uvu")});
  model::TensorProduct shared{tp2, false, std::vector<double>(2, 0.5)};
  EXPECT_THROW(ConvTp<double>(shared, "conv_tp"), ModelFormatError);
}

// ---------------------------------------------------------------------------------------------
// exp and layouts
// ---------------------------------------------------------------------------------------------

TEST(MaceKernels, ExpApproxIsAccurateToAboutOneUlp) {
  Rng rng(41);
  double worst = 0;
  float worst_f = 0;
  for (int i = 0; i < 200000; ++i) {
    const double x = 700 * rng();
    worst = std::max(worst, std::abs(mace_detail::exp_approx(x) - std::exp(x)) / std::exp(x));
    const float xf = static_cast<float>(80 * rng());
    worst_f =
        std::max(worst_f, std::abs(mace_detail::exp_approx(xf) - std::exp(xf)) / std::exp(xf));
  }
  EXPECT_LE(worst, 2.5 * std::numeric_limits<double>::epsilon());
  EXPECT_LE(worst_f, 2.5f * std::numeric_limits<float>::epsilon());
  EXPECT_EQ(mace_detail::exp_approx(0.0), 1.0);
  // Clamped outside the normal range: finite, and tiny or huge.
  EXPECT_GT(mace_detail::exp_approx(-1e4), 0.0);
  EXPECT_LT(mace_detail::exp_approx(-1e4), 1e-300);
  EXPECT_TRUE(std::isfinite(mace_detail::exp_approx(1e4)));
}

TEST(MaceKernels, LayoutConversionsAreInverse) {
  const Irreps irreps("3x0e+2x1o+4x2e");
  Rng rng(51);
  const std::vector<double> x = rng.vec(irreps.dim());
  std::vector<double> a(x.size()), b(x.size());
  mace_detail::mul_ir_to_ir_mul(irreps, x.data(), a.data());
  mace_detail::ir_mul_to_mul_ir(irreps, a.data(), b.data());
  EXPECT_EQ(b, x);
  // Block 1 (2x1o) starts at 3: mul_ir index 3 + u*3 + m, ir_mul index 3 + m*2 + u.
  EXPECT_EQ(a[3 + 2 * 2 + 1], x[3 + 1 * 3 + 2]);
}

INSTANTIATE_TEST_SUITE_P(MaceKernels, SimdLevels,
                         ::testing::Values(Simd::kBaseline, Simd::kAvx2, Simd::kAvx512), simd_name);

}  // namespace
}  // namespace clebsch
