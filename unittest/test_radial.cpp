// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Radial functions (radial.h) against independent closed forms written out here (MACE and NequIP
// Bessel bases, the DimeNet envelope, the Agnesi transform, both ZBL forms with their published
// constants), every analytic d/dr against a 5-point central finite difference in float64, float
// against double, the batch forms against the per-edge ones, and constructor errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "clebsch/nn/radial.h"
#include "clebsch/support/error.h"

namespace clebsch {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kFdTolerance = 1e-7;        // FD vs analytic derivative, relative to max |f'|
constexpr double kFormulaTolerance = 1e-13;  // vs closed forms written independently here
constexpr double kFloatTolerance = 2e-5;     // float vs double, relative to max |f|

// ase.data.covalent_radii for Z = 0..8 (index = atomic number), enough for the species below.
const std::vector<double> kCovalentRadii = {0.2, 0.31, 0.28, 1.28, 0.96, 0.84, 0.76, 0.71, 0.66};

// Fourth-order central difference: h^4 truncation, so h = 1e-3 leaves ~1e-12 relative error.
double fd(const std::function<double(double)>& f, double r, double h = 1e-3) {
  return (8 * (f(r + h) - f(r - h)) - (f(r + 2 * h) - f(r - 2 * h))) / (12 * h);
}

// Largest |a - b| over the sweep divided by the largest |b|.
struct RelError {
  double err = 0, scale = 0;
  void add(double a, double b) {
    err = std::max(err, std::abs(a - b));
    scale = std::max(scale, std::abs(b));
  }
  double value() const { return err / std::max(scale, 1e-300); }
};

// Worst FD-vs-analytic error seen, printed once at exit for the record.
struct FdRecord {
  double worst = 0;
  ~FdRecord() { std::cout << "worst relative |analytic - FD| derivative error: " << worst << "\n"; }
} g_fd_record;

double record_fd(double e) {
  g_fd_record.worst = std::max(g_fd_record.worst, e);
  return e;
}

std::vector<double> sweep(double lo, double hi, int n) {
  std::vector<double> r;
  for (int i = 0; i < n; ++i) r.push_back(lo + (hi - lo) * (i + 0.5) / n);
  return r;
}

// Points at least 2h = 2e-3 away from a cutoff, where the step makes the FD meaningless.
bool near(double r, double r_cut) { return std::abs(r - r_cut) < 3e-3; }

double envelope(double t, double p) {  // DimeNet envelope, written from the paper's formula
  if (t >= 1) return 0;
  return 1 - (p + 1) * (p + 2) / 2 * std::pow(t, p) + p * (p + 2) * std::pow(t, p + 1) -
         p * (p + 1) / 2 * std::pow(t, p + 2);
}

BesselBasis mace_bessel(double r_max, int n) {
  std::vector<double> w;
  for (int k = 1; k <= n; ++k) w.push_back(kPi / r_max * k);
  return BesselBasis(w, std::sqrt(2.0 / r_max));
}

// ------------------------------------------------------------------------------------------------
// Polynomial cutoff

TEST(PolynomialCutoff, MatchesDimeNetPolynomialAndStep) {
  for (double p : {2.0, 5.0, 6.0, 7.0}) {
    const PolynomialCutoff cut(4.5, p);
    RelError e;
    for (double r : sweep(0.01, 5.5, 200)) e.add(cut(r), envelope(r / 4.5, p));
    EXPECT_LT(e.value(), kFormulaTolerance) << "p = " << p;
    EXPECT_EQ(cut(0.0), 1.0);
    EXPECT_EQ(cut(4.5), 0.0);  // 1[r < r_max]
    EXPECT_EQ(cut(9.0), 0.0);
    double d;
    EXPECT_EQ(cut(5.0, &d), 0.0);
    EXPECT_EQ(d, 0.0);
    // The envelope is C^2 at r_max: value and slope vanish from the left too.
    EXPECT_NEAR(cut(4.5 - 1e-6), 0.0, 1e-12);
    cut(4.5 - 1e-6, &d);
    EXPECT_NEAR(d, 0.0, 1e-9);
  }
}

TEST(PolynomialCutoff, DerivativeMatchesFiniteDifference) {
  for (double p : {2.0, 5.0, 6.0, 8.5}) {
    const PolynomialCutoff cut(3.0, p);
    RelError e;
    for (double r : sweep(0.1, 3.4, 150)) {
      if (near(r, 3.0)) continue;
      double d;
      cut(r, &d);
      e.add(d, fd([&](double x) { return cut(x); }, r));
    }
    EXPECT_LT(record_fd(e.value()), kFdTolerance) << "p = " << p;
  }
}

// ------------------------------------------------------------------------------------------------
// MACE Bessel basis and Agnesi transform

TEST(BesselBasis, MatchesMaceDefinition) {
  const double rc = 5.0;
  const BesselBasis b = mace_bessel(rc, 8);
  RelError e;
  std::vector<double> v(8);
  for (double r : sweep(0.05, 6.0, 100)) {
    b.evaluate(r, v.data());
    for (int n = 1; n <= 8; ++n)
      e.add(v[n - 1], std::sqrt(2 / rc) * std::sin(n * kPi * r / rc) / r);
  }
  EXPECT_LT(e.value(), kFormulaTolerance);
  // x -> 0: the limit prefactor * w_n, and continuity of the series/closed-form switch.
  b.evaluate(0.0, v.data());
  EXPECT_NEAR(v[2], std::sqrt(2 / rc) * 3 * kPi / rc, 1e-15);
  std::vector<double> lo(8), hi(8), dlo(8), dhi(8);
  const double y_switch = 0.1 / (kPi / rc);  // w_1 x = 0.1
  b.evaluate(y_switch * (1 - 1e-12), lo.data(), dlo.data());
  b.evaluate(y_switch * (1 + 1e-12), hi.data(), dhi.data());
  EXPECT_NEAR(lo[0], hi[0], 1e-14);
  EXPECT_NEAR(dlo[0], dhi[0], 1e-12);
}

TEST(BesselBasis, DerivativeMatchesFiniteDifferenceWithTrainedWeights) {
  // Weights away from n*pi/r_max (a trained basis), small x included (series branch).
  const BesselBasis b({0.3, 1.1, 2.05, 2.9, 4.4, 7.3}, 0.71);
  for (int n = 0; n < 6; ++n) {
    RelError e;
    for (double x : sweep(0.002, 6.0, 150)) {
      std::vector<double> v(6), d(6);
      b.evaluate(x, v.data(), d.data());
      e.add(d[n], fd(
                      [&](double y) {
                        std::vector<double> w(6);
                        b.evaluate(y, w.data());
                        return w[n];
                      },
                      x, 1e-4));
    }
    EXPECT_LT(record_fd(e.value()), kFdTolerance) << "n = " << n;
  }
}

TEST(AgnesiTransform, MatchesDefinitionAndLimits) {
  const double q = 0.9183, p = 4.5791, a = 1.0805;
  const AgnesiTransform t(q, p, a, kCovalentRadii, {1, 6, 8});
  EXPECT_DOUBLE_EQ(t.r0(1, 2), 0.5 * (0.76 + 0.66));
  EXPECT_DOUBLE_EQ(t.r0(0, 0), 0.31);
  // s = 1: T = 1 / (1 + a/2).
  EXPECT_NEAR(t(0.5 * (0.76 + 0.66), 1, 2), 1 / (1 + a / 2), 1e-15);
  RelError e;
  for (double r : sweep(0.05, 6, 100)) {
    const double s = r / t.r0(0, 2);
    e.add(t(r, 0, 2), 1 / (1 + a * std::pow(s, q) / (1 + std::pow(s, q - p))));
  }
  EXPECT_LT(e.value(), kFormulaTolerance);
  EXPECT_GT(t(1e-6, 1, 1), 0.999);  // T -> 1 as r -> 0
  EXPECT_LT(t(1e3, 1, 1), 1e-2);    // T -> 0 as r -> infinity
  EXPECT_EQ(t(0.7, 0, 2), t(0.7, 2, 0));
}

TEST(AgnesiTransform, DerivativeMatchesFiniteDifference) {
  for (auto [q, p, a] : {std::tuple{0.9183, 4.5791, 1.0805}, std::tuple{1.7, 3.2, 0.6}}) {
    const AgnesiTransform t(q, p, a, kCovalentRadii, {1, 8});
    for (int su = 0; su < 2; ++su) {
      RelError e;
      for (double r : sweep(0.1, 6, 120)) {
        double d;
        t(r, su, 1, &d);
        e.add(d, fd([&](double x) { return t(x, su, 1); }, r));
      }
      EXPECT_LT(record_fd(e.value()), kFdTolerance) << "q = " << q << " species " << su;
    }
  }
}

// ------------------------------------------------------------------------------------------------
// MACE radial embedding

TEST(MaceRadialEmbedding, DerivativesMatchFiniteDifferenceInEveryVariant) {
  const double rc = 5.0;
  for (bool agnesi : {false, true})
    for (bool apply : {true, false}) {
      SCOPED_TRACE(std::string(agnesi ? "Agnesi" : "plain") + (apply ? " apply_cutoff" : ""));
      std::optional<AgnesiTransform> tr;
      if (agnesi) tr.emplace(0.9183, 4.5791, 1.0805, kCovalentRadii, std::vector<int>{1, 6, 8});
      const MaceRadialEmbedding emb(mace_bessel(rc, 8), PolynomialCutoff(rc, 5), tr, apply);
      auto feats = [&](double r, int su, int sv, int n) {
        std::vector<double> f(8);
        double c;
        emb.evaluate(r, su, sv, f.data(), nullptr, &c);
        return n < 8 ? f[n] : c;
      };
      for (int n = 0; n <= 8; ++n) {  // n = 8: the cutoff output
        RelError e;
        for (double r : sweep(0.3, 5.5, 120)) {
          if (near(r, rc)) continue;
          std::vector<double> f(8), d(8);
          double c, dc;
          emb.evaluate(r, 2, 0, f.data(), d.data(), &c, &dc);
          e.add(n < 8 ? d[n] : dc, fd([&](double x) { return feats(x, 2, 0, n); }, r));
        }
        EXPECT_LT(record_fd(e.value()), kFdTolerance) << "feature " << n;
      }
    }
}

TEST(MaceRadialEmbedding, ComposesBesselOfTransformTimesCutoffOfRawLength) {
  const double rc = 6.0;
  const AgnesiTransform tr(0.9183, 4.5791, 1.0805, kCovalentRadii, {1, 8});
  const MaceRadialEmbedding with(mace_bessel(rc, 10), PolynomialCutoff(rc, 5), tr, true);
  const MaceRadialEmbedding without(mace_bessel(rc, 10), PolynomialCutoff(rc, 5), tr, false);
  RelError e;
  for (double r : sweep(0.2, 6.5, 80)) {
    std::vector<double> f(10), g(10);
    double c;
    with.evaluate(r, 0, 1, f.data());
    without.evaluate(r, 0, 1, g.data(), nullptr, &c);
    const double x = tr(r, 0, 1);
    for (int n = 1; n <= 10; ++n) {
      const double b = std::sqrt(2 / rc) * std::sin(n * kPi * x / rc) / x;
      e.add(f[n - 1], b * envelope(r / rc, 5));
      e.add(g[n - 1], b);
    }
    e.add(c, envelope(r / rc, 5));
  }
  EXPECT_LT(e.value(), kFormulaTolerance);
}

TEST(MaceRadialEmbedding, BatchFormsMatchPerEdgeAndBackwardContractsDerivatives) {
  const AgnesiTransform tr(0.9183, 4.5791, 1.0805, kCovalentRadii, {1, 6, 8});
  const MaceRadialEmbedding emb(mace_bessel(5.0, 8), PolynomialCutoff(5.0, 6), tr, false);
  const std::vector<double> r = {0.4, 1.3, 2.2, 4.9, 5.3, 3.3};
  const std::vector<int> su = {0, 1, 2, 0, 1, 2}, sv = {2, 2, 1, 0, 0, 1};
  const std::size_t ne = r.size();
  std::vector<double> f(ne * 8), d(ne * 8), c(ne), dc(ne), g(ne * 8), gc(ne), gr(ne);
  emb.forward(ne, r.data(), su.data(), sv.data(), f.data(), d.data(), c.data(), dc.data());
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::sin(1.7 * i + 0.3);
  for (std::size_t e = 0; e < ne; ++e) gc[e] = std::cos(0.9 * e);
  emb.backward(ne, r.data(), su.data(), sv.data(), g.data(), gc.data(), gr.data());
  for (std::size_t e = 0; e < ne; ++e) {
    std::vector<double> f1(8), d1(8);
    double c1, dc1;
    emb.evaluate(r[e], su[e], sv[e], f1.data(), d1.data(), &c1, &dc1);
    double expect = gc[e] * dc1;
    for (int n = 0; n < 8; ++n) {
      EXPECT_EQ(f[e * 8 + n], f1[n]);
      EXPECT_EQ(d[e * 8 + n], d1[n]);
      expect += g[e * 8 + n] * d1[n];
    }
    EXPECT_EQ(c[e], c1);
    EXPECT_EQ(dc[e], dc1);
    EXPECT_NEAR(gr[e], expect, 1e-14 * (1 + std::abs(expect)));
  }
  EXPECT_THROW(emb.forward(ne, r.data(), nullptr, nullptr, f.data(), nullptr, nullptr, nullptr),
               Error);
}

// ------------------------------------------------------------------------------------------------
// MACE ZBL

double mace_zbl_reference(double r, int zu, int zv, double p) {
  const double a = 0.4543 * 0.529 / (std::pow(zu, 0.3) + std::pow(zv, 0.3));
  const double x = r / a;
  const double phi = 0.1818 * std::exp(-3.2 * x) + 0.5099 * std::exp(-0.9423 * x) +
                     0.2802 * std::exp(-0.4028 * x) + 0.02817 * std::exp(-0.2016 * x);
  const double rc = kCovalentRadii[zu] + kCovalentRadii[zv];
  return 0.5 * 14.3996 * zu * zv / r * phi * envelope(r / rc, p);
}

MaceZbl default_mace_zbl(std::vector<int> z, double p) {
  return MaceZbl(std::move(z), kCovalentRadii, {0.1818, 0.5099, 0.2802, 0.02817}, 0.3, 0.4543, p);
}

TEST(MaceZbl, MatchesZieglerBiersackLittmarkWithEnvelope) {
  const std::vector<int> z = {1, 6, 8};
  const MaceZbl zbl = default_mace_zbl(z, 6);
  for (int u = 0; u < 3; ++u)
    for (int v = 0; v < 3; ++v) {
      EXPECT_DOUBLE_EQ(zbl.r_cut(u, v), kCovalentRadii[z[u]] + kCovalentRadii[z[v]]);
      RelError e;
      for (double r : sweep(0.05, 1.6, 100))
        e.add(zbl.energy(r, u, v), mace_zbl_reference(r, z[u], z[v], 6));
      EXPECT_LT(e.value(), kFormulaTolerance) << u << "," << v;
      EXPECT_EQ(zbl.energy(zbl.r_cut(u, v) + 1e-9, u, v), 0.0);
    }
}

TEST(MaceZbl, DerivativeMatchesFiniteDifference) {
  const MaceZbl zbl = default_mace_zbl({1, 8, 6}, 5);
  for (int u = 0; u < 3; ++u)
    for (int v = 0; v < 3; ++v) {
      const double rc = zbl.r_cut(u, v);
      RelError e;
      for (double r : sweep(0.15 * rc, 1.1 * rc, 100)) {
        if (near(r, rc)) continue;
        double d;
        zbl.energy(r, u, v, &d);
        e.add(d, fd([&](double x) { return zbl.energy(x, u, v); }, r, 1e-4));
      }
      EXPECT_LT(record_fd(e.value()), kFdTolerance) << u << "," << v;
    }
}

// ------------------------------------------------------------------------------------------------
// NequIP edge embedding and ZBL

TEST(NequipRadialEmbedding, MatchesNequipBesselTimesEnvelope) {
  const double r_max = 4.0;
  const NequipEdgeLength len(2, {1 / r_max});
  const NequipRadialEmbedding emb(
      len, NequipBessel({1, 2, 3, 4, 5, 6, 7, 8}, 2 * kPi / (r_max * r_max)), 6);
  RelError e;
  for (double r : sweep(0.05, 4.5, 120)) {
    std::vector<double> f(8);
    double c;
    emb.evaluate(r, 1, 0, f.data(), nullptr, &c);
    for (int n = 1; n <= 8; ++n)
      e.add(f[n - 1], 2 / r_max * std::sin(n * kPi * r / r_max) / r * envelope(r / r_max, 6));
    e.add(c, envelope(r / r_max, 6));
  }
  EXPECT_LT(e.value(), kFormulaTolerance);
  // torch.sinc(0) = 1: b_n(0) = factor * w_n.
  std::vector<double> b(8);
  emb.bessel().evaluate(0.0, b.data());
  EXPECT_NEAR(b[4], 2 * kPi / 16 * 5, 1e-15);
}

TEST(NequipRadialEmbedding, PerEdgeTypeCutoffAndDerivatives) {
  // Asymmetric per-type matrix, as nequip allows (centre type, neighbour type).
  const std::vector<double> rmax = {3.0, 3.5, 2.5, 4.0};
  std::vector<double> recip;
  for (double v : rmax) recip.push_back(1 / v);
  const NequipEdgeLength len(2, recip);
  EXPECT_TRUE(len.per_edge_type());
  const NequipRadialEmbedding emb(len, NequipBessel({0.9, 2.2, 2.8, 4.1, 5.0}, 2 * kPi / 16), 6);
  for (int tc = 0; tc < 2; ++tc)
    for (int tn = 0; tn < 2; ++tn) {
      const double rc = rmax[tc * 2 + tn];
      std::vector<double> f(5);
      emb.evaluate(rc * 1.0001, tc, tn, f.data());
      EXPECT_EQ(f[0], 0.0);
      for (int n = 0; n <= 5; ++n) {
        RelError e;
        for (double r : sweep(0.1, rc + 0.3, 100)) {
          if (near(r, rc)) continue;
          std::vector<double> v(5), d(5);
          double c, dc;
          emb.evaluate(r, tc, tn, v.data(), d.data(), &c, &dc);
          e.add(n < 5 ? d[n] : dc, fd(
                                       [&](double x) {
                                         std::vector<double> w(5);
                                         double cc;
                                         emb.evaluate(x, tc, tn, w.data(), nullptr, &cc);
                                         return n < 5 ? w[n] : cc;
                                       },
                                       r));
        }
        EXPECT_LT(record_fd(e.value()), kFdTolerance) << "types " << tc << tn << " feature " << n;
      }
    }
  // Batch backward contracts the same derivatives.
  const std::vector<double> r = {0.7, 1.9, 2.6, 3.2};
  const std::vector<int> tc = {0, 1, 1, 0}, tn = {1, 0, 1, 0};
  std::vector<double> g(20), gr(4), d(20), f(20);
  for (int i = 0; i < 20; ++i) g[i] = std::cos(0.37 * i);
  emb.forward(4, r.data(), tc.data(), tn.data(), f.data(), d.data(), nullptr, nullptr);
  emb.backward(4, r.data(), tc.data(), tn.data(), g.data(), nullptr, gr.data());
  for (int e = 0; e < 4; ++e) {
    double expect = 0;
    for (int n = 0; n < 5; ++n) expect += g[e * 5 + n] * d[e * 5 + n];
    EXPECT_NEAR(gr[e], expect, 1e-14 * (1 + std::abs(expect)));
  }
}

double nequip_zbl_reference(double r, double zi, double zj, double r_max, double p) {
  // LAMMPS pair_zbl: E = qqr2e Zi Zj / r * phi(r/a), a = 0.46850 / (Zi^0.23 + Zj^0.23); half of
  // it per directed edge, times the envelope of r / r_max.
  const double a = 0.46850 / (std::pow(zi, 0.23) + std::pow(zj, 0.23));
  const double x = r / a;
  const double phi = 0.18175 * std::exp(-3.19980 * x) + 0.50986 * std::exp(-0.94229 * x) +
                     0.28022 * std::exp(-0.40290 * x) + 0.02817 * std::exp(-0.20162 * x);
  return 0.5 * 14.399645 * zi * zj / r * phi * envelope(r / r_max, p);
}

TEST(NequipZbl, MatchesLammpsZblWithEnvelopeAndDerivative) {
  const double r_max = 3.0;
  const NequipZbl zbl({1, 8, 29}, 14.399645 * 0.5, NequipEdgeLength(3, {1 / r_max}), 6);
  const std::vector<double> z = {1, 8, 29};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      RelError e, de;
      for (double r : sweep(0.1, 3.3, 100)) {
        e.add(zbl.energy(r, i, j), nequip_zbl_reference(r, z[i], z[j], r_max, 6));
        if (near(r, r_max)) continue;
        double d;
        zbl.energy(r, i, j, &d);
        de.add(d, fd([&](double x) { return zbl.energy(x, i, j); }, r, 1e-4));
      }
      EXPECT_LT(e.value(), kFormulaTolerance) << i << "," << j;
      EXPECT_LT(record_fd(de.value()), kFdTolerance) << i << "," << j;
    }
}

