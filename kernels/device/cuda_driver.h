// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The CUDA driver API, resolved at run time. libcuda.so.1 is opened with dlopen and every entry
// point is looked up through cuGetProcAddress, so nothing links against the driver: the library
// loads on machines without a GPU, and the first call that needs the driver throws CudaError
// "no CUDA driver found". cuda.h is used for its types only. All calls go through one throwing
// check macro, CLEBSCH_CU_CHECK.
#pragma once

#include <cuda.h>

#include <string>

namespace clebsch::cuda {

/// The driver entry points the engine, its tests and its benchmark use.
struct DriverApi {
  decltype(&::cuInit) Init;
  decltype(&::cuDriverGetVersion) DriverGetVersion;
  decltype(&::cuDeviceGetCount) DeviceGetCount;
  decltype(&::cuDeviceGet) DeviceGet;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute;
  decltype(&::cuDeviceGetName) DeviceGetName;
  decltype(&::cuDevicePrimaryCtxRetain) DevicePrimaryCtxRetain;
  decltype(&::cuCtxGetCurrent) CtxGetCurrent;
  decltype(&::cuCtxSetCurrent) CtxSetCurrent;
  decltype(&::cuCtxGetDevice) CtxGetDevice;
  decltype(&::cuCtxSynchronize) CtxSynchronize;
  decltype(&::cuModuleLoadData) ModuleLoadData;
  decltype(&::cuModuleUnload) ModuleUnload;
  decltype(&::cuModuleGetFunction) ModuleGetFunction;
  decltype(&::cuFuncSetAttribute) FuncSetAttribute;
  decltype(&::cuFuncGetAttribute) FuncGetAttribute;
  decltype(&::cuLaunchKernel) LaunchKernel;
  decltype(&::cuMemAlloc) MemAlloc;
  decltype(&::cuMemFree) MemFree;
  decltype(&::cuMemGetInfo) MemGetInfo;
  decltype(&::cuMemcpyHtoD) MemcpyHtoD;
  decltype(&::cuMemcpyDtoH) MemcpyDtoH;
  decltype(&::cuMemcpyDtoHAsync) MemcpyDtoHAsync;
  decltype(&::cuMemcpyHtoDAsync) MemcpyHtoDAsync;
  decltype(&::cuMemcpyDtoDAsync) MemcpyDtoDAsync;
  decltype(&::cuMemsetD8) MemsetD8;
  decltype(&::cuMemsetD8Async) MemsetD8Async;
  decltype(&::cuMemsetD32Async) MemsetD32Async;
  decltype(&::cuStreamSynchronize) StreamSynchronize;
  decltype(&::cuStreamCreate) StreamCreate;
  decltype(&::cuStreamDestroy) StreamDestroy;
  decltype(&::cuStreamWaitEvent) StreamWaitEvent;
  decltype(&::cuEventCreate) EventCreate;
  decltype(&::cuEventRecord) EventRecord;
  decltype(&::cuEventSynchronize) EventSynchronize;
  decltype(&::cuEventElapsedTime) EventElapsedTime;
  decltype(&::cuEventDestroy) EventDestroy;
  decltype(&::cuGetErrorName) GetErrorName;
  decltype(&::cuGetErrorString) GetErrorString;
};

/// The driver, loaded and initialised (cuInit) on first use; thread-safe.
/// @throws CudaError "no CUDA driver found: ..." when libcuda.so.1 cannot be opened or lacks an
/// entry point, or the cuInit error (e.g. no device).
const DriverApi& driver();

/// true when the driver loads and reports at least one device; never throws.
bool device_available();

/// Makes a context current on the calling thread if none is: the primary context of device
/// @p ordinal (what the CUDA runtime, PyTorch and Kokkos use). Returns the current device.
/// @throws CudaError.
CUdevice ensure_context(int ordinal = 0);

/// Throws CudaError "<what> failed: CUDA_ERROR_... (<description>)" unless @p result is
/// CUDA_SUCCESS.
void check(CUresult result, const char* what);

}  // namespace clebsch::cuda

/// Every driver call goes through this: CLEBSCH_CU_CHECK(MemAlloc(&p, n)).
#define CLEBSCH_CU_CHECK(call) ::clebsch::cuda::check(::clebsch::cuda::driver().call, #call)
