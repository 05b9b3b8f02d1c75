// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The per-op kernels of the NequIP host engine (nequip_engine_impl.h), each converted once from its
// model:: description to the network scalar S and evaluated per row (a node or an edge) or per
// chunk of rows, forward and reverse mode. They are internal to the engine: the generic,
// separately tested host ops (linear.h, tensor_product.h, convolution.h, gate.h) are the
// references; these are specialised for the engine's access pattern (one owner per output row,
// edge MLP recomputed per chunk, couplings and weights pre-cast to S, the self-connection's
// type-embedding input contracted into per-species matrices at load time). Feature layouts are
// e3nn's: block b of an irreps string at its offset, index u*(2l+1)+(m+l) inside a block. The
// couplings used are the exported ones (CgEntry values with the path weight folded in).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "clebsch/engine/nequip_self_connection.h"
#include "clebsch/model/gate_channels.h"
#include "clebsch/model/model.h"
#include "clebsch/support/error.h"

namespace clebsch::nequip_ops {

/// A number as it appears in error messages (12 significant digits).
inline std::string format_number(double v) {
  std::ostringstream s;
  s.precision(12);
  s << v;
  return s.str();
}

/// Largest 2l+1 of any irrep (l <= kMaxL).
inline constexpr int kMaxIrrepDim = 2 * kMaxL + 1;

// ---------------------------------------------------------------------------------------------
// Activations (FORMAT.md §3.5): cst * phi(x).
// ---------------------------------------------------------------------------------------------

enum class ActKind { kIdentity, kSilu, kTanh, kSigmoid, kAbs, kSsp, kGelu, kMish };

struct ScaledAct {
  ActKind kind = ActKind::kIdentity;
  double cst = 1.0;

  /// @throws Error naming the activation when its kind is unknown or its cst is not finite.
  static ScaledAct from(const std::optional<model::Activation>& a, const std::string& where) {
    if (!a) return {};
    ScaledAct s;
    switch (a->kind) {
      case model::Activation::Kind::kSilu:
        s.kind = ActKind::kSilu;
        break;
      case model::Activation::Kind::kTanh:
        s.kind = ActKind::kTanh;
        break;
      case model::Activation::Kind::kSigmoid:
        s.kind = ActKind::kSigmoid;
        break;
      case model::Activation::Kind::kAbs:
        s.kind = ActKind::kAbs;
        break;
      case model::Activation::Kind::kSsp:
        s.kind = ActKind::kSsp;
        break;
      case model::Activation::Kind::kGelu:
        s.kind = ActKind::kGelu;
        break;
      case model::Activation::Kind::kMish:
        s.kind = ActKind::kMish;
        break;
      default:
        throw Error("NequipEngine: " + where + " has activation \"" + a->name + "\" (kind " +
                    std::to_string(static_cast<int>(a->kind)) +
                    "); supported: silu, tanh, sigmoid, abs, ssp, gelu, mish");
    }
    if (!std::isfinite(a->cst))
      throw Error("NequipEngine: " + where + " activation " + a->name + " has cst " +
                  format_number(a->cst));
    s.cst = a->cst;
    return s;
  }

