// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Run-time resolution of cuBLAS (see cublas_loader.h).
#include "clebsch/cuda/device/cublas_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <type_traits>

namespace clebsch::cuda {

std::vector<std::string> cublas_candidates() {
  if (const char* env = std::getenv("CLEBSCH_CUBLAS_LIBRARY"); env && *env) return {env};
  std::vector<std::string> c = {"libcublas.so.13", "libcublas.so"};
#ifdef CLEBSCH_CUBLAS_TOOLKIT_DIR
  // Where the toolkit this library was built against keeps it (found by CMake), for hosts whose
  // loader path does not include the toolkit.
  c.push_back(std::string(CLEBSCH_CUBLAS_TOOLKIT_DIR) + "/libcublas.so.13");
  c.push_back(std::string(CLEBSCH_CUBLAS_TOOLKIT_DIR) + "/libcublas.so");
#endif
  return c;
}

CublasLoad load_cublas(const std::vector<std::string>& candidates) {
  CublasLoad l;
  if (candidates.empty()) {
    l.error = "cuBLAS not loaded: no candidate library";
    return l;
  }
  std::string why;
  for (const std::string& name : candidates) {
    // RTLD_LOCAL: cuBLAS's symbols stay out of the global namespace (a host application may link
    // its own cuBLAS of another version).
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      why += "\n  " + name + ": " + (e ? e : "dlopen failed");
      continue;
    }
    CublasApi a{};
    std::string missing;
    auto resolve = [&](const char* sym, auto& fn) {
      void* p = dlsym(lib, sym);
      if (!p && missing.empty()) missing = sym;
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    resolve("cublasCreate_v2", a.Create);
    resolve("cublasDestroy_v2", a.Destroy);
    resolve("cublasSetStream_v2", a.SetStream);
    resolve("cublasSetMathMode", a.SetMathMode);
    resolve("cublasDgemm_v2", a.Dgemm);
    resolve("cublasSgemm_v2", a.Sgemm);
    resolve("cublasDgemmStridedBatched", a.DgemmStridedBatched);
    resolve("cublasSgemmStridedBatched", a.SgemmStridedBatched);
    if (!missing.empty()) {
      why += "\n  " + name + ": opened but lacks " + missing + " (not cuBLAS?)";
      dlclose(lib);
      continue;
    }
    // Kept open for the life of the process: handles and their streams may outlive any owner.
    l.api = a;
    l.path = name;
    return l;
  }
  l.error = "cuBLAS not loaded (the generic GEMM kernel is used instead):" + why;
  return l;
}

const CublasLoad& cublas() {
  static const CublasLoad l = load_cublas(cublas_candidates());
  return l;
}

const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
    default:
      return "CUBLAS_STATUS_(unknown)";
  }
}

}  // namespace clebsch::cuda
