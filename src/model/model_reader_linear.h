// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The model reader's cross-check of an exported linear op against clebsch::Linear, which must
// accept the file's instructions and lay out the weights the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "clebsch/o3/irreps.h"

namespace clebsch::model_reader {

/// Empty when clebsch::Linear accepts the paths (i_in[n] -> i_out[n] with path_weight[n]) and
/// lays out exactly @p weight_numel weights at @p weight_offsets; otherwise what is wrong.
std::string linear_descriptor_problem(const Irreps& irreps_in, const Irreps& irreps_out,
                                      const std::vector<int>& i_in, const std::vector<int>& i_out,
                                      const std::vector<double>& path_weight,
                                      const std::vector<std::int64_t>& weight_offsets,
                                      std::int64_t weight_numel);

}  // namespace clebsch::model_reader
