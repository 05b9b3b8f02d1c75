// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Typed handles of the three operators of namespace clebsch (schemas in conv_ops.cpp), so that
// the autograd kernels (conv_autograd.cpp) call them through the dispatcher: under tracing
// (torch.compile, torch.export) the calls then reach the fake/meta kernels and are recorded as
// the operators themselves.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/SymInt.h>
#include <c10/util/string_view.h>

#include <optional>
#include <tuple>

namespace clebsch::torch_ext {

using Tensor = at::Tensor;
using OptTensor = std::optional<Tensor>;

/// clebsch::conv(x, y, w, sender, receiver, num_receivers, problem) -> out
using ConvSig = Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       c10::SymInt, c10::string_view);
/// clebsch::conv_backward(x, y, w, sender, receiver, grad_out, problem) -> (gx, gy, gw)
using ConvBackwardSig = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&,
                                                           const Tensor&, const Tensor&,
                                                           const Tensor&, const Tensor&,
                                                           c10::string_view);
/// clebsch::conv_double_backward(x, y, w, sender, receiver, grad_out, dx?, dy?, dw?, problem)
///   -> (gx, gy, gw, g_grad_out)
using ConvDoubleBackwardSig = std::tuple<Tensor, Tensor, Tensor, Tensor>(
    const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
    const OptTensor&, const OptTensor&, const OptTensor&, c10::string_view);

inline c10::TypedOperatorHandle<ConvSig> conv_op() {
  static auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("clebsch::conv", "").typed<ConvSig>();
  return op;
}
inline c10::TypedOperatorHandle<ConvBackwardSig> conv_backward_op() {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("clebsch::conv_backward", "")
                       .typed<ConvBackwardSig>();
  return op;
}
inline c10::TypedOperatorHandle<ConvDoubleBackwardSig> conv_double_backward_op() {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("clebsch::conv_double_backward", "")
                       .typed<ConvDoubleBackwardSig>();
  return op;
}

}  // namespace clebsch::torch_ext
