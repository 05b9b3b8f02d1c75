// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Host kernels of the MACE engine (mace_engine.h), specialised for what a MACE layer does and
// laid out for vector units: node and message features are stored channel-innermost ("ir_mul":
// inside a block of mul copies of irrep l the index is (m+l)*mul + u, blocks at e3nn's offsets),
// so that every inner loop runs over contiguous channels u. The file provides
//   - a small GEMM against constant, pre-packed weights (radial MLPs, linears, self-connections),
//     compiled for AVX-512, AVX2 and baseline x86-64 and chosen at run time;
//   - Mlp (the radial and density MLPs, FORMAT.md §4.3) with its backward;
//   - NodeLinear (e3nn o3.Linear, §4.1) and SpeciesLinear (the uvw skip_tp whose second input is
//     the one-hot species, §4.2) on ir_mul rows, with their transposes;
//   - ConvTp, the uvu convolution tensor product of one edge (x[sender] (x) Y(edge) with per-edge
//     weights, §4.2/§5) and its vector-Jacobian product with respect to x, Y and the weights.
// Every coupling is the exported one (model::TensorProduct's descriptor carries the file's CG
// tensors with the path weight folded in); nothing is recomputed. Spherical harmonics are e3nn's
// (component normalisation, m = -l..l, y the polar axis), concatenated l = 0..lmax.
// Internal header: used by the MACE host engine (mace_engine*.cpp) and its tests, not part of the
// public API. Built by mace_kernels_gemm.cpp (instruction sets, GEMM), mace_kernels_mlp.cpp
// (activations, Mlp), mace_kernels_linear.cpp (NodeLinear, SpeciesLinear, layouts) and
// mace_kernels_conv.cpp (ConvTp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "clebsch/model/model.h"
#include "clebsch/o3/irreps.h"

namespace clebsch::mace_detail {

/// The least work (flops) worth an OpenMP parallel region: a fork/join costs microseconds, and
/// far more on a loaded machine, where a descheduled thread holds the whole team at a barrier.
inline constexpr double kParallelWork = 2e6;

/// Instruction sets the hot kernels are compiled for; the best one the CPU supports is used.
enum class Simd { kBaseline, kAvx2, kAvx512 };
/// The instruction set in use: the best the CPU supports, lowered by the environment variable
/// CLEBSCH_SIMD=baseline|avx2 (read once).
Simd simd_level();
/// Selects the instruction set for kernels called and matrices packed from now on (tests run
/// every code path on one machine this way). @throws Error if the CPU does not support it.
void set_simd_level(Simd level);
std::string to_string(Simd simd);

/// A constant K x N matrix (the B operand of gemm) packed into column panels of the width the
/// selected micro-kernel uses, zero padded, 64-byte aligned.
template <class T>
class PackedMatrix {
 public:
  PackedMatrix() = default;
  /// Packs scale * B (K x N, row-major with leading dimension ldb), or scale * B^T when
  /// @p transpose (then B is N x K and the packed matrix is K x N).
  PackedMatrix(int K, int N, const double* B, std::size_t ldb, double scale,
               bool transpose = false);
  int rows() const { return K_; }
  int cols() const { return N_; }
  int panel_width() const { return nr_; }
  const T* data() const { return reinterpret_cast<const T*>(storage_.data() + pad_); }

