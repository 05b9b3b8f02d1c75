// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The device path of the operators (see conv_device.h). One DeviceBackend per CUDA device (its
// primary context: the one PyTorch's runtime calls use) and one for the emulation, each with its
// ConvRunners keyed by (dtype, problem description), all kept for the life of the process. A
// call builds both CSR orders of its edges with torch ops on the tensors' device (a stable sort,
// then searchsorted for the row pointers), so the kernels run in their deterministic mode
// (results independent of the edge order's scheduling, bitwise reproducible), and launches the
// passes on PyTorch's current stream, which it gets through c10's device-guard interface (in
// libc10, registered by libc10_cuda when a CUDA torch is loaded: no c10_cuda header or library
// is needed here). Outputs are torch tensors from PyTorch's allocator; the runners allocate
// only their 4-byte status word, once. The one synchronisation per call is the index range
// check (CLEBSCH_TORCH_CHECK_INDICES=0 skips it); the kernels would otherwise skip edges whose
// indices are out of range.
#include "conv_device.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "clebsch/cuda/engine/conv_runner.h"
#include "clebsch/support/error.h"

namespace clebsch::torch_ext {
namespace {

namespace cu = clebsch::cuda;
using Tensor = at::Tensor;

// A backend and the runners of the problems it has seen. Runners are built, and passes
// launched, under the mutex (DeviceBackend is not thread-safe).
struct DeviceState {
  std::unique_ptr<cu::DeviceBackend> backend;
  std::unordered_map<std::string, std::unique_ptr<cu::ConvRunner>> runners;
  std::mutex mutex;
};

// Never destroyed: at exit the CUDA context may be gone before static destructors run.
DeviceState& device_state(const at::Device& device) {
  static std::mutex mutex;
  static auto* states = new std::map<int, std::unique_ptr<DeviceState>>();
  std::lock_guard<std::mutex> lock(mutex);
  const int key = device.is_cuda() ? device.index() : -1;
  std::unique_ptr<DeviceState>& slot = (*states)[key];
  if (!slot) {
    auto s = std::make_unique<DeviceState>();
    try {
      s->backend =
          device.is_cuda() ? cu::make_cuda_backend(device.index()) : cu::make_emulated_backend();
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "clebsch conv: no kernel backend for ", device, ": ", e.what());
    }
    slot = std::move(s);
  }
  return *slot;
}

cu::DType dtype_of(const Tensor& x) {
  return x.scalar_type() == at::kDouble ? cu::DType::kFloat64 : cu::DType::kFloat32;
}

// An environment switch: unset or empty means @p fallback, "0" off, anything else on.
bool env_on(const char* name, bool fallback = false) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  return std::string(v) != "0";
}

// The runner of (problem, dtype) on @p s; the caller holds s.mutex.
const cu::ConvRunner& runner(DeviceState& s, const TensorProduct& tp, const std::string& problem,
                             cu::DType dtype) {
  const std::string key = cu::to_string(dtype) + "|" + problem;
  auto it = s.runners.find(key);
  if (it != s.runners.end()) return *it->second;
  try {
    // Filling the kernel cache for a GPU host while the tests run here (torch/gpu/).
    if (env_on("CLEBSCH_TORCH_PRECOMPILE_H200"))
      cu::precompile_conv(tp, dtype, cu::Accumulation::kDeterministic);
    auto r =
        std::make_unique<cu::ConvRunner>(*s.backend, tp, dtype, cu::Accumulation::kDeterministic);
    return *s.runners.emplace(key, std::move(r)).first->second;
  } catch (const CapacityError& e) {
    TORCH_CHECK(false, "clebsch conv: the generated kernels (", s.backend->name(),
                ") cannot run this problem: ", e.what(),
                "; run it on the CPU host kernels or use the e3nn module");
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "clebsch conv: building the kernels on ", s.backend->name(),
                " failed: ", e.what());
  }
}

