// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Names, parities and normalize2mom constants of the activation functions (see activation.h).
#include "clebsch/nn/activation.h"

#include <sstream>

#include "clebsch/support/error.h"

namespace clebsch {

std::string activation_name(ActivationKind kind) {
  switch (kind) {
    case ActivationKind::kIdentity:
      return "identity";
    case ActivationKind::kSilu:
      return "silu";
    case ActivationKind::kTanh:
      return "tanh";
  }
  throw Error("unknown activation kind " + std::to_string(static_cast<int>(kind)));
}

ActivationKind activation_from_name(const std::string& name) {
  for (ActivationKind kind :
       {ActivationKind::kIdentity, ActivationKind::kSilu, ActivationKind::kTanh})
    if (activation_name(kind) == name) return kind;
  throw Error("unknown activation \"" + name + "\": expected identity, silu or tanh");
}

int activation_parity(ActivationKind kind) {
  switch (kind) {
    case ActivationKind::kIdentity:
    case ActivationKind::kTanh:
      return -1;
    case ActivationKind::kSilu:
      return 0;
  }
  throw Error("unknown activation kind " + std::to_string(static_cast<int>(kind)));
}

double normalize2mom_cst(ActivationKind kind) {
  switch (kind) {
    case ActivationKind::kIdentity:
      return kNormalize2momIdentity;
    case ActivationKind::kSilu:
      return kNormalize2momSilu;
    case ActivationKind::kTanh:
      return kNormalize2momTanh;
  }
  throw Error("unknown activation kind " + std::to_string(static_cast<int>(kind)));
}

double normalize2mom_effective(double cst) { return std::abs(cst - 1.0) < 1e-4 ? 1.0 : cst; }

ScaledActivation::ScaledActivation(ActivationKind kind, double cst) : kind_(kind), cst_(cst) {
  activation_name(kind);  // rejects a value outside the enum
  if (!std::isfinite(cst) || !(cst > 0)) {
    std::ostringstream s;
    s.precision(17);
    s << "activation " << activation_name(kind) << ": scale cst must be finite and > 0, got "
      << cst;
    throw Error(s.str());
  }
}

std::string ScaledActivation::str() const {
  std::ostringstream s;
  s.precision(17);
  s << activation_name(kind_) << "*" << cst_;
  return s.str();
}

}  // namespace clebsch
