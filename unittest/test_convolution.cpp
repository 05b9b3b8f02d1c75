// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Property tests of the fused tensor-product convolution: EdgeIndex's CSR orderings and
// validation; forward, backward and double backward equal to the unfused computation (gather,
// batched tensor product, scatter); every gradient against central finite differences; O(3)
// equivariance; float against double; bitwise independence of the OpenMP thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "clebsch/o3/convolution.h"
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

Vec rotate_rows(const Vec& D, int dim, const Vec& x) {
  Vec y(x.size(), 0.0);
  for (std::size_t r = 0; r < x.size() / dim; ++r)
    for (int i = 0; i < dim; ++i)
      for (int j = 0; j < dim; ++j) y[r * dim + i] += D[i * dim + j] * x[r * dim + j];
  return y;
}

// MACE's conv_tp layout (see test_tensor_product.cpp): one uvu output block per path, sorted.
TensorProduct mace_uvu(const Irreps& in1, const Irreps& in2, const Irreps& target) {
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
  for (auto& t : ins) t[2] = sorted.p[t[2]];
  std::stable_sort(ins.begin(), ins.end(), [](auto& a, auto& b) { return a[2] < b[2]; });
  std::vector<Instruction> instructions;
  for (auto& t : ins) instructions.emplace_back(t[0], t[1], t[2], ConnectionMode::kUvu);
  TensorProductOptions options;
  options.shared_weights = false;
  return TensorProduct(in1, in2, sorted.irreps, instructions, options);
}

TensorProduct make(const std::string& name) {
  TensorProductOptions per_row;
  per_row.shared_weights = false;
  if (name == "mace")
    return mace_uvu("3x0e+3x1o+2x2e", Irreps::spherical_harmonics(3), "0e+1o+2e+3o");
  if (name == "mixed")
    return TensorProduct("2x0e+2x1o+1x2e", "0e+1o+2e", "3x0e+2x1o+2x1e+1x2e",
                         {{0, 0, 0, "uvw", true, 1.0},
                          {1, 1, 0, "uvw", true, 0.5},
                          {1, 0, 1, "uvu", true, 1.0},
                          {0, 1, 1, "uvu", false, 2.0},
                          {1, 1, 2, "uvu", true, 1.0},
                          {2, 1, 1, "uvw", true, 1.0},
                          {2, 2, 3, "uuu", false, 1.0}},
                         per_row);
  if (name == "no_weights")
    return TensorProduct("2x1o+1x2e", "0e+1o", "2x1o+2x1e",
                         {{0, 0, 0, "uvu", false}, {0, 1, 1, "uvu", false}}, per_row);
  throw Error("no test case " + name);
}

// A graph with more senders than receivers, a sender without edges (the last), a receiver
// without edges (the last), a repeated edge, and per-edge inputs.
struct Graph {
  int ns = 7, nr = 5, ne = 23;
  std::vector<int> sender, receiver;
  Vec x, Y, W, g, dx, dY, dW;
  Graph(const TensorProduct& tp, std::uint64_t seed) {
    std::mt19937_64 gen(seed);
    for (int e = 0; e < ne; ++e) {
      sender.push_back(int(gen() % (ns - 1)));
      receiver.push_back(int(gen() % (nr - 1)));
    }
    sender.back() = sender.front();
    receiver.back() = receiver.front();
    x = randn(std::size_t(ns) * tp.dim_in1(), seed + 1);
    Y = randn(std::size_t(ne) * tp.dim_in2(), seed + 2);
    W = randn(std::size_t(ne) * tp.weight_numel(), seed + 3);
    g = randn(std::size_t(nr) * tp.dim_out(), seed + 4);
    dx = randn(x.size(), seed + 5);
    dY = randn(Y.size(), seed + 6);
    dW = randn(W.size(), seed + 7);
  }
  EdgeIndex index() const { return EdgeIndex(ns, nr, sender, receiver); }
};

struct Grads {
  Vec x, Y, W, g;
};

Vec conv(const TensorProduct& tp, const Graph& G, const Vec& x, const Vec& Y, const Vec& W) {
  Vec out(std::size_t(G.nr) * tp.dim_out());
  convolution_forward<double>(tp, G.index(), x.data(), Y.data(), W.data(), out.data());
  return out;
}

Grads conv_backward(const TensorProduct& tp, const Graph& G, const Vec& x, const Vec& Y,
                    const Vec& W, const Vec& g) {
  Grads r{Vec(x.size()), Vec(Y.size()), Vec(W.size()), {}};
  convolution_backward<double>(tp, G.index(), x.data(), Y.data(), W.data(), g.data(), r.x.data(),
                               r.Y.data(), r.W.data());
  return r;
}

