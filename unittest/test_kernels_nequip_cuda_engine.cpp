// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The NequIP CUDA engine (kernels/engine/nequip_cuda_engine.cpp, through make_cuda_engine) against
// the host NequIP engine, itself checked against the real nequip (test_exported_nequip_golden.cpp):
// on the emulated backend always (no GPU needed: the device source is compiled by the host
// compiler) and on the CUDA backend when a GPU is present. Models: the NequIP models of the
// exported_models fixture (parity on/off, ZBL, per-edge-type cutoffs, resnet, lmax 3) on
// nequip's own edge lists from their golden files, and the bundled Cu-Au potential on a small
// periodic cell. In float64 energies, per-atom energies and dE/dvector agree to 1e-10; float32
// and mixed stay within the float32 tolerances the host tests use (model-spec §5). Also: ghost
// mode (periodic images as ghost nodes with a copying exchange) equals the ghost-free host
// result, atomic and deterministic accumulation agree (deterministic bitwise run to run),
// compute_device equals compute, invalid graphs throw the host engine's messages, and gelu / mish
// in a gate and in the readout MLP equal the host engine. Edge
// batches (CudaEngineOptions::edge_batch, weights recomputed in the backward): the host result
// in every precision, the one-batch result to 1e-12 in float64 (energies, per-atom energies,
// dE/dvector, forces, virial), in ghost mode, from compute_device, and bitwise run to run. The
// fused radial form (CudaEngineOptions::fused_radial, required): the host result in float64,
// both accumulation modes, in one edge batch and in several; an edge MLP it cannot take is
// refused (require_fused_radial) or runs unfused.
// The exported models' directory is $CLEBSCH_MODELS_DIR, else CLEBSCH_EXPORTED_MODELS_DIR (set
// by CMake when the fixture exists); without either, those cases are skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "clebsch/cuda/device/cuda_driver.h"
#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/nvrtc_module.h"
#include "clebsch/cuda/engine/cuda_engine.h"
#include "clebsch/cuda/engine/nequip_cuda_source.h"
#include "clebsch/cuda/graph/edge_orderings.h"
#include "clebsch/engine/nequip_engine.h"
#include "clebsch/model/model.h"
#include "clebsch/model/model_reader.h"
#include "clebsch/model/safetensors.h"
#include "clebsch/support/error.h"
#include "owner_map_exchange.h"

namespace clebsch::cuda {
namespace {

using Vec = std::vector<double>;
using test::OwnerMapExchange;

// ---------------------------------------------------------------------------------------------
// Graphs
// ---------------------------------------------------------------------------------------------

struct Graph {
  std::string name;
  std::size_t num_local = 0, num_nodes = 0;
  std::vector<int> species, center, neighbor;
  std::vector<std::array<int, 3>> shift;  // periodic image of the neighbour (may be empty)
  Vec vector;
  AtomGraph view() const {
    return {num_local,     num_nodes,       species.data(), center.size(),
            center.data(), neighbor.data(), vector.data()};
  }
};

std::string models_dir() {
  if (const char* env = std::getenv("CLEBSCH_MODELS_DIR")) return env;
#ifdef CLEBSCH_EXPORTED_MODELS_DIR
  return CLEBSCH_EXPORTED_MODELS_DIR;
#else
  return "";
#endif
}

std::vector<int> to_int(const Vec& v) {
  std::vector<int> out;
  for (double x : v) out.push_back(static_cast<int>(std::lround(x)));
  return out;
}

/// nequip's own edge lists of a golden file (FORMAT.md §7).
std::vector<Graph> golden_graphs(const std::string& path) {
  const SafetensorsFile golden = SafetensorsFile::read(path);
  const nlohmann::json gj = nlohmann::json::parse(golden.metadata("golden_json"));
  std::vector<Graph> out;
  for (const auto& s : gj.at("structures")) {
    Graph g;
    g.name = s.at("name").get<std::string>();
    const auto N = s.at("n_atoms").get<std::int64_t>(), E = s.at("n_edges").get<std::int64_t>();
    g.num_local = g.num_nodes = static_cast<std::size_t>(N);
    g.species = to_int(golden.to_double(g.name + ".species", {N}));
    g.center = to_int(golden.to_double(g.name + ".edge_centre", {E}));
    g.neighbor = to_int(golden.to_double(g.name + ".edge_neighbour", {E}));
    g.vector = golden.to_double(g.name + ".edge_vectors", {E, 3});
    out.push_back(std::move(g));
  }
  return out;
}

/// A sheared periodic cell (one lattice vector shorter than most cutoffs, so atoms see their own
/// images) with every (centre, neighbour, image) inside the pair cutoff.
Graph periodic_graph(const Engine& engine, int num_atoms) {
  const double cell[9] = {3.3, 0.0, 0.0, 0.9, 3.6, 0.0, 0.4, 0.7, 3.9};
  const double frac[6][3] = {{0.02, 0.01, 0.0},  {0.5, 0.52, 0.03},  {0.48, 0.0, 0.51},
                             {0.03, 0.49, 0.47}, {0.26, 0.24, 0.27}, {0.74, 0.77, 0.72}};
  Graph g;
  g.name = "periodic";
  g.num_local = g.num_nodes = static_cast<std::size_t>(num_atoms);
  const int ns = static_cast<int>(engine.species().size());
  Vec pos;
  for (int i = 0; i < num_atoms; ++i) {
    for (int d = 0; d < 3; ++d) {
      double x = 0;
      for (int b = 0; b < 3; ++b) x += frac[i][b] * cell[3 * b + d];
      pos.push_back(x);
    }
    g.species.push_back(i % ns);
  }
  const int range = static_cast<int>(std::ceil(engine.r_max() / 3.3));
  for (int i = 0; i < num_atoms; ++i)
    for (int j = 0; j < num_atoms; ++j)
      for (int a = -range; a <= range; ++a)
        for (int b = -range; b <= range; ++b)
          for (int c = -range; c <= range; ++c) {
            if (i == j && a == 0 && b == 0 && c == 0) continue;
            double v[3];
            for (int d = 0; d < 3; ++d)
              v[d] =
                  pos[3 * j + d] - pos[3 * i + d] + a * cell[d] + b * cell[3 + d] + c * cell[6 + d];
            if (std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]) <
                engine.r_max(g.species[i], g.species[j])) {
              g.center.push_back(i);
              g.neighbor.push_back(j);
              g.shift.push_back({a, b, c});
              g.vector.insert(g.vector.end(), v, v + 3);
            }
          }
  return g;
}

