// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The engine building blocks of the device layer, one by one, against the host engine's own
// kernels (src/engine/mace_kernels.h, src/nn/symmetric_contraction.h) on every op of the bundled
// MACE model: DeviceLinear (o3.Linear and the species-selected skip_tp, forward and transpose, with
// and without accumulation), DeviceMlp (the radial MLPs, forward and backward), and the sparse
// symmetric-contraction tables (mace_contraction_tables.h) evaluated on the host against
// SymmetricContraction::forward; DeviceMlp with LayerNorm and biases against the host Mlp and
// DeviceGate against the host Gate (src/nn/gate.h). Emulated backend (no GPU needed), and the GPU
// when present.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <algorithm>
#include <cmath>
#include <optional>
#include <random>

#include "clebsch/cuda/device/cuda_driver.h"
#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/engine/mace_contraction_tables.h"
#include "clebsch/cuda/engine/mace_cuda_source.h"
#include "clebsch/cuda/nn/device_gate.h"
#include "clebsch/cuda/nn/device_linear.h"
#include "clebsch/cuda/nn/device_mlp.h"
#include "clebsch/cuda/templates/mace_device_args.h"
#include "clebsch/engine/mace_kernels.h"
#include "clebsch/model/model_reader.h"
#include "clebsch/nn/activation.h"
#include "clebsch/nn/gate.h"
#include "clebsch/nn/symmetric_contraction.h"
#include "clebsch/support/error.h"
#include "kernels/kernel_test_util.h"

namespace clebsch::cuda {
namespace {

using mace_detail::ir_mul_to_mul_ir;
using mace_detail::mul_ir_to_ir_mul;

const model::Model& bundled() {
  static const model::Model m =
      read_model(std::string(CLEBSCH_BUNDLED_DIR) + "/cuau-mace.safetensors");
  return m;
}

std::vector<double> rows_to(const Irreps& irreps, const std::vector<double>& in, bool to_ir_mul) {
  std::vector<double> out(in.size());
  const std::size_t d = irreps.dim();
  for (std::size_t r = 0; r < in.size() / d; ++r) {
    if (to_ir_mul)
      mul_ir_to_ir_mul(irreps, in.data() + r * d, out.data() + r * d);
    else
      ir_mul_to_mul_ir(irreps, in.data() + r * d, out.data() + r * d);
  }
  return out;
}

// The host engine's contraction (src/nn/symmetric_contraction.h) of the model's layer.
SymmetricContraction host_contraction(const model::SymmetricContraction& sc, int S) {
  std::vector<ContractionTensors> cts;
  for (const auto& con : sc.contractions) {
    ContractionTensors ct{con.irrep_out, {}, {}};
    for (const auto& term : con.terms) {
      ct.U.push_back(DenseTensor{term.u_shape, term.U});
      ct.W.push_back(DenseTensor{{S, term.K, sc.num_features}, term.W});
    }
    cts.push_back(std::move(ct));
  }
  return SymmetricContraction(sc.irreps_in, std::move(cts));
}

class DeviceOps : public ::testing::TestWithParam<std::string> {
 public:
  void SetUp() override {
    if (GetParam() == "cuda" && !device_available()) GTEST_SKIP() << "no CUDA device";
    backend_ = GetParam() == "emulated" ? make_emulated_backend() : make_cuda_backend(0);
    gk_ = std::make_unique<GenericKernels>(*backend_);
  }
  DeviceArray<double> up(const std::vector<double>& v) {
    DeviceArray<double> d(*backend_);
    d.upload(v);
    return d;
  }

