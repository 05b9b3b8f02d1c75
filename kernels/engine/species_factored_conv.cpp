// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Which species-factored form the engines build (species_factored_conv.h).
#include "clebsch/cuda/engine/species_factored_conv.h"

#include <cstdlib>

#include "clebsch/cuda/engine/species_conv.h"
#include "clebsch/cuda/engine/species_gemm_conv.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda {

std::unique_ptr<SpeciesFactoredConv> make_species_factored_conv(DeviceBackend& backend,
                                                                const TensorProduct& tp,
                                                                DType dtype, int hidden) {
  const char* env = std::getenv("CLEBSCH_SPECIES_FORM");
  const std::string form = env ? env : "gemm";
  if (form == "gemm") return std::make_unique<SpeciesGemmConv>(backend, tp, dtype, hidden);
  if (form != "block") throw Error("CLEBSCH_SPECIES_FORM=" + form + ": expected block or gemm");
  return std::make_unique<SpeciesConv>(backend, tp, dtype, hidden);
}

}  // namespace clebsch::cuda