// ------------------------------------------------------------------------------------------------
// float against double

TEST(Radial, FloatMatchesDouble) {
  const AgnesiTransform tr(0.9183, 4.5791, 1.0805, kCovalentRadii, {1, 6, 8});
  const MaceRadialEmbedding mace(mace_bessel(5.0, 8), PolynomialCutoff(5.0, 5), tr, true);
  const NequipRadialEmbedding neq(NequipEdgeLength(3, {0.25}),
                                  NequipBessel({1, 2, 3, 4, 5, 6}, 2 * kPi / 16), 6);
  const MaceZbl mzbl = default_mace_zbl({1, 6, 8}, 6);
  const NequipZbl nzbl({1, 6, 8}, 7.1998225, NequipEdgeLength(3, {0.25}), 6);
  RelError fm, dm, fn, dn, zm, dzm, zn, dzn;
  for (double r : sweep(0.3, 4.2, 60)) {
    std::vector<double> a(8), da(8);
    std::vector<float> b(8), db(8);
    mace.evaluate(r, 1, 2, a.data(), da.data());
    mace.evaluate(static_cast<float>(r), 1, 2, b.data(), db.data());
    for (int n = 0; n < 8; ++n) fm.add(b[n], a[n]), dm.add(db[n], da[n]);
    neq.evaluate(r, 0, 2, a.data(), da.data());
    neq.evaluate(static_cast<float>(r), 0, 2, b.data(), db.data());
    for (int n = 0; n < 6; ++n) fn.add(b[n], a[n]), dn.add(db[n], da[n]);
    double d;
    float df;
    const double rz = 0.2 + r / 4.2 * 1.0;  // inside the covalent cutoffs
    zm.add(mzbl.energy(static_cast<float>(rz), 1, 2, &df), mzbl.energy(rz, 1, 2, &d));
    dzm.add(df, d);
    zn.add(nzbl.energy(static_cast<float>(r), 2, 1, &df), nzbl.energy(r, 2, 1, &d));
    dzn.add(df, d);
  }
  for (const RelError* e : {&fm, &dm, &fn, &dn, &zm, &dzm, &zn, &dzn})
    EXPECT_LT(e->value(), kFloatTolerance);
  std::cout << "float vs double: MACE feats " << fm.value() << " d/dr " << dm.value()
            << ", NequIP feats " << fn.value() << " d/dr " << dn.value() << ", MACE ZBL "
            << zm.value() << " / " << dzm.value() << ", NequIP ZBL " << zn.value() << " / "
            << dzn.value() << "\n";
}