  /// value = cst phi(x), derivative = cst phi'(x).
  template <class T>
  void eval(T x, T* value, T* derivative) const {
    const T c = static_cast<T>(cst);
    T v, d;
    switch (kind) {
      case ActKind::kSilu: {
        const T s = T(1) / (T(1) + std::exp(-x));
        v = x * s;
        d = s * (T(1) + x * (T(1) - s));
        break;
      }
      case ActKind::kTanh: {
        v = std::tanh(x);
        d = T(1) - v * v;
        break;
      }
      case ActKind::kSigmoid: {
        v = T(1) / (T(1) + std::exp(-x));
        d = v * (T(1) - v);
        break;
      }
      case ActKind::kAbs:
        v = std::abs(x);
        d = x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));  // torch's sign(0) = 0
        break;
      case ActKind::kSsp: {
        // log(1 + e^x) - log 2, without overflow for large x.
        v = std::max(x, T(0)) + std::log1p(std::exp(-std::abs(x))) -
            static_cast<T>(0.69314718055994530942);
        d = T(1) / (T(1) + std::exp(-x));
        break;
      }
      case ActKind::kGelu: {
        // Exact GELU (torch.nn.GELU()): x Phi(x), d = Phi(x) + x phi(x). Phi through erfc: the
        // erf form 1 + erf(x/sqrt 2) cancels for x << 0 (all digits lost below x ~ -8), erfc keeps
        // the tail to full relative precision; both tend to the right limits (0 and x) with no
        // overflow.
        const T Phi = T(0.5) * std::erfc(-x * static_cast<T>(0.70710678118654752440));
        v = x * Phi;
        d = Phi + x * static_cast<T>(0.39894228040143267794) * std::exp(T(-0.5) * x * x);
        break;
      }
      case ActKind::kMish: {
        // x tanh(sp), sp = softplus(x) = max(x, 0) + log1p(e^-|x|), which never overflows;
        // d = tanh(sp) + x (1 - tanh^2(sp)) sigmoid(x), the sigmoid from e^-|x| <= 1 for the
        // same reason. Only first derivatives are needed: the engine differentiates the energy
        // once (forces, virial).
        const T e = std::exp(-std::abs(x));
        const T sp = std::max(x, T(0)) + std::log1p(e);
        const T th = std::tanh(sp);
        const T sig = x >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
        v = x * th;
        d = th + x * (T(1) - th * th) * sig;
        break;
      }
      case ActKind::kIdentity:
      default:
        v = x;
        d = T(1);
        break;
    }
    *value = c * v;
    *derivative = c * d;
  }

  template <class T>
  T value(T x) const {
    T v, d;
    eval(x, &v, &d);
    return v;
  }
};

// ---------------------------------------------------------------------------------------------
// Dense row-major products for small chunks of rows.
// ---------------------------------------------------------------------------------------------

/// C[n][m] = A[n][k] B[k][m] (C overwritten), for the MLP chunks (n <= a few dozen rows, k and
/// m up to a few hundred). Defined in nequip_engine_kernels.cpp: register-blocked, and on x86-64
/// with GCC compiled for AVX-512, AVX2 and the baseline, picked at load time (target_clones), since
/// these products are most of the engine's arithmetic. Each C element is summed over k in order.
void gemm_nn(int n, int k, int m, const double* A, const double* B, double* C);
void gemm_nn(int n, int k, int m, const float* A, const float* B, float* C);

// ---------------------------------------------------------------------------------------------
// mlp (FORMAT.md §4.3): z = (x W) * weight_scale (+ bias); a = out_scale * act(z).
// ---------------------------------------------------------------------------------------------

/// Evaluates chunks of rows. forward() keeps, per layer, its output and (with an activation) the
/// activation's derivative at the pre-activation in a caller-provided scratch of
/// scratch_per_row() values per row, which backward() then reads, so a chunk's backward must
/// follow its forward with the same n and scratch.
template <class S>
class MlpOp {
 public:
  MlpOp() = default;
  MlpOp(const model::Mlp& m, const std::string& where) {
    if (m.layers.empty()) throw Error("NequipEngine: " + where + " has no layers");
    int prev = m.layers.front().h_in;
    dim_in_ = prev;
    max_width_ = prev;
    std::size_t offset = 0;
    for (std::size_t l = 0; l < m.layers.size(); ++l) {
      const model::Mlp::Layer& ml = m.layers[l];
      const std::string lw = where + " layer " + std::to_string(l);
      if (ml.h_in != prev || ml.h_out < 1 ||
          ml.weight.size() != static_cast<std::size_t>(ml.h_in) * ml.h_out)
        throw Error("NequipEngine: " + lw + " is " + std::to_string(ml.h_in) + " -> " +
                    std::to_string(ml.h_out) + " with " + std::to_string(ml.weight.size()) +
                    " weights; the previous layer gives " + std::to_string(prev));
      if (!ml.bias.empty() && ml.bias.size() != static_cast<std::size_t>(ml.h_out))
        throw Error("NequipEngine: " + lw + " has " + std::to_string(ml.bias.size()) +
                    " biases for " + std::to_string(ml.h_out) + " outputs");
      Layer L;
      L.in = ml.h_in;
      L.out = ml.h_out;
      L.w.resize(ml.weight.size());
      L.wt.resize(ml.weight.size());
      for (int i = 0; i < L.in; ++i)
        for (int o = 0; o < L.out; ++o) {
          const S v = static_cast<S>(ml.weight[static_cast<std::size_t>(i) * L.out + o]);
          L.w[static_cast<std::size_t>(i) * L.out + o] = v;
          L.wt[static_cast<std::size_t>(o) * L.in + i] = v;
        }
      L.bias.assign(ml.bias.begin(), ml.bias.end());
      L.weight_scale = static_cast<S>(ml.weight_scale);
      L.has_act = ml.activation.has_value();
      L.act = ScaledAct::from(ml.activation, lw);
      L.out_scale = static_cast<S>(ml.out_scale);
      L.z_offset = offset;
      offset += L.out;
      if (L.has_act) {
        L.a_offset = offset;
        offset += L.out;
      }
      max_width_ = std::max(max_width_, L.out);
      prev = L.out;
      layers_.push_back(std::move(L));
    }
    dim_out_ = prev;
    scratch_per_row_ = static_cast<int>(offset);
  }

