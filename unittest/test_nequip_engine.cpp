// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Property tests of the NequIP host engine on synthetic random-weight models built here the way
// NequIP builds its ConvNetLayers (uvu convolution into every irrep of the target reachable from
// features x spherical harmonics, sorted; gate with silu/tanh scalars and gates; self-connection
// from layer 1; parity on or off; optional resnet, per-edge-type cutoffs and ZBL): dE/dvector
// equals central finite differences of the engine's energy, forces and virial equal finite
// differences with respect to positions and strain, edge cases (isolated atoms, one pair, an
// asymmetric per-edge-type cutoff, >200 neighbours, periodic self-images, empty ranks), ghost
// mode (one rank with ghost copies, and two threads as two MPI ranks) equals the ghost-free
// graph, float32 and mixed precision stay within model-spec §5 of float64, O(3) invariance of
// the energy and equivariance of the gradients, independence of the thread count, and invalid
// graphs or models throwing clebsch::Error naming the value. The comparison with the real
// nequip is test_nequip_golden.cpp.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "clebsch/engine/engine.h"
#include "clebsch/engine/nequip_engine.h"
#include "clebsch/model/model.h"
#include "clebsch/nn/activation.h"
#include "clebsch/nn/gate.h"
#include "clebsch/o3/tensor_product.h"
#include "clebsch/o3/wigner_d.h"
#include "clebsch/support/error.h"
#include "owner_map_exchange.h"

namespace clebsch {
namespace {

using Vec = std::vector<double>;
using test::OwnerMapExchange;

// ---------------------------------------------------------------------------------------------
// A synthetic NequIP model
// ---------------------------------------------------------------------------------------------

struct ModelConfig {
  std::string name;
  int num_species = 2;
  int embedding_dim = 3;
  int lmax = 2;
  bool parity = true;
  int num_layers = 3;
  int mul = 3;
  int num_basis = 6;
  std::vector<int> mlp_hidden = {8, 8};
  bool resnet = false;
  bool zbl = true;
  bool per_type_norm = true;
  std::vector<double> cutoffs = {3.5, 3.8, 3.6, 4.0};  // [centre species][neighbour species]
  std::uint64_t seed = 1;
  // Random weights at NequIP's own scales give an energy that is nearly a sum of pair terms
  // (the angular part of the gradient ~1e-6 of the radial one), which would let errors in the
  // angular backward hide under finite-difference noise. These keep every path O(1).
  double gain = 2.0;         // multiplies every random weight
  double avg_neighbors = 6;  // norm_const = 1/sqrt(a), a drawn in [avg, 2 avg]
  double radial_factor = 0;  // 0: NequIP's 2 pi / r_max^2
};

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : gen_(seed) {}
  double normal() { return normal_(gen_); }
  double uniform(double a, double b) { return std::uniform_real_distribution<double>(a, b)(gen_); }
  Vec normals(std::size_t n) {
    Vec v(n);
    for (double& x : v) x = normal();
    return v;
  }

