// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Irreducible representations of O(3) and their direct sums, with e3nn's (>= 0.5) semantics:
// the string syntax "128x0e+64x1o", the memory layout (one block per entry, index u*(2l+1)+(m+l)
// inside a block), the ordering 0o < 0e < 1o < 1e < ..., sort() returning e3nn's (p, inv)
// permutations, and simplify() merging only adjacent equal irreps (and dropping zero
// multiplicities), so that simplify() never changes the memory layout.
#pragma once

#include <string>
#include <vector>

namespace clebsch {

/// Largest degree l the library accepts anywhere (spherical harmonics, Wigner-3j, kernels).
inline constexpr int kMaxL = 12;

/// One irreducible representation of O(3): degree l >= 0 and parity p = +1 (e) or -1 (o).
class Irrep {
 public:
  /// @throws Error if l is negative or above kMaxL, or p is not +1/-1.
  Irrep(int l, int p);
  /// Parses "1o", "2e", or "3y" (y: the parity (-1)^l of spherical harmonics).
  /// @throws Error naming the string when it is malformed.
  explicit Irrep(const std::string& text);

  int l() const { return l_; }
  int p() const { return p_; }
  int dim() const { return 2 * l_ + 1; }
  std::string str() const;

  /// The irreps in the product of this and @p other: |l1-l2|..l1+l2, parity p1*p2.
  std::vector<Irrep> operator*(const Irrep& other) const;

  bool operator==(const Irrep& o) const { return l_ == o.l_ && p_ == o.p_; }
  bool operator!=(const Irrep& o) const { return !(*this == o); }
  /// e3nn's order: by l, then odd before even.
  bool operator<(const Irrep& o) const { return l_ != o.l_ ? l_ < o.l_ : p_ < o.p_; }

 private:
  int l_;
  int p_;
};

/// A multiplicity and an irrep: mul copies of ir, laid out u-major.
struct MulIrrep {
  int mul;
  Irrep ir;
  int dim() const { return mul * ir.dim(); }
  bool operator==(const MulIrrep& o) const { return mul == o.mul && ir == o.ir; }
};

/// A direct sum of irreps, e.g. 128x0e+64x1o. Immutable value type.
class Irreps {
 public:
  Irreps() = default;
  /// @throws Error if any multiplicity is negative.
  explicit Irreps(std::vector<MulIrrep> items);
  /// Parses e3nn's syntax; the empty string is the empty sum.
  /// @throws Error naming the string and the offending term when it is malformed.
  explicit Irreps(const std::string& text);
  Irreps(const char* text) : Irreps(std::string(text)) {}  // NOLINT: allow "1x0e" literals

  /// Spherical harmonics up to lmax: 1x0e+1x1o+1x2e+... (p=-1) or all even (p=+1).
  static Irreps spherical_harmonics(int lmax, int p = -1);

  std::size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const MulIrrep& operator[](std::size_t i) const { return items_.at(i); }
  std::vector<MulIrrep>::const_iterator begin() const { return items_.begin(); }
  std::vector<MulIrrep>::const_iterator end() const { return items_.end(); }

  /// Total dimension: sum of mul*(2l+1).
  int dim() const;
  /// Total number of irreps counted with multiplicity: sum of mul.
  int num_irreps() const;
  /// Largest l with a non-zero multiplicity (as e3nn). @throws Error when there is none.
  int lmax() const;
  /// Start of each block in the flat layout; size() + 1 entries, the last is dim().
  std::vector<int> offsets() const;

  struct Sorted;
  /// Stable sort by irrep, as e3nn's Irreps.sort(): see Sorted.
  Sorted sort() const;
  /// Merges adjacent equal irreps and drops zero multiplicities (layout unchanged).
  Irreps simplify() const;
  /// sort().irreps.simplify().
  Irreps regroup() const;
  Irreps remove_zero_multiplicities() const;
  /// Concatenation.
  Irreps operator+(const Irreps& o) const;

  std::string str() const;
  bool operator==(const Irreps& o) const { return items_ == o.items_; }
  bool operator!=(const Irreps& o) const { return !(*this == o); }

 private:
  std::vector<MulIrrep> items_;
};

/// Result of Irreps::sort(), with e3nn's meaning of the two permutations:
/// irreps[k] == original[inv[k]], and p[i] is where original entry i went (p = inverse of inv).
struct Irreps::Sorted {
  Irreps irreps;
  std::vector<int> p;
  std::vector<int> inv;
};

}  // namespace clebsch
