// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Per-edge radial functions of MACE and NequIP, each with its analytic derivative d/dr: the
// scalar functions of an edge length r (and of the species at its two ends) that feed the radial
// MLPs and the pair repulsions. MACE: BesselBasis, PolynomialCutoff, AgnesiTransform and ZBLBasis
// (mace/modules/radial.py) composed as RadialEmbeddingBlock (blocks.py). NequIP:
// EdgeLengthNormalizer, BesselEdgeLengthEncoding and its PolynomialCutoff (nn/embedding/), the
// ApplyFactor that follows them (nn/misc.py), and the ZBL pair potential (nn/pair_potential.py).
// Every parameter is what the module stores (a buffer, a parameter or a Python constant), so a
// trained or rescaled model is reproduced, not re-derived. Derivatives are closed forms (chain
// rule by hand), never finite differences. Parameters are held in double and rounded to T where
// they are used; the per-edge functions are inline, the batch functions (one edge per row,
// OpenMP over edges) are instantiated for float and double.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <optional>
#include <type_traits>
#include <vector>

#include "clebsch/support/error.h"

namespace clebsch {

namespace radial_detail {

/// s(y) = sin(y)/y and s'(y) = (y cos y - sin y)/y^2, accurate for every y (s(0) = 1): below a
/// threshold the closed forms cancel catastrophically, so the Taylor series is used instead.
template <class T>
inline void sin_over(T y, T* s, T* ds) {
  // Double: below 0.1 the series (terms to y^8 / y^9) is exact to rounding, above it the closed
  // form loses at most 3/y^2 = 300 ulps. Float: the same trade-off lands at 0.5.
  const T threshold = sizeof(T) >= sizeof(double) ? T(0.1) : T(0.5);
  if (std::abs(y) < threshold) {
    const T y2 = y * y;
    *s = T(1) - y2 / T(6) * (T(1) - y2 / T(20) * (T(1) - y2 / T(42) * (T(1) - y2 / T(72))));
    if (ds)
      *ds = -y / T(3) *
            (T(1) - y2 / T(10) * (T(1) - y2 / T(28) * (T(1) - y2 / T(54) * (T(1) - y2 / T(88)))));
    return;
  }
  const T sn = std::sin(y);
  *s = sn / y;
  if (ds) *ds = (y * std::cos(y) - sn) / (y * y);
}

}  // namespace radial_detail

/// The polynomial envelope of DimeNet, shared by MACE and NequIP:
///   f(t) = 1 - (p+1)(p+2)/2 t^p + p(p+2) t^(p+1) - p(p+1)/2 t^(p+2)   for t < 1, else 0,
///   f'(t) = -p(p+1)(p+2)/2 t^(p-1) (1-t)^2                           for t < 1, else 0,
/// with t = r / r_max. MACE's PolynomialCutoff(r_max, p) applies it to r (also ZBLBasis, with
/// r_max = cov[Z_u] + cov[Z_v]); NequIP's PolynomialCutoff(p) applies it to the normalised length
/// x = r / r_max, i.e. PolynomialCutoff(1, p) here. The step 1[t < 1] is part of the function, as
/// in both codes (`envelope * (x < r_max)`).
class PolynomialCutoff {
 public:
  /// @param r_max the cutoff radius (MACE buffer `cutoff_fn.r_max`; 1 for NequIP).
  /// @param p the exponent (MACE buffer `cutoff_fn.p`, an integer; NequIP `polynomial_cutoff_p`).
  /// @throws Error if r_max is not finite and positive or p is not finite and >= 1.
  PolynomialCutoff(double r_max, double p);

  double r_max() const { return r_max_; }
  double p() const { return p_; }

  /// f(r); writes df/dr to @p df_dr when it is not null.
  template <class T>
  T operator()(T r, std::common_type_t<T>* df_dr = nullptr) const {
    const T t = r / static_cast<T>(r_max_);
    if (!(t < T(1))) {
      if (df_dr) *df_dr = T(0);
      return T(0);
    }
    const T p = static_cast<T>(p_);
    const T tp = std::pow(t, p);
    if (df_dr) {
      // The factored form (1-t)^2 t^(p-1) is exact near t = 1, where the expanded polynomial
      // cancels.
      const T one_minus_t = T(1) - t;
      *df_dr = -(p * (p + T(1)) * (p + T(2)) / T(2)) * std::pow(t, p - T(1)) * one_minus_t *
               one_minus_t / static_cast<T>(r_max_);
    }
    // Same grouping as the Python modules, so that values agree to rounding.
    return T(1) - ((p + T(1)) * (p + T(2)) / T(2)) * tp + p * (p + T(2)) * (tp * t) -
           (p * (p + T(1)) / T(2)) * (tp * t * t);
  }