  int dim_in() const { return dim_in_; }
  int dim_out() const { return dim_out_; }
  int scratch_per_row() const { return scratch_per_row_; }
  int max_width() const { return max_width_; }

  /// Rows x[n][dim_in] -> the returned pointer (inside @p scratch) to y[n][dim_out].
  const S* forward(int n, const S* x, S* scratch) const {
    const S* in = x;
    for (const Layer& L : layers_) {
      S* z = scratch + static_cast<std::size_t>(n) * L.z_offset;
      gemm_nn(n, L.in, L.out, in, L.w.data(), z);
      const std::size_t total = static_cast<std::size_t>(n) * L.out;
      for (std::size_t q = 0; q < total; ++q) z[q] *= L.weight_scale;
      if (!L.bias.empty())
        for (int r = 0; r < n; ++r)
          for (int o = 0; o < L.out; ++o)
            z[static_cast<std::size_t>(r) * L.out + o] += static_cast<S>(L.bias[o]);
      if (L.has_act) {
        // The pre-activation is only needed for the derivative: keep that instead, in place,
        // so backward() evaluates no activation again.
        S* a = scratch + static_cast<std::size_t>(n) * L.a_offset;
        for (std::size_t q = 0; q < total; ++q) {
          S v, d;
          L.act.eval(z[q], &v, &d);
          a[q] = L.out_scale * v;
          z[q] = L.out_scale * d;
        }
        in = a;
      } else {
        in = z;
      }
    }
    return in;
  }

  /// grad_in[n][dim_in] = d<grad_out, y>/dx (overwritten), from the scratch of forward(n, ...).
  /// @p buffers holds 2 n max_width() values.
  void backward(int n, const S* scratch, const S* grad_out, S* grad_in, S* buffers) const {
    S* g = buffers;
    S* g2 = buffers + static_cast<std::size_t>(n) * max_width_;
    std::copy_n(grad_out, static_cast<std::size_t>(n) * dim_out_, g);
    for (int l = static_cast<int>(layers_.size()) - 1; l >= 0; --l) {
      const Layer& L = layers_[l];
      const std::size_t total = static_cast<std::size_t>(n) * L.out;
      if (L.has_act) {
        const S* dz = scratch + static_cast<std::size_t>(n) * L.z_offset;  // out_scale * act'(z)
        for (std::size_t q = 0; q < total; ++q) g[q] *= dz[q];
      }
      for (std::size_t q = 0; q < total; ++q) g[q] *= L.weight_scale;
      S* dest = l == 0 ? grad_in : g2;
      gemm_nn(n, L.out, L.in, g, L.wt.data(), dest);
      std::swap(g, g2);
    }
  }

 private:
  struct Layer {
    int in = 0, out = 0;
    std::vector<S> w, wt;  // [in][out] and its transpose
    std::vector<double> bias;
    S weight_scale = 1;
    bool has_act = false;
    ScaledAct act;
    S out_scale = 1;
    std::size_t z_offset = 0, a_offset = 0;  // per-row offsets into the scratch
  };
  std::vector<Layer> layers_;
  int dim_in_ = 0, dim_out_ = 0, scratch_per_row_ = 0, max_width_ = 0;
};

// ---------------------------------------------------------------------------------------------
// linear (FORMAT.md §4.1)
// ---------------------------------------------------------------------------------------------

