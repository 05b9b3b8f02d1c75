// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The operators of namespace clebsch: their schemas, the CPU kernels (the core library's host
// convolution, o3/convolution.h: receiver-sorted forward, sender-sorted backward, both without
// atomics and independent of the thread count), the Meta kernels (shapes only: what FakeTensor,
// torch.compile and torch.export run) and the device path (conv_device.h: the generated kernels
// of kernels/, for CUDA tensors, and for CPU tensors when CLEBSCH_TORCH_CPU_BACKEND=emulated).
// Built without the CUDA path (CLEBSCH_TORCH_CUDA=OFF, or no CUDA toolkit), the CUDA entries
// refuse. Layouts are the core's: x [num_senders, dim_in1], y [E, dim_in2],
// w [E, weight_numel], out [num_receivers, dim_out], e3nn's mul_ir order inside a row; sender and
// receiver are [E] integer tensors (MACE: edge_index[0], edge_index[1]).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/headeronly/version.h>
#include <torch/library.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "clebsch/o3/convolution.h"
#include "conv_device.h"
#include "conv_ops.h"
#include "conv_problem.h"

namespace clebsch::torch_ext {

bool cpu_backend_emulated() {
  // Read at every call, so that one process (the tests) can compare both CPU paths.
  const char* v = std::getenv("CLEBSCH_TORCH_CPU_BACKEND");
  const std::string s = v ? v : "";
  if (s.empty() || s == "host") return false;
  TORCH_CHECK(s == "emulated", "clebsch conv: CLEBSCH_TORCH_CPU_BACKEND must be 'host' or ",
              "'emulated', got '", s, "'");
  return true;
}

namespace {

std::string str(c10::string_view s) { return std::string(s.data(), s.size()); }

// Shapes and dtypes shared by every kernel (CPU and Meta alike; sizes may be symbolic).
void check_inputs(const TensorProduct& tp, const Tensor& x, const Tensor& y, const Tensor& w,
                  const Tensor& sender, const Tensor& receiver) {
  TORCH_CHECK(x.dim() == 2 && x.sym_size(1) == tp.dim_in1(), "clebsch conv: x must be [N, ",
              tp.dim_in1(), "] for ", tp.irreps_in1().str(), ", got ", x.sym_sizes());
  TORCH_CHECK(y.dim() == 2 && y.sym_size(1) == tp.dim_in2(), "clebsch conv: y must be [E, ",
              tp.dim_in2(), "] for ", tp.irreps_in2().str(), ", got ", y.sym_sizes());
  TORCH_CHECK(w.dim() == 2 && w.sym_size(1) == tp.weight_numel(), "clebsch conv: w must be [E, ",
              tp.weight_numel(), "] (the problem's weight_numel), got ", w.sym_sizes());
  TORCH_CHECK(y.sym_size(0) == w.sym_size(0), "clebsch conv: y has ", y.sym_size(0),
              " edges but w has ", w.sym_size(0));
  TORCH_CHECK(x.scalar_type() == y.scalar_type() && x.scalar_type() == w.scalar_type(),
              "clebsch conv: x, y and w must have one dtype, got ", x.scalar_type(), ", ",
              y.scalar_type(), ", ", w.scalar_type());
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble,
              "clebsch conv: dtype must be float32 or float64, got ", x.scalar_type());
  for (const Tensor* t : {&sender, &receiver}) {
    TORCH_CHECK(t->dim() == 1 && t->sym_size(0) == y.sym_size(0),
                "clebsch conv: sender and receiver must be [E] with E = ", y.sym_size(0), ", got ",
                t->sym_sizes());
    TORCH_CHECK(t->scalar_type() == at::kLong || t->scalar_type() == at::kInt,
                "clebsch conv: sender and receiver must be int64 or int32, got ", t->scalar_type());
  }
}

void check_grad_out(const TensorProduct& tp, const Tensor& x, const Tensor& grad_out) {
  TORCH_CHECK(grad_out.dim() == 2 && grad_out.sym_size(1) == tp.dim_out(),
              "clebsch conv: grad_out must be [num_receivers, ", tp.dim_out(), "] for ",
              tp.irreps_out().str(), ", got ", grad_out.sym_sizes());
  TORCH_CHECK(grad_out.scalar_type() == x.scalar_type(), "clebsch conv: grad_out must be ",
              x.scalar_type(), ", got ", grad_out.scalar_type());
}

// The edge list in the core's form (32-bit, both CSR orders); it checks every index.
EdgeIndex edge_index(int64_t num_senders, int64_t num_receivers, const Tensor& sender,
                     const Tensor& receiver) {
  const Tensor s = sender.to(at::kInt).contiguous(), r = receiver.to(at::kInt).contiguous();
  return EdgeIndex(num_senders, num_receivers, s.numel(), s.data_ptr<int>(), r.data_ptr<int>());
}

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// --- The device path, or its refusal ----------------------------------------------------------

#ifdef CLEBSCH_TORCH_HAVE_CUDA
constexpr bool kHaveDevicePath = true;
#else
constexpr bool kHaveDevicePath = false;
#endif

// Whether a call on @p x takes the device path; refuses what this build cannot run.
bool device_path(const Tensor& x, const char* op) {
  const bool want = !x.is_cpu() || cpu_backend_emulated();
  TORCH_CHECK(
      !want || kHaveDevicePath, "clebsch_torch: ", op, " on ",
      x.is_cpu() ? "the emulated backend (CLEBSCH_TORCH_CPU_BACKEND=emulated)" : "CUDA tensors",
      ": this build of the extension has no CUDA path (built with CLEBSCH_TORCH_CUDA=OFF "
      "or without a CUDA toolkit); rebuild it, move the tensors to the CPU or use the "
      "e3nn module");
  return want;
}

}  // namespace