/// The same edges, but every neighbour reached through a periodic shift becomes a ghost node.
Graph with_image_ghosts(const Graph& g, std::vector<int>& owner) {
  Graph out = g;
  std::map<std::tuple<int, int, int, int>, int> index;
  owner.clear();
  for (std::size_t e = 0; e < g.center.size(); ++e) {
    const auto& S = g.shift[e];
    if (S[0] == 0 && S[1] == 0 && S[2] == 0) continue;
    const auto key = std::make_tuple(g.neighbor[e], S[0], S[1], S[2]);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, static_cast<int>(g.num_local + owner.size())).first;
      owner.push_back(g.neighbor[e]);
      out.species.push_back(g.species[g.neighbor[e]]);
    }
    out.neighbor[e] = it->second;
  }
  out.num_nodes = g.num_local + owner.size();
  return out;
}

/// The same edges with a local atom without edges put first (node 0), so that with small edge
/// batches the first batch has a centre but no edge.
Graph with_isolated_first_atom(const Graph& g) {
  Graph out = g;
  out.name = g.name + " + isolated atom";
  ++out.num_local, ++out.num_nodes;
  out.species.insert(out.species.begin(), g.species.front());
  for (int& c : out.center) ++c;
  for (int& j : out.neighbor) ++j;
  return out;
}

/// That batches of at most @p cap edges cut @p g into several, and (@p oversized_centre) that
/// one of them is a single centre with more edges than @p cap: what the edge-batch tests must
/// exercise.
void expect_batches(const Graph& g, std::size_t cap, bool oversized_centre) {
  const EdgeOrderings o = order_edges_by_centre(g.num_local, g.num_nodes, g.center.size(),
                                                g.center.data(), g.neighbor.data(), cap);
  EXPECT_GT(o.num_batches(), 2u) << g.name << " cap " << cap;
  bool oversized = false;
  for (std::size_t b = 0; b < o.num_batches(); ++b)
    oversized |= o.batch_edge[b + 1] - o.batch_edge[b] > static_cast<int>(cap);
  EXPECT_EQ(oversized, oversized_centre) << g.name << " cap " << cap;
}

// ---------------------------------------------------------------------------------------------
// Comparison
// ---------------------------------------------------------------------------------------------

double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

