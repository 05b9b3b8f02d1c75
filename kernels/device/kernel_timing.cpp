// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The records of kernel timing and their aggregation (see kernel_timing.h).
#include "clebsch/cuda/device/kernel_timing.h"

#include <utility>

namespace clebsch::cuda {

std::vector<KernelTimingTotal> aggregate_kernel_timings(const std::vector<KernelTiming>& records,
                                                        TimingKey key) {
  std::vector<KernelTimingTotal> totals;
  std::map<std::pair<std::string, std::string>, std::size_t> row;
  for (const KernelTiming& r : records) {
    std::string label = key == TimingKey::kLabelAndName ? r.label : std::string();
    auto [it, fresh] = row.try_emplace({label, r.name}, totals.size());
    if (fresh) {
      KernelTimingTotal t;
      t.label = std::move(label);
      t.name = r.name;
      totals.push_back(std::move(t));
    }
    KernelTimingTotal& t = totals[it->second];
    t.calls += 1;
    t.seconds += r.seconds;
    t.bytes += r.bytes;
    t.floor.bytes += r.floor.bytes;
    t.floor.flops += r.floor.flops;
  }
  return totals;
}

int KernelTimingLog::intern(std::vector<std::string>& names,
                            std::map<std::string, int, std::less<>>& index, std::string_view s) {
  // Heterogeneous lookup: a name seen before costs a search, not an allocation.
  if (auto it = index.find(s); it != index.end()) return it->second;
  const int id = static_cast<int>(names.size());
  names.emplace_back(s);
  index.emplace(std::string(s), id);
  return id;
}

std::size_t KernelTimingLog::add(std::string_view name, std::string_view detail,
                                 const unsigned (&dims)[5], std::size_t bytes, KernelFloor floor) {
  Entry e;
  if (detail.empty()) {
    e.name = intern(names_, name_index_, name);
  } else {
    joined_.assign(name).append(1, ' ').append(detail);
    e.name = intern(names_, name_index_, joined_);
  }
  for (int d = 0; d < 5; ++d) e.dims[d] = dims[d];
  e.bytes = bytes;
  e.floor = floor;
  entries_.push_back(e);
  return entries_.size() - 1;
}

void KernelTimingLog::close(std::size_t i, double seconds) {
  entries_[i].closed = true;
  entries_[i].seconds = seconds;
}

void KernelTimingLog::end_phase(std::string_view label) {
  const int id = intern(labels_, label_index_, label);
  for (std::size_t i = phase_start_; i < entries_.size(); ++i) entries_[i].label = id;
  phase_start_ = entries_.size();
}

std::vector<KernelTiming> KernelTimingLog::take(const std::function<double(std::size_t)>& seconds) {
  std::vector<KernelTiming> out;
  out.reserve(entries_.size());
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (!e.closed) continue;
    KernelTiming r;
    if (e.label >= 0) r.label = labels_[std::size_t(e.label)];
    r.name = names_[std::size_t(e.name)];
    r.grid_x = e.dims[0], r.grid_y = e.dims[1], r.grid_z = e.dims[2];
    r.threads = e.dims[3], r.shared_bytes = e.dims[4];
    r.bytes = e.bytes;
    r.floor = e.floor;
    r.seconds = seconds ? seconds(i) : e.seconds;
    out.push_back(std::move(r));
  }
  clear();
  return out;
}

void KernelTimingLog::clear() {
  entries_.clear();
  phase_start_ = 0;
}

}  // namespace clebsch::cuda
