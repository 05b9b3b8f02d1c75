// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Where the exported-model tests (test_exported_*) find models.json and the models the CTest
// fixture `exported_models` (unittest/reference/make_exported_models.py) writes:
// $CLEBSCH_MODELS_DIR, else the macro CLEBSCH_EXPORTED_MODELS_DIR (set by the exported-models
// block of unittest/CMakeLists.txt), else <build>/unittest/models.
#pragma once

#include <cstdlib>
#include <string>

namespace clebsch::test {

inline std::string exported_models_dir() {
  if (const char* env = std::getenv("CLEBSCH_MODELS_DIR")) return env;
#ifdef CLEBSCH_EXPORTED_MODELS_DIR
  return CLEBSCH_EXPORTED_MODELS_DIR;
#else
  // <build>/unittest/reference -> <build>/unittest/models (the reference directory may not exist).
  const std::string ref = CLEBSCH_REFERENCE_DIR;
  return ref.substr(0, ref.find_last_of('/')) + "/models";
#endif
}

}  // namespace clebsch::test
