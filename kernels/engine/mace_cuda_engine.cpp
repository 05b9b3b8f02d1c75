// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The MACE engine on the device layer: the host engine's sequence (src/engine/mace_engine.cpp)
// with every step a device kernel. Per edge (internal order: edges sorted by centre, as the host
// engine): harmonics, radial basis, cutoff and ZBL in the geometry precision
// (mace_edge_geometry); per layer the radial MLP (DeviceMlp), the optional cutoff on the
// weights and the density, the generated uvu convolution (ConvRunner: receiver pass forward,
// fused sender pass backward), the linears and the species-selected skip (DeviceLinear), the
// sparse symmetric contraction and the readouts; then the energies, and the hand-written
// backward layer by layer down to dE/dY, dE/d(radial features), dE/dcutoff, from which
// mace_edge_gradient makes dE/dvector. Rows are in e3nn's mul_ir layout throughout.
//
// The per-edge weight stage (radial MLP -> convolution) runs in batches of whole centres
// (edge_orderings.h). With one batch (while the weights of every layer fit the budget,
// CudaEngineOptions::edge_batch) each layer's weights W (E x weight_numel) and MLP activations
// are kept from its forward for its backward, as before. With several, a batch's weights live
// only while the batch is convolved, and the backward computes them again: one MLP forward more
// per layer, for memory that no longer grows with E times the weight count (which is what
// limited the system size on one GPU: 29 GB per 10,000 atoms of a MACE-MP-0-medium-sized model
// in float64 before). The node stages (linear, skip, contraction, product linear) run batch by
// batch behind the convolution, on scratch rows of one batch's centres. What the backward reads
// of every atom and edge beyond the node features, the contraction's inputs and the harmonics,
// is kept (CudaEngineOptions::kept_rows kAll) or, where it would not fit, held for one batch
// and made again in the backward (kBatch: a second receiver pass per layer, each batch's dE/dY
// turned into forces at once).
//
// Host round trips: the graph in and the results out, and with a GhostExchange the per-layer
// ghost rows (staged through host memory). Validation: compute() validates the host graph with
// the host engine's rules and messages before any work; compute_device() checks a
// centre-sorted graph on the device (edge_order_kernels.h: no per-step copy of the index
// arrays), any other graph on the host (it copies the index arrays), and checks the geometry on
// the device (a status word read back at the end; the message from the host's rules). Both
// order a centre-sorted graph on the device and any other on the host (the same orderings).
//
// This file: the model on the device, the graph checks, the two entry points and the
// evaluation's sequence; the layers' forward and backward are in mace_cuda_engine_forward.cpp and
// mace_cuda_engine_backward.cpp (their shared types: mace_cuda_engine_impl.h). What the NequIP
// engine does alike (host engine, backend, edge orderings and batches) is CudaEngineBase's
// (cuda_engine_base.h).
#include "clebsch/cuda/engine/mace_cuda_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/engine/conv_runner.h"
#include "clebsch/cuda/engine/cuda_engine_base.h"
#include "clebsch/cuda/engine/mace_contraction_tables.h"
#include "clebsch/cuda/engine/mace_cuda_engine_impl.h"
#include "clebsch/cuda/engine/mace_cuda_source.h"
#include "clebsch/cuda/engine/radial_conv.h"
#include "clebsch/cuda/nn/device_gate.h"
#include "clebsch/cuda/nn/device_linear.h"
#include "clebsch/cuda/templates/mace_device_args.h"
#include "clebsch/engine/mace_embedding.h"
#include "clebsch/engine/mace_engine.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda {
namespace mace_cuda_detail {
namespace {

std::string fmt(double x) {
  std::ostringstream o;
  o.precision(10);
  o << x;
  return o.str();
}

}  // namespace

template <class T, class G>
MaceCuda<T, G>::MaceCuda(const model::Model& model, Precision precision,
                         const CudaEngineOptions& options)
    : CudaEngineBase<MaceEngine>(model, precision, options, sizeof(T)) {
  profile_ = options.profile;
  DeviceBackend& b = *backend_;
  // What the constructor allocates and names no further is the model (weights, tables, kernels'
  // status words): fixed in size.
  AllocationScope model_scope(b.ledger(), {"model: weights and tables", BufferScale::kFixed});
  const model::Mace& m = *model.mace;
  S_ = model.num_species();
  T_ = static_cast<int>(m.interactions.size());
  nsh_ = (model.sh_lmax + 1) * (model.sh_lmax + 1);
  nb_ = m.radial.num_basis;
  apply_cutoff_ = m.radial.apply_cutoff;
  zbl_ = m.pair_repulsion.has_value();
  scale_ = m.scale, shift_ = m.shift;
  r_max_pairs_ = model.r_max_pairs;
  species_buf_.bind(b), centre_buf_.bind(b), neighbour_buf_.bind(b);
  for (auto* a : {&vector_buf_, &zbl_edge_, &zbl_atom_, &energy_acc_, &atom_energy_, &edge_grad_,
                  &e0_, &d_r_max_pairs_})
    a->bind(b);
  status_.bind(b);
  wb_.bind(b), wfb_.bind(b);
  for (auto* a :
       {&Y_,    &ef_,      &fc_, &h_,         &h_prev_,    &sc_,  &Mraw_, &B_,       &ones_,
        &gh_,   &gh_prev_, &gA_, &gMl_,       &gdens_,     &ghu_, &gyT_,  &gw_,      &gef_,
        &grho_, &gy_,      &gz_, &hu0_table_, &sc0_table_, &gyg_, &gX_,   &ghu_res_, &gz2_})
    a->bind(b);
  for (auto* a : {&gY_, &gE_, &gF_, &rl_, &gR_}) a->bind(b);
  rlT_.bind(b);

  const Accumulation acc =
      options.deterministic ? Accumulation::kDeterministic : Accumulation::kAtomic;
  // CLEBSCH_SPECIES_CONV=0 turns the species-factored first layer off (A/B benchmarks).
  const char* species_env = std::getenv("CLEBSCH_SPECIES_CONV");
  const bool species_factored =
      options.species_factored && !(species_env && std::string(species_env) == "0");
  std::size_t batch_weights_per_edge = 0;
  for (int t = 0; t < T_; ++t) {
    const model::MaceInteraction& in = m.interactions[t];
    const model::MaceProduct& pr = m.products[t];
    const std::string w = "mace.interactions[" + std::to_string(t) + "]";
    Layer<T> L(b);
    L.sc_on_nodes = in.skip_on_node_features;
    L.density = in.density_normalization;
    L.linear_up = DeviceLinear<T>(b, in.linear_up);
    L.product_linear = DeviceLinear<T>(b, pr.linear);
    if (in.nonlinear) {
      // The host's plan_nonlinear: sc = skip(h), the MLPs read [e | species embeddings], and
      // A = linear_2(gate(linear_1(M) / (beta D + alpha) + linear_res(hu))).
      const model::MaceInteraction::NonLinear& N = *in.nonlinear;
      if (in.radial_spline)
        throw Error(w +
                    ": a radial spline tabulates functions of r alone; the non-linear block's "
                    "MLPs also read the species embeddings");
      if (!in.density_mlp) throw Error(w + ": the non-linear block has no density MLP");
      L.nonlinear = L.sc_on_nodes = L.density = true;
      L.linear = DeviceLinear<T>(b, N.linear_1);
      L.skip = DeviceLinear<T>(b, N.skip);
      L.linear_res = DeviceLinear<T>(b, N.linear_res);
      L.linear_2 = DeviceLinear<T>(b, N.linear_2);
      L.gate = DeviceGate<T>(b, N.gate, "MaceEngine: " + w + ".gate");
      L.C0 = N.source_embedding.irreps_out.dim();
      L.mlp_in = nb_ + 2 * L.C0;
      L.dim_nonlin = N.linear_1.irreps_out.dim();
      L.alpha = N.alpha, L.beta = N.beta;
      if (L.gate.dim_in() != L.dim_nonlin || L.gate.dim_out() != N.linear_2.irreps_in.dim())
        throw ModelFormatError(w + ".gate: maps " + std::to_string(L.gate.dim_in()) + " -> " +
                               std::to_string(L.gate.dim_out()) + ", expected " +
                               std::to_string(L.dim_nonlin) + " -> " +
                               std::to_string(N.linear_2.irreps_in.dim()));
    } else {
      L.linear = DeviceLinear<T>(b, in.linear);
      L.skip = DeviceLinear<T>(b, in.skip_tp, S_, w + ".skip_tp");
    }
    L.radial_mlp = DeviceMlp<T>(b, in.radial_mlp, w + ".radial_mlp");
    if (L.density)
      L.density_mlp = DeviceMlp<T>(b, *in.density_mlp, w + ".density_mlp");
    else
      L.inv_avg = 1.0 / in.avg_num_neighbors;
    if (in.radial_spline) {
      // radial spline N: the tables make the weights (the fused form needs the MLP itself).
      if (options.require_fused_radial)
        throw Error(w +
                    ": the fused radial form evaluates the radial MLP, which radial spline "
                    "replaces; use one or the other");
      if (in.radial_spline->width != static_cast<int>(in.conv_tp.descriptor.weight_numel()) ||
          (L.density && !in.density_spline))
        throw Error(w + ": the radial spline does not match the layer's weights");
      L.spline = spline_ = true;
      L.radial_spline.upload(*in.radial_spline);
      if (L.density) L.density_spline.upload(*in.density_spline);
    }
    // The first layer's senders carry per-species rows (hu0_table_): its convolution in the
    // species-factored form where the radial MLP ends in a plain linear layer
    // (species_factored_conv.h: no per-edge weights, a fraction of the work); else as the other
    // layers.
    if (t == 0 && species_factored && !L.spline && fused_radial_refusal(L.radial_mlp).empty()) {
      try {
        L.species_conv =
            make_species_factored_conv(b, in.conv_tp.descriptor, dt_, L.radial_mlp.dim_hidden());
        L.fused = true;
      } catch (const CapacityError&) {
        // A product outside the form's shapes: the convolution below.
      }
    }
    // The fused radial form where the options ask for it and the MLP and the product's schedule
    // allow it (radial_conv.h); else the MLP (or the spline) makes the weights.
    if (!L.species_conv && L.spline && options.fused_spline && apply_cutoff_) {
      try {
        const model::RadialSpline& rs = *in.radial_spline;
        L.conv = std::make_unique<ConvRunner>(
            b, TpProblem::from_tensor_product(in.conv_tp.descriptor, dt_, acc)
                   .with_fused_spline(rs.intervals, rs.r_lo, rs.r_hi));
        L.fused_spline = true;
      } catch (const CapacityError&) {
        // The looped CG form has no fused form: the table writes the weights.
      }
    }
    if (!L.conv && !L.species_conv)
      L.conv = make_radial_conv(b, in.conv_tp.descriptor, dt_, acc, L.radial_mlp,
                                options.fused_radial && !L.spline, options.require_fused_radial,
                                w + ".radial_mlp", L.fused);
    L.dim_in = in.linear_up.irreps_in.dim();
    L.dim_edge = in.linear_up.irreps_out.dim();
    L.dim_mid = in.conv_tp.descriptor.irreps_out().dim();
    L.dim_y = in.conv_tp.descriptor.irreps_in2().dim();
    L.numel = in.conv_tp.descriptor.weight_numel();
    L.conv_width = L.fused_spline ? 1 : L.fused ? L.radial_mlp.dim_hidden() : L.numel;
    L.dim_target =
        in.nonlinear ? in.nonlinear->linear_2.irreps_out.dim() : in.linear.irreps_out.dim();
    L.dim_hidden = pr.linear.irreps_out.dim();
    // The fused form's hidden rows are in the MLP's scratch; only their cut copy is extra.
    const std::size_t weights = L.fused_spline ? 0
                                : L.fused      ? (apply_cutoff_ ? 0 : std::size_t(L.conv_width))
                                               : std::size_t(L.numel) * (apply_cutoff_ ? 1 : 2);
    const std::size_t mlp_scratch = L.spline ? 0 : L.radial_mlp.scratch_per_row();
    budget_.keep_per_edge += weights + mlp_scratch;
    // In batches one batch's weights are held at a time (wb_, wfb_), but every layer's radial
    // MLP keeps its own activations at the batch's size.
    batch_weights_per_edge = std::max(batch_weights_per_edge, weights);
    budget_.batch_per_edge += mlp_scratch;
    // The non-linear block's MLP input rows and their gradient, for every edge.
    if (L.nonlinear) budget_.keep_per_edge += 2 * L.mlp_in, budget_.batch_per_edge += 2 * L.mlp_in;
    const ContractionTables ct = mace_contraction_tables(model, t);
    mace_symcon_layout(model, t, ct);  // checks the shapes before the module is built
    L.C = ct.C, L.dim_b = ct.dim_b;
    // Per centre of a batch: the messages (in the backward their gradient, in those rows) and
    // the node stages' scratch; per centre of the call, unless made again per batch, the
    // contraction's inputs (kept_centres).
    const LayerRowWidths rw = L.row_widths();
    budget_.batch_per_centre =
        std::max(budget_.batch_per_centre, std::size_t(L.dim_mid) + std::size_t(rw.scratch));
    budget_.rows_per_centre += std::size_t(rw.kept);
    // A layer reading fewer harmonics than the model makes keeps its own cut copy of Y.
    if (L.dim_y != nsh_) budget_.rows_per_edge += std::size_t(L.dim_y);
    L.weights.upload(std::vector<T>(ct.weights.begin(), ct.weights.end()));
    layers_.push_back(std::move(L));
  }
  {
    // Plus the weight gradients, one layer at a time.
    std::size_t max_numel = 0;
    for (const Layer<T>& L : layers_) max_numel = std::max(max_numel, std::size_t(L.conv_width));
    budget_.keep_per_edge += max_numel;
    budget_.batch_per_edge += batch_weights_per_edge + max_numel;
  }
  for (const model::MaceReadout& src : m.readouts) {
    Readout<T> R(b);
    R.layer = src.layer;
    R.nonlinear = src.nonlinear;
    R.linear = DeviceLinear<T>(b, src.linear);
    if (src.nonlinear) {
      R.linear_2 = DeviceLinear<T>(b, *src.linear_2);
      if (src.linear_mid) {
        // The biases as the host's ReadoutPlan keeps them (zeros where the file has none).
        R.has_mid = true;
        R.linear_mid = DeviceLinear<T>(b, *src.linear_mid);
        std::vector<T> bm(src.linear_mid->bias.begin(), src.linear_mid->bias.end());
        std::vector<T> b2(src.linear_2->bias.begin(), src.linear_2->bias.end());
        bm.resize(src.linear_mid->irreps_out.dim(), T(0));
        b2.resize(src.linear_2->irreps_out.dim(), T(0));
        R.bias_mid.upload(bm);
        R.bias_2.upload(b2);
      }
      const std::vector<int> off = src.linear.irreps_out.offsets();
      for (std::size_t blk = 0; blk < src.activation->acts.size(); ++blk)
        if (src.activation->acts[blk])
          R.acts.push_back({off[blk], off[blk + 1],
                            static_cast<int>(src.activation->acts[blk]->kind),
                            src.activation->acts[blk]->cst});
    }
    readouts_.push_back(std::move(R));
  }

  module_ = load_modules(
      {"clebsch_mace.cu", mace_kernels_source(model, precision), mace_kernel_specs(model)});
  k_geometry_ = &module_->kernel("mace_edge_geometry");
  k_gradient_ = &module_->kernel("mace_edge_gradient");
  k_cut_fwd_ = &module_->kernel("mace_cut_forward");
  k_cut_bwd_ = &module_->kernel("mace_cut_backward");
  k_dens_fwd_ = &module_->kernel("mace_density_forward");
  k_dens_bwd_ = &module_->kernel("mace_density_backward");
  for (int t = 0; t < T_; ++t) {
    layers_[t].k_symcon_fwd = &module_->kernel(symcon_kernel_name(t, false));
    layers_[t].k_symcon_bwd = &module_->kernel(symcon_kernel_name(t, true));
  }
  k_energy_ = &module_->kernel("mace_energy");
  k_spline_fwd_ = &module_->kernel("mace_spline_forward");
  k_spline_bwd_ = &module_->kernel("mace_spline_backward");
  k_mlp_input_ = &module_->kernel("mace_mlp_input");
  k_harmonics_ = &module_->kernel("mace_edge_harmonics");
  k_harmonics_gradient_ = &module_->kernel("mace_edge_harmonics_gradient");
  // The edges' harmonics (T) and dE/dY (G), counted in T.
  budget_.rows_per_edge += std::size_t(nsh_) * (1 + sizeof(G) / sizeof(T));
  // The spline mode's lengths and dE/dlength (G each, counted in T).
  if (spline_) budget_.keep_per_edge += 2 * sizeof(G) / sizeof(T) + (sizeof(G) > sizeof(T));

  e0_.upload(m.atomic_energies);
  d_r_max_pairs_.upload(r_max_pairs_);
  // Layer 0 reads the species embedding only: tabulate its inputs per species on the device.
  {
    DeviceLinear<T> embedding(b, m.node_embedding);
    std::vector<T> onehot(static_cast<std::size_t>(S_) * S_, T(0));
    std::vector<int> sp(S_);
    for (int s = 0; s < S_; ++s) onehot[static_cast<std::size_t>(s) * S_ + s] = T(1), sp[s] = s;
    DeviceArray<T> d_onehot(b), h0(b, static_cast<std::size_t>(S_) * layers_[0].dim_in);
    DeviceArray<int> d_sp(b);
    d_onehot.upload(onehot);
    d_sp.upload(sp);
    const Layer<T>& L0 = layers_[0];
    embedding.forward(*gk_, S_, d_onehot.data(), S_, h0.data(), L0.dim_in, false, nullptr, nullptr);
    if (m.embedding) add_structure_embedding(m, options, h0);
    // The non-linear blocks' species embeddings of both edge ends, per species.
    for (int t = 0; t < T_; ++t) {
      Layer<T>& L = layers_[t];
      if (!L.nonlinear) continue;
      const model::MaceInteraction::NonLinear& N = *m.interactions[t].nonlinear;
      L.src_tab.resize(static_cast<std::size_t>(S_) * L.C0);
      L.tgt_tab.resize(static_cast<std::size_t>(S_) * L.C0);
      DeviceLinear<T>(b, N.source_embedding)
          .forward(*gk_, S_, d_onehot.data(), S_, L.src_tab.data(), L.C0, false, nullptr, nullptr);
      DeviceLinear<T>(b, N.target_embedding)
          .forward(*gk_, S_, d_onehot.data(), S_, L.tgt_tab.data(), L.C0, false, nullptr, nullptr);
      b.synchronize(nullptr);  // the temporary linears' weights die here
    }
    hu0_table_.resize(static_cast<std::size_t>(S_) * L0.dim_edge);
    L0.linear_up.forward(*gk_, S_, h0.data(), L0.dim_in, hu0_table_.data(), L0.dim_edge, false,
                         nullptr, nullptr);
    if (L0.sc_on_nodes) {
      sc0_table_.resize(static_cast<std::size_t>(S_) * L0.dim_hidden);
      L0.skip.forward(*gk_, S_, h0.data(), L0.dim_in, sc0_table_.data(), L0.dim_hidden, false,
                      L0.nonlinear ? nullptr : d_sp.data(), nullptr);
    }
    b.synchronize(nullptr);
  }
  name_buffers();
}

// Every per-call buffer by name in the backend's ledger (memory_usage().device_buffers), with
// what it grows with; the per-layer ones once per layer ("layer[t].W").
template <class T, class G>
void MaceCuda<T, G>::name_buffers() {
  const BufferScale E = BufferScale::kEdge, A = BufferScale::kAtom, F = BufferScale::kFixed;
  auto nm = [](auto& a, const std::string& name, BufferScale scale) { a.name(name, scale); };
  nm(species_buf_, "graph: species", A), nm(centre_buf_, "graph: centre", E);
  nm(neighbour_buf_, "graph: neighbour", E), nm(vector_buf_, "graph: vectors", E);
  nm(edge_grad_, "result: dE/dvector", E), nm(atom_energy_, "result: atom energies", A);
  nm(zbl_edge_, "ZBL per edge", E), nm(zbl_atom_, "ZBL per atom", A);
  nm(energy_acc_, "energy accumulator", A), nm(status_, "geometry status", F);
  nm(wb_, "W (one batch: radial weights)", E), nm(wfb_, "W cut (one batch)", E);
  nm(Y_, "Y (edge harmonics)", E), nm(ef_, "radial basis", E), nm(fc_, "cutoff", E);
  nm(h_, "h (node features)", A), nm(h_prev_, "h prev", A), nm(sc_, "sc (skip)", A);
  nm(Mraw_, "M (one batch's messages; backward: dE/dM)", A);
  nm(B_, "B (contraction output; backward: dE/dB)", A);
  nm(ones_, "ones", A), nm(gh_, "dE/dh", A), nm(gh_prev_, "dE/dh prev", A);
  nm(gA_, "dE/dA", A), nm(gMl_, "dE/dMl", A), nm(gdens_, "dE/d(density)", A);
  nm(ghu_, "dE/dhu (senders)", A), nm(gyT_, "dE/dY (one batch, T: mixed precision)", E);
  nm(gw_, "dE/dW (radial weights)", E), nm(gef_, "dE/d(MLP input rows)", E);
  nm(grho_, "dE/drho", E), nm(gy_, "readout output / seed", A), nm(gz_, "dE/dz (readout)", A);
  nm(gyg_, "gate output / dE/d(gate output)", A), nm(gX_, "dE/dX (gate input)", A);
  nm(ghu_res_, "dE/dhu through linear_res", A), nm(gz2_, "dE/dz2 (readout)", A);
  nm(gY_, "dE/dY (all layers, G)", E), nm(gE_, "dE/d(radial basis)", E);
  nm(gF_, "dE/dcutoff", E), nm(rl_, "edge lengths", E), nm(gR_, "dE/d(edge length)", E);
  nm(rlT_, "edge lengths (T)", E);
  nm(hu0_table_, "model: weights and tables", F), nm(sc0_table_, "model: weights and tables", F);
  for (int t = 0; t < T_; ++t) {
    Layer<T>& Lp = layers_[t];
    const std::string l = "layer[" + std::to_string(t) + "].";
    nm(Lp.xin, l + "MLP input rows", E), nm(Lp.X, l + "X (gate input)", A);
    nm(Lp.hu, l + "hu (conv input)", A), nm(Lp.W, l + "W (radial weights, kept)", E);
    nm(Lp.Wf, l + "W cut (kept)", E), nm(Lp.rho, l + "rho (density MLP)", E);
    nm(Lp.dedge, l + "density per edge", E), nm(Lp.dens, l + "density", A);
    nm(Lp.Ml, l + "Ml (linear output)", A), nm(Lp.A, l + "A (skip output)", A);
    nm(Lp.Yc, l + "Y cut to the layer's l", E);
    Lp.radial_mlp.name_scratch(l + "radial MLP");
    if (Lp.species_conv) Lp.species_conv->name_scratch(l + "species-factored convolution:");
    Lp.density_mlp.name_scratch(l + "density MLP");
  }
  for (std::size_t r = 0; r < readouts_.size(); ++r) {
    Readout<T>& R = readouts_[r];
    const std::string n = "readout[" + std::to_string(r) + "].";
    nm(R.z, n + "z", A), nm(R.a, n + "a", A), nm(R.z2, n + "z2", A), nm(R.a2, n + "a2", A);
  }
}

// The per-structure embedding (mace_embedding.h, as the host's plan_embedding): its row added to
// every species' h0, and its readout's energy, outside the scale, added to E0.
template <class T, class G>
void MaceCuda<T, G>::add_structure_embedding(const model::Mace& m, const CudaEngineOptions& options,
                                             DeviceArray<T>& h0) {
  DeviceBackend& b = *backend_;
  const model::MaceEmbedding& E = *m.embedding;
  const int ld = layers_[0].dim_in;
  if (E.dim_out > ld)
    throw ModelFormatError("mace.embedding: " + std::to_string(E.dim_out) +
                           " outputs, the node embedding has " + std::to_string(ld));
  const std::vector<double> row = mace_embedding_row(E, options.structure_inputs);
  DeviceArray<T> d_row(b);
  d_row.upload(std::vector<T>(row.begin(), row.end()));
  AxpbyArgs a{};
  a.x = d_row.data(), a.y = h0.data(), a.rows = S_, a.cols = E.dim_out, a.ldx = 0, a.ldy = ld;
  a.alpha = 1, a.beta = 1;
  gk_->axpby(dt_, dt_, a, nullptr);
  if (E.readout) {
    DeviceLinear<T> ro(b, *E.readout);
    DeviceArray<T> y(b, static_cast<std::size_t>(S_) * ro.dim_out());
    ro.forward(*gk_, S_, h0.data(), ld, y.data(), ro.dim_out(), false, nullptr, nullptr);
    AxpbyArgs e{};
    e.x = y.data(), e.y = e0_.data(), e.rows = S_, e.cols = 1, e.ldx = ro.dim_out(), e.ldy = 1;
    e.alpha = 1, e.beta = 1;
    gk_->axpby(dt_, DType::kFloat64, e, nullptr);
  }
  b.synchronize(nullptr);  // the temporaries die here
}

// ---------------------------------------------------------------------------------------------
// Validation (the host engine's rules and messages)
// ---------------------------------------------------------------------------------------------

template <class T, class G>
void MaceCuda<T, G>::validate_indices(std::size_t num_local, std::size_t num_nodes,
                                      std::size_t num_edges, const int* species, const int* center,
                                      const int* neighbor, GhostExchange* exchange) const {
  if (num_local > num_nodes)
    throw Error("graph has num_local = " + std::to_string(num_local) +
                " > num_nodes = " + std::to_string(num_nodes));
  if (num_nodes > static_cast<std::size_t>(INT32_MAX) ||
      num_edges > static_cast<std::size_t>(INT32_MAX))
    throw CapacityError("graph has " + std::to_string(num_nodes) + " nodes and " +
                        std::to_string(num_edges) + " edges; at most 2^31-1 of each");
  if (num_nodes > 0 && !species) throw Error("graph.species is null");
  if (num_edges > 0 && (!center || !neighbor))
    throw Error("graph has " + std::to_string(num_edges) + " edges but a null edge array");
  if (num_nodes > num_local && !exchange)
    throw Error("graph has " + std::to_string(num_nodes - num_local) +
                " ghost atoms but no GhostExchange was given");
  for (std::size_t n = 0; n < num_nodes; ++n)
    if (species[n] < 0 || species[n] >= S_)
      throw Error("atom " + std::to_string(n) + " has species " + std::to_string(species[n]) +
                  ", the model has " + std::to_string(S_) + " species (0.." +
                  std::to_string(S_ - 1) + ")");
  for (std::size_t e = 0; e < num_edges; ++e) {
    const int c = center[e], j = neighbor[e];
    if (c < 0 || static_cast<std::size_t>(c) >= num_local)
      throw Error("edge " + std::to_string(e) + " has centre " + std::to_string(c) +
                  ", not a local atom (0.." + std::to_string(num_local) + ")");
    if (j < 0 || static_cast<std::size_t>(j) >= num_nodes)
      throw Error("edge " + std::to_string(e) + " has neighbour " + std::to_string(j) +
                  ", not an atom (0.." + std::to_string(num_nodes) + ")");
  }
}

template <class T, class G>
void MaceCuda<T, G>::validate_vectors(std::size_t num_edges, const int* species, const int* center,
                                      const int* neighbor, const double* vector) const {
  const std::vector<std::string>& names = host_.species();
  for (std::size_t e = 0; e < num_edges; ++e) {
    const int c = center[e], j = neighbor[e];
    const double* v = vector + 3 * e;
    const double r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    if (!std::isfinite(r))
      throw Error("edge " + std::to_string(e) + " (centre " + std::to_string(c) + ", neighbour " +
                  std::to_string(j) + ") has a non-finite vector");
    const int sc = species[c], sj = species[j];
    const double rc = r_max_pairs_[static_cast<std::size_t>(sc) * S_ + sj];
    if (!(r < rc))
      throw Error("edge " + std::to_string(e) + " (centre " + std::to_string(c) + ", neighbour " +
                  std::to_string(j) + ") has length " + fmt(r) + " A, not below the cutoff " +
                  fmt(rc) + " A of species pair (" + names[sc] + ", " + names[sj] + ")");
    if (r < MaceEngine::kMinEdgeLength)
      throw Error("edge " + std::to_string(e) + " (centre " + std::to_string(c) + ", neighbour " +
                  std::to_string(j) + ") has length " + fmt(r) + " A, below the minimum " +
                  fmt(MaceEngine::kMinEdgeLength) + " A (overlapping atoms)");
  }
}

template <class T, class G>
void MaceCuda<T, G>::drop_kept_weights() {
  for (Layer<T>& Lp : layers_) {
    Lp.W.release(), Lp.Wf.release(), Lp.radial_mlp.release_scratch();
    Lp.kept = {};
  }
  gw_.release();
}

// ---------------------------------------------------------------------------------------------
// Entry points and the evaluation
// ---------------------------------------------------------------------------------------------

template <class T, class G>
void MaceCuda<T, G>::compute(const AtomGraph& g, EngineResult& result, GhostExchange* exchange) {
  start_phases();
  start_call_peak();
  validate_indices(g.num_local, g.num_nodes, g.num_edges, g.species, g.center, g.neighbor,
                   exchange);
  if (g.num_edges > 0 && !g.vector)
    throw Error("graph has " + std::to_string(g.num_edges) + " edges but a null edge array");
  validate_vectors(g.num_edges, g.species, g.center, g.neighbor, g.vector);
  N_ = g.num_nodes, L_ = g.num_local, E_ = g.num_edges;
  const Stream s = nullptr;
  phase("validate graph (host)", s);
  species_buf_.upload(g.species, N_, s);
  vector_buf_.upload(g.vector, 3 * E_, s);
  centre_buf_.upload(g.center, E_, s);
  neighbour_buf_.upload(g.neighbor, E_, s);
  phase("upload graph", s);
  // Ordered on the device when the centres come sorted (LAMMPS's neighbor lists), else here.
  if (order_edges_on_device(S_, species_buf_.data(), centre_buf_.data(), neighbour_buf_.data(),
                            s)) {
    phase("edge orderings (device)", s);
  } else {
    order_edges_on_host(g.center, g.neighbor, s);
    phase("edge orderings (host: centres not sorted)", s);
  }
  atom_energy_.resize(L_);
  edge_grad_.resize(3 * E_);
  run(species_buf_.data(), vector_buf_.data(), atom_energy_.data(), edge_grad_.data(), exchange, s);
  download_results(atom_energy_, edge_grad_, result, s);
  phase("download results", s);
  end_call_peak();
}

template <class T, class G>
void MaceCuda<T, G>::compute_device(const DeviceAtomGraph& g, const DeviceResult& r,
                                    GhostExchange* exchange, Stream s) {
  start_phases();
  start_call_peak();
  if (g.num_nodes > 0 && !g.species) throw Error("graph.species is null");
  if (g.num_edges > 0 && (!g.center || !g.neighbor || !g.vector))
    throw Error("graph has " + std::to_string(g.num_edges) + " edges but a null edge array");
  if (g.num_nodes > static_cast<std::size_t>(INT32_MAX) ||
      g.num_edges > static_cast<std::size_t>(INT32_MAX))
    throw CapacityError("graph has " + std::to_string(g.num_nodes) + " nodes and " +
                        std::to_string(g.num_edges) + " edges; at most 2^31-1 of each");
  if (g.num_nodes > g.num_local && !exchange)
    throw Error("graph has " + std::to_string(g.num_nodes - g.num_local) +
                " ghost atoms but no GhostExchange was given");
  N_ = g.num_nodes, L_ = g.num_local, E_ = g.num_edges;
  // The index arrays: the host's copies only when needed (a graph the device kernels decline,
  // whose error or order the host path gives, and the message of a failed geometry check).
  HostGraphIndices host;
  auto download_indices = [&] { host.download(*backend_, g, s); };
  if (order_edges_on_device(S_, g.species, g.center, g.neighbor, s)) {
    phase("edge orderings (device)", s);
  } else {
    download_indices();
    validate_indices(g.num_local, g.num_nodes, g.num_edges, host.species.data(), host.center.data(),
                     host.neighbor.data(), exchange);
    order_edges_on_host(host.center.data(), host.neighbor.data(), s);
    phase("edge orderings (host: centres not sorted)", s);
  }
  atom_energy_.resize(L_);
  double* ae = r.atom_energy ? r.atom_energy : atom_energy_.data();
  run(g.species, g.vector, ae, r.edge_gradient, exchange, s);
  const unsigned long long status = [&] {
    unsigned long long v = 0;
    backend_->download(&v, status_.data(), sizeof v, s);
    return v;
  }();
  if (status != ~0ull) {
    // Re-run the host checks on the offending edge for the host engine's message.
    if (host.empty()) download_indices();
    const std::size_t e = static_cast<std::size_t>(status & ((1ull << 40) - 1));
    double v[3];
    backend_->download(v, g.vector + 3 * e, sizeof v, s);
    int c = host.center[e], j = host.neighbor[e];
    try {
      validate_vectors(1, host.species.data(), &c, &j, v);
    } catch (const Error& err) {
      std::string msg = err.what();
      throw Error("edge " + std::to_string(e) + msg.substr(msg.find(' ', 5)));
    }
    throw Error("edge " + std::to_string(e) + " failed the device geometry check");
  }
  device_total(ae, r.energy, s);
  end_call_peak();
}

template <class T, class G>
void MaceCuda<T, G>::run(const int* d_species, const double* d_vector, double* atom_energy,
                         double* edge_gradient, GhostExchange* exchange, Stream s) {
  DeviceBackend& b = *backend_;
  d_species_ = d_species;
  const long long E = static_cast<long long>(E_), L = static_cast<long long>(L_);
  status_.resize(1);
  b.memset(status_.data(), 0xff, sizeof(unsigned long long), s);
  d_vector_ = d_vector, edge_gradient_ = edge_gradient;
  // The harmonics and dE/dY of every edge, or of one batch (made per batch: batch_harmonics).
  const std::size_t y_rows = keep_rows_ ? E_ : max_batch_edges();
  Y_.resize(y_rows * nsh_);
  // Spline mode: the tables read the lengths; the radial basis and its gradient are not made.
  ef_.resize(spline_ ? 0 : E_ * nb_);
  fc_.resize(apply_cutoff_ ? 0 : E_);
  zbl_edge_.resize(zbl_ ? E_ : 0);
  zbl_atom_.resize(zbl_ ? L_ : 0);
  MaceEdgeArgs ea{};
  ea.vector = d_vector, ea.perm = edges_.perm.data(), ea.centre = edges_.centre.data();
  ea.sender = edges_.sender.data(), ea.species = d_species, ea.r_max_pairs = d_r_max_pairs_.data();
  ea.Y = keep_rows_ ? Y_.data() : nullptr, ea.ef = spline_ ? nullptr : ef_.data(),
  ea.fc = apply_cutoff_ ? nullptr : fc_.data();
  ea.zbl = zbl_ ? zbl_edge_.data() : nullptr;
  rl_.resize(spline_ ? E_ : 0);
  ea.rl = spline_ ? rl_.data() : nullptr;
  ea.status = status_.data();
  ea.zbl_scale = scale_, ea.min_length = MaceEngine::kMinEdgeLength;
  ea.num_edges = E;
  b.launch(*k_geometry_, grid_for(E), s, ea);
  if constexpr (!std::is_same_v<T, G>) {
    rlT_.resize(spline_ ? E_ : 0);
    if (spline_) gk_->axpby(dg_, dt_, GenericKernels::vector(rl_.data(), rlT_.data(), E, 1, 0), s);
  }
  phase("edge geometry", s);
  if (zbl_)
    gk_->segment_sum(
        DType::kFloat64, DType::kFloat64,
        SegmentSumArgs{zbl_edge_.data(), zbl_atom_.data(), edges_.centre_ptr.data(), L, 1, 0, 0},
        s);
  energy_acc_.resize(L_);
  energy_acc_.zero(s);
  gY_.resize(y_rows * nsh_), gY_.zero(s);
  gE_.resize(spline_ ? 0 : E_ * nb_), gE_.zero(s);
  gF_.resize(apply_cutoff_ ? 0 : E_), gF_.zero(s);
  gR_.resize(spline_ ? E_ : 0), gR_.zero(s);
  ones_.resize(L_);
  gk_->fill(dt_, ones_.data(), L, 1.0, s);

  forward_layers(exchange, s);
  MaceEnergyArgs en{d_species,
                    e0_.data(),
                    zbl_ ? zbl_atom_.data() : nullptr,
                    energy_acc_.data(),
                    atom_energy,
                    scale_,
                    shift_,
                    L};
  b.launch(*k_energy_, grid_for(L), s, en);

  // Per batch, the batches' dE/dY is added to the edges' gradient as it is made.
  if (!keep_rows_) b.memset(edge_gradient, 0, 3 * E_ * sizeof(double), s);
  backward_layers(exchange, s);
  ea.gY = keep_rows_ ? gY_.data() : nullptr, ea.accumulate = !keep_rows_;
  ea.gE = spline_ ? nullptr : gE_.data(), ea.gF = apply_cutoff_ ? nullptr : gF_.data();
  ea.gR = spline_ ? gR_.data() : nullptr;
  ea.edge_gradient = edge_gradient;
  b.launch(*k_gradient_, grid_for(E), s, ea);
  b.synchronize(s);
  phase("edge gradient", s);
}

// The layers' stages are instantiated in their own files.
template class MaceCuda<double, double>;
template class MaceCuda<float, float>;
template class MaceCuda<float, double>;

}  // namespace mace_cuda_detail

std::unique_ptr<CudaEngine> make_mace_cuda_engine(const model::Model& model, Precision precision,
                                                  const CudaEngineOptions& options) {
  if (model.arch != model::Arch::kMace || !model.mace)
    throw Error("the CUDA MACE engine needs a MACE model");
  return make_engine_for_precision<mace_cuda_detail::MaceCuda>(model, precision, options,
                                                               "make_mace_cuda_engine");
}

}  // namespace clebsch::cuda
