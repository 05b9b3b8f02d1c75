// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// e3nn's TensorProduct: validation and derived data of the descriptor (following
// e3nn/o3/_tensor_product/_tensor_product.py line by line for the normalisation), and the
// OpenMP host kernels. Every kernel is built from one per-row routine that accumulates the
// partial derivatives of the 4-linear form E = <g, TP(x1, x2, w)>; forward, backward and double
// backward only choose which slots to feed and which to read.
#include "clebsch/o3/tensor_product.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "clebsch/o3/clebsch_gordan.h"
#include "clebsch/support/error.h"

namespace clebsch {
namespace {

// Largest dimension 2l+1 of an irrep; sizes the per-(u,v) scratch vectors of the row kernel.
constexpr int kMaxIrrepDim = 2 * kMaxL + 1;

// Number of chunks of a shared-weight gradient reduction: the batch is cut into at most this many
// chunks whatever the thread count, so the gradient is summed in one fixed order.
constexpr std::int64_t kReductionChunks = 64;

// e3nn's path_shape: the shape of an instruction's weight block.
std::vector<int> path_shape(ConnectionMode mode, int mul1, int mul2, int mul_out) {
  switch (mode) {
    case ConnectionMode::kUvw:
      return {mul1, mul2, mul_out};
    case ConnectionMode::kUvu:
      return {mul1, mul2};
    case ConnectionMode::kUvv:
      return {mul1, mul2};
    case ConnectionMode::kUuw:
      return {mul1, mul_out};
    case ConnectionMode::kUuu:
      return {mul1};
  }
  return {};
}

std::string number(double x) {
  std::ostringstream os;
  os.precision(17);
  os << x;
  return os.str();
}

}  // namespace

std::string to_string(ConnectionMode mode) {
  switch (mode) {
    case ConnectionMode::kUvw:
      return "uvw";
    case ConnectionMode::kUvu:
      return "uvu";
    case ConnectionMode::kUvv:
      return "uvv";
    case ConnectionMode::kUuw:
      return "uuw";
    case ConnectionMode::kUuu:
      return "uuu";
  }
  return "?";
}

ConnectionMode connection_mode_from_string(const std::string& name) {
  for (ConnectionMode m : {ConnectionMode::kUvw, ConnectionMode::kUvu, ConnectionMode::kUvv,
                           ConnectionMode::kUuw, ConnectionMode::kUuu})
    if (to_string(m) == name) return m;
  throw Error("unsupported connection mode \"" + name + "\": expected uvw, uvu, uvv, uuw or uuu");
}

Instruction::Instruction(int i_in1, int i_in2, int i_out, ConnectionMode mode, bool has_weight,
                         double path_weight)
    : i_in1_(i_in1),
      i_in2_(i_in2),
      i_out_(i_out),
      mode_(mode),
      has_weight_(has_weight),
      path_weight_(path_weight) {
  if (i_in1 < 0 || i_in2 < 0 || i_out < 0)
    throw Error("instruction " + str() + ": indices must be >= 0");
  if (!std::isfinite(path_weight) || path_weight < 0)
    throw Error("instruction " + str() + ": path_weight must be finite and >= 0, got " +
                number(path_weight));
}

Instruction::Instruction(int i_in1, int i_in2, int i_out, const std::string& mode, bool has_weight,
                         double path_weight)
    : Instruction(i_in1, i_in2, i_out, connection_mode_from_string(mode), has_weight, path_weight) {
}

std::string Instruction::str() const {
  return "(" + std::to_string(i_in1_) + ", " + std::to_string(i_in2_) + ", " +
         std::to_string(i_out_) + ", '" + to_string(mode_) + "', " +
         (has_weight_ ? "True" : "False") + ", " + number(path_weight_) + ")";
}

TensorProduct::TensorProduct(Irreps irreps_in1, Irreps irreps_in2, Irreps irreps_out,
                             std::vector<Instruction> instructions, TensorProductOptions options)
    : irreps_in1_(std::move(irreps_in1)),
      irreps_in2_(std::move(irreps_in2)),
      irreps_out_(std::move(irreps_out)),
      options_(std::move(options)),
      dim_in1_(irreps_in1_.dim()),
      dim_in2_(irreps_in2_.dim()),
      dim_out_(irreps_out_.dim()) {
  init(std::move(instructions), nullptr);
}

TensorProduct TensorProduct::with_couplings(Irreps irreps_in1, Irreps irreps_in2, Irreps irreps_out,
                                            std::vector<Instruction> instructions,
                                            const std::vector<std::vector<double>>& couplings,
                                            bool shared_weights) {
  TensorProduct tp;
  tp.irreps_in1_ = std::move(irreps_in1);
  tp.irreps_in2_ = std::move(irreps_in2);
  tp.irreps_out_ = std::move(irreps_out);
  tp.options_.shared_weights = shared_weights;
  tp.explicit_couplings_ = true;
  tp.dim_in1_ = tp.irreps_in1_.dim();
  tp.dim_in2_ = tp.irreps_in2_.dim();
  tp.dim_out_ = tp.irreps_out_.dim();
  tp.init(std::move(instructions), &couplings);
  return tp;
}

void TensorProduct::init(std::vector<Instruction> instructions,
                         const std::vector<std::vector<double>>* couplings) {
  if (couplings && couplings->size() != instructions.size())
    throw Error("explicit couplings: " + std::to_string(couplings->size()) + " couplings for " +
                std::to_string(instructions.size()) + " instructions");
  auto check_var = [](std::vector<double>& var, const Irreps& irreps, const char* name) {
    if (var.empty()) var.assign(irreps.size(), 1.0);
    if (var.size() != irreps.size())
      throw Error(std::string(name) + " has " + std::to_string(var.size()) + " entries, irreps " +
                  irreps.str() + " has " + std::to_string(irreps.size()));
    for (double v : var)
      if (!std::isfinite(v) || v < 0)
        throw Error(std::string(name) + " must be finite and >= 0, got " + number(v));
  };
  check_var(options_.in1_var, irreps_in1_, "in1_var");
  check_var(options_.in2_var, irreps_in2_, "in2_var");
  check_var(options_.out_var, irreps_out_, "out_var");

  const std::vector<int> off1 = irreps_in1_.offsets(), off2 = irreps_in2_.offsets(),
                         off_out = irreps_out_.offsets();

  // Pass 1: validate each instruction on its own (e3nn asserts the same conditions).
  for (std::size_t n = 0; n < instructions.size(); ++n) {
    const Instruction& ins = instructions[n];
    const std::string where = "instruction " + std::to_string(n) + " " + ins.str() + ": ";
    auto check_index = [&](int i, const Irreps& irreps, const char* what) {
      if (i >= static_cast<int>(irreps.size()))
        throw Error(where + what + "=" + std::to_string(i) + " is out of range, " +
                    (irreps.empty() ? std::string("empty irreps") : irreps.str()) + " has " +
                    std::to_string(irreps.size()) + " entries");
    };
    check_index(ins.i_in1(), irreps_in1_, "i_in1");
    check_index(ins.i_in2(), irreps_in2_, "i_in2");
    check_index(ins.i_out(), irreps_out_, "i_out");
    const MulIrrep& a = irreps_in1_[ins.i_in1()];
    const MulIrrep& b = irreps_in2_[ins.i_in2()];
    const MulIrrep& c = irreps_out_[ins.i_out()];
    const std::string product = a.ir.str() + " x " + b.ir.str() + " -> " + c.ir.str();
    if (a.ir.p() * b.ir.p() != c.ir.p())
      throw Error(where + "parity violated: " + product + " (p1*p2 must equal p_out)");
    if (c.ir.l() < std::abs(a.ir.l() - b.ir.l()) || c.ir.l() > a.ir.l() + b.ir.l())
      throw Error(where + "triangle rule violated: " + product +
                  ", l_out=" + std::to_string(c.ir.l()) + " not in " +
                  std::to_string(std::abs(a.ir.l() - b.ir.l())) + ".." +
                  std::to_string(a.ir.l() + b.ir.l()));
    auto muls = [&](const std::string& rule) {
      return where + to_string(ins.mode()) + " needs " + rule +
             ", got mul1=" + std::to_string(a.mul) + ", mul2=" + std::to_string(b.mul) +
             ", mul_out=" + std::to_string(c.mul);
    };
    switch (ins.mode()) {
      case ConnectionMode::kUvw:
        if (!ins.has_weight()) throw Error(where + "uvw needs weights (has_weight=True)");
        break;
      case ConnectionMode::kUvu:
        if (a.mul != c.mul) throw Error(muls("mul1 == mul_out"));
        break;
      case ConnectionMode::kUvv:
        if (b.mul != c.mul) throw Error(muls("mul2 == mul_out"));
        break;
      case ConnectionMode::kUuw:
        if (a.mul != b.mul) throw Error(muls("mul1 == mul2"));
        if (!ins.has_weight() && c.mul != 1)
          throw Error(muls("mul_out == 1 without weights (it sums over u)"));
        break;
      case ConnectionMode::kUuu:
        if (a.mul != b.mul || a.mul != c.mul) throw Error(muls("mul1 == mul2 == mul_out"));
        break;
    }
  }

  // e3nn's num_elements: the fan-in of one output element of the instruction.
  auto num_elements = [&](const Instruction& ins) -> double {
    const int m1 = irreps_in1_[ins.i_in1()].mul, m2 = irreps_in2_[ins.i_in2()].mul;
    switch (ins.mode()) {
      case ConnectionMode::kUvw:
        return double(m1) * m2;
      case ConnectionMode::kUvu:
        return m2;
      case ConnectionMode::kUvv:
        return m1;
      case ConnectionMode::kUuw:
        return m1;
      case ConnectionMode::kUuu:
        return 1;
    }
    return 1;
  };

  // Pass 2: normalisation, shapes, weight layout and CG non-zeros.
  int weight_offset = 0;
  for (std::size_t n = 0; n < instructions.size(); ++n) {
    const Instruction& ins = instructions[n];
    const MulIrrep& a = irreps_in1_[ins.i_in1()];
    const MulIrrep& b = irreps_in2_[ins.i_in2()];
    const MulIrrep& c = irreps_out_[ins.i_out()];

    const std::vector<int> shape = path_shape(ins.mode(), a.mul, b.mul, c.mul);
    int size = 1;
    for (int s : shape) size *= s;
    const int d1 = a.ir.dim(), d2 = b.ir.dim(), d3 = c.ir.dim();

    if (couplings) {
      // Given coupling: take its non-zeros as they are (the path weight is already inside).
      const std::vector<double>& given = (*couplings)[n];
      const std::string where = "instruction " + std::to_string(n) + " " + ins.str() + ": ";
      if (given.size() != static_cast<std::size_t>(d1) * d2 * d3)
        throw Error(where + "coupling has " + std::to_string(given.size()) +
                    " values, expected (2l1+1)(2l2+1)(2l_out+1) = " + std::to_string(d1) + "*" +
                    std::to_string(d2) + "*" + std::to_string(d3));
      TensorProductPath path{ins,
                             a.ir,
                             b.ir,
                             c.ir,
                             a.mul,
                             b.mul,
                             c.mul,
                             off1[ins.i_in1()],
                             off2[ins.i_in2()],
                             off_out[ins.i_out()],
                             ins.path_weight(),
                             shape,
                             ins.has_weight() ? weight_offset : -1,
                             ins.has_weight() ? size : 0,
                             {}};
      for (int i = 0; i < d1; ++i)
        for (int j = 0; j < d2; ++j)
          for (int k = 0; k < d3; ++k) {
            const double value = given[(i * d2 + j) * d3 + k];
            if (!std::isfinite(value))
              throw Error(where + "coupling value [" + std::to_string(i) + "][" +
                          std::to_string(j) + "][" + std::to_string(k) + "] is " + number(value));
            if (value != 0) path.cg.push_back({i, j, k, value});
          }
      if (ins.has_weight()) weight_offset += size;
      paths_.push_back(std::move(path));
      continue;
    }

    double alpha = 1;
    switch (options_.irrep_normalization) {
      case IrrepNormalization::kComponent:
        alpha = c.ir.dim();
        break;
      case IrrepNormalization::kNorm:
        alpha = double(a.ir.dim()) * b.ir.dim();
        break;
      case IrrepNormalization::kNone:
        alpha = 1;
        break;
    }
    double x = 1;
    switch (options_.path_normalization) {
      case PathNormalization::kElement:
        x = 0;
        for (const Instruction& other : instructions)
          if (other.i_out() == ins.i_out())
            x += options_.in1_var[other.i_in1()] * options_.in2_var[other.i_in2()] *
                 num_elements(other);
        break;
      case PathNormalization::kPath: {
        int count = 0;
        for (const Instruction& other : instructions) count += other.i_out() == ins.i_out();
        x = options_.in1_var[ins.i_in1()] * options_.in2_var[ins.i_in2()] * num_elements(ins) *
            count;
        break;
      }
      case PathNormalization::kNone:
        x = 1;
        break;
    }
    // e3nn divides only by a positive fan-in (an instruction with a zero multiplicity has none).
    if (x > 0) alpha /= x;
    alpha *= options_.out_var[ins.i_out()];
    alpha *= ins.path_weight();
    if (!std::isfinite(alpha) || alpha < 0)
      throw Error("instruction " + std::to_string(n) + " " + ins.str() +
                  ": normalisation alpha=" + number(alpha) + " is negative or not finite");

    TensorProductPath path{ins,
                           a.ir,
                           b.ir,
                           c.ir,
                           a.mul,
                           b.mul,
                           c.mul,
                           off1[ins.i_in1()],
                           off2[ins.i_in2()],
                           off_out[ins.i_out()],
                           std::sqrt(alpha),
                           shape,
                           ins.has_weight() ? weight_offset : -1,
                           ins.has_weight() ? size : 0,
                           {}};
    if (ins.has_weight()) weight_offset += size;

    if (path.coefficient != 0) {
      // CG in e3nn's real basis, m-ordering m = -l..l, Frobenius norm 1 (clebsch_gordan.h).
      const std::vector<double>& cg = wigner_3j(a.ir.l(), b.ir.l(), c.ir.l());
      for (int i = 0; i < d1; ++i)
        for (int j = 0; j < d2; ++j)
          for (int k = 0; k < d3; ++k) {
            const double value = cg[(i * d2 + j) * d3 + k];
            if (value != 0) path.cg.push_back({i, j, k, path.coefficient * value});
          }
    }
    paths_.push_back(std::move(path));
  }
  weight_numel_ = weight_offset;
}

std::string TensorProduct::str() const {
  std::string s = "TensorProduct(" + irreps_in1_.str() + " x " + irreps_in2_.str() + " -> " +
                  irreps_out_.str() + " | " + std::to_string(paths_.size()) + " instructions | " +
                  std::to_string(weight_numel_) + " weights";
  if (explicit_couplings_) s += ", explicit couplings";
  return s + (options_.shared_weights ? ", shared)" : ", per row)");
}

// ---------------------------------------------------------------------------------------------
// Kernels

namespace detail {
namespace {

// One instruction on one row; pointers are already offset to the instruction's blocks (w to its
// weights, or null for an instruction without weights, which then acts with W = 1). The
// (u, v) pairs of the mode are visited in order; for each, the output indices w and their weight
// indices form one contiguous run [w0, w0 + nw) / [i0, i0 + nw).
template <typename T>
void path_row(const TensorProductPath& p, const T* x1, const T* x2, const T* w, const T* g, T* out,
              T* gx1, T* gx2, T* gw) {
  const int m1 = p.mul1, m2 = p.mul2, mo = p.mul_out;
  const int d1 = p.ir1.dim(), d2 = p.ir2.dim(), d3 = p.ir_out.dim();
  const ConnectionMode mode = p.ins.mode();
  const bool diagonal = mode == ConnectionMode::kUuw || mode == ConnectionMode::kUuu;
  const bool need_t = out || gw;   // t[k] = sum_ij c_ijk x1[u,i] x2[v,j]
  const bool need_h = gx1 || gx2;  // h[k] = sum_w W[u,v,w] g[w,k]
  T t[kMaxIrrepDim], h[kMaxIrrepDim];

  for (int u = 0; u < m1; ++u) {
    const int v_begin = diagonal ? u : 0, v_end = diagonal ? u + 1 : m2;
    for (int v = v_begin; v < v_end; ++v) {
      int w0 = 0, nw = 1, i0 = 0;
      switch (mode) {
        case ConnectionMode::kUvw:
          w0 = 0, nw = mo, i0 = (u * m2 + v) * mo;
          break;
        case ConnectionMode::kUvu:
          w0 = u, i0 = u * m2 + v;
          break;
        case ConnectionMode::kUvv:
          w0 = v, i0 = u * m2 + v;
          break;
        case ConnectionMode::kUuw:
          w0 = 0, nw = mo, i0 = u * mo;
          break;
        case ConnectionMode::kUuu:
          w0 = u, i0 = u;
          break;
      }
      const T* a = x1 ? x1 + u * d1 : nullptr;
      const T* b = x2 ? x2 + v * d2 : nullptr;
      if (need_t) {
        std::fill(t, t + d3, T(0));
        for (const CgEntry& e : p.cg) t[e.k] += static_cast<T>(e.c) * a[e.i] * b[e.j];
        for (int q = 0; q < nw; ++q) {
          const int wo = (w0 + q) * d3;
          if (out) {
            const T s = w ? w[i0 + q] : T(1);
            for (int k = 0; k < d3; ++k) out[wo + k] += s * t[k];
          }
          if (gw) {
            T acc = 0;
            for (int k = 0; k < d3; ++k) acc += t[k] * g[wo + k];
            gw[i0 + q] += acc;
          }
        }
      }
      if (need_h) {
        std::fill(h, h + d3, T(0));
        for (int q = 0; q < nw; ++q) {
          const T s = w ? w[i0 + q] : T(1);
          const T* gr = g + (w0 + q) * d3;
          for (int k = 0; k < d3; ++k) h[k] += s * gr[k];
        }
        if (gx1) {
          T* r = gx1 + u * d1;
          for (const CgEntry& e : p.cg) r[e.i] += static_cast<T>(e.c) * b[e.j] * h[e.k];
        }
        if (gx2) {
          T* r = gx2 + v * d2;
          for (const CgEntry& e : p.cg) r[e.j] += static_cast<T>(e.c) * a[e.i] * h[e.k];
        }
      }
    }
  }
}

}  // namespace

template <typename T>
void tensor_product_row(const TensorProduct& tp, const T* x1, const T* x2, const T* w,
                        WeightRole role, const T* g, T* out, T* gx1, T* gx2, T* gw) {
  CLEBSCH_EXPECTS(!out || (x1 && x2));
  CLEBSCH_EXPECTS(!gx1 || (x2 && g));
  CLEBSCH_EXPECTS(!gx2 || (x1 && g));
  CLEBSCH_EXPECTS(!gw || (x1 && x2 && g));
  CLEBSCH_EXPECTS(w || tp.weight_numel() == 0);
  for (const TensorProductPath& p : tp.paths()) {
    const bool weighted = p.ins.has_weight();
    // A weight tangent does not reach instructions without weights.
    if (!weighted && role == WeightRole::kTangent) continue;
    if (p.cg.empty()) continue;
    const T* pw = weighted ? w + p.weight_offset : nullptr;
    path_row(p, x1 ? x1 + p.offset1 : nullptr, x2 ? x2 + p.offset2 : nullptr, pw,
             g ? g + p.offset_out : nullptr, out ? out + p.offset_out : nullptr,
             gx1 ? gx1 + p.offset1 : nullptr, gx2 ? gx2 + p.offset2 : nullptr,
             (gw && weighted) ? gw + p.weight_offset : nullptr);
  }
}

template void tensor_product_row<float>(const TensorProduct&, const float*, const float*,
                                        const float*, WeightRole, const float*, float*, float*,
                                        float*, float*);
template void tensor_product_row<double>(const TensorProduct&, const double*, const double*,
                                         const double*, WeightRole, const double*, double*, double*,
                                         double*, double*);

}  // namespace detail

namespace {

using detail::tensor_product_row;
using detail::WeightRole;

// Runs body(b, gw_row) for every row b < batch in parallel, where gw_row is where the row's
// weight gradient must be accumulated: the row's own slot of grad_w (per-row weights), or a
// zeroed per-chunk buffer that is summed into grad_w afterwards in chunk order (shared weights).
// Chunks depend only on the batch size, so the sum is the same for every thread count.
template <typename T, typename Body>
void for_rows(const TensorProduct& tp, std::int64_t batch, T* grad_w, Body body) {
  const std::int64_t numel = tp.weight_numel();
  if (!grad_w || !tp.shared_weights() || numel == 0) {
#pragma omp parallel for schedule(static)
    for (std::int64_t b = 0; b < batch; ++b) body(b, grad_w ? grad_w + b * numel : nullptr);
    return;
  }
  const std::int64_t chunks = std::min(batch, kReductionChunks);
  std::vector<T> partial(static_cast<std::size_t>(chunks * numel), T(0));
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = batch * c / chunks, end = batch * (c + 1) / chunks;
    for (std::int64_t b = begin; b < end; ++b) body(b, partial.data() + c * numel);
  }
  std::fill(grad_w, grad_w + numel, T(0));
  for (std::int64_t c = 0; c < chunks; ++c)
    for (std::int64_t i = 0; i < numel; ++i) grad_w[i] += partial[c * numel + i];
}

template <typename T>
const T* weight_row(const TensorProduct& tp, const T* w, std::int64_t b) {
  if (!w || tp.shared_weights()) return w;
  return w + b * tp.weight_numel();
}

template <typename T>
T* zeroed(T* p, std::int64_t b, int dim) {
  if (!p) return nullptr;
  T* r = p + b * dim;
  std::fill(r, r + dim, T(0));
  return r;
}

}  // namespace