template <class S>
class LinearOp {
 public:
  LinearOp() = default;
  LinearOp(const model::Linear& m, const std::string& where) {
    dim_in_ = m.irreps_in.dim();
    dim_out_ = m.irreps_out.dim();
    const std::vector<int> off_in = m.irreps_in.offsets(), off_out = m.irreps_out.offsets();
    for (const model::Linear::Instruction& ins : m.instructions) {
      if (ins.i_in < 0 || ins.i_in >= static_cast<int>(m.irreps_in.size()) || ins.i_out < 0 ||
          ins.i_out >= static_cast<int>(m.irreps_out.size()))
        throw Error("NequipEngine: " + where + " has an instruction " + std::to_string(ins.i_in) +
                    " -> " + std::to_string(ins.i_out) + " outside " + m.irreps_in.str() + " -> " +
                    m.irreps_out.str());
      const MulIrrep& a = m.irreps_in[ins.i_in];
      const MulIrrep& b = m.irreps_out[ins.i_out];
      const std::size_t numel = static_cast<std::size_t>(ins.mul_in) * ins.mul_out;
      if (a.ir != b.ir || a.mul != ins.mul_in || b.mul != ins.mul_out || ins.weight_offset < 0 ||
          ins.weight_offset + numel > m.weight.size())
        throw Error("NequipEngine: " + where + " instruction " + std::to_string(ins.i_in) + " -> " +
                    std::to_string(ins.i_out) + " (" + std::to_string(a.mul) + "x" + a.ir.str() +
                    " -> " + std::to_string(b.mul) + "x" + b.ir.str() +
                    ") does not fit its weights");
      Block blk;
      blk.off_in = off_in[ins.i_in];
      blk.off_out = off_out[ins.i_out];
      blk.mul_in = ins.mul_in;
      blk.mul_out = ins.mul_out;
      blk.d = a.ir.dim();
      blk.w.resize(numel);
      for (std::size_t q = 0; q < numel; ++q)
        blk.w[q] = static_cast<S>(ins.path_weight * m.weight[ins.weight_offset + q]);
      blocks_.push_back(std::move(blk));
    }
  }

  int dim_in() const { return dim_in_; }
  int dim_out() const { return dim_out_; }

  /// y = linear(x) (y overwritten; blocks no instruction reaches are zero).
  void forward_row(const S* x, S* y) const {
    std::fill(y, y + dim_out_, S(0));
    for (const Block& b : blocks_) {
      const S* xi = x + b.off_in;
      S* yo = y + b.off_out;
      if (b.d == 1) {
        for (int u = 0; u < b.mul_in; ++u) {
          const S xu = xi[u];
          const S* wr = b.w.data() + static_cast<std::size_t>(u) * b.mul_out;
#pragma omp simd
          for (int w = 0; w < b.mul_out; ++w) yo[w] += wr[w] * xu;
        }
      } else {
        for (int u = 0; u < b.mul_in; ++u) {
          const S* wr = b.w.data() + static_cast<std::size_t>(u) * b.mul_out;
          const S* xu = xi + u * b.d;
          for (int w = 0; w < b.mul_out; ++w) {
            const S c = wr[w];
            S* yw = yo + w * b.d;
            for (int m = 0; m < b.d; ++m) yw[m] += c * xu[m];
          }
        }
      }
    }
  }

  /// gx += linear^T(gy).
  void backward_row(const S* gy, S* gx) const {
    for (const Block& b : blocks_) {
      const S* go = gy + b.off_out;
      S* gi = gx + b.off_in;
      for (int u = 0; u < b.mul_in; ++u) {
        const S* wr = b.w.data() + static_cast<std::size_t>(u) * b.mul_out;
        S* gu = gi + u * b.d;
        if (b.d == 1) {
          S acc = 0;
          for (int w = 0; w < b.mul_out; ++w) acc += wr[w] * go[w];
          gu[0] += acc;
        } else {
          for (int w = 0; w < b.mul_out; ++w) {
            const S c = wr[w];
            const S* gw = go + w * b.d;
            for (int m = 0; m < b.d; ++m) gu[m] += c * gw[m];
          }
        }
      }
    }
  }

 private:
  struct Block {
    int off_in = 0, off_out = 0, mul_in = 0, mul_out = 0, d = 1;
    std::vector<S> w;  // path_weight * W[mul_in][mul_out]
  };
  std::vector<Block> blocks_;
  int dim_in_ = 0, dim_out_ = 0;
};

// ---------------------------------------------------------------------------------------------
// gate (FORMAT.md §4.5)
// ---------------------------------------------------------------------------------------------