 private:
  int K_ = 0, N_ = 0, nr_ = 0;
  std::size_t pad_ = 0;  // elements skipped to reach 64-byte alignment
  std::vector<T> storage_;
};

/// C[r][0:N] (+)= sum_k A[r][k] B[k][0:N] for r < M, with B packed. Row r of A starts at
/// A + (a_rows ? a_rows[r] : r) * lda, row r of C at C + (c_rows ? c_rows[r] : r) * ldc.
/// Runs on the calling thread.
template <class T>
void gemm(const PackedMatrix<T>& B, std::size_t M, const T* A, std::size_t lda, const int* a_rows,
          T* C, std::size_t ldc, const int* c_rows, bool accumulate);

/// exp(x) to about one ulp for x in the normal range, vectorisable (used by the activations);
/// the argument is clamped to [-708, 709] (double) or [-87, 88] (float).
template <class T>
T exp_approx(T x);

/// One activation of FORMAT.md §3.5, value and derivative (cst included).
struct ScalarAct {
  enum Kind { kSilu, kTanh, kSigmoid, kAbs, kSsp } kind = kSilu;
  double cst = 1.0;
  /// @throws ModelFormatError naming an unknown activation.
  static ScalarAct from(const model::Activation& act, const std::string& where);
  template <class T>
  T value(T x) const;
  template <class T>
  T value_and_derivative(T x, T* derivative) const;
};

/// A dense MLP (FORMAT.md §4.3) on batches of rows.
template <class T>
class Mlp {
 public:
  Mlp() = default;
  explicit Mlp(const model::Mlp& mlp, const std::string& where);
  int dim_in() const { return dim_in_; }
  int dim_out() const { return dim_out_; }
  /// Scratch (in T) that forward() fills for backward() with @p rows rows.
  std::size_t scratch_size(std::size_t rows) const { return rows * scratch_per_row_; }
  /// y[rows][dim_out] = mlp(x[rows][dim_in]); @p scratch keeps what backward() needs.
  void forward(std::size_t rows, const T* x, T* y, T* scratch) const;
  /// gx[rows][dim_in] = (dy/dx)^T gy (overwritten). @p gy is used as workspace (clobbered);
  /// @p work needs 2 * rows * max width.
  void backward(std::size_t rows, const T* scratch, T* gy, T* gx, T* work) const;
  int max_width() const { return max_width_; }
  /// Multiply-adds of one row's forward pass.
  double macs_per_row() const { return macs_; }

 private:
  struct Layer {
    int h_in, h_out;
    PackedMatrix<T> w, wt;  // weight_scale * W and its transpose
    std::vector<T> bias;
    bool has_ln = false;        // LayerNorm after the bias (mace RadialMLP)
    std::vector<T> ln_w, ln_b;  // its affine weight and bias
    T ln_eps = T(0);
    std::size_t ln_offset = 0;  // per-row scratch: normalised z [h_out], then 1/std
    bool has_act = false;
    ScalarAct act;
    double out_scale = 1;
    std::size_t z_offset = 0, a_offset = 0;  // per-row offsets of the layer's scratch
  };
  std::vector<Layer> layers_;
  int dim_in_ = 0, dim_out_ = 0, max_width_ = 0;
  std::size_t scratch_per_row_ = 0;
  double macs_ = 0;
};

/// e3nn o3.Linear (FORMAT.md §4.1) on ir_mul rows.
template <class T>
class NodeLinear {
 public:
  NodeLinear() = default;
  explicit NodeLinear(const model::Linear& linear);
  const Irreps& irreps_in() const { return in_; }
  const Irreps& irreps_out() const { return out_; }
  int dim_in() const { return dim_in_; }
  int dim_out() const { return dim_out_; }
  /// Flops of one row's forward pass.
  double flops_per_row() const { return flops_per_row_; }
  /// Y[r] (+)= linear(X[r]) for r < n (row r at X + r*ldx, Y + r*ldy); without @p accumulate,
  /// output blocks no instruction reaches are zeroed. Parallel over rows (OpenMP) when
  /// @p parallel and the work is large.
  void forward(std::size_t n, const T* X, std::size_t ldx, T* Y, std::size_t ldy, bool accumulate,
               bool parallel = true) const;
  /// gX[r] (+)= linear^T(gY[r]).
  void backward(std::size_t n, const T* gY, std::size_t ldy, T* gX, std::size_t ldx,
                bool accumulate, bool parallel = true) const;