#ifndef CLEBSCH_TORCH_HAVE_CUDA
// Never called (device_path refused first); they keep the kernels below free of #ifdefs.
Tensor conv_device(const TensorProduct&, const std::string&, const Tensor&, const Tensor&,
                   const Tensor&, const Tensor&, const Tensor&, int64_t) {
  TORCH_CHECK(false, "clebsch_torch: no CUDA path");
}
std::tuple<Tensor, Tensor, Tensor> conv_backward_device(const TensorProduct&, const std::string&,
                                                        const Tensor&, const Tensor&, const Tensor&,
                                                        const Tensor&, const Tensor&,
                                                        const Tensor&) {
  TORCH_CHECK(false, "clebsch_torch: no CUDA path");
}
std::tuple<Tensor, Tensor, Tensor, Tensor> conv_double_backward_device(
    const TensorProduct&, const std::string&, const Tensor&, const Tensor&, const Tensor&,
    const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  TORCH_CHECK(false, "clebsch_torch: no CUDA path");
}
std::string precompile_device(const TensorProduct&, const std::string&) {
  TORCH_CHECK(false, "clebsch precompile_conv: this build of the extension has no CUDA path");
}
#endif

namespace {

// --- CPU (host kernels) and the device path ----------------------------------------------------

Tensor conv_kernel(const Tensor& x_, const Tensor& y_, const Tensor& w_, const Tensor& sender,
                   const Tensor& receiver, int64_t num_receivers, c10::string_view problem) {
  const auto tp = conv_problem(str(problem));
  check_inputs(*tp, x_, y_, w_, sender, receiver);
  const Tensor x = x_.contiguous(), y = y_.contiguous(), w = w_.contiguous();
  if (device_path(x, "clebsch::conv"))
    return conv_device(*tp, str(problem), x, y, w, sender, receiver, num_receivers);
  const EdgeIndex edges = edge_index(x.size(0), num_receivers, sender, receiver);
  Tensor out = at::empty({num_receivers, tp->dim_out()}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "clebsch::conv", [&] {
    convolution_forward<scalar_t>(*tp, edges, x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                                  w.data_ptr<scalar_t>(), out.data_ptr<scalar_t>());
  });
  return out;
}

std::tuple<Tensor, Tensor, Tensor> conv_backward_kernel(const Tensor& x_, const Tensor& y_,
                                                        const Tensor& w_, const Tensor& sender,
                                                        const Tensor& receiver, const Tensor& g_,
                                                        c10::string_view problem) {
  const auto tp = conv_problem(str(problem));
  check_inputs(*tp, x_, y_, w_, sender, receiver);
  check_grad_out(*tp, x_, g_);
  const Tensor x = x_.contiguous(), y = y_.contiguous(), w = w_.contiguous(), g = g_.contiguous();
  if (device_path(x, "clebsch::conv_backward"))
    return conv_backward_device(*tp, str(problem), x, y, w, sender, receiver, g);
  const EdgeIndex edges = edge_index(x.size(0), g.size(0), sender, receiver);
  Tensor gx = at::empty_like(x), gy = at::empty_like(y), gw = at::empty_like(w);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "clebsch::conv_backward", [&] {
    convolution_backward<scalar_t>(*tp, edges, x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                                   w.data_ptr<scalar_t>(), g.data_ptr<scalar_t>(),
                                   gx.data_ptr<scalar_t>(), gy.data_ptr<scalar_t>(),
                                   gw.data_ptr<scalar_t>());
  });
  return {gx, gy, gw};
}