  // Device map (mul_ir) vs host map (ir_mul), forward and transpose, overwrite and accumulate.
  template <class HostMap>
  void check_linear(const DeviceLinear<double>& dev, const HostMap& host, bool species,
                    const std::string& what) {
    SCOPED_TRACE(what);
    const int n = 7, din = dev.dim_in(), dout = dev.dim_out();
    const std::vector<double> x = test::randn(n * din, 1), y0 = test::randn(n * dout, 2);
    std::vector<int> sp(n);
    for (int i = 0; i < n; ++i) sp[i] = (i * 5) % bundled().num_species();
    DeviceArray<int> dsp(*backend_);
    dsp.upload(sp);
    const int* spp = species ? dsp.data() : nullptr;
    auto dx = up(x), dy = up(y0);
    for (bool acc : {false, true}) {
      dy.upload(y0);
      dev.forward(*gk_, n, dx.data(), din, dy.data(), dout, acc, spp, nullptr);
      std::vector<double> xi = rows_to(dev.irreps_in(), x, true);
      std::vector<double> yi = rows_to(dev.irreps_out(), y0, true);
      if constexpr (std::is_same_v<HostMap, mace_detail::SpeciesLinear<double>>)
        host.forward(n, sp.data(), xi.data(), din, yi.data(), dout, acc, false);
      else
        host.forward(n, xi.data(), din, yi.data(), dout, acc, false);
      EXPECT_LE(test::rel_error(dy.download(), rows_to(dev.irreps_out(), yi, false)), 1e-14)
          << "forward, accumulate " << acc;
      // Transpose: gx = map^T(gy).
      auto dgx = up(x);
      dev.backward(*gk_, n, dy.data(), dout, dgx.data(), din, acc, spp, nullptr);
      std::vector<double> gxi = rows_to(dev.irreps_in(), x, true);
      const std::vector<double> gyi = rows_to(dev.irreps_out(), dy.download(), true);
      if constexpr (std::is_same_v<HostMap, mace_detail::SpeciesLinear<double>>)
        host.backward(n, sp.data(), gyi.data(), dout, gxi.data(), din, acc, false);
      else
        host.backward(n, gyi.data(), dout, gxi.data(), din, acc, false);
      EXPECT_LE(test::rel_error(dgx.download(), rows_to(dev.irreps_in(), gxi, false)), 1e-14)
          << "transpose, accumulate " << acc;
    }
  }

  // Device MLP vs host MLP on @p rows random rows, forward and backward; returns the host's
  // input gradient (for a caller that checks it is not trivially small).
  std::vector<double> check_mlp(DeviceMlp<double>& dev, const mace_detail::Mlp<double>& host,
                                int rows, std::uint64_t seed, double backward_tol) {
    const std::vector<double> x = test::randn(rows * dev.dim_in(), seed),
                              gy = test::randn(rows * dev.dim_out(), seed + 1);
    auto dx = up(x), dgy = up(gy);
    DeviceArray<double> dy(*backend_, rows * dev.dim_out()), dgx(*backend_, x.size());
    dev.forward(*gk_, rows, dx.data(), dy.data(), nullptr);
    dev.backward(*gk_, rows, dgy.data(), dgx.data(), nullptr);
    std::vector<double> y(rows * host.dim_out()), scratch(host.scratch_size(rows)),
        g = gy, gx(x.size()), work(2 * rows * host.max_width());
    host.forward(rows, x.data(), y.data(), scratch.data());
    host.backward(rows, scratch.data(), g.data(), gx.data(), work.data());
    EXPECT_LE(test::rel_error(dy.download(), y), 1e-14);
    EXPECT_LE(test::rel_error(dgx.download(), gx), backward_tol);
    return gx;
  }