Grads conv_double_backward(const TensorProduct& tp, const Graph& G, const Vec& x, const Vec& Y,
                           const Vec& W, const Vec& g, const Vec& dx, const Vec& dY,
                           const Vec& dW) {
  Grads r{Vec(x.size()), Vec(Y.size()), Vec(W.size()), Vec(g.size())};
  convolution_double_backward<double>(tp, G.index(), x.data(), Y.data(), W.data(), g.data(),
                                      dx.data(), dY.data(), dW.data(), r.x.data(), r.Y.data(),
                                      r.W.data(), r.g.data());
  return r;
}

// Rows of `src` (row length dim) picked by `index`.
Vec gather(const Vec& src, int dim, const std::vector<int>& index) {
  Vec out;
  for (int i : index) out.insert(out.end(), src.begin() + i * dim, src.begin() + (i + 1) * dim);
  return out;
}

// out[index[e]] += rows[e].
Vec scatter(const Vec& rows, int dim, const std::vector<int>& index, int n) {
  Vec out(std::size_t(n) * dim, 0.0);
  for (std::size_t e = 0; e < index.size(); ++e)
    for (int k = 0; k < dim; ++k) out[index[e] * dim + k] += rows[e * dim + k];
  return out;
}

double fd_mismatch(const std::function<double(double)>& f, double analytic, double h = 1e-3) {
  const double fd = (f(h) - f(-h)) / (2 * h);
  return std::abs(fd - analytic) / std::max(std::abs(analytic), 1e-3);
}

constexpr double kFdTol = 1e-9;
constexpr double kUnfusedTol = 1e-14;  // same sums, different order
constexpr double kEquivarianceTol = 1e-12;

class ConvolutionCase : public ::testing::TestWithParam<std::string> {};

TEST_P(ConvolutionCase, EqualsGatherTensorProductScatter) {
  const TensorProduct tp = make(GetParam());
  const Graph G(tp, 1);
  const int n1 = tp.dim_in1(), no = tp.dim_out(), E = G.ne;
  const Vec xs = gather(G.x, n1, G.sender), gr = gather(G.g, no, G.receiver);
  const Vec dxs = gather(G.dx, n1, G.sender);

  Vec messages(std::size_t(E) * no);
  tensor_product_forward<double>(tp, E, xs.data(), G.Y.data(), G.W.data(), messages.data());
  EXPECT_LT(max_rel_error(conv(tp, G, G.x, G.Y, G.W), scatter(messages, no, G.receiver, G.nr)),
            kUnfusedTol);

  Vec gxs(xs.size()), gY(G.Y.size()), gW(G.W.size());
  tensor_product_backward<double>(tp, E, xs.data(), G.Y.data(), G.W.data(), gr.data(), gxs.data(),
                                  gY.data(), gW.data());
  const Grads b = conv_backward(tp, G, G.x, G.Y, G.W, G.g);
  EXPECT_LT(max_rel_error(b.x, scatter(gxs, n1, G.sender, G.ns)), kUnfusedTol);
  EXPECT_LT(max_rel_error(b.Y, gY), kUnfusedTol);
  if (tp.weight_numel() > 0) {
    EXPECT_LT(max_rel_error(b.W, gW), kUnfusedTol);
  }

  Vec dd_xs(xs.size()), dd_Y(G.Y.size()), dd_W(G.W.size()), dd_g(gr.size());
  tensor_product_double_backward<double>(tp, E, xs.data(), G.Y.data(), G.W.data(), gr.data(),
                                         dxs.data(), G.dY.data(), G.dW.data(), dd_xs.data(),
                                         dd_Y.data(), dd_W.data(), dd_g.data());
  const Grads d = conv_double_backward(tp, G, G.x, G.Y, G.W, G.g, G.dx, G.dY, G.dW);
  EXPECT_LT(max_rel_error(d.x, scatter(dd_xs, n1, G.sender, G.ns)), kUnfusedTol);
  EXPECT_LT(max_rel_error(d.Y, dd_Y), kUnfusedTol);
  if (tp.weight_numel() > 0) {
    EXPECT_LT(max_rel_error(d.W, dd_W), kUnfusedTol);
  }
  EXPECT_LT(max_rel_error(d.g, scatter(dd_g, no, G.receiver, G.nr)), kUnfusedTol);
}

