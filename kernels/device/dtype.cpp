// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// DType's names and sizes, and the content hash (dtype.h, content_hash.h).
#include "clebsch/cuda/device/dtype.h"
#include "clebsch/cuda/device/content_hash.h"

namespace clebsch::cuda {

std::string to_string(DType dtype) { return dtype == DType::kFloat32 ? "float32" : "float64"; }

int size_of(DType dtype) { return dtype == DType::kFloat32 ? 4 : 8; }

std::uint64_t fnv1a(const void* data, std::size_t size, std::uint64_t h) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (std::size_t k = 0; k < size; ++k) {
    h ^= p[k];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex64(std::uint64_t h) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int k = 15; k >= 0; --k, h >>= 4) s[k] = digits[h & 0xf];
  return s;
}

}  // namespace clebsch::cuda
