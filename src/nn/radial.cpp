// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Validation of the radial-function parameters and the batch (OpenMP over edges) forms of the
// per-edge functions of radial.h, instantiated for float and double.
#include "clebsch/nn/radial.h"

#include <sstream>
#include <string>
#include <utility>

namespace clebsch {
namespace {

// Below this many edges the fork/join of a parallel region costs more than the work.
constexpr long long kMinParallelEdges = 512;

std::string num(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

void require_finite(double v, const std::string& what) {
  if (!std::isfinite(v)) throw Error(what + " must be finite, got " + num(v));
}

void require_positive(double v, const std::string& what) {
  if (!(std::isfinite(v) && v > 0))
    throw Error(what + " must be finite and positive, got " + num(v));
}

void require_exponent(double p, const std::string& what) {
  if (!(std::isfinite(p) && p >= 1)) throw Error(what + " must be finite and >= 1, got " + num(p));
}

void require_weights(const std::vector<double>& w, const std::string& what) {
  if (w.empty()) throw Error(what + ": bessel_weights is empty");
  for (std::size_t n = 0; n < w.size(); ++n)
    require_finite(w[n], what + ": bessel_weights[" + std::to_string(n) + "]");
}

// Covalent radius of atomic number z from a table indexed by atomic number.
double covalent_radius(const std::vector<double>& table, int z, const std::string& what) {
  if (z < 1 || z >= static_cast<int>(table.size()))
    throw Error(what + ": atomic number " + std::to_string(z) +
                " is outside the covalent_radii table (" + std::to_string(table.size()) +
                " entries, index = atomic number)");
  const double r = table[static_cast<std::size_t>(z)];
  if (!(std::isfinite(r) && r > 0))
    throw Error(what + ": covalent radius of atomic number " + std::to_string(z) +
                " must be finite and positive, got " + num(r));
  return r;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Constructors

PolynomialCutoff::PolynomialCutoff(double r_max, double p) : r_max_(r_max), p_(p) {
  require_positive(r_max, "PolynomialCutoff: r_max");
  require_exponent(p, "PolynomialCutoff: p");
}

BesselBasis::BesselBasis(std::vector<double> bessel_weights, double prefactor)
    : weights_(std::move(bessel_weights)), prefactor_(prefactor) {
  require_weights(weights_, "BesselBasis");
  require_finite(prefactor, "BesselBasis: prefactor");
}

AgnesiTransform::AgnesiTransform(double q, double p, double a,
                                 const std::vector<double>& covalent_radii,
                                 std::vector<int> atomic_numbers)
    : q_(q), p_(p), a_(a), atomic_numbers_(std::move(atomic_numbers)) {
  require_finite(q, "AgnesiTransform: q");
  require_finite(p, "AgnesiTransform: p");
  require_finite(a, "AgnesiTransform: a");
  if (atomic_numbers_.empty()) throw Error("AgnesiTransform: atomic_numbers is empty");
  const std::size_t n = atomic_numbers_.size();
  r0_.resize(n * n);
  for (std::size_t u = 0; u < n; ++u)
    for (std::size_t v = 0; v < n; ++v)
      r0_[u * n + v] =
          0.5 * (covalent_radius(covalent_radii, atomic_numbers_[u], "AgnesiTransform") +
                 covalent_radius(covalent_radii, atomic_numbers_[v], "AgnesiTransform"));
}

MaceRadialEmbedding::MaceRadialEmbedding(BesselBasis bessel, PolynomialCutoff cutoff,
                                         std::optional<AgnesiTransform> transform,
                                         bool apply_cutoff)
    : bessel_(std::move(bessel)),
      cutoff_(cutoff),
      transform_(std::move(transform)),
      apply_cutoff_(apply_cutoff) {}

MaceZbl::MaceZbl(std::vector<int> atomic_numbers, const std::vector<double>& covalent_radii,
                 std::array<double, 4> c, double a_exp, double a_prefactor, double p)
    : atomic_numbers_(std::move(atomic_numbers)),
      c_(c),
      a_exp_(a_exp),
      a_prefactor_(a_prefactor),
      p_(p) {
  if (atomic_numbers_.empty()) throw Error("MaceZbl: atomic_numbers is empty");
  for (int i = 0; i < 4; ++i) require_finite(c[i], "MaceZbl: c[" + std::to_string(i) + "]");
  require_positive(a_exp, "MaceZbl: a_exp");
  require_positive(a_prefactor, "MaceZbl: a_prefactor");
  require_exponent(p, "MaceZbl: p");
  const std::size_t n = atomic_numbers_.size();
  pairs_.reserve(n * n);
  for (std::size_t u = 0; u < n; ++u)
    for (std::size_t v = 0; v < n; ++v) {
      const int zu = atomic_numbers_[u], zv = atomic_numbers_[v];
      const double r_cut = covalent_radius(covalent_radii, zu, "MaceZbl") +
                           covalent_radius(covalent_radii, zv, "MaceZbl");
      // Same grouping as ZBLBasis.forward.
      const double a = a_prefactor * kBohr / (std::pow(zu, a_exp) + std::pow(zv, a_exp));
      pairs_.push_back({a, kCoulomb * zu * zv, PolynomialCutoff(r_cut, p)});
    }
}

NequipEdgeLength::NequipEdgeLength(int num_types, std::vector<double> rmax_recip)
    : num_types_(num_types), rmax_recip_(std::move(rmax_recip)) {
  if (num_types < 1)
    throw Error("NequipEdgeLength: num_types must be >= 1, got " + std::to_string(num_types));
  const std::size_t nn = static_cast<std::size_t>(num_types) * num_types;
  if (rmax_recip_.size() != 1 && rmax_recip_.size() != nn)
    throw Error("NequipEdgeLength: _rmax_recip has " + std::to_string(rmax_recip_.size()) +
                " entries, expected 1 or num_types^2 = " + std::to_string(nn));
  for (std::size_t i = 0; i < rmax_recip_.size(); ++i)
    require_positive(rmax_recip_[i], "NequipEdgeLength: _rmax_recip[" + std::to_string(i) + "]");
}

NequipBessel::NequipBessel(std::vector<double> bessel_weights, double factor)
    : weights_(std::move(bessel_weights)), factor_(factor) {
  require_weights(weights_, "NequipBessel");
  require_finite(factor, "NequipBessel: factor");
}

NequipRadialEmbedding::NequipRadialEmbedding(NequipEdgeLength length, NequipBessel bessel, double p)
    : length_(std::move(length)), bessel_(std::move(bessel)), cutoff_(1.0, p) {}

NequipZbl::NequipZbl(std::vector<double> atomic_numbers, double qqr2exesquare,
                     NequipEdgeLength length, double p)
    : atomic_numbers_(std::move(atomic_numbers)),
      qqr2exesquare_(qqr2exesquare),
      length_(std::move(length)),
      cutoff_(1.0, p) {
  const int n = length_.num_types();
  if (static_cast<int>(atomic_numbers_.size()) != n)
    throw Error("NequipZbl: atomic_numbers has " + std::to_string(atomic_numbers_.size()) +
                " entries, the edge-length normalizer has " + std::to_string(n) + " types");
  for (std::size_t t = 0; t < atomic_numbers_.size(); ++t)
    if (!(std::isfinite(atomic_numbers_[t]) && atomic_numbers_[t] >= 1))
      throw Error("NequipZbl: atomic_numbers[" + std::to_string(t) + "] must be >= 1, got " +
                  num(atomic_numbers_[t]));
  require_positive(qqr2exesquare, "NequipZbl: _qqr2exesquare");
  screening_.resize(static_cast<std::size_t>(n) * n);
  zz_.resize(screening_.size());
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const double zi = atomic_numbers_[i], zj = atomic_numbers_[j];
      screening_[static_cast<std::size_t>(i) * n + j] =
          (std::pow(zi, kPzbl) + std::pow(zj, kPzbl)) / kA0;
      zz_[static_cast<std::size_t>(i) * n + j] = zi * zj;
    }
}

// ---------------------------------------------------------------------------------------------
// Batch forms: independent rows, so a plain static OpenMP loop. MACE's and NequIP's embeddings
// share them: both evaluate(r, a, b, feats, dfeats, cutoff, dcutoff) per edge, a and b being the
// species (or types) of its two ends, 0 when the caller passes none.

namespace {

template <class Embedding, class T>
void embedding_forward(const Embedding& emb, std::size_t n_edges, const T* r, const int* end_a,
                       const int* end_b, std::common_type_t<T>* feats,
                       std::common_type_t<T>* dfeats_dr, std::common_type_t<T>* cutoff,
                       std::common_type_t<T>* dcutoff_dr) {
  const std::size_t nb = static_cast<std::size_t>(emb.num_basis());
  const long long n = static_cast<long long>(n_edges);
#pragma omp parallel for schedule(static) if (n > kMinParallelEdges)
  for (long long e = 0; e < n; ++e) {
    const int a = end_a ? end_a[e] : 0, b = end_b ? end_b[e] : 0;
    emb.evaluate(r[e], a, b, feats + e * nb, dfeats_dr ? dfeats_dr + e * nb : nullptr,
                 cutoff ? cutoff + e : nullptr, dcutoff_dr ? dcutoff_dr + e : nullptr);
  }
}

// grad_r[e] = grad_cutoff[e] dcutoff/dr + sum_k grad_feats[e][k] dfeats_k/dr.
template <class Embedding, class T>
void embedding_backward(const Embedding& emb, std::size_t n_edges, const T* r, const int* end_a,
                        const int* end_b, const std::common_type_t<T>* grad_feats,
                        const std::common_type_t<T>* grad_cutoff, std::common_type_t<T>* grad_r) {
  const std::size_t nb = static_cast<std::size_t>(emb.num_basis());
  const long long n = static_cast<long long>(n_edges);
#pragma omp parallel if (n > kMinParallelEdges)
  {
    std::vector<T> f(nb), df(nb);
#pragma omp for schedule(static)
    for (long long e = 0; e < n; ++e) {
      const int a = end_a ? end_a[e] : 0, b = end_b ? end_b[e] : 0;
      T c, dc;
      emb.evaluate(r[e], a, b, f.data(), df.data(), &c, &dc);
      T g = grad_cutoff ? grad_cutoff[e] * dc : T(0);
      for (std::size_t k = 0; k < nb; ++k) g += grad_feats[e * nb + k] * df[k];
      grad_r[e] = g;
    }
  }
}

}  // namespace

template <class T>
void MaceRadialEmbedding::forward(std::size_t n_edges, const T* r, const int* species_u,
                                  const int* species_v, std::common_type_t<T>* feats,
                                  std::common_type_t<T>* dfeats_dr, std::common_type_t<T>* cutoff,
                                  std::common_type_t<T>* dcutoff_dr) const {
  if (transform_ && n_edges > 0 && (!species_u || !species_v))
    throw Error("MaceRadialEmbedding: the Agnesi transform needs the species of both ends");
  embedding_forward(*this, n_edges, r, species_u, species_v, feats, dfeats_dr, cutoff, dcutoff_dr);
}

template <class T>
void MaceRadialEmbedding::backward(std::size_t n_edges, const T* r, const int* species_u,
                                   const int* species_v, const std::common_type_t<T>* grad_feats,
                                   const std::common_type_t<T>* grad_cutoff,
                                   std::common_type_t<T>* grad_r) const {
  if (transform_ && n_edges > 0 && (!species_u || !species_v))
    throw Error("MaceRadialEmbedding: the Agnesi transform needs the species of both ends");
  embedding_backward(*this, n_edges, r, species_u, species_v, grad_feats, grad_cutoff, grad_r);
}

template <class T>
void MaceZbl::forward(std::size_t n_edges, const T* r, const int* species_u, const int* species_v,
                      std::common_type_t<T>* e, std::common_type_t<T>* de_dr) const {
  const long long n = static_cast<long long>(n_edges);
#pragma omp parallel for schedule(static) if (n > kMinParallelEdges)
  for (long long i = 0; i < n; ++i)
    e[i] = energy(r[i], species_u[i], species_v[i], de_dr ? de_dr + i : nullptr);
}

template <class T>
void NequipRadialEmbedding::forward(std::size_t n_edges, const T* r, const int* type_center,
                                    const int* type_neighbor, std::common_type_t<T>* feats,
                                    std::common_type_t<T>* dfeats_dr, std::common_type_t<T>* cutoff,
                                    std::common_type_t<T>* dcutoff_dr) const {
  if (length_.per_edge_type() && n_edges > 0 && (!type_center || !type_neighbor))
    throw Error("NequipRadialEmbedding: per-edge-type cutoffs need the types of both ends");
  embedding_forward(*this, n_edges, r, type_center, type_neighbor, feats, dfeats_dr, cutoff,
                    dcutoff_dr);
}

template <class T>
void NequipRadialEmbedding::backward(std::size_t n_edges, const T* r, const int* type_center,
                                     const int* type_neighbor,
                                     const std::common_type_t<T>* grad_feats,
                                     const std::common_type_t<T>* grad_cutoff,
                                     std::common_type_t<T>* grad_r) const {
  if (length_.per_edge_type() && n_edges > 0 && (!type_center || !type_neighbor))
    throw Error("NequipRadialEmbedding: per-edge-type cutoffs need the types of both ends");
  embedding_backward(*this, n_edges, r, type_center, type_neighbor, grad_feats, grad_cutoff,
                     grad_r);
}

template <class T>
void NequipZbl::forward(std::size_t n_edges, const T* r, const int* type_center,
                        const int* type_neighbor, std::common_type_t<T>* e,
                        std::common_type_t<T>* de_dr) const {
  const long long n = static_cast<long long>(n_edges);
#pragma omp parallel for schedule(static) if (n > kMinParallelEdges)
  for (long long i = 0; i < n; ++i)
    e[i] = energy(r[i], type_center[i], type_neighbor[i], de_dr ? de_dr + i : nullptr);
}

#define CLEBSCH_INSTANTIATE_RADIAL(T)                                                              \
  template void MaceRadialEmbedding::forward<T>(std::size_t, const T*, const int*, const int*, T*, \
                                                T*, T*, T*) const;                                 \
  template void MaceRadialEmbedding::backward<T>(std::size_t, const T*, const int*, const int*,    \
                                                 const T*, const T*, T*) const;                    \
  template void MaceZbl::forward<T>(std::size_t, const T*, const int*, const int*, T*, T*) const;  \
  template void NequipRadialEmbedding::forward<T>(std::size_t, const T*, const int*, const int*,   \
                                                  T*, T*, T*, T*) const;                           \
  template void NequipRadialEmbedding::backward<T>(std::size_t, const T*, const int*, const int*,  \
                                                   const T*, const T*, T*) const;                  \
  template void NequipZbl::forward<T>(std::size_t, const T*, const int*, const int*, T*, T*) const;

CLEBSCH_INSTANTIATE_RADIAL(float)
CLEBSCH_INSTANTIATE_RADIAL(double)
#undef CLEBSCH_INSTANTIATE_RADIAL

}  // namespace clebsch
