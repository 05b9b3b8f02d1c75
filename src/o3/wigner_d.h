// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Rotation matrices of O(3) representations (Wigner-D matrices) in e3nn's real basis, for
// equivariance tests and for anything that must rotate features: D_l(R) is defined by
// Y_l(R v) = D_l(R) Y_l(v) for the spherical harmonics of spherical_harmonics.h (component
// normalisation, index m+l with m = -l..l, y the polar axis), so D_1(R) = R in (x, y, z) order.
// Block-diagonal matrices over an Irreps follow e3nn's Irreps.D_from_matrix, parity included.
#pragma once

#include <cstdint>
#include <vector>

#include "clebsch/o3/irreps.h"

namespace clebsch {

/// Real Wigner-D matrix of degree l for an orthogonal matrix R, (2l+1) x (2l+1), row-major,
/// such that Y_l(R v) = D_l(R) Y_l(v) for every v. D_l is orthogonal and D_l(R1 R2) =
/// D_l(R1) D_l(R2). For an improper R (det R = -1) this is the spherical-harmonic parity
/// (-1)^l times D_l(-R), which is what Y_l transforms with.
/// @throws Error if l < 0 or R is not orthogonal (max |R^T R - I| > 1e-6);
///         CapacityError if l > kMaxL.
std::vector<double> wigner_d(int l, const double R[3][3]);

/// Block-diagonal representation matrix of @p irreps for an orthogonal R, dim x dim, row-major,
/// as e3nn's Irreps.D_from_matrix: one block D_l(d R) * p^k per copy of each irrep (l, p), with
/// d = det R = +-1 and k = (1 - d) / 2, i.e. improper rotations multiply each block by its p.
/// @throws Error if R is not orthogonal (max |R^T R - I| > 1e-6).
std::vector<double> D_from_matrix(const Irreps& irreps, const double R[3][3]);

/// A uniformly (Haar) distributed random rotation (det +1), deterministic in @p seed on every
/// platform (SplitMix64 and Shoemake's uniform quaternion; no std:: distributions).
void random_rotation(std::uint64_t seed, double R[3][3]);

}  // namespace clebsch