 private:
  std::mt19937_64 gen_;
  std::normal_distribution<double> normal_;
};

model::Linear make_linear(const Irreps& in, const Irreps& out, Rng& rng, double gain) {
  model::Linear L;
  L.irreps_in = in;
  L.irreps_out = out;
  std::vector<int> fan(out.size(), 0);
  for (std::size_t i = 0; i < in.size(); ++i)
    for (std::size_t o = 0; o < out.size(); ++o)
      if (in[i].ir == out[o].ir) fan[o] += in[i].mul;
  int offset = 0;
  for (std::size_t i = 0; i < in.size(); ++i)
    for (std::size_t o = 0; o < out.size(); ++o)
      if (in[i].ir == out[o].ir && in[i].mul > 0 && out[o].mul > 0) {
        L.instructions.push_back({static_cast<int>(i), static_cast<int>(o), in[i].mul, out[o].mul,
                                  1.0 / std::sqrt(static_cast<double>(fan[o])), offset});
        offset += in[i].mul * out[o].mul;
      }
  L.weight = rng.normals(offset);
  for (double& w : L.weight) w *= gain;
  return L;
}

model::Activation make_act(const std::string& name, double cst) {
  model::Activation a;
  a.name = name;
  a.kind = name == "silu" ? model::Activation::Kind::kSilu : model::Activation::Kind::kTanh;
  a.cst = cst;
  return a;
}

model::Mlp make_mlp(const std::vector<int>& dims, Rng& rng, double gain = 1.0) {
  model::Mlp m;
  for (std::size_t l = 0; l + 1 < dims.size(); ++l) {
    model::Mlp::Layer L;
    L.h_in = dims[l];
    L.h_out = dims[l + 1];
    L.weight = rng.normals(static_cast<std::size_t>(L.h_in) * L.h_out);
    for (double& w : L.weight) w *= gain;
    L.weight_scale = (l == 0 ? 1.0 : std::sqrt(2.0)) / std::sqrt(static_cast<double>(L.h_in));
    if (l + 2 < dims.size()) L.activation = make_act("silu", 1.0);
    m.layers.push_back(L);
  }
  return m;
}

model::Activation act_of(const ScaledActivation& a) {
  return make_act(a.kind() == ActivationKind::kSilu ? "silu" : "tanh", a.cst());
}

model::NequipLayer make_layer(const Irreps& in, const Irreps& sh, const ModelConfig& c, int k,
                              Rng& rng) {
  const bool first = k == 0, last = k + 1 == c.num_layers;
  std::vector<MulIrrep> target;
  if (last) {
    target.push_back({c.mul, Irrep(0, 1)});
  } else {
    for (int l = 0; l <= c.lmax; ++l) {
      const int natural = l % 2 == 0 ? 1 : -1;
      target.push_back({c.mul, Irrep(l, natural)});
      if (c.parity) target.push_back({c.mul, Irrep(l, -natural)});
    }
  }
  const auto in_target = [&](const Irrep& ir) {
    return std::any_of(target.begin(), target.end(), [&](const MulIrrep& m) { return m.ir == ir; });
  };
  // Convolution: one uvu output block per path, then sorted (not simplified), as NequIP does.
  std::vector<MulIrrep> mid;
  std::vector<std::tuple<int, int, int>> raw;
  for (std::size_t i1 = 0; i1 < in.size(); ++i1)
    for (std::size_t i2 = 0; i2 < sh.size(); ++i2)
      for (const Irrep& ir : in[i1].ir* sh[i2].ir)
        if (in_target(ir)) {
          raw.emplace_back(static_cast<int>(i1), static_cast<int>(i2),
                           static_cast<int>(mid.size()));
          mid.push_back({in[i1].mul, ir});
        }
  const Irreps::Sorted sorted = Irreps(mid).sort();
  std::vector<Instruction> ins;
  for (const auto& [i1, i2, io] : raw) ins.emplace_back(i1, i2, sorted.p[io], "uvu", true);
  TensorProductOptions conv_options;
  conv_options.shared_weights = false;
  TensorProduct tp(in, sh, sorted.irreps, ins, conv_options);

  const auto reachable = [&](const Irrep& ir) {
    for (const MulIrrep& m : sorted.irreps)
      if (m.ir == ir) return true;
    return false;
  };
  std::vector<MulIrrep> scalars, gated;
  std::vector<ScaledActivation> act_scalars;
  for (const MulIrrep& m : target) {
    if (!reachable(m.ir)) continue;
    if (m.ir.l() == 0) {
      scalars.push_back(m);
      act_scalars.push_back(ScaledActivation::normalized(m.ir.p() == 1 ? ActivationKind::kSilu
                                                                       : ActivationKind::kTanh));
    } else {
      gated.push_back(m);
    }
  }
  int num_gated = 0;
  for (const MulIrrep& m : gated) num_gated += m.mul;
  const Irrep gate_ir = reachable(Irrep(0, 1)) ? Irrep(0, 1) : Irrep(0, -1);
  std::vector<MulIrrep> gates;
  std::vector<ScaledActivation> act_gates;
  if (num_gated > 0) {
    gates.push_back({num_gated, gate_ir});
    act_gates.push_back(ScaledActivation::normalized(gate_ir.p() == 1 ? ActivationKind::kSilu
                                                                      : ActivationKind::kTanh));
  }
  Gate gate(Irreps(scalars), act_scalars, Irreps(gates), act_gates, Irreps(gated));
  const Irreps conv_out = gate.irreps_in();

  model::NequipLayer L;
  L.cls = "ConvNetLayer";
  L.irreps_in = in;
  L.irreps_out = gate.irreps_out();
  L.resnet = c.resnet && in == gate.irreps_out();
  L.linear_1 = make_linear(in, in, rng, c.gain);
  L.norm_const.clear();
  for (int s = 0; s < (c.per_type_norm ? c.num_species : 1); ++s)
    L.norm_const.push_back(1.0 / std::sqrt(rng.uniform(c.avg_neighbors, 2 * c.avg_neighbors)));
  const int numel = tp.weight_numel();
  std::vector<int> dims = {c.num_basis};
  dims.insert(dims.end(), c.mlp_hidden.begin(), c.mlp_hidden.end());
  dims.push_back(numel);
  L.edge_mlp = make_mlp(dims, rng, c.gain);
  L.tp = model::TensorProduct{tp, true, {}};
  L.linear_2 = make_linear(sorted.irreps.simplify(), conv_out, rng, c.gain);
  if (!first) {
    const Irreps attrs(std::to_string(c.embedding_dim) + "x0e");
    std::vector<Instruction> sc_ins;
    for (std::size_t i1 = 0; i1 < in.size(); ++i1)
      for (std::size_t o = 0; o < conv_out.size(); ++o)
        if (in[i1].ir == conv_out[o].ir)
          sc_ins.emplace_back(static_cast<int>(i1), 0, static_cast<int>(o), "uvw", true);
    TensorProduct sc(in, attrs, conv_out, sc_ins);
    L.sc = model::TensorProduct{sc, false, rng.normals(sc.weight_numel())};
    for (double& w : L.sc->weight) w *= c.gain;
  }
  model::Gate& G = L.gate;
  G.irreps_in = gate.irreps_in();
  G.irreps_out = gate.irreps_out();
  G.irreps_scalars = Irreps(scalars);
  G.irreps_gates = Irreps(gates);
  G.irreps_gated = Irreps(gated);
  const std::vector<int>& gather = gate.gather();
  const int ns = G.irreps_scalars.dim(), ng = G.irreps_gates.dim();
  G.index_scalars.assign(gather.begin(), gather.begin() + ns);
  G.index_gates.assign(gather.begin() + ns, gather.begin() + ns + ng);
  G.index_gated.assign(gather.begin() + ns + ng, gather.end());
  for (const ScaledActivation& a : act_scalars) G.act_scalars.push_back(act_of(a));
  for (const ScaledActivation& a : act_gates) G.act_gates.push_back(act_of(a));
  return L;
}

model::Model make_model(const ModelConfig& c) {
  Rng rng(c.seed);
  const int S = c.num_species;
  static const int kZ[] = {29, 79, 8, 1};
  static const char* kSymbol[] = {"Cu", "Au", "O", "H"};
  model::Model m;
  m.format_version = "1.0";
  m.arch = model::Arch::kNequip;
  m.model_dtype = "float64";
  for (int s = 0; s < S; ++s) m.species.push_back({kZ[s], kSymbol[s], kSymbol[s]});
  m.r_max_pairs = c.cutoffs;
  m.r_max = *std::max_element(c.cutoffs.begin(), c.cutoffs.end());
  m.edge_vector = model::EdgeVector::kNeighbourMinusCentre;
  m.sh_lmax = c.lmax;
  m.sh_irreps = Irreps::spherical_harmonics(c.lmax);

  model::Nequip nq;
  nq.embedding_dim = c.embedding_dim;
  nq.type_embedding = rng.normals(static_cast<std::size_t>(S) * c.embedding_dim);
  nq.radial.num_basis = c.num_basis;
  for (int n = 0; n < c.num_basis; ++n)
    nq.radial.bessel_weights.push_back(n + 1 + 0.1 * rng.normal());
  for (double r : c.cutoffs) nq.radial.rmax_recip.push_back(1.0 / r);
  nq.radial.cutoff_p = 6;
  nq.radial.factor = c.radial_factor > 0 ? c.radial_factor : 2 * M_PI / (m.r_max * m.r_max);
  Irreps in(std::to_string(c.embedding_dim) + "x0e");
  for (int k = 0; k < c.num_layers; ++k) {
    nq.layers.push_back(make_layer(in, m.sh_irreps, c, k, rng));
    in = nq.layers.back().irreps_out;
  }
  nq.readout = make_mlp({in.dim(), 1}, rng);
  for (int s = 0; s < S; ++s) {
    nq.scales.push_back(rng.uniform(0.5, 1.5));
    nq.shifts.push_back(rng.uniform(-3.0, -1.0));
  }
  if (c.zbl) {
    model::NequipZbl z;
    for (int s = 0; s < S; ++s) z.atomic_numbers.push_back(kZ[s]);
    z.qqr2exesquare = 14.399645 / 2;
    z.pzbl = 0.23;
    z.a0 = 0.46850;
    z.cutoff_p = 6;
    z.c = {0.02817, 0.28022, 0.50986, 0.18175};
    z.d = {-0.20162, -0.40290, -0.94229, -3.19980};
    nq.pair_potential = z;
  }
  m.nequip = nq;
  return m;
}

std::vector<ModelConfig> model_configs() {
  std::vector<ModelConfig> out;
  ModelConfig a;
  a.name = "parity_zbl_per_edge_cutoff";
  out.push_back(a);
  ModelConfig b;
  b.name = "noparity_resnet_lmax1";
  b.parity = false;
  b.lmax = 1;
  b.num_layers = 4;
  b.resnet = true;
  b.zbl = false;
  b.per_type_norm = false;
  b.cutoffs = {4.0, 4.0, 4.0, 4.0};
  b.seed = 2;
  out.push_back(b);
  ModelConfig c;
  c.name = "lmax3_three_species";
  c.lmax = 3;
  c.num_species = 3;
  c.mul = 2;
  c.num_layers = 2;
  c.cutoffs = {3.6, 3.7, 3.8, 3.7, 3.9, 3.5, 3.8, 3.5, 4.0};
  c.seed = 3;
  out.push_back(c);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Structures and graphs
// ---------------------------------------------------------------------------------------------

struct Structure {
  Vec positions;             // [n][3]
  std::vector<int> species;  // [n]
  Vec cell = Vec(9, 0.0);    // rows are lattice vectors
  std::array<bool, 3> pbc = {false, false, false};
  std::size_t size() const { return species.size(); }
};

/// A graph that owns its arrays; shifts are kept so vectors can be rebuilt from positions.
struct Graph {
  std::size_t num_local = 0, num_nodes = 0;
  std::vector<int> species, center, neighbor;
  std::vector<std::array<int, 3>> shift;
  Vec vector;
  AtomGraph view() const {
    AtomGraph g;
    g.num_local = num_local;
    g.num_nodes = num_nodes;
    g.species = species.data();
    g.num_edges = center.size();
    g.center = center.data();
    g.neighbor = neighbor.data();
    g.vector = vector.data();
    return g;
  }
};

Vec edge_vectors(const Structure& s, const Graph& g) {
  Vec v(3 * g.center.size());
  for (std::size_t e = 0; e < g.center.size(); ++e)
    for (int a = 0; a < 3; ++a) {
      double x = s.positions[3 * g.neighbor[e] + a] - s.positions[3 * g.center[e] + a];
      for (int b = 0; b < 3; ++b) x += g.shift[e][b] * s.cell[3 * b + a];
      v[3 * e + a] = x;
    }
  return v;
}

/// The ghost-free graph of a structure: every (centre, neighbour, image) closer than the cutoff
/// of its species pair, periodic images of the centre itself included.
Graph build_graph(const Structure& s, const Engine& engine) {
  int range[3] = {0, 0, 0};
  for (int a = 0; a < 3; ++a) {
    if (!s.pbc[a]) continue;
    const double* u = &s.cell[3 * ((a + 1) % 3)];
    const double* w = &s.cell[3 * ((a + 2) % 3)];
    const double cross[3] = {u[1] * w[2] - u[2] * w[1], u[2] * w[0] - u[0] * w[2],
                             u[0] * w[1] - u[1] * w[0]};
    const double* c = &s.cell[3 * a];
    const double volume = std::abs(c[0] * cross[0] + c[1] * cross[1] + c[2] * cross[2]);
    const double height =
        volume / std::sqrt(cross[0] * cross[0] + cross[1] * cross[1] + cross[2] * cross[2]);
    range[a] = static_cast<int>(std::ceil(engine.r_max() / height));
  }
  Graph g;
  g.num_local = g.num_nodes = s.size();
  g.species = s.species;
  for (std::size_t i = 0; i < s.size(); ++i)
    for (std::size_t j = 0; j < s.size(); ++j)
      for (int a = -range[0]; a <= range[0]; ++a)
        for (int b = -range[1]; b <= range[1]; ++b)
          for (int c = -range[2]; c <= range[2]; ++c) {
            if (i == j && a == 0 && b == 0 && c == 0) continue;
            double v[3];
            for (int d = 0; d < 3; ++d)
              v[d] = s.positions[3 * j + d] - s.positions[3 * i + d] + a * s.cell[d] +
                     b * s.cell[3 + d] + c * s.cell[6 + d];
            const double r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
            if (r < engine.r_max(s.species[i], s.species[j])) {
              g.center.push_back(static_cast<int>(i));
              g.neighbor.push_back(static_cast<int>(j));
              g.shift.push_back({a, b, c});
            }
          }
  g.vector = edge_vectors(s, g);
  return g;
}

Structure random_cluster(int n, int num_species, double box, double min_dist, std::uint64_t seed) {
  Rng rng(seed);
  Structure s;
  while (static_cast<int>(s.size()) < n) {
    const double p[3] = {rng.uniform(0, box), rng.uniform(0, box), rng.uniform(0, box)};
    bool ok = true;
    for (std::size_t j = 0; j < s.size() && ok; ++j) {
      double d2 = 0;
      for (int a = 0; a < 3; ++a) d2 += std::pow(p[a] - s.positions[3 * j + a], 2);
      ok = d2 > min_dist * min_dist;
    }
    if (!ok) continue;
    s.positions.insert(s.positions.end(), p, p + 3);
    s.species.push_back(static_cast<int>(s.size()) % num_species);
  }
  return s;
}

/// A sheared periodic cell with one lattice vector shorter than the cutoff, so atoms see their
/// own images.
Structure periodic_cell(int num_species) {
  Structure s;
  s.cell = {3.3, 0.0, 0.0, 0.9, 3.6, 0.0, 0.4, 0.7, 3.9};
  s.pbc = {true, true, true};
  const double frac[4][3] = {
      {0.02, 0.01, 0.0}, {0.5, 0.52, 0.03}, {0.48, 0.0, 0.51}, {0.03, 0.49, 0.47}};
  for (int i = 0; i < 4; ++i) {
    for (int d = 0; d < 3; ++d) {
      double x = 0;
      for (int b = 0; b < 3; ++b) x += frac[i][b] * s.cell[3 * b + d];
      s.positions.push_back(x);
    }
    s.species.push_back(i % num_species);
  }
  return s;
}

struct Evaluation {
  double energy = 0;
  Vec atom_energy, edge_gradient;
};

Evaluation evaluate(Engine& engine, const Graph& g, GhostExchange* exchange = nullptr) {
  EngineResult r;
  engine.compute(g.view(), r, exchange);
  return {r.energy, r.atom_energy, r.edge_gradient};
}

/// F[center] += g, F[neighbor] -= g (engine.h).
Vec forces_of(const Graph& g, const Vec& edge_gradient, std::size_t num_atoms) {
  Vec f(3 * num_atoms, 0.0);
  for (std::size_t e = 0; e < g.center.size(); ++e)
    for (int a = 0; a < 3; ++a) {
      f[3 * g.center[e] + a] += edge_gradient[3 * e + a];
      f[3 * g.neighbor[e] + a] -= edge_gradient[3 * e + a];
    }
  return f;
}

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

/// Central differences of the energy with respect to each vector component of @p edges; returns
/// the largest deviation from the engine's edge_gradient, relative to max(1, |gradient|).
double vector_fd_error(Engine& engine, const Graph& g, const std::vector<int>& edges,
                       double h = 1e-5) {
  const Evaluation ref = evaluate(engine, g);
  const double scale = std::max(1.0, max_abs(ref.edge_gradient));
  double worst = 0;
  for (int e : edges)
    for (int a = 0; a < 3; ++a) {
      Graph p = g;
      p.vector[3 * e + a] += h;
      const double ep = evaluate(engine, p).energy;
      p.vector[3 * e + a] -= 2 * h;
      const double em = evaluate(engine, p).energy;
      worst = std::max(worst, std::abs((ep - em) / (2 * h) - ref.edge_gradient[3 * e + a]));
    }
  return worst / scale;
}

/// Largest component of the edge gradients perpendicular to their edges, relative to the largest
/// component: the share of the angular (spherical-harmonic) path in the gradient.
double angular_share(const Graph& g, const Vec& edge_gradient) {
  double angular = 0;
  for (std::size_t e = 0; e < g.center.size(); ++e) {
    const double* v = &g.vector[3 * e];
    const double* d = &edge_gradient[3 * e];
    const double r2 = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
    const double radial = (v[0] * d[0] + v[1] * d[1] + v[2] * d[2]) / r2;
    for (int a = 0; a < 3; ++a) angular = std::max(angular, std::abs(d[a] - radial * v[a]));
  }
  return angular / max_abs(edge_gradient);
}

std::vector<int> all_edges(const Graph& g) {
  std::vector<int> e(g.center.size());
  for (std::size_t i = 0; i < e.size(); ++i) e[i] = static_cast<int>(i);
  return e;
}

// Central differences with h = 1e-5 leave O(h^2) truncation and O(eps |E| / h) rounding, both
// near 1e-10 here; anything wrong in a backward pass shows up at 1e-3 or worse.
constexpr double kFdTolerance = 1e-7;

class NequipEngineModel : public ::testing::TestWithParam<ModelConfig> {};

// ---------------------------------------------------------------------------------------------
// Gradients
// ---------------------------------------------------------------------------------------------

TEST_P(NequipEngineModel, EdgeGradientIsTheFiniteDifferenceOfTheEnergy) {
  const model::Model m = make_model(GetParam());
  NequipEngine engine(m);
  const Structure s = random_cluster(7, m.num_species(), 4.5, 2.0, 11);
  const Graph g = build_graph(s, engine);
  ASSERT_GT(g.center.size(), 10u);
  // The test has power over the angular backward only if the energy really depends on angles:
  // a 1e-3 error in the angular part must exceed the tolerance.
  EXPECT_GT(angular_share(g, evaluate(engine, g).edge_gradient), 1e3 * kFdTolerance);
  EXPECT_LT(vector_fd_error(engine, g, all_edges(g)), kFdTolerance);
}

TEST_P(NequipEngineModel, ForcesAreTheNegativeGradientWithRespectToPositions) {
  const model::Model m = make_model(GetParam());
  NequipEngine engine(m);
  const Structure s = periodic_cell(m.num_species());
  Graph g = build_graph(s, engine);
  const Evaluation ref = evaluate(engine, g);
  const Vec f = forces_of(g, ref.edge_gradient, s.size());
  const double h = 1e-5;
  double worst = 0;
  for (std::size_t i = 0; i < s.size(); ++i)
    for (int a = 0; a < 3; ++a) {
      Structure p = s;
      p.positions[3 * i + a] += h;
      g.vector = edge_vectors(p, g);
      const double ep = evaluate(engine, g).energy;
      p.positions[3 * i + a] -= 2 * h;
      g.vector = edge_vectors(p, g);
      const double em = evaluate(engine, g).energy;
      worst = std::max(worst, std::abs(-(ep - em) / (2 * h) - f[3 * i + a]));
    }
  EXPECT_LT(worst / std::max(1.0, max_abs(f)), kFdTolerance);
}

TEST_P(NequipEngineModel, VirialIsTheNegativeStrainDerivative) {
  const model::Model m = make_model(GetParam());
  NequipEngine engine(m);
  const Structure s = periodic_cell(m.num_species());
  Graph g = build_graph(s, engine);
  const Evaluation ref = evaluate(engine, g);
  // W_ab = -sum_e v_a g_b (engine.h).
  double W[3][3] = {};
  for (std::size_t e = 0; e < g.center.size(); ++e)
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) W[a][b] -= g.vector[3 * e + a] * ref.edge_gradient[3 * e + b];
  const double h = 1e-5;
  double worst = 0, scale = 1;
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      // x -> x (I + eps) with eps = h E_ab applied to positions and cell rows alike.
      double e_pm[2];
      for (int sign = 0; sign < 2; ++sign) {
        Structure p = s;
        const double d = sign == 0 ? h : -h;
        for (std::size_t i = 0; i < p.size(); ++i)
          p.positions[3 * i + b] += d * s.positions[3 * i + a];
        for (int r = 0; r < 3; ++r) p.cell[3 * r + b] += d * s.cell[3 * r + a];
        g.vector = edge_vectors(p, g);
        e_pm[sign] = evaluate(engine, g).energy;
      }
      const double dE = (e_pm[0] - e_pm[1]) / (2 * h);
      worst = std::max(worst, std::abs(-dE - W[a][b]));
      scale = std::max(scale, std::abs(W[a][b]));
    }
  EXPECT_LT(worst / scale, kFdTolerance);
  // A rotation-invariant energy has a symmetric virial.
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < a; ++b) EXPECT_NEAR(W[a][b], W[b][a], 1e-10 * scale);
}

