// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Run-time resolution of the CUDA driver API (see cuda_driver.h).
#include "clebsch/cuda/device/cuda_driver.h"

#include <dlfcn.h>

#include <mutex>

#include "clebsch/support/error.h"

namespace clebsch::cuda {
namespace {

// The ABI version the entry points are requested for: the signatures in DriverApi are those of
// CUDA 12.0, the oldest driver generation that runs sm_90 code with these features.
constexpr int kApiVersion = 12000;

struct Loaded {
  DriverApi api{};
  std::string error;  // empty when loaded
};

Loaded load() {
  Loaded l;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    l.error = std::string("no CUDA driver found: dlopen(libcuda.so.1) failed: ") +
              (why ? why : "unknown reason");
    return l;
  }
  using GetProc =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!get_proc) {
    l.error =
        "no CUDA driver found: libcuda.so.1 has no cuGetProcAddress_v2 (driver older than "
        "CUDA 12)";
    return l;
  }
  auto resolve = [&](const char* name, auto& fn) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult status{};
    if (get_proc(name, &p, kApiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS ||
        !p) {
      if (l.error.empty())
        l.error = std::string("no CUDA driver found: libcuda.so.1 lacks ") + name;
      return;
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  DriverApi& a = l.api;
  resolve("cuInit", a.Init);
  resolve("cuDriverGetVersion", a.DriverGetVersion);
  resolve("cuDeviceGetCount", a.DeviceGetCount);
  resolve("cuDeviceGet", a.DeviceGet);
  resolve("cuDeviceGetAttribute", a.DeviceGetAttribute);
  resolve("cuDeviceGetName", a.DeviceGetName);
  resolve("cuDevicePrimaryCtxRetain", a.DevicePrimaryCtxRetain);
  resolve("cuCtxGetCurrent", a.CtxGetCurrent);
  resolve("cuCtxSetCurrent", a.CtxSetCurrent);
  resolve("cuCtxGetDevice", a.CtxGetDevice);
  resolve("cuCtxSynchronize", a.CtxSynchronize);
  resolve("cuModuleLoadData", a.ModuleLoadData);
  resolve("cuModuleUnload", a.ModuleUnload);
  resolve("cuModuleGetFunction", a.ModuleGetFunction);
  resolve("cuFuncSetAttribute", a.FuncSetAttribute);
  resolve("cuFuncGetAttribute", a.FuncGetAttribute);
  resolve("cuLaunchKernel", a.LaunchKernel);
  resolve("cuMemAlloc", a.MemAlloc);
  resolve("cuMemFree", a.MemFree);
  resolve("cuMemGetInfo", a.MemGetInfo);
  resolve("cuMemcpyHtoD", a.MemcpyHtoD);
  resolve("cuMemcpyDtoH", a.MemcpyDtoH);
  resolve("cuMemcpyDtoHAsync", a.MemcpyDtoHAsync);
  resolve("cuMemcpyHtoDAsync", a.MemcpyHtoDAsync);
  resolve("cuMemcpyDtoDAsync", a.MemcpyDtoDAsync);
  resolve("cuMemsetD8", a.MemsetD8);
  resolve("cuMemsetD8Async", a.MemsetD8Async);
  resolve("cuMemsetD32Async", a.MemsetD32Async);
  resolve("cuStreamSynchronize", a.StreamSynchronize);
  resolve("cuStreamCreate", a.StreamCreate);
  resolve("cuStreamDestroy", a.StreamDestroy);
  resolve("cuStreamWaitEvent", a.StreamWaitEvent);
  resolve("cuEventCreate", a.EventCreate);
  resolve("cuEventRecord", a.EventRecord);
  resolve("cuEventSynchronize", a.EventSynchronize);
  resolve("cuEventElapsedTime", a.EventElapsedTime);
  resolve("cuEventDestroy", a.EventDestroy);
  resolve("cuGetErrorName", a.GetErrorName);
  resolve("cuGetErrorString", a.GetErrorString);
  if (!l.error.empty()) return l;
  const CUresult init = a.Init(0);
  if (init != CUDA_SUCCESS) {
    const char* name = nullptr;
    a.GetErrorName(init, &name);
    l.error = std::string("CUDA driver found but cuInit failed: ") + (name ? name : "?");
  }
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const DriverApi& driver() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw CudaError(l.error);
  return l.api;
}

bool device_available() {
  const Loaded& l = loaded();
  if (!l.error.empty()) return false;
  int count = 0;
  return l.api.DeviceGetCount(&count) == CUDA_SUCCESS && count > 0;
}

void check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  const DriverApi& a = loaded().api;
  const char* name = nullptr;
  const char* text = nullptr;
  if (a.GetErrorName) a.GetErrorName(result, &name);
  if (a.GetErrorString) a.GetErrorString(result, &text);
  throw CudaError(std::string(what) + " failed: " + (name ? name : std::to_string(int(result))) +
                  " (" + (text ? text : "no description") + ")");
}

CUdevice ensure_context(int ordinal) {
  const DriverApi& d = driver();
  // One thread at a time may retain the primary context, so concurrent first calls agree.
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  CUcontext ctx = nullptr;
  check(d.CtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (!ctx) {
    CUdevice dev;
    check(d.DeviceGet(&dev, ordinal), "cuDeviceGet");
    // Retained for the life of the process, as the CUDA runtime does.
    check(d.DevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(d.CtxSetCurrent(ctx), "cuCtxSetCurrent");
  }
  CUdevice dev;
  check(d.CtxGetDevice(&dev), "cuCtxGetDevice");
  return dev;
}

}  // namespace clebsch::cuda