// A cotangent that is absent (autograd's undefined gradient) counts as zero in the core.
Tensor contiguous_or_undefined(const OptTensor& t, const Tensor& like, const char* name) {
  if (!t.has_value() || !t->defined()) return Tensor();
  TORCH_CHECK(t->sizes() == like.sizes() && t->scalar_type() == like.scalar_type(),
              "clebsch conv_double_backward: ", name, " must match its input: ", like.sizes(), " ",
              like.scalar_type(), ", got ", t->sizes(), " ", t->scalar_type());
  return t->contiguous();
}

std::tuple<Tensor, Tensor, Tensor, Tensor> conv_double_backward_kernel(
    const Tensor& x_, const Tensor& y_, const Tensor& w_, const Tensor& sender,
    const Tensor& receiver, const Tensor& g_, const OptTensor& dx_, const OptTensor& dy_,
    const OptTensor& dw_, c10::string_view problem) {
  const auto tp = conv_problem(str(problem));
  check_inputs(*tp, x_, y_, w_, sender, receiver);
  check_grad_out(*tp, x_, g_);
  const Tensor x = x_.contiguous(), y = y_.contiguous(), w = w_.contiguous(), g = g_.contiguous();
  const Tensor dx = contiguous_or_undefined(dx_, x, "dx");
  const Tensor dy = contiguous_or_undefined(dy_, y, "dy");
  const Tensor dw = contiguous_or_undefined(dw_, w, "dw");
  if (device_path(x, "clebsch::conv_double_backward"))
    return conv_double_backward_device(*tp, str(problem), x, y, w, sender, receiver, g, dx, dy, dw);
  const EdgeIndex edges = edge_index(x.size(0), g.size(0), sender, receiver);
  Tensor gx = at::empty_like(x), gy = at::empty_like(y), gw = at::empty_like(w);
  Tensor gg = at::empty_like(g);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "clebsch::conv_double_backward", [&] {
    convolution_double_backward<scalar_t>(
        *tp, edges, x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(),
        g.data_ptr<scalar_t>(), ptr_or_null<scalar_t>(dx), ptr_or_null<scalar_t>(dy),
        ptr_or_null<scalar_t>(dw), gx.data_ptr<scalar_t>(), gy.data_ptr<scalar_t>(),
        gw.data_ptr<scalar_t>(), gg.data_ptr<scalar_t>());
  });
  return {gx, gy, gw, gg};
}

