// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// TpProblem: extraction from clebsch::TensorProduct, validation, equality and the stable hash.
#include "clebsch/cuda/generator/tp_problem.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "clebsch/support/error.h"

namespace clebsch::cuda {
namespace {

// Canonical little-endian serialisation for the hash: independent of struct padding, integer
// widths and host byte order.
class Hasher {
 public:
  void i(std::int64_t v) {
    unsigned char b[8];
    const std::uint64_t u = static_cast<std::uint64_t>(v);
    for (int k = 0; k < 8; ++k) b[k] = static_cast<unsigned char>((u >> (8 * k)) & 0xff);
    h_ = fnv1a(b, 8, h_);
  }
  void d(double v) {
    std::uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    i(static_cast<std::int64_t>(bits));
  }
  void s(const std::string& v) {
    i(static_cast<std::int64_t>(v.size()));
    h_ = fnv1a(v.data(), v.size(), h_);
  }
  std::uint64_t value() const { return h_; }

 private:
  std::uint64_t h_ = 0xcbf29ce484222325ull;
};

void hash_blocks(Hasher& h, const std::vector<TpBlock>& blocks) {
  h.i(static_cast<std::int64_t>(blocks.size()));
  for (const TpBlock& b : blocks) {
    h.i(b.mul), h.i(b.l), h.i(b.p), h.i(b.offset);
  }
}

std::vector<TpBlock> blocks_of(const Irreps& irreps) {
  std::vector<TpBlock> out;
  int offset = 0;
  for (const MulIrrep& m : irreps) {
    out.push_back({m.mul, m.ir.l(), m.ir.p(), offset});
    offset += m.dim();
  }
  return out;
}

}  // namespace

std::string to_string(Accumulation accumulation) {
  return accumulation == Accumulation::kAtomic ? "atomic" : "deterministic";
}

std::string blocks_str(const std::vector<TpBlock>& blocks) {
  std::string s;
  for (const TpBlock& b : blocks) {
    if (!s.empty()) s += "+";
    s += std::to_string(b.mul) + "x" + std::to_string(b.l) + (b.p > 0 ? "e" : "o");
  }
  return s.empty() ? "0" : s;
}

bool TpPath::operator==(const TpPath& o) const {
  if (in1 != o.in1 || in2 != o.in2 || out != o.out || has_weight != o.has_weight ||
      weight_offset != o.weight_offset || cg.size() != o.cg.size() || description != o.description)
    return false;
  for (std::size_t n = 0; n < cg.size(); ++n) {
    const CgEntry &a = cg[n], &b = o.cg[n];
    // Bitwise comparison of the coefficient: the hash uses the bit pattern too.
    if (a.i != b.i || a.j != b.j || a.k != b.k || std::memcmp(&a.c, &b.c, sizeof a.c) != 0)
      return false;
  }
  return true;
}

TpProblem TpProblem::from_tensor_product(const TensorProduct& tp, DType dtype,
                                         Accumulation accumulation) {
  if (tp.shared_weights() && tp.weight_numel() > 0)
    throw CapacityError(
        "CUDA convolution kernels need per-edge weights (shared_weights=false), got " + tp.str());
  std::vector<TpPath> paths;
  for (std::size_t n = 0; n < tp.paths().size(); ++n) {
    const TensorProductPath& p = tp.paths()[n];
    if (p.ins.mode() != ConnectionMode::kUvu)
      throw CapacityError("CUDA convolution kernels support only 'uvu' instructions; instruction " +
                          std::to_string(n) + " " + p.ins.str() + " has mode '" +
                          to_string(p.ins.mode()) + "'");
    paths.push_back({p.ins.i_in1(), p.ins.i_in2(), p.ins.i_out(), p.ins.has_weight(),
                     p.ins.has_weight() ? p.weight_offset : -1, p.cg, p.ins.str()});
  }
  return TpProblem(blocks_of(tp.irreps_in1()), blocks_of(tp.irreps_in2()),
                   blocks_of(tp.irreps_out()), std::move(paths), tp.weight_numel(), dtype,
                   accumulation);
}

TpProblem::TpProblem(std::vector<TpBlock> in1, std::vector<TpBlock> in2, std::vector<TpBlock> out,
                     std::vector<TpPath> paths, int weight_numel, DType dtype,
                     Accumulation accumulation)
    : in1_(std::move(in1)),
      in2_(std::move(in2)),
      out_(std::move(out)),
      paths_(std::move(paths)),
      weight_numel_(weight_numel),
      dtype_(dtype),
      accumulation_(accumulation) {
  validate();
}

int TpProblem::dim(const std::vector<TpBlock>& blocks) {
  int d = 0;
  for (const TpBlock& b : blocks) d += b.mul * b.dim();
  return d;
}

TpProblem TpProblem::with_fused_radial(int hidden) const {
  if (hidden < 0 || hidden > kMaxFusedHidden)
    throw Error("fused radial form: hidden width " + std::to_string(hidden) + " outside [0, " +
                std::to_string(kMaxFusedHidden) + "]");
  if (hidden > 0 && weight_numel_ == 0)
    throw Error("fused radial form: the product has no per-edge weights");
  TpProblem p = *this;
  p.fused_hidden_ = hidden;
  return p;
}

TpProblem TpProblem::with_fused_spline(int intervals, double lo, double hi) const {
  if (intervals < 1 || !(hi > lo))
    throw Error("fused spline form: " + std::to_string(intervals) + " intervals on [" +
                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  if (weight_numel_ == 0) throw Error("fused spline form: the product has no per-edge weights");
  if (fused_hidden_ > 0) throw Error("fused spline form: the problem is in the fused radial form");
  TpProblem p = *this;
  p.spline_intervals_ = intervals, p.spline_lo_ = lo, p.spline_hi_ = hi;
  return p;
}

int TpProblem::max_mul() const {
  int m = 0;
  for (const TpBlock& b : in1_) m = std::max(m, b.mul);
  return m;
}

void TpProblem::validate() const {
  auto check_blocks = [](const std::vector<TpBlock>& blocks, const char* name) {
    int offset = 0;
    for (std::size_t n = 0; n < blocks.size(); ++n) {
      const TpBlock& b = blocks[n];
      const std::string where =
          std::string(name) + " block " + std::to_string(n) + " (" + blocks_str({b}) + "): ";
      if (b.mul < 0 || b.l < 0 || (b.p != 1 && b.p != -1))
        throw Error(where + "needs mul >= 0, l >= 0, p = +-1");
      if (b.l > kMaxKernelL)
        throw CapacityError(where + "l=" + std::to_string(b.l) +
                            " exceeds the CUDA kernels' limit l <= " + std::to_string(kMaxKernelL));
      if (b.offset != offset)
        throw Error(where + "offset " + std::to_string(b.offset) + " should be " +
                    std::to_string(offset));
      offset += b.mul * b.dim();
    }
  };
  check_blocks(in1_, "in1");
  check_blocks(in2_, "in2");
  check_blocks(out_, "out");
  for (const TpBlock& b : in2_)
    if (b.mul > kMaxKernelMul2)
      throw CapacityError("in2 block " + blocks_str({b}) + ": multiplicity " +
                          std::to_string(b.mul) + " exceeds the CUDA kernels' limit " +
                          std::to_string(kMaxKernelMul2) + " for the edge attributes");
  if (weight_numel_ < 0) throw Error("weight_numel must be >= 0");
  std::vector<char> used(static_cast<std::size_t>(weight_numel_), 0);
  for (std::size_t n = 0; n < paths_.size(); ++n) {
    const TpPath& p = paths_[n];
    const std::string where = "path " + std::to_string(n) + " " + p.description + ": ";
    if (p.in1 < 0 || p.in1 >= int(in1_.size()) || p.in2 < 0 || p.in2 >= int(in2_.size()) ||
        p.out < 0 || p.out >= int(out_.size()))
      throw Error(where + "block index out of range (in1=" + std::to_string(p.in1) +
                  ", in2=" + std::to_string(p.in2) + ", out=" + std::to_string(p.out) + ")");
    const TpBlock &a = in1_[p.in1], &b = in2_[p.in2], &c = out_[p.out];
    if (a.mul != c.mul)
      throw Error(where + "uvu needs mul1 == mul_out, got " + std::to_string(a.mul) + " and " +
                  std::to_string(c.mul));
    if (a.p * b.p != c.p || c.l < std::abs(a.l - b.l) || c.l > a.l + b.l)
      throw Error(where + "selection rule violated: " + blocks_str({a}) + " x " + blocks_str({b}) +
                  " -> " + blocks_str({c}));
    if (p.has_weight) {
      const int size = a.mul * b.mul;
      if (p.weight_offset < 0 || p.weight_offset + size > weight_numel_)
        throw Error(where + "weights [" + std::to_string(p.weight_offset) + ", " +
                    std::to_string(p.weight_offset + size) + ") outside [0, " +
                    std::to_string(weight_numel_) + ")");
      for (int q = 0; q < size; ++q) {
        if (used[p.weight_offset + q])
          throw Error(where + "weight " + std::to_string(p.weight_offset + q) +
                      " is shared with another path");
        used[p.weight_offset + q] = 1;
      }
    }
    for (const CgEntry& e : p.cg)
      if (e.i < 0 || e.i >= a.dim() || e.j < 0 || e.j >= b.dim() || e.k < 0 || e.k >= c.dim() ||
          !std::isfinite(e.c))
        throw Error(where + "CG entry (" + std::to_string(e.i) + ", " + std::to_string(e.j) + ", " +
                    std::to_string(e.k) + ") outside the blocks or not finite");
  }
}

std::uint64_t TpProblem::hash() const {
  Hasher h;
  h.s("clebsch-tp-problem");
  hash_blocks(h, in1_);
  hash_blocks(h, in2_);
  hash_blocks(h, out_);
  h.i(static_cast<std::int64_t>(paths_.size()));
  for (const TpPath& p : paths_) {
    h.i(p.in1), h.i(p.in2), h.i(p.out), h.i(p.has_weight), h.i(p.weight_offset);
    h.i(static_cast<std::int64_t>(p.cg.size()));
    for (const CgEntry& e : p.cg) h.i(e.i), h.i(e.j), h.i(e.k), h.d(e.c);
    h.s(p.description);
  }
  h.i(weight_numel_);
  h.i(static_cast<int>(dtype_));
  h.i(static_cast<int>(accumulation_));
  // Appended only when on, so that the unfused problems keep the hashes they had.
  if (fused_hidden_ > 0) h.s("fused-radial"), h.i(fused_hidden_);
  if (spline_intervals_ > 0)
    h.s("fused-spline"), h.i(spline_intervals_), h.d(spline_lo_), h.d(spline_hi_);
  return h.value();
}

std::string TpProblem::hash_hex() const { return hex64(hash()); }

std::string TpProblem::str() const {
  std::ostringstream os;
  os << blocks_str(in1_) << " x " << blocks_str(in2_) << " -> " << blocks_str(out_) << " | "
     << paths_.size() << " uvu paths | " << weight_numel_ << " weights/edge | " << to_string(dtype_)
     << " | " << to_string(accumulation_);
  if (fused_hidden_ > 0) os << " | fused radial, " << fused_hidden_ << " hidden";
  if (spline_intervals_ > 0)
    os << " | fused spline, " << spline_intervals_ << " intervals on [" << spline_lo_ << ", "
       << spline_hi_ << "]";
  return os.str();
}

bool TpProblem::operator==(const TpProblem& o) const {
  return in1_ == o.in1_ && in2_ == o.in2_ && out_ == o.out_ && paths_ == o.paths_ &&
         weight_numel_ == o.weight_numel_ && dtype_ == o.dtype_ &&
         accumulation_ == o.accumulation_ && fused_hidden_ == o.fused_hidden_ &&
         spline_intervals_ == o.spline_intervals_ && spline_lo_ == o.spline_lo_ &&
         spline_hi_ == o.spline_hi_;
}

}  // namespace clebsch::cuda
