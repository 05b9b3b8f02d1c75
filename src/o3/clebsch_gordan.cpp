// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Wigner-3j symbols in e3nn's real basis (see clebsch_gordan.h). The SU(2) Clebsch-Gordan
// coefficients come from Racah's formula evaluated exactly: every factorial is kept as a vector
// of prime exponents, the alternating Racah sum is accumulated in exact big-integer arithmetic,
// and only the final square root is taken in floating point. This removes the cancellation that
// makes a floating-point Racah sum lose digits at large l, so each coefficient carries only the
// rounding of its last few operations (~1e-19 relative in x86 long double).
#include "clebsch/o3/clebsch_gordan.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <mutex>
#include <string>

#include "clebsch/o3/irreps.h"
#include "clebsch/support/error.h"

namespace clebsch {
namespace {

// The largest factorial Racah's formula needs is (j1+j2+j3+1)!.
constexpr int kMaxFactorial = 3 * kMaxL + 1;

// Unsigned arbitrary-precision integer, just enough for Racah sums: multiply by a small factor,
// add, subtract a smaller number, compare, convert. Limbs are little-endian, no leading zeros.
class BigUint {
 public:
  BigUint() = default;
  explicit BigUint(std::uint32_t v) {
    if (v) limbs_.push_back(v);
  }

  void mul_small(std::uint32_t f) {
    std::uint64_t carry = 0;
    for (auto& limb : limbs_) {
      const std::uint64_t t = static_cast<std::uint64_t>(limb) * f + carry;
      limb = static_cast<std::uint32_t>(t);
      carry = t >> 32;
    }
    if (carry) limbs_.push_back(static_cast<std::uint32_t>(carry));
    if (f == 0) limbs_.clear();
  }

  void add(const BigUint& o) {
    if (limbs_.size() < o.limbs_.size()) limbs_.resize(o.limbs_.size(), 0);
    std::uint64_t carry = 0;
    for (std::size_t i = 0; i < limbs_.size(); ++i) {
      const std::uint64_t t =
          static_cast<std::uint64_t>(limbs_[i]) + (i < o.limbs_.size() ? o.limbs_[i] : 0) + carry;
      limbs_[i] = static_cast<std::uint32_t>(t);
      carry = t >> 32;
    }
    if (carry) limbs_.push_back(static_cast<std::uint32_t>(carry));
  }

  // *this -= o; requires *this >= o.
  void sub(const BigUint& o) {
    std::int64_t borrow = 0;
    for (std::size_t i = 0; i < limbs_.size(); ++i) {
      std::int64_t t = static_cast<std::int64_t>(limbs_[i]) -
                       (i < o.limbs_.size() ? static_cast<std::int64_t>(o.limbs_[i]) : 0) - borrow;
      borrow = t < 0 ? 1 : 0;
      if (t < 0) t += (static_cast<std::int64_t>(1) << 32);
      limbs_[i] = static_cast<std::uint32_t>(t);
    }
    while (!limbs_.empty() && limbs_.back() == 0) limbs_.pop_back();
  }

  int compare(const BigUint& o) const {
    if (limbs_.size() != o.limbs_.size()) return limbs_.size() < o.limbs_.size() ? -1 : 1;
    for (std::size_t i = limbs_.size(); i-- > 0;)
      if (limbs_[i] != o.limbs_[i]) return limbs_[i] < o.limbs_[i] ? -1 : 1;
    return 0;
  }

  bool is_zero() const { return limbs_.empty(); }

  long double to_long_double() const {
    long double x = 0;
    for (std::size_t i = limbs_.size(); i-- > 0;) x = x * 4294967296.0L + limbs_[i];
    return x;
  }

 private:
  std::vector<std::uint32_t> limbs_;
};

// Prime factorisations of n! for n <= kMaxFactorial (Legendre's formula), and of small integers.
struct PrimeTables {
  std::vector<std::uint32_t> primes;
  std::vector<std::vector<int>> factorial;  // factorial[n][q] = exponent of primes[q] in n!

  PrimeTables() {
    for (int n = 2; n <= kMaxFactorial; ++n) {
      bool prime = true;
      for (auto p : primes)
        if (n % static_cast<int>(p) == 0) prime = false;
      if (prime) primes.push_back(static_cast<std::uint32_t>(n));
    }
    factorial.assign(kMaxFactorial + 1, std::vector<int>(primes.size(), 0));
    for (int n = 0; n <= kMaxFactorial; ++n)
      for (std::size_t q = 0; q < primes.size(); ++q)
        for (long pk = primes[q]; pk <= n; pk *= primes[q]) factorial[n][q] += n / pk;
  }

  // Exponents of n itself (2 <= n <= kMaxFactorial, so all its primes are in the table).
  std::vector<int> factorise(int n) const {
    std::vector<int> e(primes.size(), 0);
    for (std::size_t q = 0; q < primes.size(); ++q)
      while (n % static_cast<int>(primes[q]) == 0) {
        n /= static_cast<int>(primes[q]);
        ++e[q];
      }
    return e;
  }

