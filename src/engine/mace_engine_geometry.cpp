// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The per-edge geometry of the MACE host engine: at the start of compute() the network's edge
// inputs (spherical harmonics, radial basis, cutoff, in the network type T) and the ZBL energy
// per centre; at the end the chain rule from the gradients the layers accumulated (with respect
// to the harmonics, the radial basis and the cutoff) down to dE/dvector, re-evaluating the
// geometry with its derivatives rather than storing them. MACE's edge vector is centre minus
// neighbour, the engine interface's the opposite: both passes flip the sign. Also the checks of
// the geometry functions' model values (mace_engine_geometry.h).
#include <cmath>

#include "clebsch/engine/mace_engine_impl.h"
#include "clebsch/o3/spherical_harmonics.h"
#include "clebsch/support/error.h"

namespace clebsch::mace_detail {

Radial::Radial(const model::MaceRadial& r, const std::vector<model::Species>& species)
    : bessel_(r.basis == model::MaceRadial::Basis::kBessel
                  ? BesselBasis(r.bessel_weights, r.prefactor)
                  : BesselBasis(std::vector<double>(1, 1.0), 1.0)),
      basis_(r.basis),
      nb_(r.num_basis),
      gauss_c_(r.gaussian_centres),
      gauss_coeff_(r.gaussian_coeff),
      cutoff_(r.r_max, r.cutoff_p),
      apply_cutoff_(r.apply_cutoff),
      num_species_(static_cast<int>(species.size())) {
  if (basis_ == model::MaceRadial::Basis::kGaussian &&
      r.num_basis != static_cast<int>(r.gaussian_centres.size()))
    throw ModelFormatError("mace.radial: num_basis " + std::to_string(r.num_basis) + " but " +
                           std::to_string(r.gaussian_centres.size()) + " gaussian_centres");
  if (basis_ == model::MaceRadial::Basis::kBessel &&
      r.num_basis != static_cast<int>(r.bessel_weights.size()))
    throw ModelFormatError("mace.radial: num_basis " + std::to_string(r.num_basis) + " but " +
                           std::to_string(r.bessel_weights.size()) + " bessel_weights");
  if (r.agnesi && r.soft)
    throw ModelFormatError("mace.radial: both an Agnesi and a soft distance transform");
  if (r.agnesi) {
    check_radii(r.agnesi->covalent_radii, "mace.radial.distance_transform (agnesi)");
    // The library's transform takes a table indexed by atomic number: index species s + 1.
    std::vector<double> table{0.0};
    std::vector<int> numbers;
    for (int s = 0; s < num_species_; ++s) {
      table.push_back(r.agnesi->covalent_radii[s]);
      numbers.push_back(s + 1);
    }
    agnesi_.emplace(r.agnesi->q, r.agnesi->p, r.agnesi->a, table, numbers);
  }
  if (r.soft) {
    check_radii(r.soft->covalent_radii, "mace.radial.distance_transform (soft)");
    soft_alpha_ = r.soft->alpha;
    soft_radii_ = r.soft->covalent_radii;
    soft_ = true;
  }
}

void Radial::check_radii(const std::vector<double>& radii, const std::string& where) const {
  if (static_cast<int>(radii.size()) != num_species_)
    throw ModelFormatError(where + ": " + std::to_string(radii.size()) + " covalent radii for " +
                           std::to_string(num_species_) + " species");
  for (double v : radii)
    if (!(std::isfinite(v) && v > 0))
      throw ModelFormatError(where + ": covalent radius " + fmt(v) + " is not positive");
}

Zbl::Zbl(const model::MaceZbl& z, int num_species) : S_(num_species), c_(z.c), e_(z.exponents) {
  if (static_cast<int>(z.atomic_numbers.size()) != S_ ||
      static_cast<int>(z.covalent_radii.size()) != S_)
    throw ModelFormatError("mace.pair_repulsion: atomic_numbers/covalent_radii do not have " +
                           std::to_string(S_) + " entries");
  for (int i = 0; i < S_; ++i)
    for (int j = 0; j < S_; ++j) {
      const double zi = z.atomic_numbers[i], zj = z.atomic_numbers[j];
      pairs_.push_back({z.a_prefactor * z.bohr / (std::pow(zi, z.a_exp) + std::pow(zj, z.a_exp)),
                        0.5 * z.coulomb * zi * zj,
                        PolynomialCutoff(z.covalent_radii[i] + z.covalent_radii[j], z.p)});
    }
}

// Harmonics, radial basis and cutoff of every edge (network inputs, in T), and the ZBL energy
// per centre.
template <class T, class G>
void MaceImpl<T, G>::edge_geometry(const AtomGraph& g) {
  const int nb = radial_.num_basis();
  Y_.resize(E_ * nsh_);
  ef_.resize(E_ * nb);
  fc_.resize(radial_.apply_cutoff() ? 0 : E_);
  rl_.resize(spline_ ? E_ : 0);
  zbl_atom_.assign(L_, 0.0);
  const long long n_tasks = static_cast<long long>(centre_tasks_.size());
  const bool par = n_tasks > 1 && E_ * (20.0 * nsh_ + 40.0 * nb) > kParallelWork;
#pragma omp parallel if (par)
  {
    std::vector<G> yg(nsh_), fg(nb);
#pragma omp for schedule(dynamic, 1)
    for (long long task = 0; task < n_tasks; ++task) {
      const auto [c0, c1] = centre_tasks_[task];
      for (int i = c0; i < c1; ++i) {
        double zsum = 0;
        for (int q = centre_ptr_[i]; q < centre_ptr_[i + 1]; ++q) {
          const double* vec = g.vector + 3 * static_cast<std::size_t>(perm_[q]);
          // MACE's vector: centre minus neighbour.
          const G v[3] = {static_cast<G>(-vec[0]), static_cast<G>(-vec[1]),
                          static_cast<G>(-vec[2])};
          const G r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
          spherical_harmonics<G>(lmax_, v, yg.data());
          T* yq = Y_.data() + static_cast<std::size_t>(q) * nsh_;
          for (int k = 0; k < nsh_; ++k) yq[k] = static_cast<T>(yg[k]);
          G f;
          const int si = species_[i], sj = species_[sender_[q]];
          radial_.evaluate<G>(r, si, sj, fg.data(), nullptr, &f, nullptr);
          T* eq = ef_.data() + static_cast<std::size_t>(q) * nb;
          for (int n = 0; n < nb; ++n) eq[n] = static_cast<T>(fg[n]);
          if (!radial_.apply_cutoff()) fc_[q] = static_cast<T>(f);
          if (spline_) rl_[q] = r;
          if (zbl_) {
            G dE;
            zsum += static_cast<double>(zbl_->energy<G>(r, si, sj, &dE));
          }
        }
        zbl_atom_[i] = zsum;
      }
    }
  }
}

// dE/dvector per edge, from the accumulated gradients of the harmonics, the radial basis, the
// cutoff and the ZBL energy.
template <class T, class G>
void MaceImpl<T, G>::final_gradient(const AtomGraph& g, EngineResult& result) {
  const int nb = radial_.num_basis();
  const G scale = static_cast<G>(scale_);
  const long long E = static_cast<long long>(E_);
#pragma omp parallel if (E_ * (60.0 * nsh_ + 40.0 * nb) > kParallelWork)
  {
    std::vector<G> yg(nsh_), dy(3 * nsh_), fg(nb), dfg(nb);
#pragma omp for schedule(static)
    for (long long q = 0; q < E; ++q) {
      const std::size_t e = perm_[q];
      const double* vec = g.vector + 3 * e;
      const G v[3] = {static_cast<G>(-vec[0]), static_cast<G>(-vec[1]), static_cast<G>(-vec[2])};
      const G r = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
      spherical_harmonics_with_gradient<G>(lmax_, v, yg.data(), dy.data());
      const G* gy = gY_.data() + q * nsh_;
      G gv[3] = {G(0), G(0), G(0)};
      for (int k = 0; k < nsh_; ++k)
        for (int a = 0; a < 3; ++a) gv[a] += gy[k] * dy[3 * k + a];
      const int si = species_[centre_[q]], sj = species_[sender_[q]];
      G f, df;
      radial_.evaluate<G>(r, si, sj, fg.data(), dfg.data(), &f, &df);
      const G* ge = gE_.data() + q * nb;
      G dEdr = G(0);
      for (int k = 0; k < nb; ++k) dEdr += ge[k] * dfg[k];
      if (!radial_.apply_cutoff()) dEdr += gF_[q] * df;
      if (spline_) dEdr += gR_[q];
      if (zbl_) {
        G dz;
        zbl_->energy<G>(r, si, sj, &dz);
        dEdr += scale * dz;
      }
      for (int a = 0; a < 3; ++a) gv[a] += dEdr * v[a] / r;
      // The engine's vector is minus MACE's.
      for (int a = 0; a < 3; ++a) result.edge_gradient[3 * e + a] = -static_cast<double>(gv[a]);
    }
  }
}

#define CLEBSCH_INSTANTIATE(T, G)                                \
  template void MaceImpl<T, G>::edge_geometry(const AtomGraph&); \
  template void MaceImpl<T, G>::final_gradient(const AtomGraph&, EngineResult&);
CLEBSCH_MACE_PRECISIONS(CLEBSCH_INSTANTIATE)
#undef CLEBSCH_INSTANTIATE

}  // namespace clebsch::mace_detail
