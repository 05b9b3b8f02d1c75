// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Argument structs of the generic device kernels (templates/generic_kernels.cuh.in). This one
// file is both included by host code and pasted verbatim into the device source (CMake embeds
// it as templates::k_device_args), so the two sides cannot disagree on a member's type or
// order. Plain C only: no includes, no std types; counts and strides are 64-bit.
#pragma once

/// C(i,j) = alpha * sum_k A(i,k) B_i(k,j) + beta * C(i,j), for i < m, j < n and batch b <
/// batch, with general strides (so one kernel serves mul_ir and ir_mul layouts, transposes and
/// per-m batches of e3nn linears):
///   A(i,k) = a[ra(i) * lda + k * a_col + b * a_batch],   ra(i) = a_rows ? a_rows[i] : i
///   B_i(k,j) = b[sel(i) * b_select_stride + k * ldb + j * b_col + b * b_batch],
///             sel(i) = b_select ? b_select[i] : 0   (per-row weights: species-dependent maps)
///   C(i,j) = c[rc(i) * ldc + j * c_col + b * c_batch],   rc(i) = c_rows ? c_rows[i] : i
/// beta == 0 writes C without reading it.
struct GemmArgs {
  const void* a;
  const void* b;
  void* c;
  const int* a_rows;
  const int* b_select;
  const int* c_rows;
  long long m, n, k, batch;
  long long lda, a_col, a_batch;
  long long ldb, b_col, b_batch, b_select_stride;
  long long ldc, c_col, c_batch;
  double alpha, beta;
};

/// x[i] = value for i < n.
struct FillArgs {
  void* x;
  long long n;
  double value;
};

/// y(i,c) = alpha * x(i,c) + beta * y(i,c) over rows i < rows, columns c < cols, with
/// x(i,c) = x[rx(i) * ldx + c], y(i,c) = y[ry(i) * ldy + c], rx/ry optional row indices
/// (gathers and scatters of rows); beta == 0 writes y without reading it. x and y may have
/// different element types (the kernel's name says which). With scatter_add, rows of y may
/// repeat and are accumulated with atomics (order not fixed).
struct AxpbyArgs {
  const void* x;
  void* y;
  const int* x_rows;
  const int* y_rows;
  long long rows, cols, ldx, ldy;
  double alpha, beta;
  int scatter_add;
};

/// Activations of FORMAT.md §3.5 (values match model::Activation::Kind order).
enum ActKind {
  kActSilu = 0,
  kActTanh = 1,
  kActSigmoid = 2,
  kActAbs = 3,
  kActSsp = 4,
  kActGelu = 5,
  kActMish = 6
};

/// Columns [c0, c1) of rows of width ld. Forward: z += bias[c] (when bias), then
/// a = out_scale * cst * phi(z) (z keeps the pre-activation for the backward). Backward:
/// g *= out_scale * cst * phi'(z).
struct ActArgs {
  void* z;
  void* a;          ///< forward output (may equal z only when bias is null and z is not needed)
  void* g;          ///< backward: gradient, in place
  const void* bias;
  long long rows, ld, c0, c1;
  int kind;
  double cst, out_scale;
};

/// out[i] (+)= sum_{q = ptr[i]}^{ptr[i+1]-1} x[q * ldx + col] for i < rows (segments of a CSR
/// order, summed in order: deterministic). accumulate: add to out instead of overwriting.
struct SegmentSumArgs {
  const void* x;
  void* out;
  const int* ptr;
  long long rows, ldx, col;
  int accumulate;
};

/// y(i,c) *= s[i] (mode 0), y(i,c) *= 1 / (1 + s[i]) (mode 1) or y(i,c) *= 1 / (alpha + beta
/// s[i]) (mode 2: MACE's non-linear block normalisation), rows of width ld, c < cols.
struct ScaleRowsArgs {
  void* y;
  const void* s;
  long long rows, cols, ld;
  int mode;
  double alpha, beta;
};