template <typename T>
void tensor_product_forward(const TensorProduct& tp, std::int64_t batch, const T* x1, const T* x2,
                            const T* weights, T* out) {
  CLEBSCH_EXPECTS(batch >= 0);
  CLEBSCH_EXPECTS(out && (batch == 0 || (x1 && x2)));
  CLEBSCH_EXPECTS(weights || tp.weight_numel() == 0);
  const int n1 = tp.dim_in1(), n2 = tp.dim_in2(), no = tp.dim_out();
#pragma omp parallel for schedule(static)
  for (std::int64_t b = 0; b < batch; ++b)
    tensor_product_row<T>(tp, x1 + b * n1, x2 + b * n2, weight_row(tp, weights, b),
                          WeightRole::kValue, nullptr, zeroed(out, b, no), nullptr, nullptr,
                          nullptr);
}

template <typename T>
void tensor_product_backward(const TensorProduct& tp, std::int64_t batch, const T* x1, const T* x2,
                             const T* weights, const T* grad_out, T* grad_x1, T* grad_x2,
                             T* grad_weights) {
  CLEBSCH_EXPECTS(batch >= 0);
  CLEBSCH_EXPECTS(batch == 0 || (x1 && x2 && grad_out));
  CLEBSCH_EXPECTS(weights || tp.weight_numel() == 0);
  const int n1 = tp.dim_in1(), n2 = tp.dim_in2(), no = tp.dim_out(), nw = tp.weight_numel();
  for_rows(tp, batch, grad_weights, [&](std::int64_t b, T* gw) {
    if (gw && !tp.shared_weights()) std::fill(gw, gw + nw, T(0));
    tensor_product_row<T>(tp, x1 + b * n1, x2 + b * n2, weight_row(tp, weights, b),
                          WeightRole::kValue, grad_out + b * no, nullptr, zeroed(grad_x1, b, n1),
                          zeroed(grad_x2, b, n2), gw);
  });
}