// --- Meta (shapes only) ------------------------------------------------------------------------

Tensor conv_meta(const Tensor& x, const Tensor& y, const Tensor& w, const Tensor& sender,
                 const Tensor& receiver, c10::SymInt num_receivers, c10::string_view problem) {
  const auto tp = conv_problem(str(problem));
  check_inputs(*tp, x, y, w, sender, receiver);
  return at::empty_symint({std::move(num_receivers), c10::SymInt(tp->dim_out())}, x.options());
}

std::tuple<Tensor, Tensor, Tensor> conv_backward_meta(const Tensor& x, const Tensor& y,
                                                      const Tensor& w, const Tensor& sender,
                                                      const Tensor& receiver, const Tensor& g,
                                                      c10::string_view problem) {
  const auto tp = conv_problem(str(problem));
  check_inputs(*tp, x, y, w, sender, receiver);
  check_grad_out(*tp, x, g);
  return {at::empty_like(x), at::empty_like(y), at::empty_like(w)};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> conv_double_backward_meta(
    const Tensor& x, const Tensor& y, const Tensor& w, const Tensor& sender, const Tensor& receiver,
    const Tensor& g, const OptTensor&, const OptTensor&, const OptTensor&,
    c10::string_view problem) {
  const auto tp = conv_problem(str(problem));
  check_inputs(*tp, x, y, w, sender, receiver);
  check_grad_out(*tp, x, g);
  return {at::empty_like(x), at::empty_like(y), at::empty_like(w), at::empty_like(g)};
}

// The torch this library was compiled against: the package compares it with the running one.
std::string build_info() { return "torch " TORCH_VERSION; }

// Which paths this build has: "cuda" when CUDA tensors (and the emulated backend) are served.
std::string build_features() { return kHaveDevicePath ? "cuda" : ""; }

std::string precompile_conv(c10::string_view problem, c10::string_view dtype) {
  return precompile_device(*conv_problem(str(problem)), str(dtype));
}

}  // namespace

TORCH_LIBRARY(clebsch, m) {
  m.def("build_info() -> str", &build_info);
  m.def("build_features() -> str", &build_features);
  // Compiles a problem's CUDA module for an H200 into the kernel cache (no GPU needed).
  m.def("precompile_conv(str problem, str dtype) -> str", &precompile_conv);
  m.def(
      "conv(Tensor x, Tensor y, Tensor w, Tensor sender, Tensor receiver, SymInt num_receivers, "
      "str problem) -> Tensor");
  m.def(
      "conv_backward(Tensor x, Tensor y, Tensor w, Tensor sender, Tensor receiver, "
      "Tensor grad_out, str problem) -> (Tensor, Tensor, Tensor)");
  m.def(
      "conv_double_backward(Tensor x, Tensor y, Tensor w, Tensor sender, Tensor receiver, "
      "Tensor grad_out, Tensor? dx, Tensor? dy, Tensor? dw, str problem) "
      "-> (Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(clebsch, CPU, m) {
  m.impl("conv", TORCH_FN(conv_kernel));
  m.impl("conv_backward", TORCH_FN(conv_backward_kernel));
  m.impl("conv_double_backward", TORCH_FN(conv_double_backward_kernel));
}

TORCH_LIBRARY_IMPL(clebsch, Meta, m) {
  m.impl("conv", TORCH_FN(conv_meta));
  m.impl("conv_backward", TORCH_FN(conv_backward_meta));
  m.impl("conv_double_backward", TORCH_FN(conv_double_backward_meta));
}

TORCH_LIBRARY_IMPL(clebsch, CUDA, m) {
  m.impl("conv", TORCH_FN(conv_kernel));
  m.impl("conv_backward", TORCH_FN(conv_backward_kernel));
  m.impl("conv_double_backward", TORCH_FN(conv_double_backward_kernel));
}

}  // namespace clebsch::torch_ext