// PyTorch's current stream of a CUDA device (nullptr, ignored, for the emulation).
cu::Stream current_stream(const at::Device& device) {
  if (!device.is_cuda()) return nullptr;
  const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(device.type());
  return impl->getStream(device).native_handle();
}

void check_device(const Tensor& t, const at::Device& device, const char* name) {
  TORCH_CHECK(!t.defined() || t.device() == device, "clebsch conv: ", name, " is on ", t.device(),
              " but x is on ", device, "; every operand must be on one device");
}

// The range of both index arrays, checked on their device with one synchronisation.
void check_index_range(const Tensor& sender, int64_t num_senders, const Tensor& receiver,
                       int64_t num_receivers) {
  if (sender.numel() == 0 || !env_on("CLEBSCH_TORCH_CHECK_INDICES", true)) return;
  auto [smin, smax] = at::aminmax(sender);
  auto [rmin, rmax] = at::aminmax(receiver);
  const Tensor m = at::stack({smin, smax, rmin, rmax}).to(at::kLong).cpu();
  const int64_t* v = m.data_ptr<int64_t>();
  TORCH_CHECK(v[0] >= 0 && v[1] < num_senders, "clebsch conv: sender indices must lie in [0, ",
              num_senders, ") (the rows of x), found [", v[0], ", ", v[1], "]");
  TORCH_CHECK(v[2] >= 0 && v[3] < num_receivers, "clebsch conv: receiver indices must lie in [0, ",
              num_receivers, ") (num_receivers), found [", v[2], ", ", v[3], "]");
}

// The CSR of the edges by one node index: the edge ids in stable sorted order (so edges of one
// node keep their input order, and the result does not depend on the sort's implementation)
// and the row pointers ptr[n] = #edges with index < n.
struct Csr {
  Tensor ptr, order;
};
Csr csr_by(const Tensor& index32, int64_t rows) {
  auto [sorted, order] = at::sort(index32, /*stable=*/true, /*dim=*/0, /*descending=*/false);
  const Tensor bounds = at::arange(rows + 1, index32.options());
  return {at::searchsorted(sorted, bounds, /*out_int32=*/true, /*right=*/false),
          order.to(at::kInt)};
}

// What every pass needs: the device, its state, the stream, and the edges as int32 with the
// CSR orders the passes use.
struct Call {
  at::Device device;
  c10::OptionalDeviceGuard guard;
  DeviceState& state;
  cu::Stream stream;
  Tensor sender, receiver;
  Csr by_receiver, by_sender;
  cu::ConvBuffers buffers;

  Call(const Tensor& x, const Tensor& sender_, const Tensor& receiver_, int64_t num_receivers,
       bool receiver_pass, bool sender_pass)
      : device(x.device()),
        guard(device.is_cuda() ? std::optional<at::Device>(device) : std::nullopt),
        state(device_state(device)),
        stream(current_stream(device)) {
    const int64_t num_senders = x.size(0);
    check_device(sender_, device, "sender");
    check_device(receiver_, device, "receiver");
    check_index_range(sender_, num_senders, receiver_, num_receivers);
    sender = sender_.to(at::kInt).contiguous();
    receiver = receiver_.to(at::kInt).contiguous();
    if (receiver_pass) by_receiver = csr_by(receiver, num_receivers);
    if (sender_pass) by_sender = csr_by(sender, num_senders);
    cu::ConvBuffers& b = buffers;
    b.num_senders = num_senders;
    b.num_receivers = num_receivers;
    b.num_edges = sender.numel();
    b.sender = sender.data_ptr<int>();
    b.receiver = receiver.data_ptr<int>();
    if (receiver_pass)
      b.receiver_ptr = by_receiver.ptr.data_ptr<int>(),
      b.receiver_order = by_receiver.order.data_ptr<int>();
    if (sender_pass)
      b.sender_ptr = by_sender.ptr.data_ptr<int>(),
      b.sender_order = by_sender.order.data_ptr<int>();
  }

  void operands(const Tensor& x, const Tensor& y, const Tensor& w) {
    check_device(y, device, "y");
    check_device(w, device, "w");
    buffers.x = x.data_ptr(), buffers.y = y.data_ptr(), buffers.w = w.data_ptr();
  }