TEST_P(ConvolutionCase, BackwardMatchesFiniteDifferences) {
  const TensorProduct tp = make(GetParam());
  const Graph G(tp, 2);
  const Grads b = conv_backward(tp, G, G.x, G.Y, G.W, G.g);
  auto L = [&](const Vec& x, const Vec& Y, const Vec& W) { return dot(G.g, conv(tp, G, x, Y, W)); };
  EXPECT_LT(fd_mismatch([&](double h) { return L(axpy(G.x, h, G.dx), G.Y, G.W); }, dot(b.x, G.dx)),
            kFdTol);
  EXPECT_LT(fd_mismatch([&](double h) { return L(G.x, axpy(G.Y, h, G.dY), G.W); }, dot(b.Y, G.dY)),
            kFdTol);
  if (tp.weight_numel() > 0) {
    EXPECT_LT(
        fd_mismatch([&](double h) { return L(G.x, G.Y, axpy(G.W, h, G.dW)); }, dot(b.W, G.dW)),
        kFdTol);
  }
}

TEST_P(ConvolutionCase, DoubleBackwardMatchesFiniteDifferences) {
  const TensorProduct tp = make(GetParam());
  const Graph G(tp, 3);
  const Grads d = conv_double_backward(tp, G, G.x, G.Y, G.W, G.g, G.dx, G.dY, G.dW);
  auto S = [&](const Vec& x, const Vec& Y, const Vec& W, const Vec& g) {
    const Grads b = conv_backward(tp, G, x, Y, W, g);
    return dot(b.x, G.dx) + dot(b.Y, G.dY) + dot(b.W, G.dW);
  };
  const Vec ex = randn(G.x.size(), 31), eY = randn(G.Y.size(), 32), eW = randn(G.W.size(), 33),
            eg = randn(G.g.size(), 34);
  EXPECT_LT(fd_mismatch([&](double h) { return S(axpy(G.x, h, ex), G.Y, G.W, G.g); }, dot(d.x, ex)),
            kFdTol);
  EXPECT_LT(fd_mismatch([&](double h) { return S(G.x, axpy(G.Y, h, eY), G.W, G.g); }, dot(d.Y, eY)),
            kFdTol);
  if (tp.weight_numel() > 0) {
    EXPECT_LT(
        fd_mismatch([&](double h) { return S(G.x, G.Y, axpy(G.W, h, eW), G.g); }, dot(d.W, eW)),
        kFdTol);
  }
  EXPECT_LT(fd_mismatch([&](double h) { return S(G.x, G.Y, G.W, axpy(G.g, h, eg)); }, dot(d.g, eg)),
            kFdTol);
}

TEST_P(ConvolutionCase, IsEquivariantUnderProperAndImproperRotations) {
  const TensorProduct tp = make(GetParam());
  const Graph G(tp, 4);
  const int n1 = tp.dim_in1(), n2 = tp.dim_in2(), no = tp.dim_out();
  for (int improper = 0; improper < 2; ++improper) {
    double R[3][3];
    random_rotation(17 + improper, R);
    if (improper)
      for (auto& row : R)
        for (double& e : row) e = -e;
    const Vec D1 = D_from_matrix(tp.irreps_in1(), R), D2 = D_from_matrix(tp.irreps_in2(), R),
              Do = D_from_matrix(tp.irreps_out(), R);
    const Vec rx = rotate_rows(D1, n1, G.x), rY = rotate_rows(D2, n2, G.Y),
              rg = rotate_rows(Do, no, G.g);
    EXPECT_LT(
        max_rel_error(conv(tp, G, rx, rY, G.W), rotate_rows(Do, no, conv(tp, G, G.x, G.Y, G.W))),
        kEquivarianceTol);
    const Grads b0 = conv_backward(tp, G, G.x, G.Y, G.W, G.g);
    const Grads b1 = conv_backward(tp, G, rx, rY, G.W, rg);
    EXPECT_LT(max_rel_error(b1.x, rotate_rows(D1, n1, b0.x)), kEquivarianceTol);
    EXPECT_LT(max_rel_error(b1.Y, rotate_rows(D2, n2, b0.Y)), kEquivarianceTol);
    if (tp.weight_numel() > 0) {
      EXPECT_LT(max_rel_error(b1.W, b0.W), kEquivarianceTol);
    }
    const Grads d0 = conv_double_backward(tp, G, G.x, G.Y, G.W, G.g, G.dx, G.dY, G.dW);
    const Grads d1 = conv_double_backward(tp, G, rx, rY, G.W, rg, rotate_rows(D1, n1, G.dx),
                                          rotate_rows(D2, n2, G.dY), G.dW);
    EXPECT_LT(max_rel_error(d1.x, rotate_rows(D1, n1, d0.x)), kEquivarianceTol);
    EXPECT_LT(max_rel_error(d1.Y, rotate_rows(D2, n2, d0.Y)), kEquivarianceTol);
    EXPECT_LT(max_rel_error(d1.g, rotate_rows(Do, no, d0.g)), kEquivarianceTol);
    if (tp.weight_numel() > 0) {
      EXPECT_LT(max_rel_error(d1.W, d0.W), kEquivarianceTol);
    }
  }
}

