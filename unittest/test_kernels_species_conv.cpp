// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The species-factored convolution in both forms (kernels/engine/species_factored_conv.h:
// per-receiver blocks, GEMMs over slots) against the host convolution
// (src/o3/convolution.h) fed with what it stands for: x[s] = table[species[s]] and W = h W4 per
// edge, dE/dh = dE/dW W4^T. Float64 to round-off and float32 within its precision, on the
// emulated backend always and on the CUDA backend when a GPU is present; products of MACE's
// first layer and wider ones (sender features with l > 0, multiplicities that differ by block,
// several paths into one block, an edge-attribute block no path reads), graphs with empty
// receivers, mixed species and a CSR order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "clebsch/cuda/device/cuda_driver.h"
#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/engine/species_conv.h"
#include "clebsch/cuda/engine/species_gemm_conv.h"
#include "clebsch/cuda/generator/conv_shapes.h"
#include "clebsch/o3/convolution.h"
#include "clebsch/support/error.h"
#include "kernels/kernel_test_util.h"

namespace clebsch::cuda {
namespace {

class SpeciesConvTest : public ::testing::TestWithParam<std::string> {
 public:
  void SetUp() override {
    if (GetParam() == "cuda" && !device_available()) GTEST_SKIP() << "no CUDA device";
    backend_ = GetParam() == "emulated" ? make_emulated_backend() : make_cuda_backend(0);
  }
  template <class T>
  DeviceArray<T> up(const std::vector<T>& v) {
    DeviceArray<T> d(*backend_);
    d.upload(v);
    return d;
  }
  template <class T>
  DeviceArray<T> up_as(const std::vector<double>& v) {
    return up<T>(std::vector<T>(v.begin(), v.end()));
  }
  std::unique_ptr<DeviceBackend> backend_;
};

// The forms by name: "block" (per-receiver blocks) and "gemm" (GEMMs over slots).
const std::vector<std::string> kForms = {"block", "gemm"};

std::unique_ptr<SpeciesFactoredConv> make_form(const std::string& form, DeviceBackend& be,
                                               const TensorProduct& tp, DType dtype, int hidden) {
  if (form == "gemm") return std::make_unique<SpeciesGemmConv>(be, tp, dtype, hidden);
  return std::make_unique<SpeciesConv>(be, tp, dtype, hidden);
}

// The host reference of one case: out, dE/dY and dE/dh in float64.
struct Reference {
  std::vector<double> out, gy, gh;
};

Reference host_reference(const TensorProduct& tp, const EdgeIndex& edges,
                         const std::vector<double>& table, const std::vector<int>& species,
                         const std::vector<double>& y, const std::vector<double>& h,
                         const std::vector<double>& w4, const std::vector<double>& go, int H) {
  const int nw = tp.weight_numel(), d1 = tp.dim_in1();
  const std::size_t n = species.size(), e = std::size_t(edges.num_edges());
  std::vector<double> x(n * d1), w(e * nw, 0.0);
  for (std::size_t s = 0; s < n; ++s)
    for (int i = 0; i < d1; ++i) x[s * d1 + i] = table[std::size_t(species[s]) * d1 + i];
  for (std::size_t q = 0; q < e; ++q)
    for (int k = 0; k < H; ++k)
      for (int c = 0; c < nw; ++c) w[q * nw + c] += h[q * H + k] * w4[std::size_t(k) * nw + c];
  Reference r;
  r.out.resize(std::size_t(edges.num_receivers()) * tp.dim_out());
  r.gy.resize(y.size());
  r.gh.assign(h.size(), 0.0);
  std::vector<double> gx(x.size()), gw(w.size());
  convolution_forward<double>(tp, edges, x.data(), y.data(), w.data(), r.out.data());
  convolution_backward<double>(tp, edges, x.data(), y.data(), w.data(), go.data(), gx.data(),
                               r.gy.data(), gw.data());
  for (std::size_t q = 0; q < e; ++q)
    for (int k = 0; k < H; ++k)
      for (int c = 0; c < nw; ++c) r.gh[q * H + k] += gw[q * nw + c] * w4[std::size_t(k) * nw + c];
  return r;
}

template <class T>
void check_case(SpeciesConvTest& t, DeviceBackend& be, const GenericKernels& gk,
                const std::string& form, const TensorProduct& tp, int H, int num_edges, bool sorted,
                double tol) {
  constexpr int kNodes = 23, kSpecies = 3;
  const test::Graph g = test::random_graph(kNodes, num_edges, sorted, 11);
  const EdgeIndex edges(kNodes, kNodes, g.sender, g.receiver);
  std::vector<int> species(kNodes);
  for (int s = 0; s < kNodes; ++s) species[std::size_t(s)] = (s * 7 + s / 5) % kSpecies;
  const std::size_t e = g.sender.size();
  const int nw = tp.weight_numel();
  // The device's inputs rounded to T, so that the reference sees what the device sees.
  const auto table = test::rounded<T>(test::randn(std::size_t(kSpecies) * tp.dim_in1(), 1));
  const auto y = test::rounded<T>(test::randn(e * tp.dim_in2(), 2));
  const auto h = test::rounded<T>(test::randn(e * H, 3));
  const auto w4 = test::rounded<T>(test::randn(std::size_t(H) * nw, 5));
  const auto go = test::rounded<T>(test::randn(std::size_t(kNodes) * tp.dim_out(), 4));
  const Reference ref = host_reference(tp, edges, table, species, y, h, w4, go, H);

  const auto conv = make_form(form, be, tp, dtype_of<T>(), H);
  auto dtable = t.up_as<T>(table), dy = t.up_as<T>(y), dh = t.up_as<T>(h), dw4 = t.up_as<T>(w4),
       dgo = t.up_as<T>(go);
  auto dsp = t.up<int>(species), dsnd = t.up<int>(g.sender), dptr = t.up<int>(edges.receiver_ptr()),
       dord = t.up<int>(edges.by_receiver());
  DeviceArray<T> out(be, ref.out.size()), gy(be, y.size()), gh(be, h.size());
  out.poison(), gy.poison(), gh.poison();
  ConvBuffers b;
  b.num_senders = b.num_receivers = kNodes;
  b.num_edges = static_cast<std::int64_t>(e);
  b.sender = dsnd.data(), b.receiver_ptr = dptr.data();
  b.receiver_order = sorted ? nullptr : dord.data();
  b.h = dh.data(), b.w4 = dw4.data(), b.y = dy.data(), b.grad_out = dgo.data();
  b.out = out.data(), b.grad_h = gh.data(), b.grad_y = gy.data();
  conv->run(gk, nullptr, Pass::kForward, b, dtable.data(), dsp.data(), kSpecies);
  conv->run(gk, nullptr, Pass::kBackward, b, dtable.data(), dsp.data(), kSpecies);
  EXPECT_EQ(conv->take_status(nullptr), 0u);
  auto dl = [](const DeviceArray<T>& a) {
    const std::vector<T> v = a.download();
    return std::vector<double>(v.begin(), v.end());
  };
  EXPECT_LE(test::rel_error(dl(out), ref.out), tol);
  EXPECT_LE(test::rel_error(dl(gy), ref.gy), tol);
  EXPECT_LE(test::rel_error(dl(gh), ref.gh), tol);

  // accumulate_grad_y adds to what dE/dY holds (the engine sums the layers into one row).
  std::vector<double> base = test::rounded<T>(test::randn(y.size(), 9)), want(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) want[i] = base[i] + ref.gy[i];
  gy.upload(std::vector<T>(base.begin(), base.end()));
  b.accumulate_grad_y = true;
  conv->run(gk, nullptr, Pass::kBackward, b, dtable.data(), dsp.data(), kSpecies);
  EXPECT_LE(test::rel_error(dl(gy), want), tol * 4);
}

TEST_P(SpeciesConvTest, MatchesTheHostConvolutionOfTheTableAndHW4) {
  struct Case {
    std::string name;
    TensorProduct tp;
    int hidden;
  };
  const std::vector<Case> cases = {
      // MACE's first layer (48 channels: a block of 64 threads with idle ones).
      {"layer0",
       conv_tensor_product(Irreps("48x0e"), Irreps("0e+1o+2e+3o"),
                           Irreps("48x0e+48x1o+48x2e+48x3o")),
       40},
      // Sender features with l = 1, and a hidden width that is not a multiple of 32.
      {"MaceLike",
       conv_tensor_product(Irreps("48x0e+48x1o"), Irreps("0e+1o+2e+3o"),
                           Irreps("48x0e+48x1o+48x2e")),
       18},
      // Multiplicities that differ by block.
      {"NonUniform",
       conv_tensor_product(Irreps("128x0e+64x1o+32x2e"), Irreps("0e+1o+2e"),
                           Irreps("128x0e+64x1o+32x2e")),
       16},
      // Several paths into one block, each with its own weights.
      {"SummedPaths",
       summed_tensor_product(Irreps("6x0o+6x0e+6x1o+6x1e+6x2e"), Irreps("0e+1o+2e"),
                             Irreps("6x0e+6x1o+6x1e+6x2e")),
       8},
      // An edge-attribute block (2e) that no path reads: its dE/dY is zero.
      {"UnreadAttributes",
       conv_tensor_product(Irreps("8x0e"), Irreps("0e+1o+2e"), Irreps("8x0e+8x1o")), 40}};
  const GenericKernels gk(*backend_);
  // The block form's receivers a block, forward and backward: the defaults, and four and one
  // (a last block of 3 of the 23 receivers; CLEBSCH_SPECIES_RECV is read when the module is
  // built). The GEMM form has no such choice.
  for (const auto& [form, recv] :
       {std::pair{"block", ""}, std::pair{"block", "4,1"}, std::pair{"gemm", ""}})
    for (const Case& c : cases)
      for (auto [edges_n, sorted] : {std::tuple{150, true}, std::tuple{90, false}}) {
        SCOPED_TRACE(std::string(form) + " form, " + c.name + ", " + std::to_string(edges_n) +
                     " edges" + (sorted ? ", sorted" : ", CSR order") + ", receivers a block " +
                     (*recv ? recv : "default"));
        if (*recv)
          setenv("CLEBSCH_SPECIES_RECV", recv, 1);
        else
          unsetenv("CLEBSCH_SPECIES_RECV");
        check_case<double>(*this, *backend_, gk, form, c.tp, c.hidden, edges_n, sorted, 1e-12);
        check_case<float>(*this, *backend_, gk, form, c.tp, c.hidden, edges_n, sorted, 2e-5);
      }
  unsetenv("CLEBSCH_SPECIES_RECV");
}

TEST_P(SpeciesConvTest, RefusesProductsOutsideItsForm) {
  TensorProductOptions o;
  o.shared_weights = false;
  // A path without weights, and an edge-attribute block of multiplicity 2.
  const TensorProduct weightless(Irreps("8x0e"), Irreps("0e+1o"), Irreps("8x0e+8x1o"),
                                 {Instruction(0, 0, 0, ConnectionMode::kUvu, true),
                                  Instruction(0, 1, 1, ConnectionMode::kUvu, false)},
                                 o);
  const TensorProduct mul2(Irreps("8x0e"), Irreps("2x1o"), Irreps("8x1o"),
                           {Instruction(0, 0, 0, ConnectionMode::kUvu, true)}, o);
  for (const std::string& form : kForms) {
    SCOPED_TRACE(form);
    EXPECT_THROW(make_form(form, *backend_, weightless, DType::kFloat64, 16), CapacityError);
    EXPECT_THROW(make_form(form, *backend_, mul2, DType::kFloat64, 16), CapacityError);
    EXPECT_THROW(make_form(form, *backend_, mul2, DType::kFloat64, 0), CapacityError);
  }
}

// A sender whose species is outside the table: its edges are skipped and reported, nothing is
// read out of bounds; the other edges' results are unchanged.
TEST_P(SpeciesConvTest, ReportsASpeciesOutsideTheTable) {
  const TensorProduct tp =
      conv_tensor_product(Irreps("8x0e"), Irreps("0e+1o"), Irreps("8x0e+8x1o"));
  const GenericKernels gk(*backend_);
  for (const std::string& form : kForms) {
    SCOPED_TRACE(form);
    const auto conv = make_form(form, *backend_, tp, DType::kFloat64, 8);
    const std::vector<int> species = {0, 5}, sender = {0, 1}, ptr = {0, 2};
    auto dsp = up<int>(species), dsnd = up<int>(sender), dptr = up<int>(ptr);
    auto dtable = up<double>(test::randn(tp.dim_in1(), 1)), dy = up<double>(test::randn(8, 2)),
         dh = up<double>(test::randn(16, 3)), dw4 = up<double>(test::randn(8 * 16, 4));
    DeviceArray<double> out(*backend_, tp.dim_out());
    ConvBuffers b;
    b.num_senders = 2, b.num_receivers = 1, b.num_edges = 2;
    b.sender = dsnd.data(), b.receiver_ptr = dptr.data();
    b.h = dh.data(), b.w4 = dw4.data(), b.y = dy.data(), b.out = out.data();
    conv->run(gk, nullptr, Pass::kForward, b, dtable.data(), dsp.data(), 1);
    EXPECT_EQ(conv->take_status(nullptr), 1u);
    for (double v : out.download()) EXPECT_TRUE(std::isfinite(v));
  }
}

INSTANTIATE_TEST_SUITE_P(All, SpeciesConvTest, ::testing::Values("emulated", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace clebsch::cuda
