// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The stable content hash behind every on-disk cache key (NVRTC modules, emulated modules) and
// the problem hash on the first line of generated source: the same bytes give the same hash on
// every run, platform and build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace clebsch::cuda {

/// 64-bit FNV-1a over bytes, continuing from h (the basis of every hash of the generator).
std::uint64_t fnv1a(const void* data, std::size_t size, std::uint64_t h = 0xcbf29ce484222325ull);
/// The hash as 16 lower-case hex digits.
std::string hex64(std::uint64_t h);

}  // namespace clebsch::cuda
