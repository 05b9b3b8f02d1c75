// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Stage 3 of the kernel generator: the emitted source. emit_conv_module() turns a problem and
// its schedule into the CUDA C++ source of one module holding the kernels of the four passes,
// one per group (kernel_name(pass, group)). It decides nothing (every choice is in the
// Schedule), and its output is byte-for-byte deterministic. The first line records the problem
// hash and the generator version. Multiply-adds over the CG non-zeros are fully unrolled with
// the coefficients (path normalisation folded in, e3nn's real basis, m = -l..l) as immediates.
#pragma once

#include <string>

#include "clebsch/cuda/generator/tp_problem.h"
#include "clebsch/cuda/generator/tp_schedule.h"

namespace clebsch::cuda {

/// The module source (see the file comment).
std::string emit_conv_module(const TpProblem& problem, const Schedule& schedule);

/// A coefficient as a C++ literal of the problem's type that reads back to exactly the value
/// the host reference uses (static_cast<T>(c)): shortest round-trip digits, "f" for float32.
std::string emit_literal(double value, DType dtype);

}  // namespace clebsch::cuda
