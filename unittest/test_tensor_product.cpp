// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Property tests of TensorProduct (e3nn's o3.TensorProduct): normalisation coefficients and
// weight layout worked out by hand from e3nn's rules, the forward against a dense per-element
// formula, every gradient of the backward and double backward against central finite
// differences, O(3) equivariance (a proper and an improper rotation), float against double,
// independence of the OpenMP thread count (bitwise), and descriptor validation.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "clebsch/o3/clebsch_gordan.h"
#include "clebsch/o3/tensor_product.h"
#include "clebsch/o3/wigner_d.h"
#include "clebsch/support/error.h"
#include "reference_data.h"

namespace clebsch {
namespace {

using test::max_rel_error;
using Vec = std::vector<double>;

Vec randn(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  Vec v(n);
  for (auto& e : v) e = normal(gen);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

Vec axpy(const Vec& x, double h, const Vec& d) {
  Vec y = x;
  for (std::size_t i = 0; i < y.size(); ++i) y[i] += h * d[i];
  return y;
}

// y = D x per row, D a dense (dim x dim) row-major matrix.
Vec rotate_rows(const Vec& D, int dim, const Vec& x) {
  Vec y(x.size(), 0.0);
  for (std::size_t r = 0; r < x.size() / dim; ++r)
    for (int i = 0; i < dim; ++i)
      for (int j = 0; j < dim; ++j) y[r * dim + i] += D[i * dim + j] * x[r * dim + j];
  return y;
}

// MACE's tp_out_irreps_with_instructions: every path of irreps1 x irreps2 into target gets its
// own uvu output block; outputs sorted, instructions sorted by output.
TensorProduct mace_uvu(const Irreps& in1, const Irreps& in2, const Irreps& target, bool shared) {
  std::vector<MulIrrep> out;
  std::vector<std::array<int, 3>> ins;
  for (std::size_t i = 0; i < in1.size(); ++i)
    for (std::size_t j = 0; j < in2.size(); ++j)
      for (const Irrep& ir : in1[i].ir* in2[j].ir) {
        bool wanted = false;
        for (const MulIrrep& t : target) wanted |= t.ir == ir;
        if (!wanted) continue;
        ins.push_back({int(i), int(j), int(out.size())});
        out.push_back({in1[i].mul, ir});
      }
  const Irreps::Sorted sorted = Irreps(out).sort();
  std::vector<Instruction> instructions;
  for (auto& t : ins) t[2] = sorted.p[t[2]];
  std::stable_sort(ins.begin(), ins.end(), [](auto& a, auto& b) { return a[2] < b[2]; });
  for (auto& t : ins) instructions.emplace_back(t[0], t[1], t[2], ConnectionMode::kUvu);
  TensorProductOptions options;
  options.shared_weights = shared;
  return TensorProduct(in1, in2, sorted.irreps, instructions, options);
}

// e3nn's FullyConnectedTensorProduct: every allowed (i1, i2, i_out) as uvw.
TensorProduct fctp(const Irreps& in1, const Irreps& in2, const Irreps& out,
                   TensorProductOptions options = {}) {
  std::vector<Instruction> instructions;
  for (std::size_t i = 0; i < in1.size(); ++i)
    for (std::size_t j = 0; j < in2.size(); ++j)
      for (std::size_t k = 0; k < out.size(); ++k)
        for (const Irrep& ir : in1[i].ir* in2[j].ir)
          if (ir == out[k].ir) instructions.emplace_back(int(i), int(j), int(k), "uvw");
  return TensorProduct(in1, in2, out, instructions, options);
}

// Every mode, with and without weights, several instructions per output, l up to 4.
TensorProduct mixed(bool shared) {
  std::vector<Instruction> ins = {
      {0, 0, 0, "uvw", true, 1.0}, {1, 1, 0, "uvw", true, 0.5},  {1, 1, 2, "uuw", true, 2.0},
      {2, 2, 2, "uvw", true, 1.0}, {1, 0, 1, "uvu", true, 1.0},  {1, 0, 1, "uuu", false, 3.0},
      {2, 1, 1, "uvv", true, 1.0}, {3, 1, 2, "uvu", true, 0.25}, {3, 1, 2, "uvu", false, 1.0},
      {2, 1, 3, "uvv", true, 1.0}, {4, 1, 3, "uvv", false, 1.0}, {1, 1, 4, "uuw", false, 1.0},
      {4, 3, 5, "uvw", true, 1.0}, {2, 3, 5, "uvu", false, 1.5}, {0, 0, 6, "uvw", true, 1.0},
      {0, 0, 6, "uvu", true, 1.0}, {1, 1, 7, "uuu", true, 1.0}};
  TensorProductOptions options;
  options.shared_weights = shared;
  return TensorProduct("3x0e+2x1o+2x2e+2x3o+1x4e", "2x0e+2x1o+1x2e+1x4e",
                       "2x0e+2x1o+2x2e+2x3o+1x1e+2x4e+3x0e+2x1e", ins, options);
}

// e3nn's ElementwiseTensorProduct: uuu without weights, every output of each pair.
TensorProduct elementwise() {
  const Irreps in1("3x0e+2x1o+1x2e"), in2("3x1o+2x2e+1x4e");
  std::vector<MulIrrep> out;
  std::vector<Instruction> ins;
  for (std::size_t i = 0; i < in1.size(); ++i)
    for (const Irrep& ir : in1[i].ir* in2[i].ir) {
      ins.emplace_back(int(i), int(i), int(out.size()), "uuu", false);
      out.push_back({in1[i].mul, ir});
    }
  return TensorProduct(in1, in2, Irreps(out), ins);
}

TensorProduct make(const std::string& name) {
  const Irreps node("3x0e+3x1o+3x2e"), sh = Irreps::spherical_harmonics(3);
  if (name == "mace_uvu") return mace_uvu(node, sh, "0e+1o+2e+3o", false);
  if (name == "mace_uvu_shared") return mace_uvu(node, sh, "0e+1o+2e+3o", true);
  if (name == "fctp_shared")
    return fctp("3x0e+2x1o+1x2e+2x1e", "2x0e+1x1o+1x2e", "2x0e+3x1o+2x2e+1x3o+1x1e");
  if (name == "fctp_per_row") {
    TensorProductOptions o;
    o.shared_weights = false;
    return fctp("3x0e+2x1o+1x2e", "2x0e+1x1o", "2x0e+3x1o+2x2e", o);
  }
  if (name == "mixed_shared") return mixed(true);
  if (name == "mixed_per_row") return mixed(false);
  if (name == "elementwise") return elementwise();
  throw Error("no test case " + name);
}

// The definition, term by term, with the dense wigner_3j (zeros included) and no sparsity:
// E = sum_paths coefficient sum_{(u,v,w) of the mode} W  *  sum_ijk C_ijk x1[u,i] x2[v,j] g[w,k].
// Returns out = dE/dg for one row.
Vec dense_forward(const TensorProduct& tp, const double* x1, const double* x2, const double* w) {
  Vec out(tp.dim_out(), 0.0);
  for (const TensorProductPath& p : tp.paths()) {
    const auto& C = wigner_3j(p.ir1.l(), p.ir2.l(), p.ir_out.l());
    const int d1 = p.ir1.dim(), d2 = p.ir2.dim(), d3 = p.ir_out.dim();
    for (int u = 0; u < p.mul1; ++u)
      for (int v = 0; v < p.mul2; ++v)
        for (int o = 0; o < p.mul_out; ++o) {
          const ConnectionMode m = p.ins.mode();
          int widx = 0;
          bool on = true;
          switch (m) {
            case ConnectionMode::kUvw:
              widx = (u * p.mul2 + v) * p.mul_out + o;
              break;
            case ConnectionMode::kUvu:
              on = o == u, widx = u * p.mul2 + v;
              break;
            case ConnectionMode::kUvv:
              on = o == v, widx = u * p.mul2 + v;
              break;
            case ConnectionMode::kUuw:
              on = u == v, widx = u * p.mul_out + o;
              break;
            case ConnectionMode::kUuu:
              on = u == v && v == o, widx = u;
              break;
          }
          if (!on) continue;
          const double W = p.ins.has_weight() ? w[p.weight_offset + widx] : 1.0;
          for (int i = 0; i < d1; ++i)
            for (int j = 0; j < d2; ++j)
              for (int k = 0; k < d3; ++k)
                out[p.offset_out + o * d3 + k] += p.coefficient * W * C[(i * d2 + j) * d3 + k] *
                                                  x1[p.offset1 + u * d1 + i] *
                                                  x2[p.offset2 + v * d2 + j];
        }
  }
  return out;
}

// Random inputs of a batch for `tp`.
struct Batch {
  int B;
  Vec x1, x2, w, g, dx1, dx2, dw;
  Batch(const TensorProduct& tp, int rows, std::uint64_t seed) : B(rows) {
    const std::size_t nw = std::size_t(tp.weight_numel()) * (tp.shared_weights() ? 1 : B);
    x1 = randn(std::size_t(B) * tp.dim_in1(), seed + 1);
    x2 = randn(std::size_t(B) * tp.dim_in2(), seed + 2);
    w = randn(nw, seed + 3);
    g = randn(std::size_t(B) * tp.dim_out(), seed + 4);
    dx1 = randn(x1.size(), seed + 5);
    dx2 = randn(x2.size(), seed + 6);
    dw = randn(nw, seed + 7);
  }
};

Vec forward(const TensorProduct& tp, const Batch& b, const Vec& x1, const Vec& x2, const Vec& w) {
  Vec out(std::size_t(b.B) * tp.dim_out());
  tensor_product_forward<double>(tp, b.B, x1.data(), x2.data(), w.data(), out.data());
  return out;
}

struct Grads {
  Vec x1, x2, w, g;
};

Grads backward(const TensorProduct& tp, const Batch& b, const Vec& x1, const Vec& x2, const Vec& w,
               const Vec& g) {
  Grads r{Vec(x1.size()), Vec(x2.size()), Vec(w.size()), {}};
  tensor_product_backward<double>(tp, b.B, x1.data(), x2.data(), w.data(), g.data(), r.x1.data(),
                                  r.x2.data(), r.w.data());
  return r;
}

Grads double_backward(const TensorProduct& tp, const Batch& b, const Vec& x1, const Vec& x2,
                      const Vec& w, const Vec& g) {
  Grads r{Vec(x1.size()), Vec(x2.size()), Vec(w.size()), Vec(g.size())};
  tensor_product_double_backward<double>(tp, b.B, x1.data(), x2.data(), w.data(), g.data(),
                                         b.dx1.data(), b.dx2.data(), b.dw.data(), r.x1.data(),
                                         r.x2.data(), r.w.data(), r.g.data());
  return r;
}

// Relative mismatch between a directional derivative and its central finite difference.
double fd_mismatch(const std::function<double(double)>& f, double analytic, double h = 1e-3) {
  const double fd = (f(h) - f(-h)) / (2 * h);
  return std::abs(fd - analytic) / std::max(std::abs(analytic), 1e-3);
}

constexpr double kFdTol = 1e-9;  // the products are multilinear: FD error is rounding only
constexpr double kEquivarianceTol = 1e-12;

class TensorProductCase : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorProductCase, SparseForwardEqualsDenseDefinition) {
  const TensorProduct tp = make(GetParam());
  const Batch b(tp, 3, 11);
  const Vec out = forward(tp, b, b.x1, b.x2, b.w);
  Vec ref;
  for (int r = 0; r < b.B; ++r) {
    const double* w = b.w.data() + (tp.shared_weights() ? 0 : r * tp.weight_numel());
    const Vec row =
        dense_forward(tp, b.x1.data() + r * tp.dim_in1(), b.x2.data() + r * tp.dim_in2(), w);
    ref.insert(ref.end(), row.begin(), row.end());
  }
  EXPECT_LT(max_rel_error(out, ref), 1e-14);
}

TEST_P(TensorProductCase, BackwardMatchesFiniteDifferences) {
  const TensorProduct tp = make(GetParam());
  const Batch b(tp, 3, 21);
  const Grads gr = backward(tp, b, b.x1, b.x2, b.w, b.g);
  auto L = [&](const Vec& x1, const Vec& x2, const Vec& w) {
    return dot(b.g, forward(tp, b, x1, x2, w));
  };
  EXPECT_LT(
      fd_mismatch([&](double h) { return L(axpy(b.x1, h, b.dx1), b.x2, b.w); }, dot(gr.x1, b.dx1)),
      kFdTol);
  EXPECT_LT(
      fd_mismatch([&](double h) { return L(b.x1, axpy(b.x2, h, b.dx2), b.w); }, dot(gr.x2, b.dx2)),
      kFdTol);
  if (tp.weight_numel() > 0) {
    EXPECT_LT(
        fd_mismatch([&](double h) { return L(b.x1, b.x2, axpy(b.w, h, b.dw)); }, dot(gr.w, b.dw)),
        kFdTol);
  }
}

TEST_P(TensorProductCase, DoubleBackwardMatchesFiniteDifferences) {
  const TensorProduct tp = make(GetParam());
  const Batch b(tp, 3, 31);
  const Grads dd = double_backward(tp, b, b.x1, b.x2, b.w, b.g);
  // S = <grad_x1, dx1> + <grad_x2, dx2> + <grad_w, dw>, the scalar PyTorch differentiates.
  auto S = [&](const Vec& x1, const Vec& x2, const Vec& w, const Vec& g) {
    const Grads gr = backward(tp, b, x1, x2, w, g);
    return dot(gr.x1, b.dx1) + dot(gr.x2, b.dx2) + dot(gr.w, b.dw);
  };
  const Vec e1 = randn(b.x1.size(), 41), e2 = randn(b.x2.size(), 42), ew = randn(b.w.size(), 43),
            eg = randn(b.g.size(), 44);
  EXPECT_LT(
      fd_mismatch([&](double h) { return S(axpy(b.x1, h, e1), b.x2, b.w, b.g); }, dot(dd.x1, e1)),
      kFdTol);
  EXPECT_LT(
      fd_mismatch([&](double h) { return S(b.x1, axpy(b.x2, h, e2), b.w, b.g); }, dot(dd.x2, e2)),
      kFdTol);
  if (tp.weight_numel() > 0) {
    EXPECT_LT(
        fd_mismatch([&](double h) { return S(b.x1, b.x2, axpy(b.w, h, ew), b.g); }, dot(dd.w, ew)),
        kFdTol);
  }
  EXPECT_LT(
      fd_mismatch([&](double h) { return S(b.x1, b.x2, b.w, axpy(b.g, h, eg)); }, dot(dd.g, eg)),
      kFdTol);
}

TEST_P(TensorProductCase, IsEquivariantUnderProperAndImproperRotations) {
  const TensorProduct tp = make(GetParam());
  const Batch b(tp, 2, 51);
  for (int improper = 0; improper < 2; ++improper) {
    double R[3][3];
    random_rotation(7 + improper, R);
    if (improper)
      for (auto& row : R)
        for (double& e : row) e = -e;
    const Vec D1 = D_from_matrix(tp.irreps_in1(), R), D2 = D_from_matrix(tp.irreps_in2(), R),
              Do = D_from_matrix(tp.irreps_out(), R);
    const int n1 = tp.dim_in1(), n2 = tp.dim_in2(), no = tp.dim_out();
    const Vec rx1 = rotate_rows(D1, n1, b.x1), rx2 = rotate_rows(D2, n2, b.x2),
              rg = rotate_rows(Do, no, b.g);
    // forward: TP(D1 x1, D2 x2) = Do TP(x1, x2)
    EXPECT_LT(max_rel_error(forward(tp, b, rx1, rx2, b.w),
                            rotate_rows(Do, no, forward(tp, b, b.x1, b.x2, b.w))),
              kEquivarianceTol);
    // backward: gradients rotate with their inputs, the weight gradient is invariant
    const Grads g0 = backward(tp, b, b.x1, b.x2, b.w, b.g);
    const Grads g1 = backward(tp, b, rx1, rx2, b.w, rg);
    EXPECT_LT(max_rel_error(g1.x1, rotate_rows(D1, n1, g0.x1)), kEquivarianceTol);
    EXPECT_LT(max_rel_error(g1.x2, rotate_rows(D2, n2, g0.x2)), kEquivarianceTol);
    if (tp.weight_numel() > 0) {
      EXPECT_LT(max_rel_error(g1.w, g0.w), kEquivarianceTol);
    }
    // double backward, with the cotangents rotated as well
    Batch rb = b;
    rb.dx1 = rotate_rows(D1, n1, b.dx1);
    rb.dx2 = rotate_rows(D2, n2, b.dx2);
    const Grads d0 = double_backward(tp, b, b.x1, b.x2, b.w, b.g);
    const Grads d1 = double_backward(tp, rb, rx1, rx2, b.w, rg);
    EXPECT_LT(max_rel_error(d1.x1, rotate_rows(D1, n1, d0.x1)), kEquivarianceTol);
    EXPECT_LT(max_rel_error(d1.x2, rotate_rows(D2, n2, d0.x2)), kEquivarianceTol);
    EXPECT_LT(max_rel_error(d1.g, rotate_rows(Do, no, d0.g)), kEquivarianceTol);
    if (tp.weight_numel() > 0) {
      EXPECT_LT(max_rel_error(d1.w, d0.w), kEquivarianceTol);
    }
  }
}

TEST_P(TensorProductCase, FloatAgreesWithDouble) {
  const TensorProduct tp = make(GetParam());
  const Batch b(tp, 4, 61);
  auto to_f = [](const Vec& v) { return std::vector<float>(v.begin(), v.end()); };
  auto to_d = [](const std::vector<float>& v) { return Vec(v.begin(), v.end()); };
  // Round the inputs once, so both precisions evaluate the same function.
  const Vec x1 = to_d(to_f(b.x1)), x2 = to_d(to_f(b.x2)), w = to_d(to_f(b.w)), g = to_d(to_f(b.g));
  const Vec dx1 = to_d(to_f(b.dx1)), dx2 = to_d(to_f(b.dx2)), dw = to_d(to_f(b.dw));
  const auto fx1 = to_f(x1), fx2 = to_f(x2), fw = to_f(w), fg = to_f(g);
  const auto fdx1 = to_f(dx1), fdx2 = to_f(dx2), fdw = to_f(dw);
  const std::size_t no = std::size_t(b.B) * tp.dim_out();

  Vec out(no), gx1(x1.size()), gx2(x2.size()), gw(w.size()), ggo(no);
  std::vector<float> fout(no), fgx1(x1.size()), fgx2(x2.size()), fgw(w.size()), fggo(no);
  tensor_product_forward<double>(tp, b.B, x1.data(), x2.data(), w.data(), out.data());
  tensor_product_forward<float>(tp, b.B, fx1.data(), fx2.data(), fw.data(), fout.data());
  EXPECT_LT(max_rel_error(to_d(fout), out), 1e-5);
  tensor_product_backward<double>(tp, b.B, x1.data(), x2.data(), w.data(), g.data(), gx1.data(),
                                  gx2.data(), gw.data());
  tensor_product_backward<float>(tp, b.B, fx1.data(), fx2.data(), fw.data(), fg.data(), fgx1.data(),
                                 fgx2.data(), fgw.data());
  EXPECT_LT(max_rel_error(to_d(fgx1), gx1), 1e-5);
  EXPECT_LT(max_rel_error(to_d(fgx2), gx2), 1e-5);
  if (tp.weight_numel() > 0) {
    EXPECT_LT(max_rel_error(to_d(fgw), gw), 1e-5);
  }
  tensor_product_double_backward<double>(tp, b.B, x1.data(), x2.data(), w.data(), g.data(),
                                         dx1.data(), dx2.data(), dw.data(), gx1.data(), gx2.data(),
                                         gw.data(), ggo.data());
  tensor_product_double_backward<float>(tp, b.B, fx1.data(), fx2.data(), fw.data(), fg.data(),
                                        fdx1.data(), fdx2.data(), fdw.data(), fgx1.data(),
                                        fgx2.data(), fgw.data(), fggo.data());
  EXPECT_LT(max_rel_error(to_d(fgx1), gx1), 1e-5);
  EXPECT_LT(max_rel_error(to_d(fgx2), gx2), 1e-5);
  EXPECT_LT(max_rel_error(to_d(fggo), ggo), 1e-5);
  if (tp.weight_numel() > 0) {
    EXPECT_LT(max_rel_error(to_d(fgw), gw), 1e-5);
  }
}

TEST_P(TensorProductCase, ResultsDoNotDependOnThreadCount) {
  const TensorProduct tp = make(GetParam());
  const Batch b(tp, 37, 71);  // more rows than reduction chunks would need for 1 thread
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<Vec> r;
    r.push_back(forward(tp, b, b.x1, b.x2, b.w));
    const Grads g = backward(tp, b, b.x1, b.x2, b.w, b.g);
    const Grads d = double_backward(tp, b, b.x1, b.x2, b.w, b.g);
    for (const Vec* v : {&g.x1, &g.x2, &g.w, &d.x1, &d.x2, &d.w, &d.g}) r.push_back(*v);
    return r;
  };
  const int saved = omp_get_max_threads();
  const auto one = run(1), two = run(2), three = run(3);
  omp_set_num_threads(saved);
  for (std::size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(one[i], two[i]) << "output " << i;
    EXPECT_EQ(one[i], three[i]) << "output " << i;
  }
}

TEST_P(TensorProductCase, NullCotangentsCountAsZeroAndNullOutputsAreSkipped) {
  const TensorProduct tp = make(GetParam());
  Batch b(tp, 2, 81);
  const Vec zeros1(b.x1.size(), 0.0);
  Batch z = b;
  z.dx1 = zeros1;
  const Grads full = double_backward(tp, z, b.x1, b.x2, b.w, b.g);
  Grads part{Vec(b.x1.size(), 7.0), Vec(b.x2.size(), 7.0), Vec(b.w.size(), 7.0),
             Vec(b.g.size(), 7.0)};
  tensor_product_double_backward<double>(tp, b.B, b.x1.data(), b.x2.data(), b.w.data(), b.g.data(),
                                         nullptr, b.dx2.data(), b.dw.data(), part.x1.data(),
                                         nullptr, part.w.data(), part.g.data());
  EXPECT_EQ(part.x1, full.x1);
  EXPECT_EQ(part.x2, Vec(b.x2.size(), 7.0));  // not requested: untouched
  EXPECT_EQ(part.w, full.w);
  EXPECT_EQ(part.g, full.g);

  Vec gx2(b.x2.size(), 7.0);
  tensor_product_backward<double>(tp, b.B, b.x1.data(), b.x2.data(), b.w.data(), b.g.data(),
                                  nullptr, gx2.data(), nullptr);
  EXPECT_EQ(gx2, backward(tp, b, b.x1, b.x2, b.w, b.g).x2);
}

INSTANTIATE_TEST_SUITE_P(Cases, TensorProductCase,
                         ::testing::Values("mace_uvu", "mace_uvu_shared", "fctp_shared",
                                           "fctp_per_row", "mixed_shared", "mixed_per_row",
                                           "elementwise"));

// --- descriptor: what e3nn derives, by hand -----------------------------------------------------

TEST(TensorProduct, MaceLayoutGivesOneOverFanInOfOne) {
  // Every instruction has its own output block: X = mul2 = 1, so alpha = sqrt(2 l_out + 1)
  // (model-spec section 1, step 4), weight index of instruction k, channel u = k*C + u.
  const TensorProduct tp = make("mace_uvu");
  ASSERT_FALSE(tp.shared_weights());
  for (std::size_t k = 0; k < tp.paths().size(); ++k) {
    const auto& p = tp.paths()[k];
    EXPECT_DOUBLE_EQ(p.coefficient, std::sqrt(2.0 * p.ir_out.l() + 1)) << k;
    EXPECT_EQ(p.weight_offset, int(k) * 3) << k;
    EXPECT_EQ(p.path_shape, (std::vector<int>{3, 1})) << k;
  }
  EXPECT_EQ(tp.weight_numel(), int(tp.paths().size()) * 3);
}

TEST(TensorProduct, NormalisationFollowsE3nnFormulas) {
  // 2x0e+3x1o (x) 4x0e+1x1o -> 5x1o+1x1o: two uvw into output 0, a weighted and an unweighted
  // uvv into output 1.
  const Irreps in1("2x0e+3x1o"), in2("4x0e+1x1o"), out("5x1o+1x1o");
  std::vector<Instruction> ins = {{1, 0, 0, "uvw", true, 1.0},
                                  {0, 1, 0, "uvw", true, 2.0},
                                  {0, 1, 1, "uvv", true, 1.0},
                                  {0, 1, 1, "uvv", false, 1.0}};
  // element: fan-in of output 0 = 3*4 + 2*1 = 14; of output 1 = mul1 + mul1 = 2 + 2 = 4.
  TensorProduct e(in1, in2, out, ins);
  EXPECT_DOUBLE_EQ(e.paths()[0].coefficient, std::sqrt(3.0 / 14));
  EXPECT_DOUBLE_EQ(e.paths()[1].coefficient, std::sqrt(3.0 * 2 / 14));
  EXPECT_DOUBLE_EQ(e.paths()[2].coefficient, std::sqrt(3.0 / 4));
  EXPECT_DOUBLE_EQ(e.paths()[3].coefficient, std::sqrt(3.0 / 4));
  // path: own fan-in times the number of instructions into the output; norm: (2l1+1)(2l2+1).
  TensorProductOptions o;
  o.path_normalization = PathNormalization::kPath;
  o.irrep_normalization = IrrepNormalization::kNorm;
  o.in1_var = {1.0, 2.0};
  o.out_var = {0.5, 1.0};
  TensorProduct p(in1, in2, out, ins, o);
  EXPECT_DOUBLE_EQ(p.paths()[0].coefficient, std::sqrt(3.0 * 1 / (2.0 * 12 * 2) * 0.5));
  EXPECT_DOUBLE_EQ(p.paths()[1].coefficient, std::sqrt(1.0 * 3 / (1.0 * 2 * 2) * 0.5 * 2));
  EXPECT_DOUBLE_EQ(p.paths()[2].coefficient, std::sqrt(1.0 * 3 / (1.0 * 2 * 2)));
  EXPECT_DOUBLE_EQ(p.paths()[3].coefficient, std::sqrt(1.0 * 3 / (1.0 * 2 * 2)));
  // weights: uvw (3,4,5), uvw (2,1,5), uvv (2,1); the unweighted uvv has none.
  EXPECT_EQ(p.paths()[0].path_shape, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(p.paths()[1].weight_offset, 60);
  EXPECT_EQ(p.paths()[2].weight_offset, 70);
  EXPECT_EQ(p.paths()[3].weight_offset, -1);
  EXPECT_EQ(p.paths()[3].path_shape, (std::vector<int>{2, 1}));
  EXPECT_EQ(p.weight_numel(), 72);
}

TEST(TensorProduct, FoldsCoefficientIntoCgNonZeros) {
  const TensorProduct tp(Irreps("1x1o"), Irreps("1x1o"), Irreps("1x1e"),
                         {Instruction(0, 0, 0, "uuu", false)});
  // C^{111} = epsilon_ijk / sqrt(6) in (x, y, z); alpha = sqrt(3): c = +-1/sqrt(2), 6 entries.
  ASSERT_EQ(tp.paths()[0].cg.size(), 6u);
  for (const CgEntry& e : tp.paths()[0].cg) EXPECT_DOUBLE_EQ(std::abs(e.c), std::sqrt(0.5));
}

TEST(TensorProduct, ZeroPathWeightContributesNothing) {
  const TensorProduct tp("2x1o", "2x1o", "2x0e", {Instruction(0, 0, 0, "uuu", true, 0.0)});
  EXPECT_EQ(tp.paths()[0].coefficient, 0.0);
  EXPECT_TRUE(tp.paths()[0].cg.empty());
  const Vec x = randn(6, 1), w = randn(2, 2);
  Vec out(2, 9.0);
  tensor_product_forward<double>(tp, 1, x.data(), x.data(), w.data(), out.data());
  EXPECT_EQ(out, Vec(2, 0.0));
}

TEST(TensorProduct, EmptyBatchZeroesSharedWeightGradient) {
  const TensorProduct tp = make("fctp_shared");
  Vec gw(tp.weight_numel(), 5.0);
  const Vec w(tp.weight_numel(), 1.0);
  tensor_product_backward<double>(tp, 0, nullptr, nullptr, w.data(), nullptr, nullptr, nullptr,
                                  gw.data());
  EXPECT_EQ(gw, Vec(tp.weight_numel(), 0.0));
}

// --- descriptor validation ----------------------------------------------------------------------

void expect_error(const std::function<void()>& f, const std::string& substring) {
  try {
    f();
    ADD_FAILURE() << "no exception, expected one containing \"" << substring << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(substring), std::string::npos) << e.what();
  }
}

TEST(TensorProduct, RejectsIndexOutOfRange) {
  expect_error([] { TensorProduct("2x0e", "1x1o", "2x1o", {Instruction(1, 0, 0, "uvu")}); },
               "instruction 0 (1, 0, 0, 'uvu', True, 1): i_in1=1 is out of range, 2x0e has 1");
  expect_error([] { TensorProduct("2x0e", "1x1o", "2x1o", {Instruction(0, 3, 0, "uvu")}); },
               "i_in2=3 is out of range");
  expect_error(
      [] {
        TensorProduct("2x0e", "1x1o", "2x1o",
                      {Instruction(0, 0, 0, "uvu"), Instruction(0, 0, 2, "uvu")});
      },
      "instruction 1 (0, 0, 2, 'uvu', True, 1): i_out=2 is out of range");
}

TEST(TensorProduct, RejectsParityAndTriangleViolations) {
  expect_error([] { TensorProduct("2x1o", "1x1o", "2x1o", {Instruction(0, 0, 0, "uvu")}); },
               "parity violated: 1o x 1o -> 1o");
  expect_error([] { TensorProduct("2x1o", "1x1o", "2x3e", {Instruction(0, 0, 0, "uvu")}); },
               "triangle rule violated: 1o x 1o -> 3e, l_out=3 not in 0..2");
}

TEST(TensorProduct, RejectsMultiplicitiesThatDoNotFitTheMode) {
  expect_error([] { TensorProduct("2x0e", "3x0e", "3x0e", {Instruction(0, 0, 0, "uvu")}); },
               "uvu needs mul1 == mul_out, got mul1=2, mul2=3, mul_out=3");
  expect_error([] { TensorProduct("2x0e", "3x0e", "2x0e", {Instruction(0, 0, 0, "uvv")}); },
               "uvv needs mul2 == mul_out");
  expect_error([] { TensorProduct("2x0e", "3x0e", "2x0e", {Instruction(0, 0, 0, "uuw")}); },
               "uuw needs mul1 == mul2");
  expect_error([] { TensorProduct("2x0e", "2x0e", "2x0e", {Instruction(0, 0, 0, "uuw", false)}); },
               "uuw needs mul_out == 1 without weights");
  expect_error([] { TensorProduct("2x0e", "2x0e", "3x0e", {Instruction(0, 0, 0, "uuu")}); },
               "uuu needs mul1 == mul2 == mul_out, got mul1=2, mul2=2, mul_out=3");
  expect_error([] { TensorProduct("2x0e", "2x0e", "3x0e", {Instruction(0, 0, 0, "uvw", false)}); },
               "uvw needs weights");
}

TEST(TensorProduct, RejectsBadInstructionValuesAndOptions) {
  expect_error([] { Instruction(0, 0, 0, "uvuv"); }, "unsupported connection mode \"uvuv\"");
  expect_error([] { Instruction(0, -1, 0, "uvu"); }, "indices must be >= 0");
  expect_error([] { Instruction(0, 0, 0, "uvu", true, -2.0); },
               "path_weight must be finite and >= 0, got -2");
  TensorProductOptions o;
  o.in2_var = {1.0, 2.0};
  expect_error([&] { TensorProduct("2x0e", "1x0e", "2x0e", {Instruction(0, 0, 0, "uvu")}, o); },
               "in2_var has 2 entries, irreps 1x0e has 1");
}

// --- explicit couplings (TensorProduct::with_couplings) -----------------------------------------

// The dense coupling coefficient * wigner_3j of every path of `tp`: what an exporter probing an
// e3nn 0.6 module writes as "cg".
std::vector<Vec> dense_couplings(const TensorProduct& tp) {
  std::vector<Vec> out;
  for (const TensorProductPath& p : tp.paths()) {
    Vec c = wigner_3j(p.ir1.l(), p.ir2.l(), p.ir_out.l());
    for (double& v : c) v *= p.coefficient;
    out.push_back(c);
  }
  return out;
}

// The instructions of `tp` with the path weight e3nn reports after construction (its
// coefficient), as an exported file states them.
std::vector<Instruction> exported_instructions(const TensorProduct& tp) {
  std::vector<Instruction> out;
  for (const TensorProductPath& p : tp.paths())
    out.emplace_back(p.ins.i_in1(), p.ins.i_in2(), p.ins.i_out(), p.ins.mode(), p.ins.has_weight(),
                     p.coefficient);
  return out;
}

TEST_P(TensorProductCase, ExplicitCouplingsEqualToDerivedGiveTheSameProduct) {
  const TensorProduct derived = make(GetParam());
  const TensorProduct given = TensorProduct::with_couplings(
      derived.irreps_in1(), derived.irreps_in2(), derived.irreps_out(),
      exported_instructions(derived), dense_couplings(derived), derived.shared_weights());
  EXPECT_TRUE(given.explicit_couplings());
  EXPECT_FALSE(derived.explicit_couplings());
  ASSERT_EQ(given.weight_numel(), derived.weight_numel());
  ASSERT_EQ(given.paths().size(), derived.paths().size());
  for (std::size_t n = 0; n < given.paths().size(); ++n) {
    const TensorProductPath &a = given.paths()[n], &b = derived.paths()[n];
    EXPECT_EQ(a.weight_offset, b.weight_offset) << n;
    EXPECT_EQ(a.path_shape, b.path_shape) << n;
    EXPECT_EQ(a.offset_out, b.offset_out) << n;
    EXPECT_DOUBLE_EQ(a.coefficient, b.coefficient) << n;
    // Same non-zeros with the same values: the given coupling is coefficient * C entry by entry,
    // so the kernels see identical tables.
    ASSERT_EQ(a.cg.size(), b.cg.size()) << n;
    for (std::size_t e = 0; e < a.cg.size(); ++e) {
      EXPECT_EQ(a.cg[e].i, b.cg[e].i);
      EXPECT_EQ(a.cg[e].j, b.cg[e].j);
      EXPECT_EQ(a.cg[e].k, b.cg[e].k);
      EXPECT_EQ(a.cg[e].c, b.cg[e].c);
    }
  }
  const Batch b(derived, 3, 71);
  EXPECT_EQ(forward(given, b, b.x1, b.x2, b.w), forward(derived, b, b.x1, b.x2, b.w));
  const Grads ga = backward(given, b, b.x1, b.x2, b.w, b.g);
  const Grads gb = backward(derived, b, b.x1, b.x2, b.w, b.g);
  EXPECT_EQ(ga.x1, gb.x1);
  EXPECT_EQ(ga.x2, gb.x2);
  EXPECT_EQ(ga.w, gb.w);
}

TEST(TensorProduct, ExplicitCouplingSignIsHonoured) {
  // MACE-like uvu product with non-natural-parity targets (1e, 2o: odd l1+l2+l3 paths); flip the
  // sign of one odd path's coupling, as e3nn 0.4.4 differs from 0.6 for such triples. Every
  // instruction writes its own output block, so exactly that block changes sign and every other
  // block is unchanged.
  const TensorProduct derived =
      mace_uvu("3x0e+3x1o+3x2e", Irreps::spherical_harmonics(2), "0e+1o+1e+2e+2o", false);
  std::vector<Vec> couplings = dense_couplings(derived);
  std::size_t flipped = derived.paths().size();
  for (std::size_t n = 0; n < derived.paths().size(); ++n) {
    const TensorProductPath& p = derived.paths()[n];
    if ((p.ir1.l() + p.ir2.l() + p.ir_out.l()) % 2 == 1) {
      flipped = n;
      break;
    }
  }
  ASSERT_LT(flipped, derived.paths().size()) << "the case needs an odd l1+l2+l3 path";
  for (double& v : couplings[flipped]) v = -v;
  const TensorProduct given = TensorProduct::with_couplings(
      derived.irreps_in1(), derived.irreps_in2(), derived.irreps_out(),
      exported_instructions(derived), couplings, derived.shared_weights());
  const Batch b(derived, 2, 5);
  const Vec yd = forward(derived, b, b.x1, b.x2, b.w), yg = forward(given, b, b.x1, b.x2, b.w);
  const TensorProductPath& p = derived.paths()[flipped];
  const int begin = p.offset_out, end = p.offset_out + p.mul_out * p.ir_out.dim();
  int changed = 0;
  for (int r = 0; r < b.B; ++r)
    for (int k = 0; k < derived.dim_out(); ++k) {
      const double d = yd[r * derived.dim_out() + k], g = yg[r * derived.dim_out() + k];
      if (k >= begin && k < end) {
        EXPECT_EQ(g, -d) << "row " << r << " component " << k;
        changed += d != 0;
      } else {
        EXPECT_EQ(g, d) << "row " << r << " component " << k;
      }
    }
  EXPECT_GT(changed, 0);
}

TEST(TensorProduct, ExplicitCouplingIsContractedAsGiven) {
  // 1o x 1o -> 0e, uvw with a hand-written coupling P[i][j][0] = s * delta_ij (not wigner_3j's
  // 1/sqrt(3)): out[w] = s * sum_uv W[u,v,w] (a_u . b_v), worked out directly.
  const double s = -0.7;
  Vec P(9, 0.0);
  for (int i = 0; i < 3; ++i) P[i * 3 + i] = s;
  const TensorProduct tp = TensorProduct::with_couplings(
      "2x1o", "1x1o", "2x0e", {Instruction(0, 0, 0, "uvw", true, 0.5)}, {P}, true);
  EXPECT_EQ(tp.paths()[0].coefficient, 0.5);  // kept for reference, not applied
  ASSERT_EQ(tp.weight_numel(), 4);
  const Vec x1 = randn(6, 11), x2 = randn(3, 12), w = randn(4, 13);
  Vec out(2);
  tensor_product_forward<double>(tp, 1, x1.data(), x2.data(), w.data(), out.data());
  for (int o = 0; o < 2; ++o) {
    double expect = 0;
    for (int u = 0; u < 2; ++u) {
      const double ab = x1[u * 3] * x2[0] + x1[u * 3 + 1] * x2[1] + x1[u * 3 + 2] * x2[2];
      expect += s * w[(u * 1 + 0) * 2 + o] * ab;
    }
    EXPECT_NEAR(out[o], expect, 1e-15);
  }
}

TEST(TensorProduct, ExplicitCouplingsAreValidated) {
  const Vec ok(9, 0.1);
  expect_error(
      [&] {
        TensorProduct::with_couplings("1x1o", "1x1o", "1x0e", {Instruction(0, 0, 0, "uvw")},
                                      {ok, ok});
      },
      "2 couplings for 1 instructions");
  expect_error(
      [&] {
        TensorProduct::with_couplings("1x1o", "1x1o", "1x0e", {Instruction(0, 0, 0, "uvw")},
                                      {Vec(8, 0.1)});
      },
      "coupling has 8 values, expected (2l1+1)(2l2+1)(2l_out+1) = 3*3*1");
  Vec bad = ok;
  bad[4] = std::nan("");
  expect_error(
      [&] {
        TensorProduct::with_couplings("1x1o", "1x1o", "1x0e", {Instruction(0, 0, 0, "uvw")}, {bad});
      },
      "coupling value [1][1][0] is nan");
  // The selection rules still apply: a given coupling does not make 1o x 1o -> 0o allowed.
  expect_error(
      [&] {
        TensorProduct::with_couplings("1x1o", "1x1o", "1x0o", {Instruction(0, 0, 0, "uvw")}, {ok});
      },
      "parity violated");
}

}  // namespace
}  // namespace clebsch
