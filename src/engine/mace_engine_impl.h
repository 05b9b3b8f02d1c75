// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The MACE host engine's implementation (see mace_engine.h), shared by the files that define it
// stage by stage: the model plan (mace_engine_plan.cpp), graph validation and CSR orderings
// (mace_engine_graph.cpp), the per-edge geometry and the final chain rule to dE/dvector
// (mace_engine_geometry.cpp), the edge chunks of every pass (mace_engine_edges.cpp), the forward
// pass (mace_engine_forward.cpp), the hand-written backward pass (mace_engine_backward.cpp), and
// the sequence of one compute() (mace_engine.cpp). Node and message features are kept
// channel-innermost (ir_mul, see mace_kernels.h); the symmetric contraction keeps its own
// [node][channel][D] layout. Private to src/engine/.
//
// Data flow of one layer t (rows: L local atoms, N all nodes, E edges):
//   sc[L]    = skip_tp(h^{t-1}, species)            residual blocks
//   hu[N]    = linear_up(h^{t-1})                   ghost rows by GhostExchange::forward (t > 0)
//   Mraw[L]  = sum over the centre's edges of conv_tp(hu[sender], Y_e, mlp(e_e) [* f_e])
//   Ml[L]    = linear(Mraw) / avg_num_neighbors  or  / (1 + sum_e tanh(density(e_e)^2) [* f_e])
//   A[L]     = Ml or skip_tp(Ml, species)            (residual or not)
//   h^t[L]   = product_linear(SC(A)) [+ sc]
// Work is organised in centre tasks (whole centres, ~256 edges): a task computes its edges'
// radial MLPs in chunks of 32, accumulates its centres' messages in a per-thread buffer and runs
// their node part at once, so Mraw and the node temporaries never exist for all atoms. Stored
// for the backward pass: per edge only the harmonics and the radial basis (with the cutoff);
// per node hu (every layer), A, and for density blocks the denominators (and Ml of non-residual
// ones) and the pre-activations of non-linear readouts. The backward pass of layers before the
// last runs the node part for all atoms, then the edges sender by sender (so dE/dhu of a sender
// has one owner), recomputing the radial MLPs; the last layer runs forward and backward in the
// same task (fused_last_layer), which computes its radial MLPs once.
#pragma once

#include <omp.h>

#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "clebsch/engine/mace_engine.h"
#include "clebsch/engine/mace_engine_geometry.h"
#include "clebsch/engine/mace_kernels.h"
#include "clebsch/engine/nequip_engine_ops.h"
#include "clebsch/engine/radial_spline.h"
#include "clebsch/nn/symmetric_contraction.h"

namespace clebsch {

// The precision-independent part, which MaceEngine's accessors read.
class MaceEngine::Impl {
 public:
  virtual ~Impl() = default;
  virtual void compute(const AtomGraph& graph, EngineResult& result, GhostExchange* exchange) = 0;
  /// Bytes of the buffers kept between calls.
  virtual std::size_t buffer_bytes() const = 0;