// ------------------------------------------------------------------------------------------------
// Constructor errors

template <class F>
void expect_error(F&& f, const std::string& substring) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one containing \"" << substring << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(substring), std::string::npos) << e.what();
  }
}

TEST(Radial, ConstructorsRejectBadParameters) {
  expect_error([] { PolynomialCutoff(0.0, 5); }, "PolynomialCutoff: r_max");
  expect_error([] { PolynomialCutoff(5.0, 0.5); }, "PolynomialCutoff: p must be finite and >= 1");
  expect_error([] { BesselBasis({}, 1.0); }, "BesselBasis: bessel_weights is empty");
  expect_error([] { BesselBasis({1.0, NAN}, 1.0); }, "bessel_weights[1]");
  expect_error(
      [] {
        AgnesiTransform(0.9, 4.5, 1.0, kCovalentRadii, {1, 42});
      },
      "atomic number 42 is outside the covalent_radii table");
  expect_error([] { AgnesiTransform(0.9, 4.5, 1.0, kCovalentRadii, {}); },
               "atomic_numbers is empty");
  expect_error([] { AgnesiTransform(INFINITY, 4.5, 1.0, kCovalentRadii, {1}); },
               "AgnesiTransform: q");
  expect_error([] { default_mace_zbl({0, 1}, 6); }, "atomic number 0");
  expect_error(
      [] {
        MaceZbl({1}, kCovalentRadii, {1, 1, 1, 1}, -0.3, 0.4543, 6);
      },
      "MaceZbl: a_exp");
  expect_error(
      [] {
        NequipEdgeLength(2, {0.3, 0.2, 0.1});
      },
      "_rmax_recip has 3 entries, expected 1 or num_types^2 = 4");
  expect_error([] { NequipEdgeLength(1, {-0.3}); }, "_rmax_recip[0] must be finite and positive");
  expect_error(
      [] {
        NequipZbl({1, 8}, 7.2, NequipEdgeLength(3, {0.2}), 6);
      },
      "atomic_numbers has 2 entries, the edge-length normalizer has 3 types");
  expect_error(
      [] {
        NequipZbl({1, 0.5}, 7.2, NequipEdgeLength(2, {0.2}), 6);
      },
      "atomic_numbers[1] must be >= 1");
  expect_error([] { NequipBessel({1.0}, NAN); }, "NequipBessel: factor");
  // All of these are clebsch::Error, nothing else.
  EXPECT_THROW(PolynomialCutoff(-1, 6), Error);
}

}  // namespace
}  // namespace clebsch