  // A DeviceMlp<float> of @p m on @p rows random rows (seeds @p seed, @p seed + 1) against the
  // float64 host Mlp, forward and backward, each within @p tol; returns the device's (y, gx).
  std::pair<std::vector<double>, std::vector<double>> check_mlp_float32(
      const model::Mlp& m, const mace_detail::Mlp<double>& host, int rows, std::uint64_t seed,
      double tol) {
    const std::vector<double> x = test::randn(rows * host.dim_in(), seed),
                              gy = test::randn(rows * host.dim_out(), seed + 1);
    std::vector<double> y(rows * host.dim_out()), scratch(host.scratch_size(rows)),
        g = gy, gx(x.size()), work(2 * rows * host.max_width());
    host.forward(rows, x.data(), y.data(), scratch.data());
    host.backward(rows, scratch.data(), g.data(), gx.data(), work.data());
    DeviceMlp<float> dev(*backend_, m, "mlp");
    DeviceArray<float> dx(*backend_), dgy(*backend_), dy(*backend_, y.size()),
        dgx(*backend_, x.size());
    dx.upload(std::vector<float>(x.begin(), x.end()));
    dgy.upload(std::vector<float>(gy.begin(), gy.end()));
    dev.forward(*gk_, rows, dx.data(), dy.data(), nullptr);
    dev.backward(*gk_, rows, dgy.data(), dgx.data(), nullptr);
    const std::vector<float> fy = dy.download(), fgx = dgx.download();
    std::pair<std::vector<double>, std::vector<double>> out{{fy.begin(), fy.end()},
                                                            {fgx.begin(), fgx.end()}};
    EXPECT_LE(test::rel_error(out.first, y), tol) << "float32 forward";
    EXPECT_LE(test::rel_error(out.second, gx), tol) << "float32 backward";
    return out;
  }

