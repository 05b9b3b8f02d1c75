// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// SymmetricContraction (symmetric_contraction.h) against independent math: a dense evaluation of
// B = sum_nu sum_k W_nu[z,k,c] sum_{i..} U_nu[M,i..,k] prod_t A[c,i_t] written out here (no
// symmetrisation, no monomial tree), on random sparse U and on U built from chains of e3nn
// Wigner-3j tensors; O(3) equivariance with those (A rotated by the real Wigner-D matrices,
// proper and improper rotations); the backward against a 5-point central difference (exact for
// polynomials of degree <= 4, so only rounding remains); float against double; thread-count
// independence; MACE's weight naming; constructor errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "clebsch/nn/symmetric_contraction.h"
#include "clebsch/o3/clebsch_gordan.h"
#include "clebsch/o3/irreps.h"
#include "clebsch/o3/wigner_d.h"
#include "clebsch/support/error.h"

namespace clebsch {
namespace {

constexpr double kDenseTolerance = 1e-13;         // vs the dense formula, relative to max |B|
constexpr double kEquivarianceTolerance = 1e-12;  // relative to max |B|
constexpr double kFdTolerance = 1e-9;             // backward vs 5-point FD (exact polynomial)
constexpr double kFloatTolerance = 2e-5;

// Platform-independent random numbers (SplitMix64), uniform in [-1, 1).
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * 0x1.0p-53 * 2 - 1; }
  int below(int n) { return static_cast<int>(next() % static_cast<std::uint64_t>(n)); }
};

double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return err / std::max(scale, 1e-300);
}

std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

// U shape as MACE stores it: [2L+1, D x nu, K], without the leading 1 when L = 0.
std::vector<std::int64_t> u_shape(int L, int D, int nu, int K) {
  std::vector<std::int64_t> s;
  if (L > 0) s.push_back(2 * L + 1);
  for (int t = 0; t < nu; ++t) s.push_back(D);
  s.push_back(K);
  return s;
}

DenseTensor random_weights(int n_el, int K, int C, Rng& rng) {
  DenseTensor w{{n_el, K, C}, {}};
  for (std::int64_t i = 0; i < numel(w.shape); ++i) w.values.push_back(rng.uniform());
  return w;
}

// Random sparse U (no symmetry at all), about `density` of the entries nonzero.
DenseTensor random_u(int L, int D, int nu, int K, double density, Rng& rng) {
  DenseTensor u{u_shape(L, D, nu, K), {}};
  u.values.assign(numel(u.shape), 0.0);
  for (auto& v : u.values)
    if ((rng.uniform() + 1) / 2 < density) v = rng.uniform();
  return u;
}

// Equivariant U from coupling chains of Wigner-3j tensors (the construction of MACE's
// _wigner_nj, without its symmetrisation), one K index per chain: start from input irrep a1,
// couple a2 into l_12 with C^{l_1 l_2 l_12}[m_1, m_2, m_12], then a3 into l_123, ..., ending in
// L; a1 <= a2 <= ... (irrep indices), parities multiplied along the chain. nu = 1 gives
// delta(M, m) for each input irrep equal to L.
struct Chain {
  std::vector<double> t;  // [2l+1][D^depth]
  int l, p, last, depth;
};

void extend(const Irreps& coupling, const Irrep& L, int nu, const Chain& ch,
            std::vector<std::vector<double>>& paths) {
  const int D = coupling.dim();
  const std::vector<int> off = coupling.offsets();
  if (ch.depth == nu) {
    if (ch.l == L.l() && ch.p == L.p()) paths.push_back(ch.t);
    return;
  }
  std::size_t dn = 1;
  for (int t = 0; t < ch.depth; ++t) dn *= D;
  for (int b = ch.last; b < static_cast<int>(coupling.size()); ++b) {
    const int lb = coupling[b].ir.l(), db = 2 * lb + 1;
    for (int l = std::abs(ch.l - lb); l <= ch.l + lb; ++l) {
      const auto& C = wigner_3j(ch.l, lb, l);
      const int dl = 2 * l + 1;
      Chain next{std::vector<double>(dl * dn * D, 0.0), l, ch.p * coupling[b].ir.p(), b,
                 ch.depth + 1};
      for (int m = 0; m < 2 * ch.l + 1; ++m)
        for (std::size_t f = 0; f < dn; ++f) {
          const double v = ch.t[m * dn + f];
          if (v == 0) continue;
          for (int mb = 0; mb < db; ++mb)
            for (int M = 0; M < dl; ++M)
              next.t[(M * dn + f) * D + off[b] + mb] += v * C[(m * db + mb) * dl + M];
        }
      extend(coupling, L, nu, next, paths);
    }
  }
}

