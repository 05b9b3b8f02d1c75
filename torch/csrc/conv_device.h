// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The device path of the operators (conv_device.cpp): the generated convolution kernels of
// kernels/ (ConvRunner, deterministic accumulation over sorted CSR orders built with torch ops),
// launched on PyTorch's current stream into tensors from PyTorch's allocator. CUDA tensors run
// on the CUDA backend (the device's primary context, which PyTorch uses too); CPU tensors run
// here only when CLEBSCH_TORCH_CPU_BACKEND=emulated, on the kernels' emulated backend (the same
// generated source compiled for the host), so that CI tests this path without a GPU. The
// callers (conv_ops.cpp) have checked shapes and dtypes and made the operands contiguous.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <tuple>

#include "clebsch/o3/tensor_product.h"

namespace clebsch::torch_ext {

/// Whether CPU tensors take the device path on the emulated backend
/// (CLEBSCH_TORCH_CPU_BACKEND=emulated; read once; any other value but "host" or empty is an
/// error naming it).
bool cpu_backend_emulated();

/// clebsch::conv on the device path. @p problem is the description (the runner cache's key).
at::Tensor conv_device(const TensorProduct& tp, const std::string& problem, const at::Tensor& x,
                       const at::Tensor& y, const at::Tensor& w, const at::Tensor& sender,
                       const at::Tensor& receiver, int64_t num_receivers);

/// clebsch::conv_backward on the device path.
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_backward_device(
    const TensorProduct& tp, const std::string& problem, const at::Tensor& x, const at::Tensor& y,
    const at::Tensor& w, const at::Tensor& sender, const at::Tensor& receiver,
    const at::Tensor& grad_out);

/// clebsch::conv_double_backward on the device path; an undefined cotangent counts as zero.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> conv_double_backward_device(
    const TensorProduct& tp, const std::string& problem, const at::Tensor& x, const at::Tensor& y,
    const at::Tensor& w, const at::Tensor& sender, const at::Tensor& receiver,
    const at::Tensor& grad_out, const at::Tensor& dx, const at::Tensor& dy, const at::Tensor& dw);

/// Compiles the CUDA module of @p tp in @p dtype ("float32" or "float64") for an H200 (sm_90)
/// into the kernel cache, without a GPU (kernels' precompile_conv): what the device path's
/// runner loads there. Returns "<cache key> <seconds> s (compiled|cache)".
std::string precompile_device(const TensorProduct& tp, const std::string& dtype);

}  // namespace clebsch::torch_ext