 private:
  double r_max_;
  double p_;
};

/// MACE's BesselBasis: b_n(x) = prefactor * sin(w_n x) / x, n = 0..N-1, with the module's
/// buffers `bessel_weights` (w_n = (n+1) pi / r_max unless trained) and `prefactor`
/// (sqrt(2 / r_max)). x is the edge length, or its Agnesi transform T(r). At x = 0 the limit
/// prefactor * w_n is returned (torch gives NaN there).
class BesselBasis {
 public:
  /// @throws Error if @p bessel_weights is empty or any value is not finite.
  BesselBasis(std::vector<double> bessel_weights, double prefactor);

  int num_basis() const { return static_cast<int>(weights_.size()); }
  const std::vector<double>& bessel_weights() const { return weights_; }
  double prefactor() const { return prefactor_; }

  /// b[n] = b_n(x); db_dx[n] = d b_n / dx when @p db_dx is not null. Arrays of num_basis().
  template <class T>
  void evaluate(T x, std::common_type_t<T>* b, std::common_type_t<T>* db_dx = nullptr) const {
    const T pre = static_cast<T>(prefactor_);
    for (std::size_t n = 0; n < weights_.size(); ++n) {
      // prefactor sin(w x)/x = prefactor w s(w x), with s(y) = sin(y)/y finite at y = 0.
      const T w = static_cast<T>(weights_[n]);
      T s, ds;
      radial_detail::sin_over(w * x, &s, db_dx ? &ds : nullptr);
      b[n] = pre * w * s;
      if (db_dx) db_dx[n] = pre * w * w * ds;
    }
  }

 private:
  std::vector<double> weights_;
  double prefactor_;
};

/// MACE's AgnesiTransform (ACEpotentials.jl): T(r) = 1 / (1 + a s^q / (1 + s^(q-p))), with
/// s = r / r0 and r0 = (cov[Z_u] + cov[Z_v]) / 2 from the covalent radii of the two atoms
/// (buffers `q`, `p`, `a`, `covalent_radii`, the latter indexed by atomic number).
class AgnesiTransform {
 public:
  /// @param covalent_radii the module's buffer, indexed by atomic number (ase.data.covalent_radii).
  /// @param atomic_numbers the model's species (MACE `atomic_numbers`): species index s has
  ///   atomic number atomic_numbers[s]; the per-edge functions take species indices.
  /// @throws Error if q, p or a is not finite, a species has no positive covalent radius in the
  ///   table, or @p atomic_numbers is empty.
  AgnesiTransform(double q, double p, double a, const std::vector<double>& covalent_radii,
                  std::vector<int> atomic_numbers);

  double q() const { return q_; }
  double p() const { return p_; }
  double a() const { return a_; }
  int num_species() const { return static_cast<int>(atomic_numbers_.size()); }
  /// r0 of the species pair (symmetric).
  double r0(int species_u, int species_v) const {
    return r0_[static_cast<std::size_t>(species_u) * atomic_numbers_.size() + species_v];
  }

  /// T(r) for an edge between species @p species_u and @p species_v; writes dT/dr to @p dT_dr
  /// when it is not null.
  template <class T>
  T operator()(T r, int species_u, int species_v, std::common_type_t<T>* dT_dr = nullptr) const {
    CLEBSCH_EXPECTS(species_u >= 0 && species_u < num_species() && species_v >= 0 &&
                    species_v < num_species());
    const T r0 = static_cast<T>(this->r0(species_u, species_v));
    const T q = static_cast<T>(q_), p = static_cast<T>(p_), a = static_cast<T>(a_);
    const T s = r / r0;
    const T sq = std::pow(s, q);
    const T sqp = std::pow(s, q - p);
    const T den = T(1) + sqp;
    const T g = a * sq / den;
    const T value = T(1) / (T(1) + g);
    if (dT_dr) {
      // dg/ds = a s^(q-1) (q + p s^(q-p)) / (1 + s^(q-p))^2, and dT/dg = -T^2.
      const T dg_ds = a * (sq / s) * (q + p * sqp) / (den * den);
      *dT_dr = -value * value * dg_ds / r0;
    }
    return value;
  }

