// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Parsing, layout and ordering of irreps, following e3nn's Irrep/Irreps exactly (see irreps.h).
#include "clebsch/o3/irreps.h"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <tuple>

#include "clebsch/support/error.h"

namespace clebsch {
namespace {

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Parses a non-negative decimal integer made of digits only; returns false on anything else
// (signs, blanks inside, overflow), so "1.5x0e" or "-1x0e" are rejected rather than truncated.
bool parse_count(const std::string& text, int* out) {
  if (text.empty() || text.size() > 9) return false;
  for (char c : text)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  *out = std::stoi(text);
  return true;
}

}  // namespace

Irrep::Irrep(int l, int p) : l_(l), p_(p) {
  if (l < 0) throw Error("irrep degree l must be >= 0, got " + std::to_string(l));
  if (l > kMaxL)
    throw CapacityError("irrep degree l=" + std::to_string(l) + " exceeds the supported maximum " +
                        std::to_string(kMaxL));
  if (p != 1 && p != -1) throw Error("irrep parity must be +1 or -1, got " + std::to_string(p));
}

Irrep::Irrep(const std::string& text) : l_(0), p_(1) {
  const std::string name = trim(text);
  int l = 0;
  if (name.size() < 2 || !parse_count(name.substr(0, name.size() - 1), &l))
    throw Error("cannot parse irrep \"" + text + "\": expected <l><e|o|y>, e.g. 1o");
  const char parity = name.back();
  int p = 0;
  if (parity == 'e') {
    p = 1;
  } else if (parity == 'o') {
    p = -1;
  } else if (parity == 'y') {
    p = (l % 2 == 0) ? 1 : -1;
  } else {
    throw Error("cannot parse irrep \"" + text + "\": parity must be e, o or y, got '" +
                std::string(1, parity) + "'");
  }
  *this = Irrep(l, p);
}

std::string Irrep::str() const { return std::to_string(l_) + (p_ == 1 ? "e" : "o"); }

std::vector<Irrep> Irrep::operator*(const Irrep& other) const {
  std::vector<Irrep> out;
  const int p = p_ * other.p_;
  for (int l = std::abs(l_ - other.l_); l <= l_ + other.l_ && l <= kMaxL; ++l)
    out.emplace_back(l, p);
  return out;
}

Irreps::Irreps(std::vector<MulIrrep> items) : items_(std::move(items)) {
  for (const auto& mi : items_)
    if (mi.mul < 0)
      throw Error("multiplicity must be >= 0, got " + std::to_string(mi.mul) + " for " +
                  mi.ir.str());
}

Irreps::Irreps(const std::string& text) {
  if (trim(text).empty()) return;
  std::size_t start = 0;
  while (true) {
    const std::size_t plus = text.find('+', start);
    const std::string term = text.substr(start, plus == std::string::npos ? plus : plus - start);
    const std::size_t x = term.find('x');
    int mul = 1;
    std::string ir_text = term;
    if (x != std::string::npos) {
      if (!parse_count(trim(term.substr(0, x)), &mul))
        throw Error("cannot parse irreps \"" + text + "\": bad multiplicity in term \"" + term +
                    "\"");
      ir_text = term.substr(x + 1);
    }
    try {
      items_.push_back({mul, Irrep(ir_text)});
    } catch (const CapacityError& e) {
      throw CapacityError("irreps \"" + text + "\": " + e.what());
    } catch (const Error& e) {
      throw Error("cannot parse irreps \"" + text + "\": term \"" + term + "\": " + e.what());
    }
    if (plus == std::string::npos) break;
    start = plus + 1;
  }
}

Irreps Irreps::spherical_harmonics(int lmax, int p) {
  if (p != 1 && p != -1) throw Error("spherical harmonics parity must be +1 or -1");
  std::vector<MulIrrep> items;
  for (int l = 0; l <= lmax; ++l) items.push_back({1, Irrep(l, (p == -1 && l % 2 == 1) ? -1 : 1)});
  return Irreps(std::move(items));
}

int Irreps::dim() const {
  int d = 0;
  for (const auto& mi : items_) d += mi.dim();
  return d;
}

int Irreps::num_irreps() const {
  int n = 0;
  for (const auto& mi : items_) n += mi.mul;
  return n;
}

int Irreps::lmax() const {
  // As e3nn: only irreps with a non-zero multiplicity count.
  int l = -1;
  for (const auto& mi : items_)
    if (mi.mul > 0) l = std::max(l, mi.ir.l());
  if (l < 0)
    throw Error("lmax of an empty Irreps (no non-zero multiplicity) is undefined: \"" + str() +
                "\"");
  return l;
}

std::vector<int> Irreps::offsets() const {
  std::vector<int> off(items_.size() + 1, 0);
  for (std::size_t i = 0; i < items_.size(); ++i) off[i + 1] = off[i] + items_[i].dim();
  return off;
}

Irreps::Sorted Irreps::sort() const {
  // e3nn sorts the tuples (ir, index, mul); the index makes the order total and stable.
  std::vector<int> inv(items_.size());
  std::iota(inv.begin(), inv.end(), 0);
  std::sort(inv.begin(), inv.end(), [this](int a, int b) {
    if (items_[a].ir != items_[b].ir) return items_[a].ir < items_[b].ir;
    return a < b;
  });
  Sorted s;
  s.inv = inv;
  s.p.assign(items_.size(), 0);
  std::vector<MulIrrep> sorted;
  for (std::size_t k = 0; k < inv.size(); ++k) {
    s.p[inv[k]] = static_cast<int>(k);
    sorted.push_back(items_[inv[k]]);
  }
  s.irreps = Irreps(std::move(sorted));
  return s;
}

Irreps Irreps::simplify() const {
  std::vector<MulIrrep> out;
  for (const auto& mi : items_) {
    if (!out.empty() && out.back().ir == mi.ir) {
      out.back().mul += mi.mul;
    } else if (mi.mul > 0) {
      out.push_back(mi);
    }
  }
  return Irreps(std::move(out));
}

Irreps Irreps::regroup() const { return sort().irreps.simplify(); }

Irreps Irreps::remove_zero_multiplicities() const {
  std::vector<MulIrrep> out;
  for (const auto& mi : items_)
    if (mi.mul > 0) out.push_back(mi);
  return Irreps(std::move(out));
}

Irreps Irreps::operator+(const Irreps& o) const {
  std::vector<MulIrrep> out = items_;
  out.insert(out.end(), o.items_.begin(), o.items_.end());
  return Irreps(std::move(out));
}

std::string Irreps::str() const {
  std::string s;
  for (std::size_t i = 0; i < items_.size(); ++i) {
    if (i) s += "+";
    s += std::to_string(items_[i].mul) + "x" + items_[i].ir.str();
  }
  return s;
}

}  // namespace clebsch