  std::unique_ptr<DeviceBackend> backend_;
  std::unique_ptr<GenericKernels> gk_;
};

// A dense layer of random weights (seed), weight_scale 1/sqrt(h_in), a random bias when
// @p bias_seed >= 0.
model::Mlp::Layer dense_layer(int h_in, int h_out, std::uint64_t seed, long long bias_seed = -1) {
  model::Mlp::Layer L;
  L.h_in = h_in, L.h_out = h_out;
  L.weight = test::randn(h_in * h_out, seed);
  if (bias_seed >= 0) L.bias = test::randn(h_out, std::uint64_t(bias_seed));
  L.weight_scale = 1.0 / std::sqrt(double(h_in));
  return L;
}

TEST_P(DeviceOps, LinearsAndSpeciesSkipsMatchTheHostEngine) {
  const model::Mace& m = *bundled().mace;
  const int S = bundled().num_species();
  for (std::size_t t = 0; t < m.interactions.size(); ++t) {
    const auto& in = m.interactions[t];
    const std::string w = "layer " + std::to_string(t);
    check_linear(DeviceLinear<double>(*backend_, in.linear_up),
                 mace_detail::NodeLinear<double>(in.linear_up), false, w + " linear_up");
    check_linear(DeviceLinear<double>(*backend_, in.linear),
                 mace_detail::NodeLinear<double>(in.linear), false, w + " linear");
    check_linear(DeviceLinear<double>(*backend_, m.products[t].linear),
                 mace_detail::NodeLinear<double>(m.products[t].linear), false, w + " product");
    check_linear(DeviceLinear<double>(*backend_, in.skip_tp, S, "skip"),
                 mace_detail::SpeciesLinear<double>(in.skip_tp, S, "skip"), true, w + " skip");
  }
}

// The radial MLPs (the bundled model's are not 64 wide: no tensor-core chain) by every route:
// layer by layer (their default, and with CLEBSCH_MLP_LAYERWISE=1) and the SIMT chain
// (CLEBSCH_MLP_SIMT=1: hidden layers in one kernel, the last layer a GEMM; 77 rows: two whole
// tiles of the chain kernel and a part).
TEST_P(DeviceOps, MlpForwardAndBackwardMatchTheHostEngine) {
  const model::Mace& m = *bundled().mace;
  for (const std::string route : {"default", "layerwise", "simt"}) {
    SCOPED_TRACE(route);
    if (route == "layerwise") setenv("CLEBSCH_MLP_LAYERWISE", "1", 1);
    if (route == "simt") setenv("CLEBSCH_MLP_SIMT", "1", 1);
    for (const auto& in : m.interactions) {
      DeviceMlp<double> dev(*backend_, in.radial_mlp, "radial_mlp");
      EXPECT_EQ(dev.fused_chain(), route == "simt");
      mace_detail::Mlp<double> host(in.radial_mlp, "radial_mlp");
      check_mlp(dev, host, 77, 3, 1e-14);
    }
    unsetenv("CLEBSCH_MLP_LAYERWISE");
    unsetenv("CLEBSCH_MLP_SIMT");
  }
}

// A chain with every option of a layer but LayerNorm: biases (the last layer's too, so the
// chain runs every layer), several activations with their cst, an out_scale, widths that are no
// multiple of the kernel's 4-column groups and one above its 64-column pass; forward and
// backward against the host Mlp, in float64 and float32 (against the float64 host). The SIMT
// chain (CLEBSCH_MLP_SIMT=1): such widths otherwise run layer by layer.
TEST_P(DeviceOps, FusedMlpChainMatchesTheHostEngine) {
  setenv("CLEBSCH_MLP_SIMT", "1", 1);
  model::Mlp m;
  const int widths[] = {9, 37, 70, 3};
  const model::Activation acts[] = {{"silu", model::Activation::Kind::kSilu, 1.7},
                                    {"tanh", model::Activation::Kind::kTanh, 1.2},
                                    {"ssp", model::Activation::Kind::kSsp, 0.9}};
  for (int l = 0; l < 3; ++l) {
    model::Mlp::Layer L = dense_layer(widths[l], widths[l + 1], 60 + l, 70 + l);
    L.activation = acts[l];
    L.out_scale = l == 1 ? 0.8 : 1.0;
    m.layers.push_back(L);
  }
  DeviceMlp<double> dev(*backend_, m, "chain");
  ASSERT_TRUE(dev.fused_chain());
  mace_detail::Mlp<double> host(m, "chain");
  const std::vector<double> gx = check_mlp(dev, host, 77, 11, 1e-13);
  double gmax = 0;
  for (double v : gx) gmax = std::max(gmax, std::abs(v));
  EXPECT_GT(gmax, 1e-2);  // a meaningful comparison

  check_mlp_float32(m, host, 77, 11, 1e-5);
  unsetenv("CLEBSCH_MLP_SIMT");
}

// A radial MLP of MACE-MP / NequIP width ([n_basis, 64, 64, 64] then a wide plain layer), the
// shape the chain runs on the tensor cores (mlp_chain_mma.cuh.in: DMMA in float64, 3xTF32 in
// float32): 77 rows (whole warp strips and a part), with and without biases and out_scale, 8 and
// 10 inputs, three hidden layers and one (the backward then keeps no phi' tile), forward and
// backward against the host Mlp, and the tensor-core chain against the SIMT one
// (CLEBSCH_MLP_SIMT=1) on the same rows; the float32 forward on either chain.
TEST_P(DeviceOps, TensorCoreMlpChainMatchesTheHostEngine) {
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant == 1   ? "10 inputs, biases, tanh, out_scale"
                 : variant == 2 ? "one hidden layer"
                                : "8 inputs, silu, no bias");
    model::Mlp m;
    const std::vector<int> widths = variant == 2
                                        ? std::vector<int>{8, 64, 200}
                                        : std::vector<int>{variant ? 10 : 8, 64, 64, 64, 200};
    const int hidden = static_cast<int>(widths.size()) - 2;
    for (int l = 0; l <= hidden; ++l) {
      model::Mlp::Layer L = dense_layer(widths[l], widths[l + 1], 80 + 10 * variant + l,
                                        variant == 1 && l < 3 ? 90 + l : -1);
      if (l < hidden) {
        L.activation = variant == 1
                           ? model::Activation{"tanh", model::Activation::Kind::kTanh, 1.3}
                           : model::Activation{"silu", model::Activation::Kind::kSilu, 1.68};
        L.out_scale = variant == 1 && l == 1 ? 0.7 : 1.0;
      }
      m.layers.push_back(L);
    }
    mace_detail::Mlp<double> host(m, "radial_mlp");
    DeviceMlp<double> dev(*backend_, m, "radial_mlp");
    ASSERT_TRUE(dev.fused_chain());
    MlpChainArgs probe{};
    probe.num_layers = hidden;
    for (int l = 0; l <= hidden; ++l) probe.dims[l] = widths[l];
    ASSERT_TRUE(GenericKernels::mlp_mma_route(probe, backend_->limits(), backend_->emulated()));
    setenv("CLEBSCH_MLP_SIMT", "1", 1);
    const auto simt = check_mlp_float32(m, host, 77, 31 + variant, 2e-5);
    unsetenv("CLEBSCH_MLP_SIMT");
    const std::vector<double> gx = check_mlp(dev, host, 77, 21 + variant, 1e-13);
    double gmax = 0;
    for (double v : gx) gmax = std::max(gmax, std::abs(v));
    EXPECT_GT(gmax, 1e-2);