DenseTensor cg_u(const Irreps& coupling, const Irrep& L, int nu) {
  const int D = coupling.dim();
  const std::vector<int> off = coupling.offsets();
  std::vector<std::vector<double>> paths;  // each a dense [2L+1][D^nu] block
  for (int a = 0; a < static_cast<int>(coupling.size()); ++a) {
    const int la = coupling[a].ir.l();
    Chain start{std::vector<double>((2 * la + 1) * D, 0.0), la, coupling[a].ir.p(), a, 1};
    for (int m = 0; m < 2 * la + 1; ++m) start.t[m * D + off[a] + m] = 1;
    extend(coupling, L, nu, start, paths);
  }
  std::size_t block = L.dim();
  for (int t = 0; t < nu; ++t) block *= D;
  // MACE stores a zero tensor with K = 1 when no path exists.
  const int K = std::max<int>(1, static_cast<int>(paths.size()));
  DenseTensor u{u_shape(L.l(), D, nu, K), std::vector<double>(block * K, 0.0)};
  for (std::size_t k = 0; k < paths.size(); ++k)
    for (std::size_t e = 0; e < block; ++e) u.values[e * K + k] = paths[k][e];
  return u;
}

// The tensors of a contraction with the U given by `make_u(nu)` and random weights.
template <class MakeU>
ContractionTensors contraction(const Irrep& L, int corr, int n_el, int C, Rng& rng, MakeU make_u) {
  ContractionTensors ct{L, {}, {}};
  for (int nu = 1; nu <= corr; ++nu) {
    ct.U.push_back(make_u(nu));
    ct.W.push_back(random_weights(n_el, static_cast<int>(ct.U.back().shape.back()), C, rng));
  }
  return ct;
}

// The definition, evaluated densely: no symmetrisation, no shared monomials.
std::vector<double> dense_reference(const std::vector<ContractionTensors>& cts, int C, int D,
                                    const std::vector<int>& species, const std::vector<double>& A) {
  int rows = 0;
  for (const auto& ct : cts) rows += ct.ir_out.dim();
  const std::size_t n = species.size();
  std::vector<double> B(n * C * rows, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    int row0 = 0;
    for (const auto& ct : cts) {
      const int dL = ct.ir_out.dim();
      for (std::size_t nu = 1; nu <= ct.U.size(); ++nu) {
        const DenseTensor& U = ct.U[nu - 1];
        const DenseTensor& W = ct.W[nu - 1];
        const std::int64_t K = U.shape.back();
        for (std::size_t f = 0; f < U.values.size(); ++f) {
          if (U.values[f] == 0) continue;
          std::size_t rest = f;
          const int k = static_cast<int>(rest % K);
          rest /= K;
          std::vector<int> idx(nu);
          for (int t = static_cast<int>(nu) - 1; t >= 0; --t) idx[t] = rest % D, rest /= D;
          const int M = static_cast<int>(rest);
          for (int c = 0; c < C; ++c) {
            double prod = U.values[f] * W.values[(species[i] * K + k) * C + c];
            for (int t : idx) prod *= A[(i * C + c) * D + t];
            B[i * C * rows + C * row0 + c * dL + M] += prod;
          }
        }
      }
      row0 += dL;
    }
  }
  return B;
}

std::vector<double> random_vector(std::size_t n, Rng& rng) {
  std::vector<double> v(n);
  for (auto& x : v) x = rng.uniform();
  return v;
}

Irreps with_mul(const std::string& irs, int C) {
  std::vector<MulIrrep> items;
  for (const auto& mi : Irreps(irs)) items.push_back({C, mi.ir});
  return Irreps(items);
}

struct Case {
  std::string coupling;
  std::vector<std::string> outputs;
  int corr, n_el, C;
};