 private:
  double q_, p_, a_;
  std::vector<int> atomic_numbers_;
  std::vector<double> r0_;  // [species_u][species_v]
};

/// MACE's RadialEmbeddingBlock (radial_type "bessel"): with the cutoff f(r) of the raw length and
/// x = r or x = T(r) (distance_transform "Agnesi"),
///   apply_cutoff (default): edge_feats_n = b_n(x) f(r);
///   otherwise:              edge_feats_n = b_n(x), and f(r) is returned on its own (MACE then
///                           multiplies it into the TP weights and the density).
/// Edge (sender u, receiver v); only the Agnesi transform depends on the species.
class MaceRadialEmbedding {
 public:
  MaceRadialEmbedding(BesselBasis bessel, PolynomialCutoff cutoff,
                      std::optional<AgnesiTransform> transform, bool apply_cutoff);

  int num_basis() const { return bessel_.num_basis(); }
  const BesselBasis& bessel() const { return bessel_; }
  const PolynomialCutoff& cutoff() const { return cutoff_; }
  const std::optional<AgnesiTransform>& transform() const { return transform_; }
  bool apply_cutoff() const { return apply_cutoff_; }

  /// One edge: feats[n] (num_basis()), cutoff = f(r), and their derivatives d/dr where the
  /// pointers are not null. @p species_u / @p species_v are only read with a transform.
  template <class T>
  void evaluate(T r, int species_u, int species_v, std::common_type_t<T>* feats,
                std::common_type_t<T>* dfeats_dr = nullptr, std::common_type_t<T>* cutoff = nullptr,
                std::common_type_t<T>* dcutoff_dr = nullptr) const {
    T df;
    const T f = cutoff_(r, &df);
    T x = r, dx_dr = T(1);
    if (transform_) x = (*transform_)(r, species_u, species_v, &dx_dr);
    bessel_.evaluate(x, feats, dfeats_dr);
    const int n_basis = num_basis();
    if (dfeats_dr)
      for (int n = 0; n < n_basis; ++n) dfeats_dr[n] *= dx_dr;
    if (apply_cutoff_) {
      for (int n = 0; n < n_basis; ++n) {
        if (dfeats_dr) dfeats_dr[n] = dfeats_dr[n] * f + feats[n] * df;
        feats[n] *= f;
      }
    }
    if (cutoff) *cutoff = f;
    if (dcutoff_dr) *dcutoff_dr = df;
  }

  /// Batch version of evaluate(): row e of feats / dfeats_dr (n_edges x num_basis()) for edge e.
  /// Null outputs are skipped; @p species_u / @p species_v may be null without a transform.
  template <class T>
  void forward(std::size_t n_edges, const T* r, const int* species_u, const int* species_v,
               std::common_type_t<T>* feats, std::common_type_t<T>* dfeats_dr,
               std::common_type_t<T>* cutoff, std::common_type_t<T>* dcutoff_dr) const;

  /// Reverse mode: grad_r[e] = sum_n grad_feats[e][n] d feats_n / dr + grad_cutoff[e] df/dr
  /// (overwritten). @p grad_cutoff may be null (treated as zero).
  template <class T>
  void backward(std::size_t n_edges, const T* r, const int* species_u, const int* species_v,
                const std::common_type_t<T>* grad_feats, const std::common_type_t<T>* grad_cutoff,
                std::common_type_t<T>* grad_r) const;

 private:
  BesselBasis bessel_;
  PolynomialCutoff cutoff_;
  std::optional<AgnesiTransform> transform_;
  bool apply_cutoff_;
};

/// MACE's ZBLBasis (pair_repulsion): the energy of edge (sender u, receiver v), summed by MACE at
/// the receiver (inside ScaleShiftMACE's scale):
///   E = 1/2 * 14.3996 Z_u Z_v / r * phi(r / a) * f(r; r_c = cov[Z_u] + cov[Z_v], p),
///   a = a_prefactor * 0.529 / (Z_u^a_exp + Z_v^a_exp),
///   phi(x) = c0 e^(-3.2 x) + c1 e^(-0.9423 x) + c2 e^(-0.4028 x) + c3 e^(-0.2016 x),
/// with f the polynomial envelope. Buffers/parameters: `c`, `a_exp`, `a_prefactor`, `p`,
/// `covalent_radii`; the exponents, 14.3996 and 0.529 are constants of the Python code.
class MaceZbl {
 public:
  /// @param atomic_numbers the model's species (MACE `atomic_numbers`), indexed by species.
  /// @param covalent_radii the module's buffer, indexed by atomic number.
  /// @throws Error if an atomic number is below 1 or has no positive radius in the table, or a
  ///   parameter is not finite (a_prefactor, a_exp and p must be positive).
  MaceZbl(std::vector<int> atomic_numbers, const std::vector<double>& covalent_radii,
          std::array<double, 4> c, double a_exp, double a_prefactor, double p);