// ---------------------------------------------------------------------------------------------
// Edge cases
// ---------------------------------------------------------------------------------------------

TEST_P(NequipEngineModel, IsolatedAtomsAddUpAndHaveNoEdges) {
  const model::Model m = make_model(GetParam());
  NequipEngine engine(m);
  Structure one;
  one.positions = {0, 0, 0};
  one.species = {1};
  const Evaluation e1 = evaluate(engine, build_graph(one, engine));
  EXPECT_TRUE(std::isfinite(e1.energy));
  EXPECT_TRUE(e1.edge_gradient.empty());
  ASSERT_EQ(e1.atom_energy.size(), 1u);
  // The same atom far (beyond every cutoff) from a second one keeps its energy.
  Structure two = one;
  two.positions.insert(two.positions.end(), {20, 0, 0});
  two.species.push_back(0);
  const Evaluation e2 = evaluate(engine, build_graph(two, engine));
  EXPECT_NEAR(e2.atom_energy[0], e1.atom_energy[0], 1e-14 * std::abs(e1.atom_energy[0]));
  EXPECT_NEAR(e2.energy, e2.atom_energy[0] + e2.atom_energy[1], 1e-14 * std::abs(e2.energy));
}

TEST_P(NequipEngineModel, SinglePairIsAntisymmetricAndMatchesFiniteDifferences) {
  const model::Model m = make_model(GetParam());
  NequipEngine engine(m);
  Structure s;
  s.positions = {0.1, -0.2, 0.3, 1.9, 1.1, -0.6};
  s.species = {0, 0};
  const Graph g = build_graph(s, engine);
  ASSERT_EQ(g.center.size(), 2u);
  const Evaluation r = evaluate(engine, g);
  // Same species: edge 1->0 is edge 0->1 seen from the other end.
  for (int a = 0; a < 3; ++a)
    EXPECT_NEAR(r.edge_gradient[a], -r.edge_gradient[3 + a], 1e-13 * max_abs(r.edge_gradient));
  EXPECT_NEAR(r.atom_energy[0], r.atom_energy[1], 1e-13 * std::abs(r.atom_energy[0]));
  EXPECT_LT(vector_fd_error(engine, g, all_edges(g)), kFdTolerance);
}