  void run(const TensorProduct& tp, const std::string& problem, cu::DType dtype,
           std::initializer_list<cu::Pass> passes) {
    std::lock_guard<std::mutex> lock(state.mutex);
    const cu::ConvRunner& r = runner(state, tp, problem, dtype);
    try {
      for (cu::Pass p : passes) r.run(stream, p, buffers);
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "clebsch conv on ", state.backend->name(), ": ", e.what());
    }
  }
};

void* data_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

}  // namespace

Tensor conv_device(const TensorProduct& tp, const std::string& problem, const Tensor& x,
                   const Tensor& y, const Tensor& w, const Tensor& sender, const Tensor& receiver,
                   int64_t num_receivers) {
  Call call(x, sender, receiver, num_receivers, true, false);
  call.operands(x, y, w);
  Tensor out = at::empty({num_receivers, tp.dim_out()}, x.options());
  call.buffers.out = out.data_ptr();
  call.run(tp, problem, dtype_of(x), {cu::Pass::kForward});
  return out;
}

std::tuple<Tensor, Tensor, Tensor> conv_backward_device(
    const TensorProduct& tp, const std::string& problem, const Tensor& x, const Tensor& y,
    const Tensor& w, const Tensor& sender, const Tensor& receiver, const Tensor& grad_out) {
  Call call(x, sender, receiver, grad_out.size(0), false, true);
  call.operands(x, y, w);
  check_device(grad_out, call.device, "grad_out");
  Tensor gx = at::empty_like(x), gy = at::empty_like(y), gw = at::empty_like(w);
  cu::ConvBuffers& b = call.buffers;
  b.grad_out = grad_out.data_ptr();
  b.grad_x = gx.data_ptr(), b.grad_y = gy.data_ptr(), b.grad_w = data_or_null(gw);
  call.run(tp, problem, dtype_of(x), {cu::Pass::kBackward});
  return {gx, gy, gw};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> conv_double_backward_device(
    const TensorProduct& tp, const std::string& problem, const Tensor& x, const Tensor& y,
    const Tensor& w, const Tensor& sender, const Tensor& receiver, const Tensor& grad_out,
    const Tensor& dx, const Tensor& dy, const Tensor& dw) {
  Call call(x, sender, receiver, grad_out.size(0), true, true);
  call.operands(x, y, w);
  check_device(grad_out, call.device, "grad_out");
  check_device(dx, call.device, "dx");
  check_device(dy, call.device, "dy");
  check_device(dw, call.device, "dw");
  Tensor gx = at::empty_like(x), gy = at::empty_like(y), gw = at::empty_like(w);
  Tensor gg = at::empty_like(grad_out);
  cu::ConvBuffers& b = call.buffers;
  b.grad_out = grad_out.data_ptr();
  b.dx = data_or_null(dx), b.dy = data_or_null(dy), b.dw = data_or_null(dw);
  b.grad_x = gx.data_ptr(), b.grad_y = gy.data_ptr(), b.grad_w = data_or_null(gw);
  b.grad_grad_out = gg.data_ptr();
  call.run(tp, problem, dtype_of(x), {cu::Pass::kDoubleForward, cu::Pass::kDoubleBackward});
  return {gx, gy, gw, gg};
}

std::string precompile_device(const TensorProduct& tp, const std::string& dtype) {
  TORCH_CHECK(dtype == "float32" || dtype == "float64",
              "clebsch precompile_conv: dtype must be float32 or float64, got ", dtype);
  try {
    const cu::Cubin c =
        cu::precompile_conv(tp, dtype == "float64" ? cu::DType::kFloat64 : cu::DType::kFloat32,
                            cu::Accumulation::kDeterministic);
    return c.key + " " + std::to_string(c.seconds) + " s " +
           (c.from_cache ? "(cache)" : "(compiled)");
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "clebsch precompile_conv: ", e.what());
  }
}

}  // namespace clebsch::torch_ext