/// torch LayerNorm over the first cols entries of each row (row stride ld, biased variance),
/// one row per thread (the rows are an MLP's hidden widths, tens of entries). Forward:
/// y = (x - mean) / sqrt(var + eps) * w + b (y may be x only when the caller keeps no copy of x:
/// the backward reads x). Backward: g holds dE/dy and is overwritten with dE/dx at x.
struct LayerNormArgs {
  const void* x;
  void* y;
  void* g;
  const void* w;
  const void* b;
  long long rows, cols, ld;
  double eps;
};


/// out[i] = alpha * sum_c a(i,c) b(i,c) (+ beta * out[i] when beta != 0).
struct RowDotArgs {
  const void* a;
  const void* b;
  void* out;
  long long rows, cols, lda, ldb;
  double alpha, beta;
};
/// e3nn nn.Gate (FORMAT.md §4.5) on rows in e3nn's mul_ir layout, of width dim_in -> dim_out
/// (out row stride ld_out). Forward, per output column o: out = act_o(x[src[o]]) for scalars
/// (gate[o] < 0), act_o(x[gate[o]]) x[src[o]] for gated values. Backward, per input column c
/// (in_kind: 0 unused, 1 scalar with output in_out[c], 2 gate of the output columns
/// [in_out[c], in_out[c] + in_dim[c]), 3 gated value of output in_out[c] whose gate is
/// in_gate[c]): gx = d<gy, out>/dx (overwritten). act kinds: ActKind (above), -1 the identity;
/// an act's value is cst phi.
struct GateArgs {
  const void* x;
  void* out;
  const void* gy;
  void* gx;
  const int* src;
  const int* gate;
  const int* act_kind;
  const double* act_cst;
  const int* in_kind;
  const int* in_out;
  const int* in_dim;
  const int* in_gate;
  const int* in_act_kind;
  const double* in_act_cst;
  long long rows, dim_in, dim_out, ld_out;
};

/// A chain of dense layers on rows (templates/mlp_chain.cuh.in; DeviceMlp's fused route): layer
/// l maps dims[l] -> dims[l + 1] values, z = a W_l + b_l, a' = out_scale[l] phi_l(z) (phi with
/// its cst: kernels' clebsch_act; act[l] < 0: a' = z). In w, in T: W_l row-major [dims[l]][dims[l
/// + 1]] at w_off[l], its transpose at wt_off[l], its bias at b_off[l] (-1: none). Forward:
/// y = chain(x); backward: gx = (d chain / dx)^T gy, x the forward's rows. x and gx have row
/// stride ldx, y and gy ldy. Shared memory: z_off[l] (in tiles of the kernel's row stride) is
/// where the backward keeps layer l's pre-activations; the forward needs 2 max_width tiles.
/// The tensor-core chains (templates/mlp_chain_mma.cuh.in) read W_l and W_l^T in their MMAs'
/// fragment order instead, at wf_off[l] and wtf_off[l] (-1: not packed; mlp_mma_fragments.h).
#define CLEBSCH_MLP_MAX_LAYERS 8
struct MlpChainArgs {
  const void* x;
  void* y;
  const void* gy;
  void* gx;
  const void* w;
  long long rows, ldx, ldy;
  int num_layers, max_width;
  int dims[CLEBSCH_MLP_MAX_LAYERS + 1];
  int act[CLEBSCH_MLP_MAX_LAYERS];
  long long w_off[CLEBSCH_MLP_MAX_LAYERS], wt_off[CLEBSCH_MLP_MAX_LAYERS];
  long long wf_off[CLEBSCH_MLP_MAX_LAYERS], wtf_off[CLEBSCH_MLP_MAX_LAYERS];
  long long b_off[CLEBSCH_MLP_MAX_LAYERS], z_off[CLEBSCH_MLP_MAX_LAYERS];
  double cst[CLEBSCH_MLP_MAX_LAYERS], out_scale[CLEBSCH_MLP_MAX_LAYERS];
};