TEST(NequipEngine, AsymmetricPerEdgeTypeCutoffGivesOneDirectedEdge) {
  ModelConfig c = model_configs()[0];  // cutoffs: (0,1) 3.8, (1,0) 3.6
  NequipEngine engine(make_model(c));
  Structure s;
  s.positions = {0, 0, 0, 3.7, 0, 0};
  s.species = {0, 1};
  const Graph g = build_graph(s, engine);
  ASSERT_EQ(g.center.size(), 1u);
  EXPECT_EQ(g.center[0], 0);
  EXPECT_LT(vector_fd_error(engine, g, {0}), kFdTolerance);
}

TEST_P(NequipEngineModel, TwoHundredFiftyNeighboursAndEdgeOrderDoNotMatter) {
  const model::Model m = make_model(GetParam());
  NequipEngine engine(m);
  Rng rng(5);
  Graph g;
  const int n = 251;
  g.num_local = g.num_nodes = n;
  for (int i = 0; i < n; ++i) g.species.push_back(i % m.num_species());
  g.species[0] = 0;
  for (int j = 1; j < n; ++j) {
    const double rc = engine.r_max(0, g.species[j]);
    double v[3], r2;
    do {
      for (double& x : v) x = rng.uniform(-rc, rc);
      r2 = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
    } while (r2 < 1.2 * 1.2 || r2 >= 0.97 * rc * rc);
    g.center.push_back(0);
    g.neighbor.push_back(j);
    g.shift.push_back({0, 0, 0});
    g.vector.insert(g.vector.end(), v, v + 3);
  }
  const Evaluation ref = evaluate(engine, g);
  EXPECT_TRUE(std::isfinite(ref.energy));
  EXPECT_LT(vector_fd_error(engine, g, {0, 31, 32, 33, 127, 200, 249}), kFdTolerance);
  // Reversed edge order: the sums change order, nothing else.
  Graph rev = g;
  const std::size_t ne = g.center.size();
  for (std::size_t e = 0; e < ne; ++e) {
    rev.neighbor[e] = g.neighbor[ne - 1 - e];
    for (int a = 0; a < 3; ++a) rev.vector[3 * e + a] = g.vector[3 * (ne - 1 - e) + a];
  }
  const Evaluation r2 = evaluate(engine, rev);
  EXPECT_NEAR(r2.energy, ref.energy, 1e-12 * std::abs(ref.energy));
  double worst = 0;
  for (std::size_t e = 0; e < ne; ++e)
    for (int a = 0; a < 3; ++a)
      worst = std::max(
          worst, std::abs(r2.edge_gradient[3 * e + a] - ref.edge_gradient[3 * (ne - 1 - e) + a]));
  EXPECT_LT(worst, 1e-12 * max_abs(ref.edge_gradient));
}