template <typename T>
void tensor_product_double_backward(const TensorProduct& tp, std::int64_t batch, const T* x1,
                                    const T* x2, const T* weights, const T* grad_out, const T* dx1,
                                    const T* dx2, const T* dweights, T* grad_x1, T* grad_x2,
                                    T* grad_weights, T* grad_grad_out) {
  CLEBSCH_EXPECTS(batch >= 0);
  CLEBSCH_EXPECTS(batch == 0 || (x1 && x2 && grad_out));
  CLEBSCH_EXPECTS(weights || tp.weight_numel() == 0);
  const int n1 = tp.dim_in1(), n2 = tp.dim_in2(), no = tp.dim_out(), nw = tp.weight_numel();
  for_rows(tp, batch, grad_weights, [&](std::int64_t b, T* gw) {
    if (gw && !tp.shared_weights()) std::fill(gw, gw + nw, T(0));
    const T* a = x1 + b * n1;
    const T* y = x2 + b * n2;
    const T* w = weight_row(tp, weights, b);
    const T* g = grad_out + b * no;
    T* ggo = zeroed(grad_grad_out, b, no);
    T* g1 = zeroed(grad_x1, b, n1);
    T* g2 = zeroed(grad_x2, b, n2);
    // Each term of the header's formulas comes from feeding one cotangent into its slot: the
    // three calls produce TP(.), T1*, T2*, T3* of that substitution at once.
    if (dx1)
      tensor_product_row<T>(tp, dx1 + b * n1, y, w, WeightRole::kValue, g, ggo, nullptr, g2, gw);
    if (dx2)
      tensor_product_row<T>(tp, a, dx2 + b * n2, w, WeightRole::kValue, g, ggo, g1, nullptr, gw);
    if (dweights)
      tensor_product_row<T>(tp, a, y, weight_row(tp, dweights, b), WeightRole::kTangent, g, ggo, g1,
                            g2, nullptr);
  });
}

#define CLEBSCH_INSTANTIATE(T)                                                                     \
  template void tensor_product_forward<T>(const TensorProduct&, std::int64_t, const T*, const T*,  \
                                          const T*, T*);                                           \
  template void tensor_product_backward<T>(const TensorProduct&, std::int64_t, const T*, const T*, \
                                           const T*, const T*, T*, T*, T*);                        \
  template void tensor_product_double_backward<T>(const TensorProduct&, std::int64_t, const T*,    \
                                                  const T*, const T*, const T*, const T*,          \
                                                  const T*, const T*, T*, T*, T*, T*);
CLEBSCH_INSTANTIATE(float)
CLEBSCH_INSTANTIATE(double)
#undef CLEBSCH_INSTANTIATE

}  // namespace clebsch
