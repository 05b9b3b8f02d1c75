// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// cuBLAS, resolved at run time (the pattern of cuda_driver.h). libclebsch_cuda must load on
// machines without a driver or without cuBLAS (CI checks that nothing new is NEEDED), and the
// GEMMs must still run there through the generic kernel: so cuBLAS is an optional accelerator,
// opened with dlopen on first use, never linked. cublas_v2.h is included for its types only.
// Search order: $CLEBSCH_CUBLAS_LIBRARY alone when set (the user named a file: no silent
// substitute), else libcublas.so.13, libcublas.so (the loader's path, which includes this
// library's RUNPATH), then the toolkit directory found at build time.
#pragma once

#include <cublas_v2.h>

#include <string>
#include <vector>

namespace clebsch::cuda {

/// The cuBLAS entry points the dense GEMM route uses. All are required: every cuBLAS since 8.0
/// has them, so a library lacking one is refused as not cuBLAS (no partial route).
struct CublasApi {
  decltype(&::cublasCreate_v2) Create = nullptr;
  decltype(&::cublasDestroy_v2) Destroy = nullptr;
  decltype(&::cublasSetStream_v2) SetStream = nullptr;
  decltype(&::cublasSetMathMode) SetMathMode = nullptr;
  decltype(&::cublasDgemm_v2) Dgemm = nullptr;
  decltype(&::cublasSgemm_v2) Sgemm = nullptr;
  decltype(&::cublasDgemmStridedBatched) DgemmStridedBatched = nullptr;
  decltype(&::cublasSgemmStridedBatched) SgemmStridedBatched = nullptr;
};

/// The outcome of one load attempt: @c error empty on success (@c api complete, @c path the file
/// that was opened), else why no candidate worked (every candidate's dlerror or missing symbol).
struct CublasLoad {
  CublasApi api{};
  std::string path;
  std::string error;
  bool ok() const { return error.empty(); }
};

/// The file names tried, in order (see the file comment; reads $CLEBSCH_CUBLAS_LIBRARY now).
std::vector<std::string> cublas_candidates();

/// Tries @p candidates in order; never throws. Not cached (tests call it with their own lists).
CublasLoad load_cublas(const std::vector<std::string>& candidates);

/// The process-wide cuBLAS: load_cublas(cublas_candidates()) on first call, then cached;
/// thread-safe, never throws (check ok()).
const CublasLoad& cublas();

/// "CUBLAS_STATUS_..." for @p status (no dependency on the library's own string table).
const char* cublas_status_name(cublasStatus_t status);

}  // namespace clebsch::cuda