template <class S>
class GateOp {
 public:
  GateOp() = default;
  GateOp(const model::Gate& m, const std::string& where) {
    dim_in_ = m.irreps_in.dim();
    dim_out_ = m.irreps_out.dim();
    model::GateChannels<ScaledAct> c = model::check_gate<ScaledAct>(
        m, "NequipEngine: " + where,
        [&](const std::optional<model::Activation>& a) { return ScaledAct::from(a, where); });
    scalar_acts_ = std::move(c.scalar_acts);
    gate_acts_ = std::move(c.gate_acts);
    scalar_src_ = m.index_scalars;
    gate_src_ = m.index_gates;
    gated_src_ = m.index_gated;
    copy_begin_ = std::move(c.copy_begin);
    copy_dim_ = std::move(c.copy_dim);
    num_scalars_ = static_cast<int>(scalar_src_.size());
  }

  int dim_in() const { return dim_in_; }
  int dim_out() const { return dim_out_; }

  void forward_row(const S* x, S* y) const {
    for (int q = 0; q < num_scalars_; ++q) y[q] = scalar_acts_[q].value(x[scalar_src_[q]]);
    S* yg = y + num_scalars_;
    for (std::size_t k = 0; k < gate_src_.size(); ++k) {
      const S gk = gate_acts_[k].value(x[gate_src_[k]]);
      const int b = copy_begin_[k];
      for (int m = 0; m < copy_dim_[k]; ++m) yg[b + m] = gk * x[gated_src_[b + m]];
    }
  }

  /// gx = gate^T(gy) at x (overwritten).
  void backward_row(const S* x, const S* gy, S* gx) const {
    std::fill(gx, gx + dim_in_, S(0));
    for (int q = 0; q < num_scalars_; ++q) {
      S v, d;
      scalar_acts_[q].eval(x[scalar_src_[q]], &v, &d);
      gx[scalar_src_[q]] += gy[q] * d;
    }
    const S* gg = gy + num_scalars_;
    for (std::size_t k = 0; k < gate_src_.size(); ++k) {
      S gk, dk;
      gate_acts_[k].eval(x[gate_src_[k]], &gk, &dk);
      const int b = copy_begin_[k];
      S acc = 0;
      for (int m = 0; m < copy_dim_[k]; ++m) {
        const int src = gated_src_[b + m];
        gx[src] += gk * gg[b + m];
        acc += x[src] * gg[b + m];
      }
      gx[gate_src_[k]] += acc * dk;
    }
  }

 private:
  int dim_in_ = 0, dim_out_ = 0, num_scalars_ = 0;
  std::vector<int> scalar_src_, gate_src_, gated_src_, copy_begin_, copy_dim_;
  std::vector<ScaledAct> scalar_acts_, gate_acts_;
};

// ---------------------------------------------------------------------------------------------
// Tensor products (FORMAT.md §4.2) with the exported couplings.
// ---------------------------------------------------------------------------------------------

/// One coupling non-zero in the network scalar.
template <class S>
struct Coupling {
  int i, j, k;
  S c;
};

template <class S>
std::vector<Coupling<S>> couplings_of(const TensorProductPath& p) {
  std::vector<Coupling<S>> out;
  for (const CgEntry& e : p.cg) out.push_back({e.i, e.j, e.k, static_cast<S>(e.c)});
  return out;
}

/// NequIP's self-connection: a uvw FullyConnectedTensorProduct of the features with the type
/// embedding a (all scalars). Because a takes one of num_species values, the sum over its
/// channels is done at load time: K_s[u][w] = sum_v W[u,v,w] a_s[v] per path, so a row costs
/// one species-selected linear map.
template <class S>
class SelfConnection {
 public:
  SelfConnection(const model::TensorProduct& m, const std::vector<double>& type_embedding,
                 int num_species, int embedding_dim, const std::string& where) {
    check_self_connection(m, embedding_dim, where);
    const TensorProduct& tp = m.descriptor;
    dim_in1_ = tp.dim_in1();
    dim_out_ = tp.dim_out();
    num_species_ = num_species;
    for (const TensorProductPath& p : tp.paths()) {
      check_self_connection_path(p, where);
      if (p.cg.empty()) continue;
      Path q;
      q.off1 = p.offset1;
      q.off_out = p.offset_out;
      q.mul1 = p.mul1;
      q.mul_out = p.mul_out;
      q.d1 = p.ir1.dim();
      q.d3 = p.ir_out.dim();
      q.cg = couplings_of<S>(p);
      for (double k : contract_type_embedding(m, p, type_embedding, num_species, embedding_dim))
        q.K.push_back(static_cast<S>(k));
      paths_.push_back(std::move(q));
    }
  }

