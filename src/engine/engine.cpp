// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Names of the engine precisions (the pair style's `precision` keyword).
#include "clebsch/engine/engine.h"

#include "clebsch/support/error.h"

namespace clebsch {

Precision precision_from_string(const std::string& text) {
  if (text == "fp64") return Precision::kFloat64;
  if (text == "fp32") return Precision::kFloat32;
  if (text == "mixed") return Precision::kMixed;
  throw Error("unknown precision \"" + text + "\": expected fp64, fp32 or mixed");
}

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::kFloat64:
      return "fp64";
    case Precision::kFloat32:
      return "fp32";
    case Precision::kMixed:
      return "mixed";
  }
  return "?";
}

}  // namespace clebsch
