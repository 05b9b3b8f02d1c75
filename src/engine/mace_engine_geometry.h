// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The per-edge geometry functions of the MACE host engine (FORMAT.md §5): the radial embedding
// (Bessel basis of the length, optionally Agnesi- or soft-transformed, with the polynomial
// cutoff) and the ZBL pair repulsion, each with its derivative d/dr. Parameters are kept in
// double and the functions evaluated in the geometry type G (double, or float in fp32), so one
// table serves every precision. The constructors check the model's values
// (mace_engine_geometry.cpp). Private to src/engine/.
#pragma once

#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "clebsch/model/model.h"
#include "clebsch/nn/radial.h"

namespace clebsch::mace_detail {

// The radial embedding e_e and the cutoff f(r_e), with d/dr (FORMAT.md §5 "radial").
class Radial {
 public:
  /// @throws ModelFormatError naming the value when the basis, transforms or radii disagree.
  Radial(const model::MaceRadial& r, const std::vector<model::Species>& species);

  int num_basis() const { return nb_; }
  bool apply_cutoff() const { return apply_cutoff_; }

  // feats[n], f; with derivatives d/dr when dfeats is not null.
  template <class G>
  void evaluate(G r, int s_centre, int s_neigh, G* feats, G* dfeats, G* f, G* df) const {
    G dfc;
    const G fc = cutoff_(r, &dfc);
    G x = r, dx = G(1);
    if (agnesi_) x = (*agnesi_)(r, s_neigh, s_centre, &dx);
    if (soft_) x = soft(r, s_centre, s_neigh, &dx);
    basis(x, feats, dfeats);
    const int nb = num_basis();
    if (dfeats)
      for (int n = 0; n < nb; ++n) dfeats[n] *= dx;
    if (apply_cutoff_) {
      for (int n = 0; n < nb; ++n) {
        if (dfeats) dfeats[n] = dfeats[n] * fc + feats[n] * dfc;
        feats[n] *= fc;
      }
    }
    *f = fc;
    if (df) *df = dfc;
  }

 private:
  void check_radii(const std::vector<double>& radii, const std::string& where) const;

  // T(r) = p0 + (r - p0) (1 + tanh(alpha (r - m))) / 2 (FORMAT.md §5, "soft").
  template <class G>
  G soft(G r, int si, int sj, G* dx) const {
    const G r0 = static_cast<G>(soft_radii_[si] + soft_radii_[sj]);
    const G p0 = G(0.75) * r0, p1 = (G(4) / G(3)) * r0;
    const G m = G(0.5) * (p0 + p1);
    const G alpha = static_cast<G>(soft_alpha_) / (p1 - p0);
    const G t = std::tanh(alpha * (r - m));
    *dx = G(0.5) * (G(1) + t) + (r - p0) * G(0.5) * alpha * (G(1) - t * t);
    return p0 + (r - p0) * G(0.5) * (G(1) + t);
  }

  // The basis functions of x and (dfeats not null) their derivatives d/dx.
  template <class G>
  void basis(G x, G* feats, G* dfeats) const {
    using B = model::MaceRadial::Basis;
    if (basis_ == B::kBessel) return bessel_.evaluate(x, feats, dfeats);
    if (basis_ == B::kGaussian) {
      for (int n = 0; n < nb_; ++n) {
        const G d = x - static_cast<G>(gauss_c_[n]);
        feats[n] = std::exp(static_cast<G>(gauss_coeff_) * d * d);
        if (dfeats) dfeats[n] = feats[n] * G(2) * static_cast<G>(gauss_coeff_) * d;
      }
      return;
    }
    // Chebyshev T_n(x), n = 1..N, of the raw x (mace uses no rescaling): the recurrence
    // T_{n+1} = 2x T_n - T_{n-1}, and T_n' = n U_{n-1} with U_{n} = 2x U_{n-1} - U_{n-2}.
    G t0 = G(1), t1 = x, u0 = G(1), u1 = G(2) * x;  // T_0, T_1, U_0, U_1
    for (int n = 1; n <= nb_; ++n) {
      feats[n - 1] = t1;
      // mace-torch's forces treat T_n as constant (torch.special.chebyshev_polynomial_t has no
      // derivative); the engine does the same so that its forces are mace-torch's (FORMAT.md §5).
      if (dfeats) dfeats[n - 1] = G(0) * G(n) * u0;
      const G t2 = G(2) * x * t1 - t0, u2 = G(2) * x * u1 - u0;
      t0 = t1;
      t1 = t2;
      u0 = u1;
      u1 = u2;
    }
  }

  BesselBasis bessel_;
  model::MaceRadial::Basis basis_ = model::MaceRadial::Basis::kBessel;
  int nb_ = 0;
  std::vector<double> gauss_c_;
  double gauss_coeff_ = 0;
  PolynomialCutoff cutoff_;
  bool apply_cutoff_;
  int num_species_;
  std::optional<AgnesiTransform> agnesi_;
  bool soft_ = false;
  double soft_alpha_ = 0;
  std::vector<double> soft_radii_;
};

// MACE's ZBL pair repulsion, per edge (FORMAT.md §5 "pair_repulsion").
class Zbl {
 public:
  /// @throws ModelFormatError when the per-species tables do not have one entry per species.
  Zbl(const model::MaceZbl& z, int num_species);

  // Energy of one edge and dE/dr.
  template <class G>
  G energy(G r, int si, int sj, G* dE) const {
    const Pair& p = pairs_[static_cast<std::size_t>(si) * S_ + sj];
    G df;
    const G f = p.cutoff(r, &df);
    if (f == G(0) && df == G(0)) {
      *dE = G(0);
      return G(0);
    }
    const G inv_a = G(1) / static_cast<G>(p.a);
    G phi = G(0), dphi = G(0);
    for (int k = 0; k < 4; ++k) {
      const G term = static_cast<G>(c_[k]) * std::exp(-static_cast<G>(e_[k]) * r * inv_a);
      phi += term;
      dphi -= static_cast<G>(e_[k]) * inv_a * term;
    }
    const G zz = static_cast<G>(p.half_coulomb_zz);
    const G v = zz / r * phi;
    *dE = zz * ((dphi - phi / r) / r) * f + v * df;
    return v * f;
  }

 private:
  struct Pair {
    double a, half_coulomb_zz;
    PolynomialCutoff cutoff;
  };
  int S_;
  std::array<double, 4> c_, e_;
  std::vector<Pair> pairs_;
};

}  // namespace clebsch::mace_detail