    // float32 (the SIMT forward, the 3xTF32 backward; then the 3xTF32 forward too) against
    // the float64 host, and against the SIMT chain in both directions.
    const auto mixed = check_mlp_float32(m, host, 77, 31 + variant, 2e-5);
    EXPECT_LE(test::rel_error(mixed.second, simt.second), 2e-5);
    setenv("CLEBSCH_MLP_F32_FORWARD", "mma", 1);
    const auto mma = check_mlp_float32(m, host, 77, 31 + variant, 2e-5);
    unsetenv("CLEBSCH_MLP_F32_FORWARD");
    EXPECT_LE(test::rel_error(mma.first, simt.first), 2e-5);
    EXPECT_LE(test::rel_error(mma.second, simt.second), 2e-5);
  }
}

// The fused route reads the forward's input rows again: a backward of rows it never saw is an
// error, not a gradient of whatever the pointer holds.
TEST_P(DeviceOps, FusedMlpBackwardNeedsItsForward) {
  const model::Mace& m = *bundled().mace;
  setenv("CLEBSCH_MLP_SIMT", "1", 1);  // the bundled model's widths run the SIMT chain only so
  DeviceMlp<double> dev(*backend_, m.interactions[0].radial_mlp, "radial_mlp");
  unsetenv("CLEBSCH_MLP_SIMT");
  ASSERT_TRUE(dev.fused_chain());
  DeviceArray<double> g(*backend_, 5 * dev.dim_out()), gx(*backend_, 5 * dev.dim_in());
  EXPECT_THROW(dev.backward(*gk_, 5, g.data(), gx.data(), nullptr), Error);
  const std::vector<double> x = test::randn(4 * dev.dim_in(), 1);
  auto dx = up(x);
  DeviceArray<double> y(*backend_, 4 * dev.dim_out());
  dev.forward(*gk_, 4, dx.data(), y.data(), nullptr);
  EXPECT_THROW(dev.backward(*gk_, 5, g.data(), gx.data(), nullptr), Error);
}

