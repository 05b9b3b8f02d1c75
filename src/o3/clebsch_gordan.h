// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Wigner-3j symbols (real Clebsch-Gordan coefficients) in e3nn's (>= 0.5) real basis and sign
// convention: the coupling tensors every tensor product contracts with. They are built the way
// e3nn defines them, from exact SU(2) Clebsch-Gordan coefficients (Racah's formula, evaluated in
// exact integer arithmetic) and e3nn's change of basis from complex to real spherical harmonics,
// so they agree with o3.wigner_3j to the last bits of double precision.
//
// Basis and ordering: index i of an l-block is m+l, m = -l..l, in e3nn's real basis (for l=1,
// index 0,1,2 = x,y,z; y is the polar axis). Normalisation: Frobenius norm 1, hence
// sum_ij C[i][j][k] C[i][j][k'] = delta_kk' / (2 l3 + 1).
#pragma once

#include <vector>

namespace clebsch {

/// Wigner-3j tensor C^{l1 l2 l3} in e3nn's real basis and sign (e3nn.o3.wigner_3j).
///
/// C[i][j][k] is stored flat, row-major, with shape (2l1+1, 2l2+1, 2l3+1), i.e. at index
/// (i*(2l2+1) + j)*(2l3+1) + k; index = m+l in each factor. ||C||_F = 1, and C is invariant:
/// C_ijk = sum_abc C_abc D1_ai D2_bj D3_ck for every rotation (D from wigner_d).
/// Results are computed once and cached; the function is thread-safe and the returned reference
/// stays valid for the life of the program.
/// @throws Error if an l is negative or (l1, l2, l3) violates the triangle rule
///         |l1-l2| <= l3 <= l1+l2; CapacityError if an l exceeds kMaxL.
const std::vector<double>& wigner_3j(int l1, int l2, int l3);

}  // namespace clebsch