  BigUint power_product(const std::vector<int>& e) const {
    BigUint x(1);
    for (std::size_t q = 0; q < primes.size(); ++q)
      for (int k = 0; k < e[q]; ++k) x.mul_small(primes[q]);
    return x;
  }
};

const PrimeTables& prime_tables() {
  static const PrimeTables tables;
  return tables;
}

// Condon-Shortley SU(2) Clebsch-Gordan coefficient <j1 m1; j2 m2 | j3 m1+m2> (integer j), from
// Racah's formula
//   sqrt[(2J+1) (J+j1-j2)! (J-j1+j2)! (j1+j2-J)! / (j1+j2+J+1)!]
//   * sqrt[(J+M)! (J-M)! (j1-m1)! (j1+m1)! (j2-m2)! (j2+m2)!]
//   * sum_k (-1)^k / [k! (j1+j2-J-k)! (j1-m1-k)! (j2+m2-k)! (J-j2+m1+k)! (J-j1-m2+k)!].
// The sum is made exact by factoring out the smallest power of each prime over all its terms,
// which turns every term into an integer.
long double su2_clebsch_gordan(int j1, int m1, int j2, int m2, int J) {
  const PrimeTables& t = prime_tables();
  const std::size_t np = t.primes.size();
  const int M = m1 + m2;
  if (std::abs(M) > J) return 0;

  std::vector<int> under_sqrt = t.factorise(2 * J + 1);
  auto add_fact = [&](std::vector<int>& e, int n, int sign) {
    for (std::size_t q = 0; q < np; ++q) e[q] += sign * t.factorial[n][q];
  };
  add_fact(under_sqrt, J + j1 - j2, 1);
  add_fact(under_sqrt, J - j1 + j2, 1);
  add_fact(under_sqrt, j1 + j2 - J, 1);
  add_fact(under_sqrt, j1 + j2 + J + 1, -1);
  add_fact(under_sqrt, J + M, 1);
  add_fact(under_sqrt, J - M, 1);
  add_fact(under_sqrt, j1 - m1, 1);
  add_fact(under_sqrt, j1 + m1, 1);
  add_fact(under_sqrt, j2 - m2, 1);
  add_fact(under_sqrt, j2 + m2, 1);

  const int kmin = std::max({0, j2 - J - m1, j1 - J + m2});
  const int kmax = std::min({j1 + j2 - J, j1 - m1, j2 + m2});
  if (kmin > kmax) return 0;
  std::vector<std::vector<int>> term(kmax - kmin + 1, std::vector<int>(np, 0));
  std::vector<int> emin(np, 0);
  for (int k = kmin; k <= kmax; ++k) {
    auto& e = term[k - kmin];
    add_fact(e, k, -1);
    add_fact(e, j1 + j2 - J - k, -1);
    add_fact(e, j1 - m1 - k, -1);
    add_fact(e, j2 + m2 - k, -1);
    add_fact(e, J - j2 + m1 + k, -1);
    add_fact(e, J - j1 - m2 + k, -1);
    for (std::size_t q = 0; q < np; ++q) emin[q] = (k == kmin) ? e[q] : std::min(emin[q], e[q]);
  }
  BigUint positive, negative;
  for (int k = kmin; k <= kmax; ++k) {
    std::vector<int> e = term[k - kmin];
    for (std::size_t q = 0; q < np; ++q) e[q] -= emin[q];
    ((k % 2 == 0) ? positive : negative).add(t.power_product(e));
  }
  int sign = 1;
  BigUint sum = positive;
  if (positive.compare(negative) >= 0) {
    sum.sub(negative);
  } else {
    sum = negative;
    sum.sub(positive);
    sign = -1;
  }
  if (sum.is_zero()) return 0;

  // coefficient = sign * sum * sqrt(prod p^(under_sqrt + 2 emin)).
  std::vector<int> num(np, 0), den(np, 0);
  for (std::size_t q = 0; q < np; ++q) {
    const int e = under_sqrt[q] + 2 * emin[q];
    (e >= 0 ? num[q] : den[q]) = std::abs(e);
  }
  const long double ratio =
      t.power_product(num).to_long_double() / t.power_product(den).to_long_double();
  return sign * sum.to_long_double() * std::sqrt(ratio);
}

using Complex = std::complex<long double>;

// e3nn's change of basis between complex and real spherical harmonics
// (change_basis_real_to_complex), indexed [m+l][m'+l]: the rows are contracted with the SU(2)
// index, the columns are the real-basis index of the result. It is the real form of Wikipedia's
// spherical harmonics (the (-1)^m and i factors fix the sign of each real function) times the
// global factor (-i)^l that e3nn added so that the coupling tensors come out real.
std::vector<Complex> real_to_complex(int l) {
  const int d = 2 * l + 1;
  std::vector<Complex> q(d * d, Complex(0, 0));
  const long double h = 1.0L / std::sqrt(2.0L);
  auto at = [&](int row, int col) -> Complex& { return q[(l + row) * d + (l + col)]; };
  for (int m = -l; m < 0; ++m) {
    at(m, -m) = Complex(h, 0);
    at(m, m) = Complex(0, -h);
  }
  at(0, 0) = Complex(1, 0);
  for (int m = 1; m <= l; ++m) {
    const long double s = (m % 2 == 0) ? 1.0L : -1.0L;
    at(m, m) = Complex(s * h, 0);
    at(m, -m) = Complex(0, s * h);
  }
  Complex phase(1, 0);
  for (int k = 0; k < l; ++k) phase *= Complex(0, -1);
  for (auto& z : q) z *= phase;
  return q;
}

// C_real[a,b,c] = Re sum_{i,j,k} Q1[i,a] Q2[j,b] conj(Q3[k,c]) CG[i,j,k], then normalised to
// Frobenius norm 1: exactly e3nn's einsum("ij,kl,mn,ikn->jlm", Q1, Q2, Q3^H, CG) / norm.
std::vector<double> compute_wigner_3j(int l1, int l2, int l3) {
  const int d1 = 2 * l1 + 1, d2 = 2 * l2 + 1, d3 = 2 * l3 + 1;
  std::vector<long double> cg(static_cast<std::size_t>(d1) * d2 * d3, 0);
  for (int m1 = -l1; m1 <= l1; ++m1)
    for (int m2 = -l2; m2 <= l2; ++m2)
      if (std::abs(m1 + m2) <= l3)
        cg[((l1 + m1) * d2 + (l2 + m2)) * d3 + (l3 + m1 + m2)] =
            su2_clebsch_gordan(l1, m1, l2, m2, l3);

  const auto q1 = real_to_complex(l1), q2 = real_to_complex(l2), q3 = real_to_complex(l3);
  // Each column of Q has at most two non-zero rows (m and -m), so the contraction is sparse.
  auto nonzero_rows = [](const std::vector<Complex>& q, int d) {
    std::vector<std::vector<int>> rows(d);
    for (int col = 0; col < d; ++col)
      for (int r = 0; r < d; ++r)
        if (q[r * d + col] != Complex(0, 0)) rows[col].push_back(r);
    return rows;
  };
  const auto rows1 = nonzero_rows(q1, d1), rows2 = nonzero_rows(q2, d2),
             rows3 = nonzero_rows(q3, d3);

  std::vector<long double> c(cg.size(), 0);
  long double norm2 = 0;
  for (int a = 0; a < d1; ++a)
    for (int b = 0; b < d2; ++b)
      for (int cc = 0; cc < d3; ++cc) {
        Complex s(0, 0);
        for (int i : rows1[a])
          for (int j : rows2[b])
            for (int k : rows3[cc]) {
              const long double g = cg[(i * d2 + j) * d3 + k];
              if (g != 0) s += q1[i * d1 + a] * q2[j * d2 + b] * std::conj(q3[k * d3 + cc]) * g;
            }
        c[(a * d2 + b) * d3 + cc] = s.real();
        norm2 += s.real() * s.real();
      }
  const long double norm = std::sqrt(norm2);
  std::vector<double> out(c.size());
  for (std::size_t n = 0; n < c.size(); ++n) out[n] = static_cast<double>(c[n] / norm);
  return out;
}

struct CacheSlot {
  std::once_flag once;
  std::vector<double> data;
};

}  // namespace

const std::vector<double>& wigner_3j(int l1, int l2, int l3) {
  const std::string name = "wigner_3j(" + std::to_string(l1) + ", " + std::to_string(l2) + ", " +
                           std::to_string(l3) + ")";
  for (int l : {l1, l2, l3}) {
    if (l < 0) throw Error(name + ": degree l=" + std::to_string(l) + " is negative");
    if (l > kMaxL)
      throw CapacityError(name + ": degree l=" + std::to_string(l) +
                          " exceeds the supported maximum " + std::to_string(kMaxL));
  }
  if (l3 < std::abs(l1 - l2) || l3 > l1 + l2)
    throw Error(name + " violates the triangle rule |l1-l2| <= l3 <= l1+l2");

  // One slot per triple, allocated once and never freed, so references stay valid through static
  // destruction too; call_once makes concurrent first calls compute the tensor exactly once.
  constexpr int n = kMaxL + 1;
  static CacheSlot* const cache = new CacheSlot[n * n * n];
  CacheSlot& slot = cache[(l1 * n + l2) * n + l3];
  std::call_once(slot.once, [&] { slot.data = compute_wigner_3j(l1, l2, l3); });
  return slot.data;
}

}  // namespace clebsch