  std::vector<std::string> species_names;
  std::size_t model_bytes = 0;  // the plan: the model's values in the network type
  double r_max = 0;
  std::vector<double> r_max_pairs;
  int num_species = 0;
  int num_layers = 0;
  int exchange_width = 0;
  Precision precision = Precision::kFloat64;
};

namespace mace_detail {

// Edges per MLP batch: large enough for the GEMM to reuse each weight panel, small enough that
// the batch's radial-MLP output (edges x weight_numel) stays in L2.
inline constexpr std::size_t kEdgeChunk = 32;
// Edges per scheduling task (whole centres, or whole senders, per task), and the most rows (atoms)
// a task may have: bounds the per-thread node scratch when atoms have few edges.
inline constexpr std::size_t kTaskEdges = 256;
inline constexpr std::size_t kTaskRows = 64;

// Calls f with the OpenMP regions it opens limited to one thread unless `parallel` (for library
// calls that decide their own threading).
template <class F>
void maybe_serial(bool parallel, F&& f) {
  if (parallel) {
    f();
    return;
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  f();
  omp_set_num_threads(saved);
}

// A number in an error message.
inline std::string fmt(double x) {
  std::ostringstream s;
  s.precision(10);
  s << x;
  return s.str();
}

// A[n][c][i] (the contraction's layout) from ir_mul rows of the target irreps, and back.
template <class T>
void to_contraction_layout(const Irreps& target, int C, int D, std::size_t n, const T* in, T* out,
                           bool inverse) {
  const std::vector<int> off = target.offsets();
  const std::size_t dim = target.dim();
  for (std::size_t r = 0; r < n; ++r) {
    const T* a = in + r * dim;
    T* b = out + r * dim;
    int i0 = 0;
    for (std::size_t blk = 0; blk < target.size(); ++blk) {
      const int d = target[blk].ir.dim();
      for (int m = 0; m < d; ++m)
        for (int c = 0; c < C; ++c) {
          const std::size_t ir = off[blk] + static_cast<std::size_t>(m) * C + c;
          const std::size_t ci = static_cast<std::size_t>(c) * D + i0 + m;
          if (inverse)
            b[ir] = a[ci];
          else
            b[ci] = a[ir];
        }
      i0 += d;
    }
  }
}

template <class T>
void convert_rows(const Irreps& irreps, std::size_t n, const T* in, T* out, bool to_ir_mul) {
  const std::size_t dim = irreps.dim();
  for (std::size_t r = 0; r < n; ++r) {
    if (to_ir_mul)
      mace_detail::mul_ir_to_ir_mul(irreps, in + r * dim, out + r * dim);
    else
      mace_detail::ir_mul_to_mul_ir(irreps, in + r * dim, out + r * dim);
  }
}

// ---------------------------------------------------------------------------------------------
// Model plan, per network precision T
// ---------------------------------------------------------------------------------------------

template <class T>
struct LayerPlan {
  bool sc_on_nodes = false;  // residual: sc = skip(h^{t-1}) is added to h^t
  bool density = false;
  NodeLinear<T> linear_up, linear, product_linear;
  Mlp<T> radial_mlp, density_mlp;
  // radial spline N (radial_spline.h): the MLPs' tables, evaluated at the edge lengths instead.
  std::optional<SplineTable<T>> radial_spline, density_spline;
  ConvTp<T> conv;
  SpeciesLinear<T> skip;
  T inv_avg = T(1);
  std::unique_ptr<SymmetricContraction> contraction;
  Irreps target, b_irreps;
  // RealAgnosticResidualNonLinearInteractionBlock (mace_engine_nonlinear.cpp): the MLPs read
  // [e_e | src[s_sender] | tgt[s_centre]] (mlp_in wide), the skip is a plain linear, and
  // A = linear_2(gate(linear_1(M) / (beta D + alpha) + linear_res(hu))).
  bool nonlinear = false;
  int mlp_in = 0, C0 = 0, dim_nonlin = 0;
  std::vector<T> src_tab, tgt_tab;  // [S][C0]
  NodeLinear<T> linear_res, linear_2, skip_linear;
  nequip_ops::GateOp<T> gate;  // on e3nn (mul_ir) rows
  Irreps nonlin_irreps, gate_out_irreps;
  T alpha = T(1), beta = T(0);
  double edge_flops = 0;  // forward flops of one edge (radial and density MLPs, product)
  double node_flops = 0;  // forward flops of one node (linears, skip, contraction)
  int dim_in = 0, dim_edge = 0, dim_mid = 0, dim_target = 0, dim_hidden = 0;
  int C = 0, D = 0, dim_b = 0;
};

template <class T>
struct ReadoutPlan {
  int layer = 0;
  bool nonlinear = false;
  NodeLinear<T> linear, linear_2;
  std::vector<std::optional<ScalarAct>> acts;  // per block of linear's output (non-linear)
  std::vector<int> act_offsets;
  // NonLinearBiasReadoutBlock: linear_mid (+ bias) and the same activations again before
  // linear_2 (+ bias); all of them scalar-only, so ir_mul is the file's layout.
  bool has_mid = false;
  NodeLinear<T> linear_mid;
  std::vector<T> bias_mid, bias_2;
};

// ---------------------------------------------------------------------------------------------
// Engine implementation
// ---------------------------------------------------------------------------------------------

// T: the network's arithmetic; G: the geometry's (harmonics, radial basis, cutoff, ZBL).
template <class T, class G>
class MaceImpl final : public MaceEngine::Impl {
 public:
  MaceImpl(const model::Model& model, const MaceEngineOptions& options);
  void compute(const AtomGraph& graph, EngineResult& result, GhostExchange* exchange) override;
  std::size_t buffer_bytes() const override;

 private:
  // Per-thread scratch of the edge passes, and of the node passes of a block of rows.
  struct EdgeWork {
    std::vector<T> mlp, dmlp, W, Wf, gW, efc, gef, work, rho, grho, gy;
    std::vector<int> q_of;
  };
  struct NodeWork {
    std::vector<T> Mraw, gMraw, Ml, Air, gMl, B, Bir, gA;
  };
  void size_edge_work(const LayerPlan<T>& Lp, std::size_t rows, EdgeWork& w) const;
  void size_node_work(const LayerPlan<T>& Lp, std::size_t rows, bool messages, NodeWork& w) const;

  void validate(const AtomGraph& graph, GhostExchange* exchange) const;
  void build_orderings(const AtomGraph& graph);
  void edge_geometry(const AtomGraph& graph);
  void prepare_layer(int t, GhostExchange* exchange);
  void layer_forward(int t);
  void fused_last_layer(bool need_hu_gradient);
  void node_forward(int t, std::size_t r0, std::size_t r1, const T* Mraw, NodeWork& w);
  void node_backward(int t, std::size_t r0, std::size_t r1, T* gMraw, NodeWork& w);
  void layer_node_backward(int t);
  void edge_backward(int t, T* ghu);
  void backward_tail(int t, GhostExchange* exchange);
  void edges_forward_chunk(const LayerPlan<T>& Lp, std::size_t q0, std::size_t n, T* W, T* mlp,
                           T* rho, T* dmlp) const;
  // The spline mode's stand-in for the MLPs: W and rho of n internal edges (q_of[p], or q0 + p
  // when q_of is null) from the tables at their lengths rl_.
  void spline_rows(const LayerPlan<T>& Lp, const int* q_of, std::size_t q0, std::size_t n, T* W,
                   T* rho) const;
  void edges_messages(const LayerPlan<T>& Lp, int t, std::size_t e0, std::size_t e1, const T* W,
                      const T* rho, int c0, T* Mraw, T* dens, EdgeWork& w) const;
  void edges_backward_chunk(const LayerPlan<T>& Lp, int t, const int* q_of, std::size_t n,
                            const T* W, T* mlp, const T* rho, T* dmlp, const T* gMraw, int c0,
                            EdgeWork& w, T* ghu);
  void node_forward_nonlinear(int t, std::size_t r0, std::size_t r1, const T* Mraw, NodeWork& w);
  void node_backward_nonlinear(int t, std::size_t r0, std::size_t r1, T* gMl, T* gMraw);
  void plan_nonlinear(const model::MaceInteraction& in, const Irreps& h_irreps,
                      const std::string& where, LayerPlan<T>& L) const;
  void plan_splines(const model::MaceInteraction& in, const std::string& where, LayerPlan<T>& L);
  void plan_embedding(const model::Mace& m, const MaceEngineOptions& options, T* h0_table);
  // The MLP input of n internal edges (q_of[p], or q0 + p when q_of is null): e_e alone, or
  // for non-linear blocks [e_e | src | tgt] written to buf; returns the rows (mlp_in wide).
  const T* mlp_input(const LayerPlan<T>& Lp, const int* q_of, std::size_t q0, std::size_t n,
                     T* buf) const;
  void readouts_forward(int t, std::size_t r0, std::size_t r1);
  void readouts_backward(int t, std::size_t r0, std::size_t r1);
  void final_gradient(const AtomGraph& graph, EngineResult& result);

  // --- model ---
  MaceEngineOptions options_;
  int S_ = 0, T_ = 0, lmax_ = 0, nsh_ = 0;
  Radial radial_;
  std::optional<Zbl> zbl_;
  std::vector<LayerPlan<T>> layers_;
  std::vector<ReadoutPlan<T>> readouts_;
  std::vector<T> hu0_table_, sc0_table_;  // [S][...]: layer 0 reads the species embedding only
  std::vector<double> e0_;
  double scale_ = 1, shift_ = 0;
  bool spline_ = false;  // the layers' radial functions are tables (radial spline N)

  // --- per call ---
  std::size_t N_ = 0, L_ = 0, E_ = 0;
  const int* species_ = nullptr;
  std::vector<int> perm_;             // internal edge q (centre-sorted) -> graph edge id
  std::vector<int> centre_, sender_;  // per internal edge
  std::vector<int> centre_ptr_;       // [L+1] internal edges of each centre
  std::vector<int> by_sender_;        // internal edges sorted by sender
  std::vector<int> sender_ptr_;       // [N+1]
  std::vector<std::pair<int, int>> centre_tasks_, sender_tasks_;
  std::vector<T> Y_, ef_, fc_;      // [E][nsh], [E][nb], [E] (fc only without apply_cutoff)
  std::vector<G> gY_, gE_, gF_;     // per internal edge
  std::vector<G> rl_, gR_;          // spline mode: per internal edge, length and dE/dlength
  std::vector<double> zbl_atom_;    // [L]
  std::vector<double> energy_acc_;  // [L]: sum of readouts (before scale)
  std::vector<std::vector<T>> hu_, A_, dens_, Ml_;     // per layer
  std::vector<std::vector<T>> readout_z_;              // per readout (non-linear)
  std::vector<std::vector<T>> readout_z2_;             // per readout (linear_mid output)
  std::vector<std::vector<T>> Xg_;                     // per layer: gate input (non-linear)
  std::vector<T> ghu_res_;                             // dE/dhu of local rows via linear_res
  std::vector<T> h_, sc_;                              // h^t, residual sc: [L][...]
  std::vector<T> gh_, gh_prev_, gMraw_, gdens_, ghu_;  // backward
  std::vector<std::vector<T>> ghu_private_;            // fused pass: per thread [N][dim_edge]
};

// The (network, geometry) types of the three precisions (engine.h: fp64, fp32, mixed): every
// file that defines members of MaceImpl instantiates them for each, through X(T, G).
#define CLEBSCH_MACE_PRECISIONS(X) X(double, double) X(float, float) X(float, double)

}  // namespace mace_detail
}  // namespace clebsch