  int dim_in1() const { return dim_in1_; }
  int dim_out() const { return dim_out_; }

  /// out += sc(x, a_species).
  void forward_row(int species, const S* x, S* out) const {
    S t[kMaxIrrepDim];
    for (const Path& p : paths_) {
      const S* K = p.K.data() + static_cast<std::size_t>(species) * p.mul1 * p.mul_out;
      for (int u = 0; u < p.mul1; ++u) {
        std::fill(t, t + p.d3, S(0));
        const S* a = x + p.off1 + u * p.d1;
        for (const Coupling<S>& e : p.cg) t[e.k] += e.c * a[e.i];
        const S* Ku = K + static_cast<std::size_t>(u) * p.mul_out;
        S* o = out + p.off_out;
        for (int w = 0; w < p.mul_out; ++w) {
          const S kw = Ku[w];
          for (int k = 0; k < p.d3; ++k) o[w * p.d3 + k] += kw * t[k];
        }
      }
    }
  }

  /// gx += sc^T(g) for the row's species.
  void backward_row(int species, const S* g, S* gx) const {
    S t[kMaxIrrepDim];
    for (const Path& p : paths_) {
      const S* K = p.K.data() + static_cast<std::size_t>(species) * p.mul1 * p.mul_out;
      const S* go = g + p.off_out;
      for (int u = 0; u < p.mul1; ++u) {
        std::fill(t, t + p.d3, S(0));
        const S* Ku = K + static_cast<std::size_t>(u) * p.mul_out;
        for (int w = 0; w < p.mul_out; ++w) {
          const S kw = Ku[w];
          for (int k = 0; k < p.d3; ++k) t[k] += kw * go[w * p.d3 + k];
        }
        S* ga = gx + p.off1 + u * p.d1;
        for (const Coupling<S>& e : p.cg) ga[e.i] += e.c * t[e.k];
      }
    }
  }

 private:
  struct Path {
    int off1 = 0, off_out = 0, mul1 = 0, mul_out = 0, d1 = 1, d3 = 1;
    std::vector<Coupling<S>> cg;
    std::vector<S> K;  // [species][mul1][mul_out]
  };
  std::vector<Path> paths_;
  int dim_in1_ = 0, dim_out_ = 0, num_species_ = 0;
};

/// Where each value of a row in e3nn's layout (index u*(2l+1)+m inside a block) goes in the
/// component-major layout (index m*mul+u inside the same block), for every block of @p irreps.
inline std::vector<int> component_major_permutation(const Irreps& irreps) {
  std::vector<int> perm;
  int offset = 0;
  for (const MulIrrep& mi : irreps) {
    const int d = mi.ir.dim();
    for (int u = 0; u < mi.mul; ++u)
      for (int m = 0; m < d; ++m) perm.push_back(offset + m * mi.mul + u);
    offset += mi.dim();
  }
  return perm;
}

/// One path of the convolution (ConvTp): block offsets, multiplicities, dimensions, the start
/// of its weights in a weight row (-1: no weights, w = 1) and its coupling non-zeros.
template <class S>
struct ConvPath {
  int off1 = 0, off2 = 0, off_out = 0, mul1 = 0, mul2 = 0, d1 = 1, d2 = 1, d3 = 1;
  int weight_offset = -1;
  std::vector<Coupling<S>> cg;
};

/// The per-edge convolution kernels behind ConvTp::forward_edge / backward_edge (see there),
/// defined in nequip_engine_kernels.cpp, where they are compiled per instruction set like gemm_nn.
void conv_forward_edge(const ConvPath<double>* paths, int num_paths, const double* x1t,
                       const double* y, const double* w, double* outt, double* scratch);
void conv_forward_edge(const ConvPath<float>* paths, int num_paths, const float* x1t,
                       const float* y, const float* w, float* outt, float* scratch);
void conv_backward_edge(const ConvPath<double>* paths, int num_paths, int weight_numel,
                        const double* x1t, const double* y, const double* w, const double* gt,
                        double* gx1t, double* gy, double* gw, double* scratch);
void conv_backward_edge(const ConvPath<float>* paths, int num_paths, int weight_numel,
                        const float* x1t, const float* y, const float* w, const float* gt,
                        float* gx1t, float* gy, float* gw, float* scratch);