  int num_species() const { return static_cast<int>(atomic_numbers_.size()); }
  /// The cutoff radius cov[Z_u] + cov[Z_v] of a species pair.
  double r_cut(int species_u, int species_v) const {
    return pair(species_u, species_v).cutoff.r_max();
  }

  /// Energy of one edge; writes dE/dr to @p dE_dr when it is not null.
  template <class T>
  T energy(T r, int species_u, int species_v, std::common_type_t<T>* dE_dr = nullptr) const {
    CLEBSCH_EXPECTS(species_u >= 0 && species_u < num_species() && species_v >= 0 &&
                    species_v < num_species());
    const Pair& pr = pair(species_u, species_v);
    T df;
    const T f = pr.cutoff(r, dE_dr ? &df : nullptr);
    if (f == T(0)) {
      if (dE_dr) *dE_dr = T(0);
      return T(0);
    }
    const T inv_a = T(1) / static_cast<T>(pr.a);
    const T x = r * inv_a;
    T phi = T(0), dphi = T(0);
    for (int i = 0; i < 4; ++i) {
      const T d = static_cast<T>(kExponents[i]);
      const T term = static_cast<T>(c_[i]) * std::exp(-d * x);
      phi += term;
      dphi -= d * term;
    }
    const T k = static_cast<T>(pr.zz);  // 14.3996 Z_u Z_v
    const T v = k / r * phi;
    if (dE_dr) *dE_dr = T(0.5) * ((k / r) * (dphi * inv_a - phi / r) * f + v * df);
    return T(0.5) * v * f;
  }

  /// Batch energies: e[i] for edge i (overwritten), de_dr[i] = dE/dr when not null.
  template <class T>
  void forward(std::size_t n_edges, const T* r, const int* species_u, const int* species_v,
               std::common_type_t<T>* e, std::common_type_t<T>* de_dr) const;

  /// The decay rates of phi, hard-coded in ZBLBasis.forward.
  static constexpr double kExponents[4] = {3.2, 0.9423, 0.4028, 0.2016};
  /// e^2 / (4 pi eps0) in eV*Angstrom as ZBLBasis writes it.
  static constexpr double kCoulomb = 14.3996;
  /// Bohr radius in Angstrom as ZBLBasis writes it.
  static constexpr double kBohr = 0.529;

 private:
  struct Pair {
    double a;                 // screening length
    double zz;                // kCoulomb * Z_u * Z_v
    PolynomialCutoff cutoff;  // r_max = cov[Z_u] + cov[Z_v]
  };
  const Pair& pair(int u, int v) const {
    return pairs_[static_cast<std::size_t>(u) * atomic_numbers_.size() + v];
  }

  std::vector<int> atomic_numbers_;
  std::array<double, 4> c_;
  double a_exp_, a_prefactor_, p_;
  std::vector<Pair> pairs_;
};

/// NequIP's EdgeLengthNormalizer: x = r * rmax_recip, with the buffer `_rmax_recip` either one
/// value (1 / r_max) or, with per_edge_type_cutoff, a num_types x num_types row-major matrix
/// indexed [type of the centre, edge_index[0]][type of the neighbour, edge_index[1]] (not
/// necessarily symmetric).
class NequipEdgeLength {
 public:
  /// @throws Error if num_types < 1, @p rmax_recip has neither 1 nor num_types^2 entries, or an
  ///   entry is not finite and positive.
  NequipEdgeLength(int num_types, std::vector<double> rmax_recip);

  int num_types() const { return num_types_; }
  bool per_edge_type() const { return rmax_recip_.size() > 1; }
  /// 1 / r_max of the edge (dx/dr).
  double rmax_recip(int type_center, int type_neighbor) const {
    return per_edge_type()
               ? rmax_recip_[static_cast<std::size_t>(type_center) * num_types_ + type_neighbor]
               : rmax_recip_[0];
  }
  template <class T>
  T operator()(T r, int type_center, int type_neighbor) const {
    CLEBSCH_EXPECTS(!per_edge_type() || (type_center >= 0 && type_center < num_types_ &&
                                         type_neighbor >= 0 && type_neighbor < num_types_));
    return r * static_cast<T>(rmax_recip(type_center, type_neighbor));
  }