// Channel counts below, at and above the 32-wide block; L = 1e exercises parity and the
// symmetric part vanishing (1o x 1o -> 1e is antisymmetric).
const std::vector<Case> kCases = {
    {"0e+1o", {"0e"}, 1, 1, 3},
    {"0e+1o", {"0e", "1o", "2e"}, 2, 2, 5},
    {"0e+1o+2e", {"0e", "1o"}, 3, 3, 32},
    {"0e+1o+2e", {"0e", "1o", "1e", "2e"}, 3, 2, 37},
    {"0e+1o+2e+3o", {"0e", "1o"}, 3, 2, 4},
    {"0e+1o+2e", {"2e", "0e"}, 4, 2, 2},
};

// ------------------------------------------------------------------------------------------------

TEST(SymmetricContraction, RandomSparseUMatchesDenseDefinition) {
  Rng rng{11};
  double worst = 0;
  for (const Case& cs : kCases) {
    SCOPED_TRACE(cs.coupling + " corr " + std::to_string(cs.corr));
    const Irreps coupling(cs.coupling);
    const int D = coupling.dim();
    std::vector<ContractionTensors> cts;
    for (const auto& out : cs.outputs) {
      const Irrep L(out);
      cts.push_back(contraction(L, cs.corr, cs.n_el, cs.C, rng, [&](int nu) {
        return random_u(L.l(), D, nu, 1 + rng.below(4), nu == 1 ? 0.5 : 0.08, rng);
      }));
    }
    const SymmetricContraction sc(with_mul(cs.coupling, cs.C), cts);
    const std::size_t n = 5;
    std::vector<int> species;
    for (std::size_t i = 0; i < n; ++i) species.push_back(rng.below(cs.n_el));
    const auto A = random_vector(n * cs.C * D, rng);
    std::vector<double> B(n * sc.dim_out());
    sc.forward(n, species.data(), A.data(), B.data());
    const double e = max_rel(B, dense_reference(cts, cs.C, D, species, A));
    EXPECT_LT(e, kDenseTolerance);
    worst = std::max(worst, e);
  }
  std::cout << "random U: max relative error vs dense definition " << worst << "\n";
}

TEST(SymmetricContraction, IsEquivariantUnderProperAndImproperRotations) {
  Rng rng{23};
  double worst = 0, worst_dense = 0;
  for (const Case& cs : kCases) {
    SCOPED_TRACE(cs.coupling + " corr " + std::to_string(cs.corr));
    const Irreps coupling(cs.coupling);
    const int D = coupling.dim();
    std::vector<ContractionTensors> cts;
    for (const auto& out : cs.outputs) {
      const Irrep L(out);
      cts.push_back(contraction(L, cs.corr, cs.n_el, cs.C, rng,
                                [&](int nu) { return cg_u(coupling, L, nu); }));
    }
    const SymmetricContraction sc(with_mul(cs.coupling, cs.C), cts);
    const std::size_t n = 3;
    std::vector<int> species;
    for (std::size_t i = 0; i < n; ++i) species.push_back(rng.below(cs.n_el));
    const auto A = random_vector(n * cs.C * D, rng);
    std::vector<double> B(n * sc.dim_out());
    sc.forward(n, species.data(), A.data(), B.data());
    worst_dense = std::max(worst_dense, max_rel(B, dense_reference(cts, cs.C, D, species, A)));
    double scale = 0;
    for (double b : B) scale = std::max(scale, std::abs(b));
    ASSERT_GT(scale, 1e-3);  // a vanishing output would make the check empty

    for (std::uint64_t seed : {1u, 2u, 3u}) {
      for (double sign : {1.0, -1.0}) {
        double R[3][3];
        random_rotation(seed, R);
        for (auto& row : R)
          for (double& v : row) v *= sign;
        const auto Din = D_from_matrix(coupling, R);
        std::vector<double> A_rot(A.size(), 0.0);
        for (std::size_t row = 0; row < n * cs.C; ++row)
          for (int a = 0; a < D; ++a)
            for (int b = 0; b < D; ++b) A_rot[row * D + a] += Din[a * D + b] * A[row * D + b];
        std::vector<double> B_rot(B.size());
        sc.forward(n, species.data(), A_rot.data(), B_rot.data());
        // Expected: every (c, L) block of B rotated by D_L (with L's parity).
        std::vector<double> expect(B.size(), 0.0);
        std::size_t base = 0;
        for (const auto& mi : sc.irreps_out()) {
          const int dL = mi.ir.dim();
          const auto DL = D_from_matrix(Irreps({{1, mi.ir}}), R);
          for (std::size_t i = 0; i < n; ++i)
            for (int c = 0; c < cs.C; ++c) {
              const std::size_t o = i * sc.dim_out() + base + c * dL;
              for (int M = 0; M < dL; ++M)
                for (int M2 = 0; M2 < dL; ++M2) expect[o + M] += DL[M * dL + M2] * B[o + M2];
            }
          base += static_cast<std::size_t>(cs.C) * dL;
        }
        double err = 0;
        for (std::size_t i = 0; i < B.size(); ++i)
          err = std::max(err, std::abs(B_rot[i] - expect[i]));
        EXPECT_LT(err / scale, kEquivarianceTolerance) << "seed " << seed << " sign " << sign;
        worst = std::max(worst, err / scale);
      }
    }
  }
  EXPECT_LT(worst_dense, kDenseTolerance);
  std::cout << "Wigner-3j U: equivariance error " << worst << ", vs dense definition "
            << worst_dense << "\n";
}

