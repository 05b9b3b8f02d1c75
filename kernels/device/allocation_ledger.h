// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// AllocationLedger: a backend's live allocations, each with the name of the buffer it holds and
// what its size grows with, so that an engine can say where its device memory goes (issue 23:
// nobody knew which buffers made up 125 KB per atom). A DeviceArray names its allocation
// (DeviceArray::name); an allocation made inside an AllocationScope, by code that does not name
// its arrays (an MLP's scratch, the edge orderings), takes the innermost scope's name; any other
// is "unnamed". The ledger also keeps the peak of the live total since the last reset_peak(), for
// working sets that a call frees before it returns.
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace clebsch::cuda {

/// What a buffer's size is proportional to: atoms, edges, or neither (model weights, tables).
enum class BufferScale { kAtom, kEdge, kFixed };

/// "atom", "edge", "fixed".
inline const char* to_string(BufferScale s) {
  return s == BufferScale::kAtom ? "atom" : s == BufferScale::kEdge ? "edge" : "fixed";
}

/// The name of a buffer and what its size grows with.
struct BufferLabel {
  std::string name;
  BufferScale scale = BufferScale::kFixed;
};

/// The live bytes of one named buffer (the sum over its allocations).
struct LedgerEntry {
  std::string name;
  BufferScale scale = BufferScale::kFixed;
  std::size_t bytes = 0;
};

class AllocationLedger {
 public:
  /// The name of allocations nobody named.
  static constexpr const char* kUnnamed = "unnamed";

  void track(void* ptr, std::size_t bytes) {
    if (!ptr) return;
    live_[ptr] = {bytes,
                  scopes_.empty() ? BufferLabel{kUnnamed, BufferScale::kFixed} : scopes_.back()};
    total_ += bytes;
    peak_ = std::max(peak_, total_);
  }
  void untrack(void* ptr) noexcept {
    const auto it = live_.find(ptr);
    if (it == live_.end()) return;
    total_ -= it->second.bytes;
    live_.erase(it);
  }
  /// Names the live allocation @p ptr (no effect on an unknown pointer).
  void label(void* ptr, BufferLabel label) {
    const auto it = live_.find(ptr);
    if (it != live_.end()) it->second.label = std::move(label);
  }
  void push_scope(BufferLabel label) { scopes_.push_back(std::move(label)); }
  void pop_scope() noexcept {
    if (!scopes_.empty()) scopes_.pop_back();
  }

  std::size_t bytes() const { return total_; }
  /// The largest live total since the last reset_peak() (or since the start).
  std::size_t peak_bytes() const { return peak_; }
  void reset_peak() { peak_ = total_; }

  /// The live bytes by name, largest first (ties by name).
  std::vector<LedgerEntry> entries() const {
    std::map<std::string, LedgerEntry> by_name;
    for (const auto& [ptr, a] : live_) {
      LedgerEntry& e = by_name[a.label.name];
      e.name = a.label.name, e.scale = a.label.scale, e.bytes += a.bytes;
    }
    std::vector<LedgerEntry> out;
    for (auto& [name, e] : by_name) out.push_back(std::move(e));
    std::stable_sort(out.begin(), out.end(),
                     [](const LedgerEntry& a, const LedgerEntry& b) { return a.bytes > b.bytes; });
    return out;
  }

 private:
  struct Allocation {
    std::size_t bytes;
    BufferLabel label;
  };
  std::unordered_map<void*, Allocation> live_;
  std::vector<BufferLabel> scopes_;
  std::size_t total_ = 0, peak_ = 0;
};

/// Names the allocations made while it lives (RAII over push_scope / pop_scope).
class AllocationScope {
 public:
  AllocationScope(AllocationLedger& ledger, BufferLabel label) : ledger_(ledger) {
    ledger_.push_scope(std::move(label));
  }
  ~AllocationScope() { ledger_.pop_scope(); }
  AllocationScope(const AllocationScope&) = delete;
  AllocationScope& operator=(const AllocationScope&) = delete;

 private:
  AllocationLedger& ledger_;
};

}  // namespace clebsch::cuda