// The generated per-layer kernels (mace_symcon_source.h) of the model's own module, forward and
// reverse mode, against the host engine's contraction on every species: A is read in the mul_ir
// layout of the interaction linear's output, the host's [C][D] rows are its permutation.
TEST_P(DeviceOps, GeneratedSymmetricContractionMatchesTheHostEngine) {
  const model::Model& model = bundled();
  const int S = model.num_species();
  const auto module =
      backend_->load({"clebsch_mace.cu", mace_kernels_source(model, Precision::kFloat64),
                      mace_kernel_specs(model)});
  for (std::size_t t = 0; t < model.mace->products.size(); ++t) {
    SCOPED_TRACE("layer " + std::to_string(t));
    const int layer = static_cast<int>(t);
    const ContractionTables tab = mace_contraction_tables(model, layer);
    const SymconLayout lay = mace_symcon_layout(model, layer, tab);
    const SymmetricContraction host = host_contraction(model.mace->products[t].contraction, S);
    const int n = 2 * S + 3, C = tab.C, D = tab.D;
    const std::vector<double> A = test::randn(n * C * D, 6), gB = test::randn(n * tab.dim_b, 7);
    std::vector<double> A_dev(static_cast<std::size_t>(n) * lay.row, 0.0);
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < C; ++c)
        for (int k = 0; k < D; ++k)
          A_dev[i * lay.row + lay.base[k] + c * lay.stride[k]] = A[(i * C + c) * D + k];
    std::vector<int> sp(n);
    for (int i = 0; i < n; ++i) sp[i] = (3 * i + 1) % S;
    std::vector<double> ref(n * host.dim_out()), gA_ref(A.size());
    host.forward(n, sp.data(), A.data(), ref.data());
    host.backward(n, sp.data(), A.data(), gB.data(), gA_ref.data());

    DeviceArray<int> dsp(*backend_);
    dsp.upload(sp);
    DeviceArray<double> dW(*backend_);
    dW.upload(tab.weights);
    auto dA = up(A_dev), dgB = up(gB);
    // Garbage first: the forward must write every output, the backward every component.
    auto dB = up(std::vector<double>(ref.size(), 1e30)),
         dgA = up(std::vector<double>(A_dev.size(), 1e30));
    SymConArgs sa{};
    sa.A = dA.data(), sa.species = dsp.data(), sa.weights = dW.data(), sa.rows = n;
    sa.B = dB.data();
    backend_->launch(module->kernel(symcon_kernel_name(layer, false)), grid_for(n * C), nullptr,
                     sa);
    EXPECT_LE(test::rel_error(dB.download(), ref), 1e-13);
    sa.B = dgB.data(), sa.gA = dgA.data();
    backend_->launch(module->kernel(symcon_kernel_name(layer, true)), grid_for(n * C), nullptr, sa);
    const std::vector<double> gA_dev = dgA.download();
    std::vector<double> gA(A.size());
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < C; ++c)
        for (int k = 0; k < D; ++k)
          gA[(i * C + c) * D + k] = gA_dev[i * lay.row + lay.base[k] + c * lay.stride[k]];
    EXPECT_LE(test::rel_error(gA, gA_ref), 1e-13);
  }
}

// mace-torch's RadialMLP (the non-linear interaction block's radial and density MLPs):
// Linear with bias, LayerNorm, SiLU per hidden layer, a last layer with a bias and no activation
// (which the activation kernel cannot add), against the host engine's Mlp, forward and backward.
TEST_P(DeviceOps, LayerNormAndBiasMlpMatchesTheHostEngine) {
  model::Mlp m;
  const int widths[] = {7, 8, 6, 5};
  for (int l = 0; l < 3; ++l) {
    model::Mlp::Layer L = dense_layer(widths[l], widths[l + 1], 20 + l, 30 + l);
    if (l < 2) {
      model::Mlp::Layer::LayerNorm ln;
      ln.weight = test::randn(L.h_out, 40 + l);
      ln.bias = test::randn(L.h_out, 50 + l);
      ln.eps = 1e-5;
      L.layer_norm = ln;
      L.activation = model::Activation{"silu", model::Activation::Kind::kSilu, 1.6};
    }
    m.layers.push_back(L);
  }
  DeviceMlp<double> dev(*backend_, m, "radial_mlp");
  EXPECT_FALSE(dev.last_layer_is_linear());  // the fused radial form must not take it
  mace_detail::Mlp<double> host(m, "radial_mlp");
  const std::vector<double> gx = check_mlp(dev, host, 11, 5, 1e-13);
  double gmax = 0;
  for (double v : gx) gmax = std::max(gmax, std::abs(v));
  EXPECT_GT(gmax, 1e-3);  // a meaningful comparison
}