TEST(SymmetricContraction, BackwardMatchesFiniteDifference) {
  Rng rng{5};
  double worst = 0;
  for (const Case& cs : kCases) {
    SCOPED_TRACE(cs.coupling + " corr " + std::to_string(cs.corr));
    const Irreps coupling(cs.coupling);
    const int D = coupling.dim();
    std::vector<ContractionTensors> cts;
    for (const auto& out : cs.outputs) {
      const Irrep L(out);
      cts.push_back(contraction(L, cs.corr, cs.n_el, cs.C, rng, [&](int nu) {
        return nu % 2 ? cg_u(coupling, L, nu) : random_u(L.l(), D, nu, 3, 0.1, rng);
      }));
    }
    const SymmetricContraction sc(with_mul(cs.coupling, cs.C), cts);
    const std::size_t n = 2;
    const std::vector<int> species = {cs.n_el - 1, 0};
    auto A = random_vector(n * cs.C * D, rng);
    const auto G = random_vector(n * sc.dim_out(), rng);
    std::vector<double> gA(A.size()), B(G.size());
    sc.backward(n, species.data(), A.data(), G.data(), gA.data());
    auto loss = [&]() {
      sc.forward(n, species.data(), A.data(), B.data());
      double s = 0;
      for (std::size_t i = 0; i < B.size(); ++i) s += B[i] * G[i];
      return s;
    };
    // Degree <= 4 in each entry: the 5-point stencil is exact, h only trades rounding.
    const double h = 1e-2;
    // Every entry of small cases, an evenly spread subset (every node, channel block and D
    // index gets hit) of large ones, to keep the Debug run short.
    const std::size_t stride = std::max<std::size_t>(1, A.size() / 48);
    std::vector<double> fd, an;
    for (std::size_t j = 0; j < A.size(); j += stride) {
      const double a0 = A[j];
      double f[4];
      const double steps[4] = {h, -h, 2 * h, -2 * h};
      for (int s = 0; s < 4; ++s) {
        A[j] = a0 + steps[s];
        f[s] = loss();
      }
      A[j] = a0;
      fd.push_back((8 * (f[0] - f[1]) - (f[2] - f[3])) / (12 * h));
      an.push_back(gA[j]);
    }
    const double e = max_rel(an, fd);
    EXPECT_LT(e, kFdTolerance);
    worst = std::max(worst, e);
  }
  std::cout << "backward vs 5-point FD: max relative error " << worst << "\n";
}