TEST_P(ConvolutionCase, FloatAgreesWithDouble) {
  const TensorProduct tp = make(GetParam());
  const Graph G(tp, 5);
  auto to_f = [](const Vec& v) { return std::vector<float>(v.begin(), v.end()); };
  auto to_d = [](const std::vector<float>& v) { return Vec(v.begin(), v.end()); };
  const Vec x = to_d(to_f(G.x)), Y = to_d(to_f(G.Y)), W = to_d(to_f(G.W)), g = to_d(to_f(G.g));
  const Vec dx = to_d(to_f(G.dx)), dY = to_d(to_f(G.dY)), dW = to_d(to_f(G.dW));
  const auto fx = to_f(x), fY = to_f(Y), fW = to_f(W), fg = to_f(g);
  const auto fdx = to_f(dx), fdY = to_f(dY), fdW = to_f(dW);
  const EdgeIndex idx = G.index();

  std::vector<float> fout(g.size());
  convolution_forward<float>(tp, idx, fx.data(), fY.data(), fW.data(), fout.data());
  EXPECT_LT(max_rel_error(to_d(fout), conv(tp, G, x, Y, W)), 1e-5);

  std::vector<float> fgx(x.size()), fgY(Y.size()), fgW(W.size()), fgg(g.size());
  convolution_backward<float>(tp, idx, fx.data(), fY.data(), fW.data(), fg.data(), fgx.data(),
                              fgY.data(), fgW.data());
  const Grads b = conv_backward(tp, G, x, Y, W, g);
  EXPECT_LT(max_rel_error(to_d(fgx), b.x), 1e-5);
  EXPECT_LT(max_rel_error(to_d(fgY), b.Y), 1e-5);
  if (tp.weight_numel() > 0) {
    EXPECT_LT(max_rel_error(to_d(fgW), b.W), 1e-5);
  }

  convolution_double_backward<float>(tp, idx, fx.data(), fY.data(), fW.data(), fg.data(),
                                     fdx.data(), fdY.data(), fdW.data(), fgx.data(), fgY.data(),
                                     fgW.data(), fgg.data());
  const Grads d = conv_double_backward(tp, G, x, Y, W, g, dx, dY, dW);
  EXPECT_LT(max_rel_error(to_d(fgx), d.x), 1e-5);
  EXPECT_LT(max_rel_error(to_d(fgY), d.Y), 1e-5);
  EXPECT_LT(max_rel_error(to_d(fgg), d.g), 1e-5);
  if (tp.weight_numel() > 0) {
    EXPECT_LT(max_rel_error(to_d(fgW), d.W), 1e-5);
  }
}

TEST_P(ConvolutionCase, ResultsDoNotDependOnThreadCount) {
  const TensorProduct tp = make(GetParam());
  const Graph G(tp, 6);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    const Grads b = conv_backward(tp, G, G.x, G.Y, G.W, G.g);
    const Grads d = conv_double_backward(tp, G, G.x, G.Y, G.W, G.g, G.dx, G.dY, G.dW);
    return std::vector<Vec>{conv(tp, G, G.x, G.Y, G.W), b.x, b.Y, b.W, d.x, d.Y, d.W, d.g};
  };
  const int saved = omp_get_max_threads();
  const auto one = run(1), two = run(2), three = run(3);
  omp_set_num_threads(saved);
  for (std::size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(one[i], two[i]) << "output " << i;
    EXPECT_EQ(one[i], three[i]) << "output " << i;
  }
}