TEST_P(NequipEngineModel, PeriodicSelfImagesOfOneAtom) {
  const model::Model m = make_model(GetParam());
  NequipEngine engine(m);
  Structure s;
  s.positions = {0.3, 0.2, 0.1};
  s.species = {0};
  s.cell = {2.2, 0, 0, 0.3, 2.4, 0, 0.2, 0.1, 2.5};
  s.pbc = {true, true, true};
  const Graph g = build_graph(s, engine);
  ASSERT_GT(g.center.size(), 6u);
  for (std::size_t e = 0; e < g.center.size(); ++e) {
    EXPECT_EQ(g.center[e], 0);
    EXPECT_EQ(g.neighbor[e], 0);
  }
  const Evaluation r = evaluate(engine, g);
  // Every image pair (v, -v) carries opposite gradients, so the force on the atom vanishes.
  const Vec f = forces_of(g, r.edge_gradient, 1);
  EXPECT_LT(max_abs(f), 1e-12 * std::max(1.0, max_abs(r.edge_gradient)));
  EXPECT_LT(vector_fd_error(engine, g, all_edges(g)), kFdTolerance);
}

// ---------------------------------------------------------------------------------------------
// Ghosts
// ---------------------------------------------------------------------------------------------

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

TEST_P(NequipEngineModel, GhostModeEqualsGhostFreeGraph) {
  const model::Model m = make_model(GetParam());
  for (Precision precision : {Precision::kFloat64, Precision::kMixed}) {
    NequipEngine engine(m, precision);
    const Structure s = periodic_cell(m.num_species());
    const Graph g = build_graph(s, engine);
    std::vector<int> owner;
    const Graph gg = with_image_ghosts(g, owner);
    ASSERT_GT(owner.size(), 0u);
    OwnerMapExchange exchange(g.num_local, owner);
    const Evaluation ref = evaluate(engine, g);
    const Evaluation gh = evaluate(engine, gg, &exchange);
    EXPECT_EQ(exchange.forward_calls, engine.num_layers() - 1);
    EXPECT_EQ(exchange.reverse_calls, engine.num_layers() - 1);
    EXPECT_EQ(exchange.max_width, engine.exchange_width());
    const double tol = precision == Precision::kFloat64 ? 1e-12 : 1e-5;
    EXPECT_NEAR(gh.energy, ref.energy, tol * std::abs(ref.energy));
    EXPECT_LT(max_abs_diff(gh.atom_energy, ref.atom_energy), tol * max_abs(ref.atom_energy));
    EXPECT_LT(max_abs_diff(gh.edge_gradient, ref.edge_gradient), tol * max_abs(ref.edge_gradient));
  }
}