 private:
  struct Ins {
    int i_in, i_out, mul_in, mul_out, dim_m;
    std::size_t off_in, off_out;
    PackedMatrix<T> w, wt;  // path_weight * W [mul_in][mul_out], and its transpose
  };
  void run(bool transpose, std::size_t n, const T* X, std::size_t ldx, T* Y, std::size_t ldy,
           bool accumulate, bool parallel) const;
  Irreps in_, out_;
  int dim_in_ = 0, dim_out_ = 0;
  std::vector<Ins> ins_;
  double flops_per_row_ = 0;
};

/// The skip_tp of MACE interactions (FORMAT.md §4.2, uvw, internal weights) whose second input
/// is the one-hot species: per species s a linear map out[w,k] = sum_u c W[u,s,w] x[u,k].
template <class T>
class SpeciesLinear {
 public:
  SpeciesLinear() = default;
  /// @throws ModelFormatError if the product is not of that form.
  SpeciesLinear(const model::TensorProduct& tp, int num_species, const std::string& where);
  const Irreps& irreps_in() const { return in_; }
  const Irreps& irreps_out() const { return out_; }
  int dim_in() const { return dim_in_; }
  int dim_out() const { return dim_out_; }
  /// Flops of one row's forward pass.
  double flops_per_row() const {
    double f = 0;
    for (const Ins& ins : ins_) f += 2.0 * ins.mul_in * ins.mul_out * ins.dim_m;
    return f;
  }
  /// Y[r] (+)= skip(X[r], onehot(species[r])), rows as in NodeLinear.
  void forward(std::size_t n, const int* species, const T* X, std::size_t ldx, T* Y,
               std::size_t ldy, bool accumulate, bool parallel = true) const;
  /// gX[r] (+)= skip^T(gY[r]).
  void backward(std::size_t n, const int* species, const T* gY, std::size_t ldy, T* gX,
                std::size_t ldx, bool accumulate, bool parallel = true) const;

 private:
  struct Ins {
    int i_in, i_out, mul_in, mul_out, dim_m;
    std::size_t off_in, off_out;
    std::vector<PackedMatrix<T>> w, wt;  // per species
  };
  void run(bool transpose, std::size_t n, const int* species, const T* X, std::size_t ldx, T* Y,
           std::size_t ldy, bool accumulate, bool parallel) const;
  Irreps in_, out_;
  int dim_in_ = 0, dim_out_ = 0, num_species_ = 0;
  std::vector<Ins> ins_;
};

/// The uvu convolution tensor product of MACE (conv_tp) for one edge, on ir_mul rows:
///   out[i_out][k][u] += sum_{(i,j,k)} P[i,j,k] w[woff + u] x[i_in1][i][u] Y[off2 + j]
/// with P the exported coupling (path weight included) and Y the edge's spherical harmonics
/// (irreps_in2 must be 1x0 + 1x1 + ... in order: one copy of each degree, as MACE's edge
/// attributes are).
template <class T>
class ConvTp {
 public:
  ConvTp() = default;
  /// @throws ModelFormatError if the product is not a uvu product with external weights and
  /// single-copy second input.
  ConvTp(const model::TensorProduct& tp, const std::string& where);
  int dim_in1() const { return dim_in1_; }
  int dim_in2() const { return dim_in2_; }
  int dim_out() const { return dim_out_; }
  int weight_numel() const { return weight_numel_; }
  /// Multiply-adds of one edge's forward product (about a third of its backward).
  double macs() const { return macs_; }

  /// out += TP(x, y, w) (out: one ir_mul row of irreps_out).
  void forward(const T* x, const T* y, const T* w, T* out) const;
  /// Vector-Jacobian product with cotangent g (a row of irreps_out): gx += dTP/dx^T g (skipped
  /// when null), gy += dTP/dy^T g, gw = dTP/dw^T g (overwritten).
  void backward(const T* x, const T* y, const T* w, const T* g, T* gx, T* gy, T* gw) const;

  struct Entry {
    int i, j, k;
    T c;
  };
  struct Ins {
    int l1, l2, l3, mul, d1, d3;
    int off1, off2, off3, woff;
    std::vector<Entry> cg;
    // Sparsity of a[i][k] = sum_j P[i,j,k] y[j]: per k the i's (and per i the k's) that occur.
    std::vector<int> k_ptr, k_i, i_ptr, i_k;
  };
  const std::vector<Ins>& instructions() const { return ins_; }

 private:
  std::vector<Ins> ins_;
  int dim_in1_ = 0, dim_in2_ = 0, dim_out_ = 0, weight_numel_ = 0;
  double macs_ = 0;
};

/// Converts one row between e3nn's mul_ir layout (u*(2l+1)+m inside a block) and ir_mul.
template <class T>
void mul_ir_to_ir_mul(const Irreps& irreps, const T* in, T* out);
template <class T>
void ir_mul_to_mul_ir(const Irreps& irreps, const T* in, T* out);

}  // namespace clebsch::mace_detail
