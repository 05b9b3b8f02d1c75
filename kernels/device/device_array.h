// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// DeviceArray<T>: a typed allocation on a DeviceBackend, freed on destruction. It only grows
// (resize keeps the allocation when it is large enough, and does not preserve contents), so that
// an engine sizes its buffers on the first call and allocates nothing on later calls of the same
// or smaller size. A named array (name()) labels its allocation in the backend's ledger
// (allocation_ledger.h), so that an engine can account for its device memory buffer by buffer.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "clebsch/cuda/device/device_backend.h"

namespace clebsch::cuda {

template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(DeviceBackend& backend, std::size_t n = 0) : backend_(&backend) {
    resize(n);
  }
  ~DeviceArray() { release(); }
  DeviceArray(DeviceArray&& o) noexcept
      : backend_(o.backend_),
        ptr_(o.ptr_),
        size_(o.size_),
        capacity_(o.capacity_),
        label_(std::move(o.label_)) {
    o.ptr_ = nullptr;
    o.size_ = o.capacity_ = 0;
  }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(backend_, o.backend_);
    std::swap(ptr_, o.ptr_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
    std::swap(label_, o.label_);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  /// Binds an empty array to @p backend (for arrays default-constructed in containers).
  void bind(DeviceBackend& backend) {
    if (backend_ != &backend) {
      release();
      backend_ = &backend;
    }
  }
  /// Names the buffer in the backend's ledger: its allocation now and every later one.
  void name(std::string name, BufferScale scale) {
    label_ = {std::move(name), scale};
    if (ptr_) backend_->ledger().label(ptr_, label_);
  }
  const std::string& name() const { return label_.name; }

  /// n elements; contents undefined after a reallocation. A second growth takes 1/8 more than
  /// asked: in MD the edge count creeps up by a few edges from step to step, and every exact
  /// regrowth would free (cuMemFree synchronises the device) and allocate again.
  void resize(std::size_t n) {
    if (n > capacity_) {
      const std::size_t grown = capacity_ > 0 ? std::max(n, capacity_ + capacity_ / 8) : n;
      release();
      ptr_ = static_cast<T*>(backend_->allocate(grown * sizeof(T)));
      capacity_ = grown;
      if (!label_.name.empty()) backend_->ledger().label(ptr_, label_);
    }
    size_ = n;
  }
  /// Resizes to host.size() and copies it in (asynchronously on @p stream).
  void upload(const std::vector<T>& host, Stream stream = nullptr) {
    resize(host.size());
    backend_->upload(ptr_, host.data(), host.size() * sizeof(T), stream);
  }
  void upload(const T* host, std::size_t n, Stream stream = nullptr) {
    resize(n);
    backend_->upload(ptr_, host, n * sizeof(T), stream);
  }
  std::vector<T> download(Stream stream = nullptr) const {
    std::vector<T> host(size_);
    backend_->download(host.data(), ptr_, size_ * sizeof(T), stream);
    return host;
  }
  void zero(Stream stream = nullptr) { backend_->memset(ptr_, 0, size_ * sizeof(T), stream); }
  /// Every byte 0xff: NaN in float32 and float64 (tests poison outputs with it).
  void poison(Stream stream = nullptr) { backend_->memset(ptr_, 0xff, size_ * sizeof(T), stream); }

  /// Frees the allocation (size and capacity 0), for a working set that a call stops needing.
  void release() {
    if (ptr_) backend_->free(ptr_);
    ptr_ = nullptr;
    size_ = capacity_ = 0;
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }
  std::size_t capacity_bytes() const { return capacity_ * sizeof(T); }

 private:
  DeviceBackend* backend_ = nullptr;
  T* ptr_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;
  BufferLabel label_;  // empty name: the ledger's scope names the allocation
};

}  // namespace clebsch::cuda