/// Two engines in two threads acting as two MPI ranks: rank r owns some atoms, and its ghosts
/// are atoms (or images) owned by either rank. Exchanges meet at a barrier, as MPI calls would.
struct RankExchange;

struct Board {
  std::mutex mutex;
  std::condition_variable cv;
  int arrived = 0;
  long generation = 0;
  void* buffer[2] = {nullptr, nullptr};
  const RankExchange* rank[2] = {nullptr, nullptr};
  void barrier() {
    std::unique_lock<std::mutex> lock(mutex);
    const long gen = generation;
    if (++arrived == 2) {
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen; });
    }
  }
};

struct RankExchange : public GhostExchange {
  RankExchange(Board& b, int r, std::size_t nl) : board(b), me(r), num_local(nl) {
    board.rank[r] = this;
  }
  void forward(double* f, int width) override { fwd(f, width); }
  void forward(float* f, int width) override { fwd(f, width); }
  void reverse(double* g, int width) override { rev(g, width); }
  void reverse(float* g, int width) override { rev(g, width); }

  template <class T>
  void fwd(T* f, int width) {
    board.buffer[me] = f;
    board.barrier();
    for (std::size_t k = 0; k < owner_rank.size(); ++k)
      std::copy_n(static_cast<T*>(board.buffer[owner_rank[k]]) +
                      static_cast<std::size_t>(owner_local[k]) * width,
                  width, f + (num_local + k) * width);
    board.barrier();
  }
  template <class T>
  void rev(T* g, int width) {
    board.buffer[me] = g;
    board.barrier();
    for (int q = 0; q < 2; ++q) {
      const RankExchange* other = board.rank[q];
      const T* src = static_cast<T*>(board.buffer[q]);
      for (std::size_t k = 0; k < other->owner_rank.size(); ++k)
        if (other->owner_rank[k] == me)
          for (int c = 0; c < width; ++c)
            g[static_cast<std::size_t>(other->owner_local[k]) * width + c] +=
                src[(other->num_local + k) * width + c];
    }
    board.barrier();
    std::fill(g + num_local * width, g + (num_local + owner_rank.size()) * width, T(0));
  }

  Board& board;
  int me;
  std::size_t num_local;
  std::vector<int> owner_rank, owner_local;  // per ghost
};