 private:
  int num_types_;
  std::vector<double> rmax_recip_;
};

/// NequIP's BesselEdgeLengthEncoding followed by ApplyFactor, on the normalised length x:
///   b_n(x) = factor * w_n * sinc(w_n x) = factor * sin(pi w_n x) / (pi x),
/// with torch's sinc(z) = sin(pi z)/(pi z), the buffer (or trainable parameter)
/// `bessel_weights` (w_n = n+1 unless trained) and factor = 2 pi / r_max^2 (global r_max). For
/// x = r / r_max and untrained weights this is (2 / r_max) sin((n+1) pi r / r_max) / r.
class NequipBessel {
 public:
  /// @throws Error if @p bessel_weights is empty or a value (or the factor) is not finite.
  NequipBessel(std::vector<double> bessel_weights, double factor);

  int num_basis() const { return static_cast<int>(weights_.size()); }
  const std::vector<double>& bessel_weights() const { return weights_; }
  double factor() const { return factor_; }

  /// b[n] = b_n(x); db_dx[n] = d b_n / dx when @p db_dx is not null.
  template <class T>
  void evaluate(T x, std::common_type_t<T>* b, std::common_type_t<T>* db_dx = nullptr) const {
    const T pi = static_cast<T>(kPi), fac = static_cast<T>(factor_);
    for (std::size_t n = 0; n < weights_.size(); ++n) {
      const T w = static_cast<T>(weights_[n]);
      T s, ds;
      radial_detail::sin_over(pi * w * x, &s, db_dx ? &ds : nullptr);
      b[n] = fac * w * s;
      if (db_dx) db_dx[n] = fac * w * (pi * w) * ds;
    }
  }

  static constexpr double kPi = 3.14159265358979323846;

 private:
  std::vector<double> weights_;
  double factor_;
};

/// NequIP's edge embedding, as the model chains edge_norm -> bessel_encode -> factor:
///   x = r * rmax_recip(type_center, type_neighbor),
///   edge_embedding_n = b_n(x) * f(x)  (b_n includes the factor 2 pi / r_max^2),
///   edge_cutoff = f(x)  (f: the polynomial envelope in x, r_max 1, p = polynomial_cutoff_p).
class NequipRadialEmbedding {
 public:
  NequipRadialEmbedding(NequipEdgeLength length, NequipBessel bessel, double p);

  int num_basis() const { return bessel_.num_basis(); }
  const NequipEdgeLength& length() const { return length_; }
  const NequipBessel& bessel() const { return bessel_; }
  const PolynomialCutoff& cutoff() const { return cutoff_; }

  /// One edge (centre type, neighbour type): feats[n] and cutoff with their d/dr where the
  /// pointers are not null.
  template <class T>
  void evaluate(T r, int type_center, int type_neighbor, std::common_type_t<T>* feats,
                std::common_type_t<T>* dfeats_dr = nullptr, std::common_type_t<T>* cutoff = nullptr,
                std::common_type_t<T>* dcutoff_dr = nullptr) const {
    const T dx_dr = static_cast<T>(length_.rmax_recip(type_center, type_neighbor));
    const T x = length_(r, type_center, type_neighbor);
    T df_dx;
    const T f = cutoff_(x, &df_dx);
    bessel_.evaluate(x, feats, dfeats_dr);
    const int n_basis = num_basis();
    for (int n = 0; n < n_basis; ++n) {
      if (dfeats_dr) dfeats_dr[n] = (dfeats_dr[n] * f + feats[n] * df_dx) * dx_dr;
      feats[n] *= f;
    }
    if (cutoff) *cutoff = f;
    if (dcutoff_dr) *dcutoff_dr = df_dx * dx_dr;
  }

  /// Batch version of evaluate() (null outputs are skipped).
  template <class T>
  void forward(std::size_t n_edges, const T* r, const int* type_center, const int* type_neighbor,
               std::common_type_t<T>* feats, std::common_type_t<T>* dfeats_dr,
               std::common_type_t<T>* cutoff, std::common_type_t<T>* dcutoff_dr) const;

