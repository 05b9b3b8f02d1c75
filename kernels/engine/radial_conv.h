// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The convolution of a layer whose weights come from a radial MLP (MACE's radial MLP, NequIP's
// edge MLP): in the fused radial form (TpProblem::fused_hidden: the passes make each edge's
// weights from the MLP's last hidden rows) when the engine's options ask for it and the MLP and
// the schedule allow it, else the unfused form fed with the MLP's output. One rule for both
// engines, so that they fall back, and refuse under require_fused_radial, alike.
#pragma once

#include <memory>
#include <string>

#include "clebsch/cuda/engine/conv_runner.h"
#include "clebsch/cuda/generator/tp_problem.h"
#include "clebsch/cuda/nn/device_mlp.h"

namespace clebsch::cuda {

/// Why @p mlp cannot feed the fused radial form, or empty when it can.
template <class T>
std::string fused_radial_refusal(const DeviceMlp<T>& mlp) {
  if (!mlp.last_layer_is_linear())
    return "its last layer has an activation or a bias (or it has one layer); the fused radial "
           "form needs a plain linear last layer";
  if (mlp.dim_hidden() > kMaxFusedHidden)
    return "its last hidden width " + std::to_string(mlp.dim_hidden()) +
           " exceeds the fused radial form's " + std::to_string(kMaxFusedHidden);
  return "";
}

/// The layer's convolution of @p tp, fused with @p mlp when @p want_fused and possible
/// (@p fused says which was built).
/// @param where names the layer's MLP in errors (e.g. "mace.interactions[1].radial_mlp").
/// @throws CapacityError naming @p where when @p require_fused and the fused form cannot be
///   built (the MLP's shape, or a product whose schedule has no fused form: the looped CG form).
template <class T>
std::unique_ptr<ConvRunner> make_radial_conv(DeviceBackend& backend, const TensorProduct& tp,
                                             DType dtype, Accumulation accumulation,
                                             const DeviceMlp<T>& mlp, bool want_fused,
                                             bool require_fused, const std::string& where,
                                             bool& fused) {
  fused = false;
  if (want_fused) {
    const std::string refusal = fused_radial_refusal(mlp);
    if (refusal.empty()) {
      try {
        auto conv = std::make_unique<ConvRunner>(backend, tp, dtype, accumulation,
                                                 ScheduleOptions{}, mlp.dim_hidden());
        fused = true;
        return conv;
      } catch (const CapacityError& e) {
        if (require_fused) throw CapacityError(where + ", fused convolution: " + e.what());
      }
    } else if (require_fused) {
      throw CapacityError(where + ": " + refusal);
    }
  }
  return std::make_unique<ConvRunner>(backend, tp, dtype, accumulation);
}

}  // namespace clebsch::cuda