TEST_P(NequipEngineModel, TwoRanksWithGhostsEqualOneRank) {
  const model::Model m = make_model(GetParam());
  NequipEngine reference(m);
  Structure s = periodic_cell(m.num_species());
  // Eight atoms: the cell doubled along its first vector.
  Structure big = s;
  for (int d = 0; d < 3; ++d) big.cell[d] *= 2;
  for (std::size_t i = 0; i < s.size(); ++i) {
    for (int d = 0; d < 3; ++d) big.positions.push_back(s.positions[3 * i + d] + s.cell[d]);
    big.species.push_back(s.species[i]);
  }
  const Graph g = build_graph(big, reference);
  const Evaluation ref = evaluate(reference, g);

  const std::size_t n = big.size();
  std::vector<int> rank_of(n), local_of(n);
  std::size_t count[2] = {0, 0};
  for (std::size_t i = 0; i < n; ++i) {
    rank_of[i] = i < n / 2 - 1 ? 0 : 1;  // uneven split
    local_of[i] = static_cast<int>(count[rank_of[i]]++);
  }
  Board board;
  Graph rg[2];
  std::vector<int> edge_ids[2];
  std::vector<std::unique_ptr<RankExchange>> ex;
  for (int r = 0; r < 2; ++r) {
    ex.push_back(std::make_unique<RankExchange>(board, r, count[r]));
    Graph& G = rg[r];
    G.num_local = count[r];
    G.species.resize(count[r]);
    for (std::size_t i = 0; i < n; ++i)
      if (rank_of[i] == r) G.species[local_of[i]] = big.species[i];
    std::map<std::tuple<int, int, int, int>, int> ghost;
    for (std::size_t e = 0; e < g.center.size(); ++e) {
      const int c = g.center[e], j = g.neighbor[e];
      if (rank_of[c] != r) continue;
      const auto& S = g.shift[e];
      int node;
      if (rank_of[j] == r && S[0] == 0 && S[1] == 0 && S[2] == 0) {
        node = local_of[j];
      } else {
        const auto key = std::make_tuple(j, S[0], S[1], S[2]);
        auto it = ghost.find(key);
        if (it == ghost.end()) {
          it = ghost.emplace(key, static_cast<int>(count[r] + ex[r]->owner_rank.size())).first;
          ex[r]->owner_rank.push_back(rank_of[j]);
          ex[r]->owner_local.push_back(local_of[j]);
          G.species.push_back(big.species[j]);
        }
        node = it->second;
      }
      G.center.push_back(local_of[c]);
      G.neighbor.push_back(node);
      G.shift.push_back(S);
      G.vector.insert(G.vector.end(), g.vector.begin() + 3 * e, g.vector.begin() + 3 * e + 3);
      edge_ids[r].push_back(static_cast<int>(e));
    }
    G.num_nodes = G.species.size();
  }
  Evaluation out[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      NequipEngine engine(m);
      out[r] = evaluate(engine, rg[r], ex[r].get());
    });
  for (std::thread& t : threads) t.join();

  EXPECT_NEAR(out[0].energy + out[1].energy, ref.energy, 1e-12 * std::abs(ref.energy));
  double worst_e = 0, worst_g = 0;
  for (std::size_t i = 0; i < n; ++i)
    worst_e =
        std::max(worst_e, std::abs(out[rank_of[i]].atom_energy[local_of[i]] - ref.atom_energy[i]));
  for (int r = 0; r < 2; ++r)
    for (std::size_t k = 0; k < edge_ids[r].size(); ++k)
      for (int a = 0; a < 3; ++a)
        worst_g = std::max(worst_g, std::abs(out[r].edge_gradient[3 * k + a] -
                                             ref.edge_gradient[3 * edge_ids[r][k] + a]));
  EXPECT_LT(worst_e, 1e-12 * max_abs(ref.atom_energy));
  EXPECT_LT(worst_g, 1e-12 * max_abs(ref.edge_gradient));
}

TEST(NequipEngine, RankWithoutLocalAtomsStillTakesPartInExchanges) {
  const model::Model m = make_model(model_configs()[0]);
  NequipEngine engine(m);
  Graph g;
  g.num_local = 0;
  g.num_nodes = 2;
  g.species = {0, 1};
  OwnerMapExchange exchange(0, {});
  EngineResult r;
  engine.compute(g.view(), r, &exchange);
  EXPECT_EQ(r.energy, 0.0);
  EXPECT_TRUE(r.atom_energy.empty());
  EXPECT_EQ(exchange.forward_calls, engine.num_layers() - 1);
  EXPECT_EQ(exchange.reverse_calls, engine.num_layers() - 1);
}

// ---------------------------------------------------------------------------------------------
// Precision, symmetry, determinism
// ---------------------------------------------------------------------------------------------

TEST_P(NequipEngineModel, Float32AndMixedStayWithinSpecTolerances) {
  const model::Model m = make_model(GetParam());
  NequipEngine f64(m, Precision::kFloat64);
  const Structure s = periodic_cell(m.num_species());
  const Graph g = build_graph(s, f64);
  const Evaluation ref = evaluate(f64, g);
  const Vec fref = forces_of(g, ref.edge_gradient, s.size());
  for (Precision p : {Precision::kFloat32, Precision::kMixed}) {
    NequipEngine engine(m, p);
    EXPECT_EQ(engine.precision(), p);
    const Evaluation r = evaluate(engine, g);
    const Vec f = forces_of(g, r.edge_gradient, s.size());
    // model-spec §5 float32: ~1e-5 eV/atom, ~1e-4..1e-3 eV/A, scaled by the sizes here.
    const double e_scale = std::max(1.0, max_abs(ref.atom_energy));
    EXPECT_LT(max_abs_diff(r.atom_energy, ref.atom_energy), 1e-5 * e_scale) << to_string(p);
    EXPECT_LT(std::abs(r.energy - ref.energy), 1e-5 * e_scale * s.size()) << to_string(p);
    EXPECT_LT(max_abs_diff(f, fref), 1e-4 * std::max(1.0, max_abs(fref))) << to_string(p);
    // ...but it is really float32: not bitwise float64.
    EXPECT_NE(r.energy, ref.energy) << to_string(p);
  }
}

void rotate(const double R[3][3], Vec& v) {
  for (std::size_t i = 0; i < v.size(); i += 3) {
    const double x[3] = {v[i], v[i + 1], v[i + 2]};
    for (int a = 0; a < 3; ++a) v[i + a] = R[a][0] * x[0] + R[a][1] * x[1] + R[a][2] * x[2];
  }
}