/// The convolution's uvu tensor product with per-edge weights, for one edge at a time:
/// out[u,k] += sum_v w[u,v] sum_ij P_ijk x1[u,i] Y[v,j].
/// The node-side operands (x1, out and their gradients) are taken in the component-major layout
/// (block by block, index m*mul+u), so that every inner loop runs over the channels u with unit
/// stride and vectorises; Y and the weights keep e3nn's layout. The to_/from_ functions convert
/// rows once per node, which is negligible next to the per-edge work.
template <class S>
class ConvTp {
 public:
  ConvTp() = default;
  ConvTp(const model::TensorProduct& m, const std::string& where) {
    const TensorProduct& tp = m.descriptor;
    if (!m.external_weights && tp.weight_numel() > 0)
      throw Error("NequipEngine: " + where + " must take its weights from the edge MLP, it has " +
                  "internal weights");
    dim_in1_ = tp.dim_in1();
    dim_in2_ = tp.dim_in2();
    dim_out_ = tp.dim_out();
    weight_numel_ = tp.weight_numel();
    perm_in1_ = component_major_permutation(tp.irreps_in1());
    perm_out_ = component_major_permutation(tp.irreps_out());
    for (const TensorProductPath& p : tp.paths()) {
      if (p.ins.mode() != ConnectionMode::kUvu)
        throw Error("NequipEngine: " + where + " instruction " + p.ins.str() + " has mode " +
                    to_string(p.ins.mode()) + ", the convolution supports uvu");
      if (p.cg.empty()) continue;
      ConvPath<S> q;
      q.off1 = p.offset1;
      q.off2 = p.offset2;
      q.off_out = p.offset_out;
      q.mul1 = p.mul1;
      q.mul2 = p.mul2;
      q.d1 = p.ir1.dim();
      q.d2 = p.ir2.dim();
      q.d3 = p.ir_out.dim();
      q.weight_offset = p.ins.has_weight() ? p.weight_offset : -1;
      q.cg = couplings_of<S>(p);
      scratch_ = std::max(scratch_, q.mul1 * (std::max(q.d1, q.d3) + q.d3 + 1));
      paths_.push_back(std::move(q));
    }
  }

  int dim_in1() const { return dim_in1_; }
  int dim_in2() const { return dim_in2_; }
  int dim_out() const { return dim_out_; }
  int weight_numel() const { return weight_numel_; }
  /// Values of scratch the edge functions need.
  int scratch_size() const { return scratch_; }

  /// e3nn layout -> component-major layout of x1 (overwrites @p xt).
  void in1_to_cm(const S* x, S* xt) const {
    for (int q = 0; q < dim_in1_; ++q) xt[perm_in1_[q]] = x[q];
  }
  /// Component-major -> e3nn layout of x1 (overwrites @p x).
  void in1_from_cm(const S* xt, S* x) const {
    for (int q = 0; q < dim_in1_; ++q) x[q] = xt[perm_in1_[q]];
  }
  void out_to_cm(const S* y, S* yt) const {
    for (int q = 0; q < dim_out_; ++q) yt[perm_out_[q]] = y[q];
  }
  void out_from_cm(const S* yt, S* y) const {
    for (int q = 0; q < dim_out_; ++q) y[q] = yt[perm_out_[q]];
  }

  /// outt += tp(x1t, y, w), x1t and outt component-major.
  void forward_edge(const S* x1t, const S* y, const S* w, S* outt, S* scratch) const {
    conv_forward_edge(paths_.data(), static_cast<int>(paths_.size()), x1t, y, w, outt, scratch);
  }

  /// With E = <g, tp(x1, y, w)> (x1t, gt component-major): gx1t += dE/dx1 (component-major;
  /// skipped when null), gy += dE/dy, and gw = dE/dw (every weight is written).
  void backward_edge(const S* x1t, const S* y, const S* w, const S* gt, S* gx1t, S* gy, S* gw,
                     S* scratch) const {
    conv_backward_edge(paths_.data(), static_cast<int>(paths_.size()), weight_numel_, x1t, y, w, gt,
                       gx1t, gy, gw, scratch);
  }

 private:
  std::vector<ConvPath<S>> paths_;
  std::vector<int> perm_in1_, perm_out_;
  int dim_in1_ = 0, dim_in2_ = 0, dim_out_ = 0, weight_numel_ = 0, scratch_ = 0;
};

}  // namespace clebsch::nequip_ops
