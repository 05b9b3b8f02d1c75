// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Helpers of the test_kernels_* suites: the small coverage products of conv_shapes.h, random
// graphs, device buffers through the run-time driver API, and the error measure with its named
// tolerances.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "clebsch/cuda/device/cuda_driver.h"
#include "clebsch/cuda/generator/conv_shapes.h"
#include "clebsch/o3/tensor_product.h"

namespace clebsch::cuda::test {

/// Tolerances of kernel output against the float64 host reference (max |a-b| / max |b|).
inline constexpr double kTolFloat64 = 1e-12;
inline constexpr double kTolFloat32 = 1e-5;

/// The coverage shapes of conv_shapes.h.
inline std::vector<CoverageShape> test_shapes() { return coverage_shapes(); }

inline std::vector<double> randn(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  std::vector<double> v(n);
  for (double& e : v) e = normal(gen);
  return v;
}

/// Rounds to T and back: the exact inputs the device sees, for the float64 reference.
template <typename T>
std::vector<double> rounded(const std::vector<double>& v) {
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = static_cast<double>(static_cast<T>(v[i]));
  return r;
}

/// max |a - b| / max |b|, and +inf if a has a non-finite entry (an unwritten poisoned value).
inline double rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    err = std::max(err, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return err / std::max(scale, 1e-300);
}

/// A random graph: receivers sorted (as a neighbour list gives them) or shuffled, random senders.
struct Graph {
  int num_nodes;
  std::vector<int> sender, receiver;
};

inline Graph random_graph(int num_nodes, int num_edges, bool sorted_receivers, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> node(0, num_nodes - 1);
  Graph g{num_nodes, std::vector<int>(num_edges), std::vector<int>(num_edges)};
  for (int e = 0; e < num_edges; ++e) g.sender[e] = node(gen), g.receiver[e] = node(gen);
  if (sorted_receivers) std::sort(g.receiver.begin(), g.receiver.end());
  return g;
}

/// A device allocation (driver API), freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes) CLEBSCH_CU_CHECK(MemAlloc(&ptr_, bytes));
  }
  template <typename T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    if (bytes_) CLEBSCH_CU_CHECK(MemcpyHtoD(ptr_, host.data(), bytes_));
  }
  ~DeviceBuffer() {
    if (ptr_) driver().MemFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  void* get() const { return reinterpret_cast<void*>(ptr_); }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }
  /// All bytes 0xff: NaN in float32 and float64, so an unwritten output is caught.
  void poison() const {
    if (bytes_) CLEBSCH_CU_CHECK(MemsetD8(ptr_, 0xff, bytes_));
  }
  template <typename T>
  std::vector<T> download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    if (bytes_) CLEBSCH_CU_CHECK(MemcpyDtoH(host.data(), ptr_, bytes_));
    return host;
  }
  std::vector<unsigned char> bytes_copy() const { return download<unsigned char>(); }

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
};

template <typename T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}
template <typename T>
std::vector<double> widen(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace clebsch::cuda::test

/// Skips a GPU test on machines without a CUDA device (CI, CPU-only hosts).
#define CLEBSCH_REQUIRE_GPU()                                                   \
  do {                                                                          \
    if (!::clebsch::cuda::device_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)