TEST_P(NequipEngineModel, EnergyIsInvariantAndGradientsEquivariantUnderO3) {
  const model::Model m = make_model(GetParam());
  NequipEngine engine(m);
  const Structure s = random_cluster(8, m.num_species(), 4.5, 2.0, 17);
  const Graph g = build_graph(s, engine);
  const Evaluation ref = evaluate(engine, g);
  for (int improper = 0; improper < 2; ++improper) {
    double R[3][3];
    random_rotation(99 + improper, R);
    if (improper)
      for (auto& row : R)
        for (double& x : row) x = -x;
    Graph rg = g;
    rotate(R, rg.vector);
    const Evaluation r = evaluate(engine, rg);
    EXPECT_NEAR(r.energy, ref.energy, 1e-12 * std::abs(ref.energy)) << "improper " << improper;
    EXPECT_LT(max_abs_diff(r.atom_energy, ref.atom_energy), 1e-12 * max_abs(ref.atom_energy));
    Vec expected = ref.edge_gradient;
    rotate(R, expected);
    EXPECT_LT(max_abs_diff(r.edge_gradient, expected), 1e-11 * max_abs(expected))
        << "improper " << improper;
  }
}

TEST_P(NequipEngineModel, ResultDoesNotDependOnThreadCount) {
  const model::Model m = make_model(GetParam());
  NequipEngine engine(m);
  const Structure s = random_cluster(12, m.num_species(), 5.0, 2.0, 23);
  const Graph g = build_graph(s, engine);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Evaluation one = evaluate(engine, g);
  omp_set_num_threads(3);
  const Evaluation three = evaluate(engine, g);
  omp_set_num_threads(saved);
  EXPECT_EQ(one.energy, three.energy);
  EXPECT_EQ(one.atom_energy, three.atom_energy);
  EXPECT_EQ(one.edge_gradient, three.edge_gradient);
}

INSTANTIATE_TEST_SUITE_P(Models, NequipEngineModel, ::testing::ValuesIn(model_configs()),
                         [](const ::testing::TestParamInfo<ModelConfig>& info) {
                           return info.param.name;
                         });

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

template <class F>
void expect_error(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning \"" << needle << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << needle;
  }
}

TEST(NequipEngine, InvalidGraphsThrowNamingTheValue) {
  const model::Model m = make_model(model_configs()[0]);
  NequipEngine engine(m);
  Structure s;
  s.positions = {0, 0, 0, 1.5, 0.5, 0, 0.2, 1.9, 0.3};
  s.species = {0, 1, 0};
  const Graph good = build_graph(s, engine);
  EngineResult r;
  const auto run = [&](const Graph& g, GhostExchange* ex = nullptr) {
    return [&, g, ex] { engine.compute(g.view(), r, ex); };
  };
  {
    Graph g = good;
    g.species[2] = 5;
    expect_error(run(g), "species[2] = 5");
  }
  {
    Graph g = good;
    g.species[1] = -1;
    expect_error(run(g), "species[1] = -1");
  }
  {
    Graph g = good;
    g.center[3] = 7;
    expect_error(run(g), "edge 3 has center 7");
  }
  {
    Graph g = good;
    g.neighbor[1] = 3;
    expect_error(run(g), "edge 1 has neighbor 3");
  }
  {
    Graph g = good;
    g.vector[4] = std::nan("");
    expect_error(run(g), "edge 1 has a non-finite vector");
  }
  {
    Graph g = good;
    g.vector[0] = g.vector[1] = g.vector[2] = 0;
    expect_error(run(g), "has length 0");
  }
  {
    Graph g = good;
    g.vector[6] = 3.9;  // edge 2 is (1 -> 0), cutoff 3.6
    g.vector[7] = 0.5;
    g.vector[8] = 0;
    expect_error(run(g), "beyond the cutoff");
  }
  {
    Graph g = good;
    g.num_local = 4;
    expect_error(run(g), "num_local = 4 exceeds num_nodes = 3");
  }
  {
    Graph g = good;
    g.num_local = 2;
    for (std::size_t e = 0; e < g.center.size(); ++e)
      if (g.center[e] == 2) g.center[e] = 0;
    expect_error(run(g), "1 ghost nodes but no GhostExchange");
  }
  // The valid graph still works after the failures.
  EXPECT_NO_THROW(engine.compute(good.view(), r, nullptr));
  EXPECT_THROW(engine.r_max(0, 2), Error);
}

TEST(NequipEngine, CutoffMessageNamesLengthAndSpeciesPair) {
  NequipEngine engine(make_model(model_configs()[0]));
  Graph g;
  g.num_local = g.num_nodes = 2;
  g.species = {1, 0};
  g.center = {0};
  g.neighbor = {1};
  g.vector = {3.7, 0, 0};  // (Au, Cu) cutoff is 3.6
  g.shift = {{0, 0, 0}};
  EngineResult r;
  expect_error([&] { engine.compute(g.view(), r, nullptr); },
               "has length 3.7, beyond the cutoff 3.6 of species pair (Au, Cu)");
}

TEST(NequipEngine, RejectsModelsItCannotEvaluate) {
  model::Model m = make_model(model_configs()[0]);
  {
    model::Model bad = m;
    bad.arch = model::Arch::kMace;
    expect_error([&] { NequipEngine e(bad); }, "arch is mace");
  }
  {
    model::Model bad = m;
    bad.nequip->layers[1].edge_mlp.layers.back().h_out -= 1;
    bad.nequip->layers[1].edge_mlp.layers.back().weight.resize(
        static_cast<std::size_t>(bad.nequip->layers[1].edge_mlp.layers.back().h_in) *
        bad.nequip->layers[1].edge_mlp.layers.back().h_out);
    const int numel = bad.nequip->layers[1].tp.descriptor.weight_numel();
    expect_error([&] { NequipEngine e(bad); }, "layer 1 tp needs " + std::to_string(numel) +
                                                   " weights per edge, edge_mlp gives " +
                                                   std::to_string(numel - 1));
  }
  {
    model::Model bad = m;
    model::Activation odd = make_act("silu", 1.0);
    odd.name = "gelu";
    odd.kind = static_cast<model::Activation::Kind>(17);
    bad.nequip->layers[0].gate.act_scalars[0] = odd;
    expect_error([&] { NequipEngine e(bad); }, "activation \"gelu\" (kind 17)");
  }
  {
    model::Model bad = m;
    bad.nequip->scales.push_back(1.0);
    expect_error([&] { NequipEngine e(bad); }, "scale_shift.scales has 3 entries");
  }
}

}  // namespace
}  // namespace clebsch