double max_abs_diff(const Vec& a, const Vec& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

struct Tolerance {
  double energy, gradient;  // relative to max(1, |reference|)
};
Tolerance tolerance_of(Precision p) {
  // float64: summation order only. float32 / mixed: the host tests' float32 targets (per-atom
  // energy 1e-5, forces 1e-4, both relative to max(1, |value|)).
  return p == Precision::kFloat64 ? Tolerance{1e-10, 1e-10} : Tolerance{1e-5, 1e-4};
}

void expect_close(const EngineResult& dev, const EngineResult& ref, Precision p,
                  const std::string& what) {
  const Tolerance t = tolerance_of(p);
  const double de = std::abs(dev.energy - ref.energy);
  const double dae = max_abs_diff(dev.atom_energy, ref.atom_energy);
  const double dg = max_abs_diff(dev.edge_gradient, ref.edge_gradient);
  std::cout << "  [" << to_string(p) << "] " << what << ": |dE| " << de << ", max|de_i| " << dae
            << ", max|dg| " << dg << "  (E = " << ref.energy << ", max|g| "
            << max_abs(ref.edge_gradient) << ")\n";
  EXPECT_LE(de, t.energy * std::max(1.0, std::abs(ref.energy)) *
                    (p == Precision::kFloat64 ? 1.0 : double(ref.atom_energy.size())))
      << what;
  EXPECT_LE(dae, t.energy * std::max(1.0, max_abs(ref.atom_energy))) << what;
  EXPECT_LE(dg, t.gradient * std::max(1.0, max_abs(ref.edge_gradient))) << what;
}

/// What a caller makes of dE/dvector on graph @p g (engine.h): F[centre] += g_e,
/// F[neighbour] -= g_e, and the virial W_ab = -sum_e vector[e]_a g[e]_b.
struct ForcesAndVirial {
  Vec forces, virial;
};
ForcesAndVirial forces_and_virial(const Graph& g, const EngineResult& r) {
  ForcesAndVirial out{Vec(3 * g.num_nodes, 0.0), Vec(9, 0.0)};
  for (std::size_t e = 0; e < g.center.size(); ++e)
    for (int a = 0; a < 3; ++a) {
      out.forces[3 * g.center[e] + a] += r.edge_gradient[3 * e + a];
      out.forces[3 * g.neighbor[e] + a] -= r.edge_gradient[3 * e + a];
      for (int b = 0; b < 3; ++b)
        out.virial[3 * a + b] -= g.vector[3 * e + a] * r.edge_gradient[3 * e + b];
    }
  return out;
}

/// expect_close, and the forces and virial on @p g (relative to max(1, |reference|)) within
/// @p tolerance.
void expect_close_with_forces(const EngineResult& dev, const EngineResult& ref, const Graph& g,
                              Precision p, const std::string& what) {
  expect_close(dev, ref, p, what);
  const double t = tolerance_of(p).gradient;
  const ForcesAndVirial d = forces_and_virial(g, dev), r = forces_and_virial(g, ref);
  const double df = max_abs_diff(d.forces, r.forces), dw = max_abs_diff(d.virial, r.virial);
  std::cout << "      forces max|dF| " << df << ", virial max|dW| " << dw << "\n";
  EXPECT_LE(df, t * std::max(1.0, max_abs(r.forces))) << what;
  EXPECT_LE(dw, t * std::max(1.0, max_abs(r.virial))) << what;
}

/// The float64 batched result against the one-batch device result: summation order only (the
/// senders' dE/dx is summed batch after batch), 1e-12 relative.
void expect_equal_to_rounding(const EngineResult& batched, const EngineResult& one, const Graph& g,
                              const std::string& what) {
  const auto rel = [](const Vec& a, const Vec& b) {
    return max_abs_diff(a, b) / std::max(1e-300, max_abs(b));
  };
  const ForcesAndVirial d = forces_and_virial(g, batched), r = forces_and_virial(g, one);
  const double de = std::abs(batched.energy - one.energy) / std::max(1.0, std::abs(one.energy));
  const double dae = rel(batched.atom_energy, one.atom_energy);
  const double dg = rel(batched.edge_gradient, one.edge_gradient);
  const double df = rel(d.forces, r.forces), dw = rel(d.virial, r.virial);
  std::cout << "      vs one batch (relative): E " << de << ", e_i " << dae << ", g " << dg
            << ", F " << df << ", W " << dw << "\n";
  EXPECT_LE(de, 1e-12) << what;
  EXPECT_LE(dae, 1e-12) << what;
  EXPECT_LE(dg, 1e-12) << what;
  EXPECT_LE(df, 1e-12) << what;
  EXPECT_LE(dw, 1e-12) << what;
}

EngineResult run(Engine& engine, const Graph& g, GhostExchange* exchange = nullptr) {
  EngineResult r;
  engine.compute(g.view(), r, exchange);
  return r;
}

// ---------------------------------------------------------------------------------------------
// Fixture: one backend per parameter
// ---------------------------------------------------------------------------------------------

class NequipCuda : public ::testing::TestWithParam<std::string> {
 public:
  void SetUp() override {
    if (GetParam() == "cuda" && !device_available()) GTEST_SKIP() << "no CUDA device";
    backend_ = GetParam() == "emulated" ? std::shared_ptr<DeviceBackend>(make_emulated_backend())
                                        : std::shared_ptr<DeviceBackend>(make_cuda_backend(0));
  }
  // fused: the edge MLP's last layer inside the convolution (CudaEngineOptions::fused_radial),
  // required, so that a layer falling back to the unfused form fails the test.
  std::unique_ptr<CudaEngine> engine(const model::Model& m, Precision p, bool deterministic = false,
                                     std::size_t edge_batch = 0, bool fused = false) {
    CudaEngineOptions o;
    o.backend = backend_;
    o.deterministic = deterministic;
    o.edge_batch = edge_batch;
    o.fused_radial = fused;
    o.require_fused_radial = fused;
    return make_cuda_engine(m, p, o);
  }
  std::shared_ptr<DeviceBackend> backend_;
};

struct ExportedModel {
  std::string name, model_path, golden_path;
};

/// The exported NequIP models with golden data (gelu and mish readouts among them).
std::vector<ExportedModel> exported_nequip_models() {
  const std::string dir = models_dir();
  if (dir.empty()) return {};
  std::ifstream in(dir + "/models.json");
  if (!in) {
    ADD_FAILURE() << dir << "/models.json is missing: run unittest/reference/"
                  << "make_exported_models.py (ctest does it through the exported_models fixture)";
    return {};
  }
  const nlohmann::json index = nlohmann::json::parse(in);
  std::vector<ExportedModel> out;
  for (const auto& m : index.at("models")) {
    if (m.at("arch") != "nequip" || m.at("golden").is_null()) continue;
    out.push_back({m.at("name").get<std::string>(), dir + "/" + m.at("file").get<std::string>(),
                   dir + "/" + m.at("golden").get<std::string>()});
  }
  EXPECT_FALSE(out.empty()) << "models.json lists no NequIP model with golden data";
  return out;
}

std::string bundled_path() {
  return std::string(CLEBSCH_SOURCE_DIR) + "/potentials/bundled/cuau-nequip.safetensors";
}

TEST_P(NequipCuda, ExportedModelsFloat64MatchTheHostEngine) {
  const std::vector<ExportedModel> models = exported_nequip_models();
  if (models.empty()) GTEST_SKIP() << "no exported models (set CLEBSCH_MODELS_DIR)";
  for (const ExportedModel& c : models) {
    SCOPED_TRACE(c.name);
    const model::Model m = read_model(c.model_path);
    NequipEngine host(m, Precision::kFloat64);
    auto dev = engine(m, Precision::kFloat64);
    for (const Graph& g : golden_graphs(c.golden_path))
      expect_close(run(*dev, g), run(host, g), Precision::kFloat64, c.name + "/" + g.name);
  }
}

TEST_P(NequipCuda, BundledCuAuAllPrecisionsMatchTheHostEngine) {
  const model::Model m = read_model(bundled_path());
  for (Precision p : {Precision::kFloat64, Precision::kMixed, Precision::kFloat32}) {
    NequipEngine host(m, p);
    auto dev = engine(m, p);
    const Graph g = periodic_graph(host, 4);
    ASSERT_GT(g.center.size(), 20u);
    expect_close(run(*dev, g), run(host, g), p, "cuau-nequip/periodic");
  }
}

// gelu and mish in a gate (the readout MLP's are among the exported models above): the bundled
// model's first scalar activation made each in turn, against the host engine in every precision.
// The inputs of that gate reach the far, negative tail of both functions only rarely, so the
// test also checks that the change of activation moved the energy (it reached the device code).
TEST_P(NequipCuda, GeluAndMishInAGateMatchTheHostEngine) {
  const model::Model bundled = read_model(bundled_path());
  NequipEngine silu(bundled, Precision::kFloat64);
  const Graph g = periodic_graph(silu, 4);
  const double e_silu = run(silu, g).energy;
  for (const auto& [name, kind] : {std::pair{"gelu", model::Activation::Kind::kGelu},
                                   std::pair{"mish", model::Activation::Kind::kMish}}) {
    SCOPED_TRACE(std::string("gate ") + name);
    model::Model m = bundled;
    std::optional<model::Activation>& a = m.nequip->layers[0].gate.act_scalars[0];
    ASSERT_TRUE(a.has_value());
    a->name = name;
    a->kind = kind;
    for (Precision p : {Precision::kFloat64, Precision::kMixed, Precision::kFloat32}) {
      NequipEngine host(m, p);
      auto dev = engine(m, p);
      const EngineResult want = run(host, g);
      if (p == Precision::kFloat64) EXPECT_GT(std::abs(want.energy - e_silu), 1e-6);
      expect_close(run(*dev, g), want, p, std::string("cuau-nequip/") + name);
    }
  }
}

TEST_P(NequipCuda, ExportedFloat32AndMixedStayWithinTheHostTolerances) {
  const std::vector<ExportedModel> models = exported_nequip_models();
  if (models.empty()) GTEST_SKIP() << "no exported models (set CLEBSCH_MODELS_DIR)";
  // One model (parity, ZBL, per-edge-type cutoffs) keeps the emulated run short.
  const ExportedModel& c = models.front();
  const model::Model m = read_model(c.model_path);
  const Graph g = golden_graphs(c.golden_path).back();
  for (Precision p : {Precision::kMixed, Precision::kFloat32}) {
    NequipEngine host(m, p);
    auto dev = engine(m, p);
    expect_close(run(*dev, g), run(host, g), p, c.name + "/" + g.name);
  }
}

TEST_P(NequipCuda, GhostModeEqualsTheGhostFreeHostResult) {
  const model::Model m = read_model(bundled_path());
  for (Precision p : {Precision::kFloat64, Precision::kMixed}) {
    NequipEngine host(m, p);
    auto dev = engine(m, p);
    const Graph g = periodic_graph(host, 4);
    std::vector<int> owner;
    const Graph gg = with_image_ghosts(g, owner);
    ASSERT_GT(owner.size(), 0u);
    OwnerMapExchange exchange(g.num_local, owner);
    expect_close(run(*dev, gg, &exchange), run(host, g), p, "cuau-nequip/periodic ghosts");
    EXPECT_EQ(exchange.forward_calls, dev->num_layers() - 1);
    EXPECT_EQ(exchange.reverse_calls, dev->num_layers() - 1);
  }
}

// The weight stage in batches: caps of 1 edge (every centre a batch of its own, each with more
// edges than the cap), a few edges, and a third of the edges; both accumulation modes; a first
// batch with a centre but no edge. The host engine and the one-batch device result are the
// references; the deterministic mode stays bitwise reproducible with batches.
TEST_P(NequipCuda, EdgeBatchesMatchTheHostAndTheOneBatchResult) {
  const model::Model m = read_model(bundled_path());
  NequipEngine host(m, Precision::kFloat64);
  const Graph cell = periodic_graph(host, 6);
  for (const Graph& g : {cell, with_isolated_first_atom(cell)}) {
    const EngineResult ref = run(host, g);
    ASSERT_GT(max_abs(ref.edge_gradient), 1e-6);  // a meaningful comparison
    for (bool det : {true, false}) {
      const EngineResult one = run(*engine(m, Precision::kFloat64, det), g);
      for (std::size_t cap : {std::size_t(1), std::size_t(5), g.center.size() / 3}) {
        const std::string what = g.name + (det ? " deterministic" : " atomic") + " cap " +
                                 std::to_string(cap) + " of " + std::to_string(g.center.size());
        SCOPED_TRACE(what);
        expect_batches(g, cap, cap < 6);
        auto dev = engine(m, Precision::kFloat64, det, cap);
        const EngineResult r = run(*dev, g);
        expect_close_with_forces(r, ref, g, Precision::kFloat64, what);
        expect_equal_to_rounding(r, one, g, what);
        if (!det) continue;
        const EngineResult again = run(*dev, g);
        EXPECT_EQ(again.energy, r.energy);
        EXPECT_EQ(again.atom_energy, r.atom_energy);
        EXPECT_EQ(again.edge_gradient, r.edge_gradient);
      }
    }
  }
}

// The device-memory ledger (EngineMemory::device_buffers) names every buffer of a call: none is
// "unnamed", their bytes add up to what the backend holds, the call's peak is at least that,
// and the one-batch call keeps every layer's edge MLP weights while a call in batches holds one
// batch's (W per layer released, a batch's W instead), as its messages and their gradient are
// one batch's centres' rows.
TEST_P(NequipCuda, TheDeviceLedgerNamesEveryBuffer) {
  const model::Model m = read_model(bundled_path());
  NequipEngine host(m, Precision::kFloat64);
  const Graph g = periodic_graph(host, 6);
  std::size_t kept_w = 0, batch_w = 0, messages[2] = {0, 0};
  for (std::size_t cap : {std::size_t(0), g.center.size() / 3}) {
    SCOPED_TRACE("cap " + std::to_string(cap));
    auto dev = engine(m, Precision::kFloat32, true, cap);
    run(*dev, g);
    const EngineMemory mem = dev->memory_usage();
    std::size_t sum = 0;
    for (const EngineMemory::Buffer& b : mem.device_buffers) {
      EXPECT_NE(b.name, "unnamed") << b.bytes << " bytes";
      sum += b.bytes;
      if (b.name == "layer[0].W (edge MLP weights, kept)") (cap ? batch_w : kept_w) += b.bytes;
      if (cap && b.name == "W (one batch: edge MLP weights)") EXPECT_GT(b.bytes, 0u);
      if (b.name.rfind("message (", 0) == 0 || b.name.rfind("dE/dmessage", 0) == 0)
        messages[cap ? 1 : 0] += b.bytes;
    }
    EXPECT_EQ(sum, mem.device_bytes);
    EXPECT_GE(mem.device_peak_bytes, mem.device_bytes);
  }
  EXPECT_GT(kept_w, 0u);
  EXPECT_EQ(batch_w, 0u);
  EXPECT_GT(messages[1], 0u);
  EXPECT_LT(messages[1], messages[0]) << "the messages hold every centre's rows in batches";
}

TEST_P(NequipCuda, EdgeBatchesInFloat32AndMixedMatchTheHostEngine) {
  const model::Model m = read_model(bundled_path());
  for (Precision p : {Precision::kMixed, Precision::kFloat32}) {
    NequipEngine host(m, p);
    const Graph g = periodic_graph(host, 6);
    expect_close_with_forces(run(*engine(m, p, true, 2), g), run(host, g), g, p,
                             "cuau-nequip/periodic cap 2");
  }
}

// The exported models (ZBL, per-edge-type cutoffs, resnet, lmax 3) on nequip's edge lists, in
// batches of a few edges.
TEST_P(NequipCuda, ExportedModelsInEdgeBatchesMatchTheHostEngine) {
  const std::vector<ExportedModel> models = exported_nequip_models();
  if (models.empty()) GTEST_SKIP() << "no exported models (set CLEBSCH_MODELS_DIR)";
  for (const ExportedModel& c : models) {
    SCOPED_TRACE(c.name);
    const model::Model m = read_model(c.model_path);
    NequipEngine host(m, Precision::kFloat64);
    auto one = engine(m, Precision::kFloat64, true);
    auto dev = engine(m, Precision::kFloat64, true, 3);
    for (const Graph& g : golden_graphs(c.golden_path)) {
      const std::string what = c.name + "/" + g.name + " cap 3";
      if (g.center.size() > 6) expect_batches(g, 3, true);
      const EngineResult r = run(*dev, g);
      expect_close_with_forces(r, run(host, g), g, Precision::kFloat64, what);
      expect_equal_to_rounding(r, run(*one, g), g, what);
    }
  }
}

// The fused radial form (no per-edge weights stored, dE/dh from the convolution) against the
// host engine: the exported models on nequip's edge lists and the bundled potential on a periodic
// cell, both accumulation modes, one edge batch (hidden rows kept from the forward) and batches
// of 3 edges (recomputed in the backward).
TEST_P(NequipCuda, TheFusedRadialFormMatchesTheHostEngine) {
  struct Case {
    std::string name;
    model::Model model;
    std::vector<Graph> graphs;
  };
  std::vector<Case> cases;
  for (const ExportedModel& c : exported_nequip_models())
    cases.push_back({c.name, read_model(c.model_path), golden_graphs(c.golden_path)});
  {
    model::Model m = read_model(bundled_path());
    const Graph g = periodic_graph(NequipEngine(m, Precision::kFloat64), 4);
    cases.push_back({"cuau-nequip", std::move(m), {g}});
  }
  for (const Case& c : cases) {
    NequipEngine host(c.model, Precision::kFloat64);
    std::vector<EngineResult> refs;
    for (const Graph& g : c.graphs) {
      refs.push_back(run(host, g));
      ASSERT_GT(max_abs(refs.back().edge_gradient), 1e-6) << c.name << "/" << g.name;
    }
    for (bool det : {true, false})
      for (std::size_t cap : {std::size_t(0), std::size_t(3)}) {
        auto dev = engine(c.model, Precision::kFloat64, det, cap, /*fused=*/true);
        for (std::size_t i = 0; i < c.graphs.size(); ++i) {
          const Graph& g = c.graphs[i];
          const std::string what = c.name + "/" + g.name + (det ? " deterministic" : " atomic") +
                                   " cap " + std::to_string(cap);
          SCOPED_TRACE(what);
          if (cap > 0 && g.center.size() > 6) expect_batches(g, cap, true);
          expect_close_with_forces(run(*dev, g), refs[i], g, Precision::kFloat64, what);
        }
      }
  }
}

// An edge MLP whose last layer has an activation cannot be fused: with require_fused_radial the
// engine refuses it naming the layer, without it the layer runs unfused (the host result).
TEST_P(NequipCuda, AnEdgeMlpEndingInAnActivationRunsUnfusedOrIsRefused) {
  model::Model m = read_model(bundled_path());
  m.nequip->layers.back().edge_mlp.layers.back().activation = model::Activation{"silu"};
  NequipEngine host(m, Precision::kFloat64);
  const Graph g = periodic_graph(host, 4);
  CudaEngineOptions o;
  o.backend = backend_;
  o.fused_radial = o.require_fused_radial = true;
  const std::string last = "layer " + std::to_string(m.nequip->layers.size() - 1) + " edge_mlp";
  try {
    make_cuda_engine(m, Precision::kFloat64, o);
    ADD_FAILURE() << "no CapacityError";
  } catch (const CapacityError& e) {
    EXPECT_NE(std::string(e.what()).find(last + ": its last layer has an activation"),
              std::string::npos)
        << e.what();
  }
  o.require_fused_radial = false;
  expect_close(run(*make_cuda_engine(m, Precision::kFloat64, o), g), run(host, g),
               Precision::kFloat64, "cuau-nequip/periodic, last layer unfused");
}

// One engine whose graphs alternate between one batch (weights kept) and several (weights
// dropped and recomputed): the switch leaves nothing stale.
TEST_P(NequipCuda, EdgeBatchesSwitchWithTheGraphSize) {
  const model::Model m = read_model(bundled_path());
  NequipEngine host(m, Precision::kFloat64);
  const Graph small = periodic_graph(host, 2), large = periodic_graph(host, 6);
  const std::size_t cap = small.center.size();
  ASSERT_GT(large.center.size(), 2 * cap);
  auto dev = engine(m, Precision::kFloat64, true, cap);
  for (const Graph* g : {&small, &large, &small, &large})
    expect_close_with_forces(
        run(*dev, *g), run(host, *g), *g, Precision::kFloat64,
        g->name + " " + std::to_string(g->num_local) + " atoms, cap " + std::to_string(cap));
}

// Ghost rows of dE/dx summed over the batches before the reverse exchange.
TEST_P(NequipCuda, GhostModeInEdgeBatchesEqualsTheGhostFreeHostResult) {
  const model::Model m = read_model(bundled_path());
  for (Precision p : {Precision::kFloat64, Precision::kMixed}) {
    NequipEngine host(m, p);
    const Graph g = periodic_graph(host, 4);
    std::vector<int> owner;
    const Graph gg = with_image_ghosts(g, owner);
    ASSERT_GT(owner.size(), 0u);
    expect_batches(gg, 3, true);
    const EngineResult ref = run(host, g);
    for (bool det : {true, false}) {
      auto dev = engine(m, p, det, 3);
      OwnerMapExchange exchange(g.num_local, owner);
      const std::string what =
          std::string("cuau-nequip/periodic ghosts cap 3") + (det ? " deterministic" : " atomic");
      const EngineResult r = run(*dev, gg, &exchange);
      // Forces on the ghost-free graph: the ghosts' shares belong to their owners.
      expect_close_with_forces(r, ref, g, p, what);
      EXPECT_EQ(exchange.forward_calls, dev->num_layers() - 1);
      EXPECT_EQ(exchange.reverse_calls, dev->num_layers() - 1);
      if (p == Precision::kFloat64 && det) {
        OwnerMapExchange again_exchange(g.num_local, owner);
        const EngineResult again = run(*dev, gg, &again_exchange);
        EXPECT_EQ(again.edge_gradient, r.edge_gradient);
        EXPECT_EQ(again.atom_energy, r.atom_energy);
      }
    }
  }
}

// Under MPI every rank takes part in each exchange, also one without atoms or edges.
TEST_P(NequipCuda, RankWithoutAtomsStillTakesPartInExchanges) {
  const model::Model m = read_model(bundled_path());
  auto dev = engine(m, Precision::kFloat64);
  OwnerMapExchange exchange(0, {});
  Graph empty;
  const EngineResult r = run(*dev, empty, &exchange);
  EXPECT_EQ(r.energy, 0.0);
  EXPECT_TRUE(r.atom_energy.empty());
  EXPECT_TRUE(r.edge_gradient.empty());
  EXPECT_EQ(exchange.forward_calls, dev->num_layers() - 1);
  EXPECT_EQ(exchange.reverse_calls, dev->num_layers() - 1);
}

TEST_P(NequipCuda, DeterministicModeIsReproducibleAndMatches) {
  const model::Model m = read_model(bundled_path());
  NequipEngine host(m, Precision::kFloat64);
  auto dev = engine(m, Precision::kFloat64, /*deterministic=*/true);
  const Graph g = periodic_graph(host, 6);
  const EngineResult a = run(*dev, g), b = run(*dev, g);
  expect_close(a, run(host, g), Precision::kFloat64, "cuau-nequip/periodic deterministic");
  EXPECT_EQ(a.energy, b.energy);
  EXPECT_EQ(a.atom_energy, b.atom_energy);
  EXPECT_EQ(a.edge_gradient, b.edge_gradient);
}

// Also in edge batches, where the device orderings' batches are the host's.
TEST_P(NequipCuda, ComputeDeviceEqualsCompute) {
  const model::Model m = read_model(bundled_path());
  for (std::size_t cap : {std::size_t(0), std::size_t(4)}) {
    SCOPED_TRACE("cap " + std::to_string(cap));
    auto dev = engine(m, Precision::kFloat64, true, cap);
    const Graph g = periodic_graph(*dev, 4);
    if (cap > 0) expect_batches(g, cap, true);
    const EngineResult ref = run(*dev, g);
    DeviceBackend& b = dev->backend();
    DeviceArray<int> species(b), center(b), neighbor(b);
    DeviceArray<double> vector(b), energy(b, 1), atom_energy(b, g.num_local),
        gradient(b, g.vector.size());
    species.upload(g.species);
    center.upload(g.center);
    neighbor.upload(g.neighbor);
    vector.upload(g.vector);
    DeviceAtomGraph dg{g.num_local,   g.num_nodes,     g.center.size(), species.data(),
                       center.data(), neighbor.data(), vector.data()};
    dev->compute_device(dg, {energy.data(), atom_energy.data(), gradient.data()}, nullptr, nullptr);
    b.synchronize(nullptr);
    EXPECT_EQ(atom_energy.download(), ref.atom_energy);
    EXPECT_EQ(gradient.download(), ref.edge_gradient);
    EXPECT_NEAR(energy.download()[0], ref.energy, 1e-12 * std::abs(ref.energy));
  }
}

// Device graphs: indices and geometry are checked on the device, the messages worded on the host
// from its rules; either way the first offending value is reported with the host engine's
// message, and the engine stays usable.
TEST_P(NequipCuda, InvalidDeviceGraphsThrowTheHostEnginesMessages) {
  const model::Model m = read_model(bundled_path());
  NequipEngine host(m, Precision::kFloat64);
  auto dev = engine(m, Precision::kFloat64);
  DeviceBackend& b = dev->backend();
  const Graph good = periodic_graph(host, 4);
  const auto device_message = [&](const Graph& g) {
    DeviceArray<int> species(b), center(b), neighbor(b);
    DeviceArray<double> vector(b), gradient(b, g.vector.size());
    species.upload(g.species);
    center.upload(g.center);
    neighbor.upload(g.neighbor);
    vector.upload(g.vector);
    const DeviceAtomGraph dg{g.num_local,   g.num_nodes,     g.center.size(), species.data(),
                             center.data(), neighbor.data(), vector.data()};
    try {
      dev->compute_device(dg, {nullptr, nullptr, gradient.data()}, nullptr, nullptr);
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string("no exception");
  };
  const auto host_message = [&](const Graph& g) {
    try {
      run(host, g);
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string("no exception");
  };
  Graph far = good, nan = good, zero = good, both = good, species = good;
  far.vector[3 * 7 + 1] += 10.0;
  nan.vector[3 * 9] = std::nan("");
  zero.vector[3 * 4] = zero.vector[3 * 4 + 1] = zero.vector[3 * 4 + 2] = 0.0;
  both.vector[3 * 2] += 10.0;  // a geometry error before an index error: reported first
  both.neighbor[6] = 99;
  species.species[3] = -1;
  for (const Graph* g : {&far, &nan, &zero, &both, &species}) {
    const std::string h = host_message(*g);
    EXPECT_NE(h, "no exception");
    EXPECT_EQ(device_message(*g), h);
  }
  EXPECT_EQ(device_message(good), "no exception");
}

TEST_P(NequipCuda, InvalidGraphsThrowTheHostEnginesMessages) {
  const model::Model m = read_model(bundled_path());
  NequipEngine host(m, Precision::kFloat64);
  auto dev = engine(m, Precision::kFloat64);
  const Graph good = periodic_graph(host, 4);
  const auto message = [](Engine& e, const Graph& g, GhostExchange* ex = nullptr) {
    try {
      run(e, g, ex);
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string("no exception");
  };
  Graph far = good, species = good, centre = good, ghost = good;
  far.vector[3 * 5] += 10.0;
  species.species[2] = 7;
  centre.center[3] = 4;
  ghost.num_nodes += 1;
  ghost.species.push_back(0);
  for (const Graph* g : {&far, &species, &centre, &ghost}) {
    const std::string h = message(host, *g), d = message(*dev, *g);
    EXPECT_NE(h, "no exception");
    EXPECT_EQ(d, h);
  }
  // A failed call leaves the engine usable.
  expect_close(run(*dev, good), run(host, good), Precision::kFloat64, "after errors");
}

// The module the emulation builds with the host compiler must also compile with NVRTC (no GPU
// needed): every precision, and a model with ZBL and per-edge-type cutoffs when present.
TEST(NequipCudaSource, CompilesWithNvrtcForSm90) {
  std::vector<std::string> paths = {bundled_path()};
  const std::vector<ExportedModel> exported = exported_nequip_models();
  if (!exported.empty()) paths.push_back(exported.front().model_path);
  CompileOptions o;
  o.arch = "sm_90";
  o.cache_dir = "off";
  for (const std::string& path : paths) {
    const model::Model m = read_model(path);
    for (Precision p : {Precision::kFloat64, Precision::kMixed, Precision::kFloat32}) {
      SCOPED_TRACE(path + " " + to_string(p));
      const Cubin c = compile_cubin(nequip_kernels_source(m, p), "clebsch_nequip.cu", o);
      EXPECT_GT(c.image.size(), 1000u);
    }
  }
}

TEST(NequipCudaFactory, BuildsTheNequipEngineThroughMakeCudaEngine) {
  const model::Model m = read_model(bundled_path());
  CudaEngineOptions o;
  o.backend = std::shared_ptr<DeviceBackend>(make_emulated_backend());
  auto e = make_cuda_engine(m, Precision::kFloat64, o);
  NequipEngine host(m, Precision::kFloat64);
  EXPECT_EQ(e->species(), host.species());
  EXPECT_EQ(e->num_layers(), host.num_layers());
  EXPECT_EQ(e->exchange_width(), host.exchange_width());
  EXPECT_EQ(e->r_max(), host.r_max());
}

INSTANTIATE_TEST_SUITE_P(All, NequipCuda, ::testing::Values("emulated", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace clebsch::cuda