TEST(SymmetricContraction, FloatMatchesDouble) {
  Rng rng{77};
  const Case& cs = kCases[3];
  const Irreps coupling(cs.coupling);
  const int D = coupling.dim();
  std::vector<ContractionTensors> cts;
  for (const auto& out : cs.outputs) {
    const Irrep L(out);
    cts.push_back(
        contraction(L, cs.corr, cs.n_el, cs.C, rng, [&](int nu) { return cg_u(coupling, L, nu); }));
  }
  const SymmetricContraction sc(with_mul(cs.coupling, cs.C), cts);
  const std::size_t n = 4;
  const std::vector<int> species = {0, 1, 1, 0};
  const auto A = random_vector(n * cs.C * D, rng);
  const auto G = random_vector(n * sc.dim_out(), rng);
  std::vector<double> B(G.size()), gA(A.size());
  std::vector<float> Af(A.begin(), A.end()), Gf(G.begin(), G.end()), Bf(B.size()), gAf(A.size());
  sc.forward(n, species.data(), A.data(), B.data());
  sc.backward(n, species.data(), A.data(), G.data(), gA.data());
  sc.forward(n, species.data(), Af.data(), Bf.data());
  sc.backward(n, species.data(), Af.data(), Gf.data(), gAf.data());
  const double eb = max_rel(std::vector<double>(Bf.begin(), Bf.end()), B);
  const double eg = max_rel(std::vector<double>(gAf.begin(), gAf.end()), gA);
  EXPECT_LT(eb, kFloatTolerance);
  EXPECT_LT(eg, kFloatTolerance);
  std::cout << "float vs double: B " << eb << ", grad_A " << eg << "\n";
}

TEST(SymmetricContraction, ResultDoesNotDependOnThreadCount) {
#ifdef _OPENMP
  Rng rng{3};
  const Case& cs = kCases[2];
  const Irreps coupling(cs.coupling);
  std::vector<ContractionTensors> cts;
  for (const auto& out : cs.outputs) {
    const Irrep L(out);
    cts.push_back(
        contraction(L, cs.corr, cs.n_el, cs.C, rng, [&](int nu) { return cg_u(coupling, L, nu); }));
  }
  const SymmetricContraction sc(with_mul(cs.coupling, cs.C), cts);
  const std::size_t n = 150;  // enough work for the threaded path
  std::vector<int> species;
  for (std::size_t i = 0; i < n; ++i) species.push_back(rng.below(cs.n_el));
  const auto A = random_vector(n * cs.C * coupling.dim(), rng);
  const auto G = random_vector(n * sc.dim_out(), rng);
  std::vector<double> B1(G.size()), B2(G.size()), g1(A.size()), g2(A.size());
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  sc.forward(n, species.data(), A.data(), B1.data());
  sc.backward(n, species.data(), A.data(), G.data(), g1.data());
  omp_set_num_threads(3);
  sc.forward(n, species.data(), A.data(), B2.data());
  sc.backward(n, species.data(), A.data(), G.data(), g2.data());
  omp_set_num_threads(saved);
  EXPECT_EQ(B1, B2);
  EXPECT_EQ(g1, g2);
#else
  GTEST_SKIP() << "built without OpenMP";
#endif
}

TEST(SymmetricContraction, StoresFarFewerTermsThanDenseNonzeros) {
  Rng rng{9};
  const Irreps coupling("0e+1o+2e+3o");
  std::vector<ContractionTensors> cts;
  for (const char* out : {"0e", "1o"}) {
    const Irrep L(out);
    cts.push_back(contraction(L, 3, 1, 2, rng, [&](int nu) { return cg_u(coupling, L, nu); }));
  }
  const SymmetricContraction sc(with_mul("0e+1o+2e+3o", 2), cts);
  EXPECT_LT(sc.num_terms() * 2, sc.num_dense_nonzeros());
  std::cout << "l <= 3, corr 3, L = 0e+1o: " << sc.num_dense_nonzeros() << " dense nonzeros -> "
            << sc.num_terms() << " terms over " << sc.num_monomials() << " monomials\n";
}

TEST(SymmetricContraction, AcceptsLeadingDimensionForScalarOutput) {
  Rng rng{4};
  const Irreps coupling("0e+1o");
  const Irrep L("0e");
  auto ct = contraction(L, 2, 1, 3, rng, [&](int nu) { return cg_u(coupling, L, nu); });
  ContractionTensors unsqueezed = ct;
  for (auto& u : unsqueezed.U) u.shape.insert(u.shape.begin(), 1);
  const SymmetricContraction a(with_mul("0e+1o", 3), {ct}), b(with_mul("0e+1o", 3), {unsqueezed});
  const std::vector<int> species = {0};
  const auto A = random_vector(3 * 4, rng);
  std::vector<double> Ba(3), Bb(3);
  a.forward(1, species.data(), A.data(), Ba.data());
  b.forward(1, species.data(), A.data(), Bb.data());
  EXPECT_EQ(Ba, Bb);
  EXPECT_EQ(a.irreps_out(), Irreps("3x0e"));
}

