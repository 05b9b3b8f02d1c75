// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The heap bytes that containers hold, for the host engines' memory_usage(): capacity, not size,
// because that is what the allocator gave them and what stays allocated between calls.
// Private to src/engine/.
#pragma once

#include <cstddef>
#include <vector>

namespace clebsch::engine_detail {

template <class V>
std::size_t held_bytes(const std::vector<V>& v) {
  return v.capacity() * sizeof(V);
}

template <class V>
std::size_t held_bytes(const std::vector<std::vector<V>>& v) {
  std::size_t bytes = v.capacity() * sizeof(std::vector<V>);
  for (const std::vector<V>& x : v) bytes += held_bytes(x);
  return bytes;
}

/// The sum of held_bytes over every argument.
template <class... C>
std::size_t sum_held_bytes(const C&... c) {
  return (std::size_t(0) + ... + held_bytes(c));
}

}  // namespace clebsch::engine_detail
