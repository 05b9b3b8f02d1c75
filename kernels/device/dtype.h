// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The floating-point type of device data: of every operand of a generated convolution
// (generator/tp_problem.h), of the generic kernels' rows and of the GEMMs. Here in the device
// layer because everything above it names it.
#pragma once

#include <string>

namespace clebsch::cuda {

/// Floating-point type of every operand and of the accumulation.
enum class DType { kFloat32, kFloat64 };

std::string to_string(DType dtype);
/// Bytes of one element.
int size_of(DType dtype);

}  // namespace clebsch::cuda