  /// Reverse mode: grad_r[e] = sum_n grad_feats[e][n] d feats_n/dr + grad_cutoff[e] df/dr
  /// (overwritten); @p grad_cutoff may be null.
  template <class T>
  void backward(std::size_t n_edges, const T* r, const int* type_center, const int* type_neighbor,
                const std::common_type_t<T>* grad_feats, const std::common_type_t<T>* grad_cutoff,
                std::common_type_t<T>* grad_r) const;

 private:
  NequipEdgeLength length_;
  NequipBessel bessel_;
  PolynomialCutoff cutoff_;
};

/// NequIP's ZBL pair potential (constants of LAMMPS pair_zbl_const.h), per edge (centre i =
/// edge_index[0], neighbour j), summed by NequIP at the centre after the per-type scale/shift:
///   E = qqr2exesquare * Z_i Z_j / r * psi(x_z) * f(x),
///   x_z = (Z_i^0.23 + Z_j^0.23) r / 0.46850,
///   psi(x) = 0.02817 e^(-0.20162 x) + 0.28022 e^(-0.40290 x) + 0.50986 e^(-0.94229 x)
///          + 0.18175 e^(-3.19980 x),
/// with x the normalised length of NequipEdgeLength and f the envelope in x with the module's p.
/// qqr2exesquare is the module's buffer `_qqr2exesquare`, which already holds the factor 1/2
/// (14.399645 / 2 in metal units).
class NequipZbl {
 public:
  /// @param atomic_numbers the module's buffer `atomic_numbers`, one value per type.
  /// @throws Error if the sizes disagree with @p length's types, an atomic number is below 1,
  ///   qqr2exesquare is not finite, or p is not finite and >= 1.
  NequipZbl(std::vector<double> atomic_numbers, double qqr2exesquare, NequipEdgeLength length,
            double p);

  int num_types() const { return length_.num_types(); }
  const NequipEdgeLength& length() const { return length_; }

  /// Energy of one edge; writes dE/dr to @p dE_dr when it is not null.
  template <class T>
  T energy(T r, int type_center, int type_neighbor, std::common_type_t<T>* dE_dr = nullptr) const {
    CLEBSCH_EXPECTS(type_center >= 0 && type_center < num_types() && type_neighbor >= 0 &&
                    type_neighbor < num_types());
    const T dx_dr = static_cast<T>(length_.rmax_recip(type_center, type_neighbor));
    T df_dx;
    const T f = cutoff_(length_(r, type_center, type_neighbor), dE_dr ? &df_dx : nullptr);
    if (f == T(0)) {
      if (dE_dr) *dE_dr = T(0);
      return T(0);
    }
    const std::size_t ij = static_cast<std::size_t>(type_center) * num_types() + type_neighbor;
    const T k = static_cast<T>(screening_[ij]);  // (Z_i^0.23 + Z_j^0.23) / a0
    const T x = k * r;
    T psi = T(0), dpsi = T(0);
    for (int n = 0; n < 4; ++n) {
      const T d = static_cast<T>(kD[n]);
      const T term = static_cast<T>(kC[n]) * std::exp(d * x);
      psi += term;
      dpsi += d * term;
    }
    const T q = static_cast<T>(qqr2exesquare_) * static_cast<T>(zz_[ij]);
    const T e = q / r * psi;
    if (dE_dr) *dE_dr = (q / r) * (dpsi * k - psi / r) * f + e * df_dx * dx_dr;
    return e * f;
  }

  /// Batch energies: e[i] for edge i (overwritten), de_dr[i] = dE/dr when not null.
  template <class T>
  void forward(std::size_t n_edges, const T* r, const int* type_center, const int* type_neighbor,
               std::common_type_t<T>* e, std::common_type_t<T>* de_dr) const;

  /// LAMMPS pair_zbl_const.h: pzbl, a0, c1..c4, d1..d4 (as nequip's _ZBL copies them).
  static constexpr double kPzbl = 0.23;
  static constexpr double kA0 = 0.46850;
  static constexpr double kC[4] = {0.02817, 0.28022, 0.50986, 0.18175};
  static constexpr double kD[4] = {-0.20162, -0.40290, -0.94229, -3.19980};

 private:
  std::vector<double> atomic_numbers_;
  double qqr2exesquare_;
  NequipEdgeLength length_;
  PolynomialCutoff cutoff_;
  std::vector<double> screening_;  // [ti][tj] (Z_i^pzbl + Z_j^pzbl) / a0
  std::vector<double> zz_;         // [ti][tj] Z_i Z_j
};

}  // namespace clebsch
