// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Builds safetensors byte strings for tests, written from the format's specification (8-byte
// little-endian header length, JSON header, tightly packed data), independently of the reader.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace clebsch::test {

class SafetensorsBuilder {
 public:
  SafetensorsBuilder& f64(const std::string& name, std::vector<std::int64_t> shape,
                          const std::vector<double>& values) {
    return add(name, "F64", std::move(shape), values.data(), values.size() * 8);
  }
  SafetensorsBuilder& f32(const std::string& name, std::vector<std::int64_t> shape,
                          const std::vector<float>& values) {
    return add(name, "F32", std::move(shape), values.data(), values.size() * 4);
  }
  SafetensorsBuilder& i64(const std::string& name, std::vector<std::int64_t> shape,
                          const std::vector<std::int64_t>& values) {
    return add(name, "I64", std::move(shape), values.data(), values.size() * 8);
  }
  SafetensorsBuilder& metadata(const std::string& key, const std::string& value) {
    header_["__metadata__"][key] = value;
    return *this;
  }
  std::vector<std::uint8_t> bytes() const {
    std::string h = header_.dump();
    while (h.size() % 8) h += ' ';  // the reference writer pads with spaces to 8 bytes
    std::vector<std::uint8_t> out(8 + h.size() + data_.size());
    const std::uint64_t n = h.size();
    std::memcpy(out.data(), &n, 8);
    std::memcpy(out.data() + 8, h.data(), h.size());
    if (!data_.empty()) std::memcpy(out.data() + 8 + h.size(), data_.data(), data_.size());
    return out;
  }

 private:
  SafetensorsBuilder& add(const std::string& name, const char* dtype,
                          std::vector<std::int64_t> shape, const void* p, std::size_t n) {
    header_[name] = {
        {"dtype", dtype}, {"shape", shape}, {"data_offsets", {data_.size(), data_.size() + n}}};
    const auto* b = static_cast<const std::uint8_t*>(p);
    data_.insert(data_.end(), b, b + n);
    return *this;
  }
  nlohmann::json header_ = nlohmann::json::object();
  std::vector<std::uint8_t> data_;
};

}  // namespace clebsch::test
