// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Real spherical harmonics of edge vectors, with their analytic gradients, in e3nn's convention
// o3.spherical_harmonics(l, v, normalize=True, normalization='component'):
//   - the input is normalised as e3nn's F.normalize does, u = v / max(|v|, 1e-12);
//   - component normalisation, |Y_l(u)|^2 = 2l+1 on the unit sphere;
//     Y_0 = 1, Y_1 = sqrt(3) (x, y, z);
//   - y is the polar axis; inside a degree-l block the index is m+l, m = -l..l, and blocks are
//     concatenated l = 0..lmax, so Y_l starts at offset l^2 and there are (lmax+1)^2 values.
// Degrees up to kMaxL (= 12, the largest e3nn implements) are supported.
//
// At the zero vector (and for |v| < 1e-12) the result is e3nn's: u = v / 1e-12, so Y_0 = 1 and
// Y_{l>0} = 0 at v = 0, never NaN. The gradient there is e3nn's autograd gradient: with the norm
// clamped, u = v / 1e-12 is linear in v and nothing is projected out, so dY/dv = (dY/du) / 1e-12;
// at v = 0 exactly this is sqrt(3) * 1e12 * I for the l = 1 rows and 0 for every other row.
#pragma once

#include <cstddef>
#include <type_traits>

namespace clebsch {

/// Y_0 .. Y_lmax of v (component normalisation, e3nn order, see the file comment).
/// @param v   vector, any length (normalised inside)
/// @param out (lmax+1)^2 values
/// @throws Error if lmax < 0; CapacityError if lmax > kMaxL.
template <typename T>
void spherical_harmonics(int lmax, const T v[3], T* out);

/// As spherical_harmonics, and also the gradient with respect to the unnormalised v.
/// @param grad (lmax+1)^2 x 3 values, row-major: grad[3*i + a] = dY_i / dv_a
/// @throws Error if lmax < 0; CapacityError if lmax > kMaxL.
template <typename T>
void spherical_harmonics_with_gradient(int lmax, const T v[3], T* out, T* grad);

/// Batched version over n vectors, parallel with OpenMP.
/// @param v    n x 3 values
/// @param out  n x (lmax+1)^2 values
/// @param grad n x (lmax+1)^2 x 3 values, or nullptr to skip the gradient (T is deduced from v
///             and out only, so a plain nullptr works)
/// @throws Error if lmax < 0; CapacityError if lmax > kMaxL.
template <typename T>
void spherical_harmonics_batch(int lmax, std::size_t n, const T* v, T* out,
                               std::common_type_t<T>* grad);

}  // namespace clebsch
