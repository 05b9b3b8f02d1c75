// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// See model_reader_linear.h: builds the clebsch::Linear an engine would build from an exported
// linear op, so that a file the reader accepts cannot make that construction fail later.
#include "clebsch/model/model_reader_linear.h"

#include "clebsch/nn/linear.h"
#include "clebsch/support/error.h"

namespace clebsch::model_reader {

std::string linear_descriptor_problem(const Irreps& irreps_in, const Irreps& irreps_out,
                                      const std::vector<int>& i_in, const std::vector<int>& i_out,
                                      const std::vector<double>& path_weight,
                                      const std::vector<std::int64_t>& weight_offsets,
                                      std::int64_t weight_numel) {
  std::vector<LinearPath> paths;
  for (std::size_t n = 0; n < i_in.size(); ++n)
    paths.emplace_back(i_in[n], i_out[n], path_weight[n]);
  try {
    const Linear linear(irreps_in, irreps_out, paths);
    if (static_cast<std::int64_t>(linear.weight_numel()) != weight_numel)
      return "clebsch::Linear counts " + std::to_string(linear.weight_numel()) +
             " weights, the file " + std::to_string(weight_numel);
    for (std::size_t n = 0; n < paths.size(); ++n)
      if (static_cast<std::int64_t>(linear.instructions()[n].weight_offset) != weight_offsets[n])
        return "clebsch::Linear puts instruction " + std::to_string(n) + "'s weights at " +
               std::to_string(linear.instructions()[n].weight_offset) + ", the file at " +
               std::to_string(weight_offsets[n]);
  } catch (const Error& e) {
    return std::string("rejected by clebsch::Linear: ") + e.what();
  }
  return "";
}

}  // namespace clebsch::model_reader
