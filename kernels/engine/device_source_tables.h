// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Pieces of generated CUDA source that the per-model preludes (mace_cuda_source.cpp,
// nequip_cuda_source.cpp) share: exact double literals, __device__ constant arrays and the
// spherical-harmonics recursion table the device harmonics read.
#pragma once

#include <string>
#include <vector>

namespace clebsch::cuda {

/// A double as a C literal that reads back to the same value (%.17g, always with a '.' or an
/// exponent so that it is never taken for an integer).
std::string double_literal(double x);

/// `__device__ const double name[n] = {...};` followed by a newline; an empty v gives one 0.0
/// (C arrays cannot be empty).
std::string device_double_array(const std::string& name, const std::vector<double>& v);

/// `__device__ const int name[n] = {...};` followed by a newline; an empty v gives one 0.
std::string device_int_array(const std::string& name, const std::vector<int>& v);

/// The harmonics recursion of src/o3/spherical_harmonics.cpp as device arrays kShTermBegin
/// [max(lmax,1)+1], kShTermK, kShTermI, kShTermJ, kShTermC: terms[l] build Y_{l+1} from Y_l and
/// Y_1, k-major, with c = c_l sqrt(3) C^{l,1,l+1}[i][j][k] and c_l fixed at the pole (component
/// normalization, e3nn's m-ordering; see src/o3/spherical_harmonics.h).
std::string sh_recursion_table(int lmax);

}  // namespace clebsch::cuda