// DeviceGate (the generic gate kernels, shared by the NequIP engine and MACE's non-linear block)
// against the host's e3nn Gate (src/nn/gate.h) on mul_ir rows: scalars with an odd scalar, gates
// and gated irreps of several l, an identity (None) activation; forward and backward.
TEST_P(DeviceOps, GateMatchesTheHostGate) {
  const Irreps scalars("3x0e+1x0o"), gates("2x0e+1x0e"), gated("2x1o+1x2e");
  const Gate host(
      scalars,
      {ScaledActivation(ActivationKind::kSilu, 1.3), ScaledActivation(ActivationKind::kTanh, 0.9)},
      gates, {ScaledActivation(ActivationKind::kTanh, 1.1), ScaledActivation::none()}, gated);
  model::Gate m;
  m.irreps_in = host.irreps_in(), m.irreps_out = host.irreps_out();
  m.irreps_scalars = scalars, m.irreps_gates = gates, m.irreps_gated = gated;
  const std::vector<int>& q = host.gather();
  const int ns = scalars.dim(), ng = gates.dim();
  m.index_scalars.assign(q.begin(), q.begin() + ns);
  m.index_gates.assign(q.begin() + ns, q.begin() + ns + ng);
  m.index_gated.assign(q.begin() + ns + ng, q.end());
  m.act_scalars = {model::Activation{"silu", model::Activation::Kind::kSilu, 1.3},
                   model::Activation{"tanh", model::Activation::Kind::kTanh, 0.9}};
  m.act_gates = {model::Activation{"tanh", model::Activation::Kind::kTanh, 1.1}, std::nullopt};
  DeviceGate<double> dev(*backend_, m, "test gate");
  ASSERT_EQ(dev.dim_in(), host.irreps_in().dim());
  ASSERT_EQ(dev.dim_out(), host.irreps_out().dim());
  const int rows = 6, din = dev.dim_in(), dout = dev.dim_out();
  const std::vector<double> x = test::randn(rows * din, 7), gy = test::randn(rows * dout, 8);
  auto dx = up(x), dgy = up(gy);
  DeviceArray<double> dy(*backend_, rows * dout), dgx(*backend_, rows * din);
  dev.forward(*gk_, rows, dx.data(), dy.data(), dout, nullptr);
  dev.backward(*gk_, rows, dx.data(), dgy.data(), dout, dgx.data(), nullptr);
  std::vector<double> y(rows * dout), gx(rows * din);
  host.forward(rows, x.data(), y.data());
  host.backward(rows, x.data(), gy.data(), gx.data());
  EXPECT_LE(test::rel_error(dy.download(), y), 1e-14);
  EXPECT_LE(test::rel_error(dgx.download(), gx), 1e-14);
}

INSTANTIATE_TEST_SUITE_P(All, DeviceOps, ::testing::Values("emulated", "cuda"),
                         [](const auto& info) { return info.param; });

// The tables, evaluated by a plain host loop, against the library's SymmetricContraction.
TEST(ContractionTables, EvaluateToTheHostContraction) {
  const model::Mace& m = *bundled().mace;
  const int S = bundled().num_species();
  for (std::size_t t = 0; t < m.products.size(); ++t) {
    SCOPED_TRACE("layer " + std::to_string(t));
    const model::SymmetricContraction& sc = m.products[t].contraction;
    const ContractionTables tab = make_contraction_tables(sc, S, "contraction");
    const SymmetricContraction host = host_contraction(sc, S);
    ASSERT_EQ(tab.dim_b, host.dim_out());
    const int n = 5, C = tab.C, D = tab.D;
    const std::vector<double> A = test::randn(n * C * D, 5);
    std::vector<int> sp(n);
    for (int i = 0; i < n; ++i) sp[i] = i % S;
    std::vector<double> ref(n * host.dim_out());
    host.forward(n, sp.data(), A.data(), ref.data());
    std::vector<double> B(ref.size(), 0.0);
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < C; ++c)
        for (int p = 0; p < tab.num_pairs(); ++p) {
          double mono = 1;
          for (int f = 0; f < tab.pair_nu[p]; ++f)
            mono *= A[(i * C + c) * D + tab.pair_factors[4 * p + f]];
          double w = 0;
          for (int q = tab.pair_term_begin[p]; q < tab.pair_term_begin[p + 1]; ++q)
            w +=
                tab.term_coef[q] *
                tab.weights[(static_cast<std::size_t>(sp[i]) * tab.num_w_rows + tab.term_w_row[q]) *
                                C +
                            c];
          B[i * tab.dim_b + tab.pair_b_base[p] + c * tab.pair_b_stride[p]] += w * mono;
        }
    EXPECT_LE(test::rel_error(B, ref), 1e-13);
    EXPECT_GT(tab.num_pairs(), 0);
  }
}

}  // namespace
}  // namespace clebsch::cuda
