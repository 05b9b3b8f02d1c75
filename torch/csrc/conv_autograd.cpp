// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Autograd of the convolution to second order, in C++ so that it holds wherever the operators
// run (eager, TorchScript, a LibTorch program, AOTAutograd under torch.compile): the backward of
// clebsch::conv is clebsch::conv_backward, itself differentiable, and the backward of that is
// clebsch::conv_double_backward. The double backward has no derivative of its own (third order
// is refused by autograd with the operator's name). Every call goes through the dispatcher
// (conv_ops.h), so a traced graph records the operators, never the kernels.
#include <torch/autograd.h>
#include <torch/library.h>

#include <string>

#include "conv_ops.h"

namespace clebsch::torch_ext {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::string str(c10::string_view s) { return std::string(s.data(), s.size()); }

// The first derivative as a differentiable function of (x, y, w, grad_out).
class ConvBackwardFunction : public torch::autograd::Function<ConvBackwardFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& y,
                               const Tensor& w, const Tensor& sender, const Tensor& receiver,
                               const Tensor& grad_out, c10::string_view problem) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [gx, gy, gw] = conv_backward_op().call(x, y, w, sender, receiver, grad_out, problem);
    ctx->save_for_backward({x, y, w, sender, receiver, grad_out});
    ctx->saved_data["problem"] = str(problem);
    return {gx, gy, gw};
  }

  static variable_list backward(AutogradContext* ctx, variable_list cotangents) {
    const auto s = ctx->get_saved_variables();
    const std::string problem = ctx->saved_data["problem"].toStringRef();
    auto opt = [](const Tensor& t) { return t.defined() ? OptTensor(t) : OptTensor(); };
    auto [gx, gy, gw, gg] =
        conv_double_backward_op().call(s[0], s[1], s[2], s[3], s[4], s[5], opt(cotangents[0]),
                                       opt(cotangents[1]), opt(cotangents[2]), problem);
    return {gx, gy, gw, Tensor(), Tensor(), gg, Tensor()};
  }
};

class ConvFunction : public torch::autograd::Function<ConvFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& y, const Tensor& w,
                        const Tensor& sender, const Tensor& receiver,
                        const c10::SymInt& num_receivers, c10::string_view problem) {
    at::AutoDispatchBelowADInplaceOrView guard;
    Tensor out = conv_op().call(x, y, w, sender, receiver, num_receivers, problem);
    ctx->save_for_backward({x, y, w, sender, receiver});
    ctx->saved_data["problem"] = str(problem);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const std::string problem = ctx->saved_data["problem"].toStringRef();
    // autograd passes an undefined gradient when the output does not reach the loss.
    if (!grads[0].defined())
      return {Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
    auto g = ConvBackwardFunction::apply(s[0], s[1], s[2], s[3], s[4], grads[0],
                                         c10::string_view(problem));
    return {g[0], g[1], g[2], Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

Tensor conv_autograd(const Tensor& x, const Tensor& y, const Tensor& w, const Tensor& sender,
                     const Tensor& receiver, c10::SymInt num_receivers, c10::string_view problem) {
  return ConvFunction::apply(x, y, w, sender, receiver, num_receivers, problem);
}

std::tuple<Tensor, Tensor, Tensor> conv_backward_autograd(const Tensor& x, const Tensor& y,
                                                          const Tensor& w, const Tensor& sender,
                                                          const Tensor& receiver,
                                                          const Tensor& grad_out,
                                                          c10::string_view problem) {
  auto g = ConvBackwardFunction::apply(x, y, w, sender, receiver, grad_out, problem);
  return {g[0], g[1], g[2]};
}

}  // namespace

TORCH_LIBRARY_IMPL(clebsch, Autograd, m) {
  m.impl("conv", TORCH_FN(conv_autograd));
  m.impl("conv_backward", TORCH_FN(conv_backward_autograd));
}

}  // namespace clebsch::torch_ext