TEST_P(ConvolutionCase, EmptyRowsAreZeroAndNullArgumentsBehave) {
  const TensorProduct tp = make(GetParam());
  const Graph G(tp, 7);
  const Vec out = conv(tp, G, G.x, G.Y, G.W);
  for (int k = 0; k < tp.dim_out(); ++k) EXPECT_EQ(out[(G.nr - 1) * tp.dim_out() + k], 0.0);
  const Grads b = conv_backward(tp, G, G.x, G.Y, G.W, G.g);
  for (int k = 0; k < tp.dim_in1(); ++k) EXPECT_EQ(b.x[(G.ns - 1) * tp.dim_in1() + k], 0.0);

  // null cotangent == zero cotangent; a null output is left alone
  const Grads full =
      conv_double_backward(tp, G, G.x, G.Y, G.W, G.g, Vec(G.dx.size(), 0.0), G.dY, G.dW);
  Vec gx(G.x.size(), 7.0), gg(G.g.size(), 7.0);
  convolution_double_backward<double>(tp, G.index(), G.x.data(), G.Y.data(), G.W.data(), G.g.data(),
                                      nullptr, G.dY.data(), G.dW.data(), gx.data(), nullptr,
                                      nullptr, gg.data());
  EXPECT_EQ(gx, full.x);
  EXPECT_EQ(gg, full.g);
  Vec gY(G.Y.size(), 7.0);
  convolution_backward<double>(tp, G.index(), G.x.data(), G.Y.data(), G.W.data(), G.g.data(),
                               nullptr, gY.data(), nullptr);
  EXPECT_EQ(gY, b.Y);
}

INSTANTIATE_TEST_SUITE_P(Cases, ConvolutionCase, ::testing::Values("mace", "mixed", "no_weights"));

TEST(Convolution, EmptyGraphGivesZeros) {
  const TensorProduct tp = make("mace");
  const EdgeIndex idx(3, 2, std::vector<int>{}, std::vector<int>{});
  Vec out(2 * tp.dim_out(), 9.0), gx(3 * tp.dim_in1(), 9.0);
  const Vec x(3 * tp.dim_in1(), 1.0), g(2 * tp.dim_out(), 1.0);
  convolution_forward<double>(tp, idx, x.data(), nullptr, nullptr, out.data());
  convolution_backward<double>(tp, idx, x.data(), nullptr, nullptr, g.data(), gx.data(), nullptr,
                               nullptr);
  EXPECT_EQ(out, Vec(out.size(), 0.0));
  EXPECT_EQ(gx, Vec(gx.size(), 0.0));
}

TEST(Convolution, RejectsSharedWeights) {
  const TensorProduct tp("2x0e", "0e", "2x0e", {Instruction(0, 0, 0, "uvu")});
  const EdgeIndex idx(1, 1, std::vector<int>{0}, std::vector<int>{0});
  const Vec x(2, 1.0), Y(1, 1.0), W(2, 1.0);
  Vec out(2);
  try {
    convolution_forward<double>(tp, idx, x.data(), Y.data(), W.data(), out.data());
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs per-edge weights"), std::string::npos) << e.what();
  }
}

TEST(EdgeIndex, BuildsStableCsrOrderings) {
  // edges: 0:(s2->r1) 1:(s0->r0) 2:(s2->r0) 3:(s1->r1) 4:(s2->r1)
  const EdgeIndex idx(4, 3, std::vector<int>{2, 0, 2, 1, 2}, std::vector<int>{1, 0, 0, 1, 1});
  EXPECT_EQ(idx.receiver_ptr(), (std::vector<int>{0, 2, 5, 5}));
  EXPECT_EQ(idx.by_receiver(), (std::vector<int>{1, 2, 0, 3, 4}));
  EXPECT_EQ(idx.sender_ptr(), (std::vector<int>{0, 1, 2, 5, 5}));
  EXPECT_EQ(idx.by_sender(), (std::vector<int>{1, 3, 0, 2, 4}));
  EXPECT_EQ(idx.num_edges(), 5);
}

TEST(EdgeIndex, RejectsOutOfRangeIndices) {
  auto expect_error = [](const std::function<void()>& f, const std::string& substring) {
    try {
      f();
      ADD_FAILURE() << "no exception, expected \"" << substring << "\"";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(substring), std::string::npos) << e.what();
    }
  };
  expect_error(
      [] {
        EdgeIndex(2, 2, std::vector<int>{0, 2}, std::vector<int>{0, 1});
      },
      "edge 1: sender 2 is out of range [0, 2)");
  expect_error(
      [] {
        EdgeIndex(2, 2, std::vector<int>{0, 1}, std::vector<int>{-1, 1});
      },
      "edge 0: receiver -1 is out of range [0, 2)");
  expect_error(
      [] {
        EdgeIndex(2, 2, std::vector<int>{0, 1}, std::vector<int>{0});
      },
      "2 senders but 1 receivers");
  expect_error([] { EdgeIndex(-1, 2, std::vector<int>{}, std::vector<int>{}); },
               "num_senders must be >= 0, got -1");
}

}  // namespace
}  // namespace clebsch
