// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The problem description of the PyTorch operators: a JSON string that names a uvu-style
// tensor-product convolution (the irreps of x, Y and the output, the instruction list and,
// optionally, each instruction's coupling table), parsed once into the core library's immutable
// TensorProduct and kept in a process-wide cache keyed by the string. A string (not an opaque
// object) is what TorchScript, torch.compile and torch.export carry through a graph unchanged.
//
// Schema (clebsch_torch/problem.py writes it):
//   {"irreps_in1": "8x0e+8x1o", "irreps_in2": "0e+1o+2e", "irreps_out": "8x0e+8x1o+8x2e",
//    "instructions": [[i_in1, i_in2, i_out, "uvu", has_weight, path_weight], ...],
//    "couplings": [[P_000, P_001, ...], ...]            optional: instruction n's dense
//                                                       row-major (2l1+1, 2l2+1, 2l_out+1) table
//    "irrep_normalization": "component",                 used only without couplings
//    "path_normalization": "element"}                    used only without couplings
// With couplings the kernels apply them as given (TensorProduct::with_couplings: the exporting
// e3nn's own signs and path weights); without, the core derives e3nn 0.6's.
#pragma once

#include <memory>
#include <string>

#include "clebsch/o3/tensor_product.h"

namespace clebsch::torch_ext {

/// The per-edge-weight TensorProduct that @p problem describes, from the cache or parsed now.
/// Thread safe; the returned product lives as long as the process.
/// @throws Error naming the field and the value when the description is malformed.
std::shared_ptr<const TensorProduct> conv_problem(const std::string& problem);

}  // namespace clebsch::torch_ext