TEST(SymmetricContraction, FromModuleMapsWeightsInReverseOrder) {
  std::map<std::string, DenseTensor> named;
  for (int nu = 1; nu <= 3; ++nu) named["U_matrix_" + std::to_string(nu)] = {{1}, {1.0}};
  named["weights_max"] = {{1, 1, 1}, {3.0}};
  named["weights.0"] = {{1, 1, 1}, {2.0}};
  named["weights.1"] = {{1, 1, 1}, {1.0}};
  named["weights_0_zeroed"] = {{}, {0.0}};  // other buffers are ignored
  const auto ct = ContractionTensors::from_module(Irrep("0e"), 3, named);
  ASSERT_EQ(ct.W.size(), 3u);
  for (int nu = 1; nu <= 3; ++nu) EXPECT_EQ(ct.W[nu - 1].values[0], nu) << "nu = " << nu;
  named.erase("weights.1");
  try {
    ContractionTensors::from_module(Irrep("0e"), 3, named);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor weights.1 is missing"), std::string::npos)
        << e.what();
  }
}

template <class F>
void expect_error(F&& f, const std::string& substring) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one containing \"" << substring << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(substring), std::string::npos) << e.what();
  }
}

TEST(SymmetricContraction, ConstructorRejectsBadTensors) {
  Rng rng{1};
  const Irreps coupling("0e+1o");  // D = 4
  const Irrep L("1o");
  const auto good = contraction(L, 2, 2, 3, rng, [&](int nu) { return cg_u(coupling, L, nu); });
  const Irreps in = with_mul("0e+1o", 3);
  EXPECT_NO_THROW(SymmetricContraction(in, {good}));

  expect_error([&] { SymmetricContraction(Irreps("3x0e+2x1o"), {good}); },
               "must hold the same nonzero multiplicity C");
  expect_error([&] { SymmetricContraction(Irreps(""), {good}); }, "irreps_in is empty");
  expect_error([&] { SymmetricContraction(in, {}); }, "no contraction");

  auto bad = good;
  bad.U[1].shape = {3, 4, 5, bad.U[1].shape.back()};
  expect_error([&] { SymmetricContraction(in, {bad}); },
               "contraction 0 (1o): U_matrix_2 has shape [3, 4, 5, " +
                   std::to_string(good.U[1].shape.back()) + "], expected [3, 4, 4, ");

  bad = good;
  bad.W[1].shape = {2, bad.W[1].shape[1] + 1, 3};
  expect_error([&] { SymmetricContraction(in, {bad}); }, "weights_max (nu = 2) has shape [2, ");

  bad = good;
  bad.W[0].shape = {2, 1, 4};
  expect_error([&] { SymmetricContraction(in, {bad}); }, "weights.0 (nu = 1) has shape [2, 1, 4]");

  bad = good;
  bad.W[0].values.pop_back();
  expect_error([&] { SymmetricContraction(in, {bad}); }, "weights.0 (nu = 1) has 5 values");

  bad = good;
  bad.U[0].values[0] = NAN;
  expect_error([&] { SymmetricContraction(in, {bad}); }, "U_matrix_1 has a non-finite value");

  bad = good;
  bad.W.pop_back();
  expect_error([&] { SymmetricContraction(in, {bad}); }, "2 U_matrix tensors but 1 weight tensors");

  // Two contractions with different numbers of elements.
  const Irrep L0("0e");
  const auto other = contraction(L0, 2, 3, 3, rng, [&](int nu) { return cg_u(coupling, L0, nu); });
  expect_error(
      [&] {
        SymmetricContraction(in, {good, other});
      },
      "contraction 1 (0e): weights.0 (nu = 1) has shape [3, ");

  const SymmetricContraction sc(in, {good});
  const std::vector<int> species = {0, 2};
  std::vector<double> A(2 * 3 * 4, 0.1), B(2 * sc.dim_out());
  expect_error([&] { sc.forward(2, species.data(), A.data(), B.data()); },
               "node 1 has species 2, expected 0..1");
}

}  // namespace
}  // namespace clebsch
