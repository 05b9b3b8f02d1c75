// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Validation and decoding of safetensors files (see safetensors.h). Every check that guards a
// memory access happens before the access; the JSON library's own errors are turned into
// ModelFormatError so callers see one error type.
#include "clebsch/model/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "clebsch/support/error.h"

namespace clebsch {
namespace {

// A header larger than this is not a model file; the bound keeps a corrupt length from
// turning into a huge allocation.
constexpr std::uint64_t kMaxHeaderBytes = 64u << 20;

DType parse_dtype(const std::string& s, const std::string& where) {
  static const std::map<std::string, DType> names = {
      {"F64", DType::kF64}, {"F32", DType::kF32},  {"F16", DType::kF16}, {"BF16", DType::kBF16},
      {"I64", DType::kI64}, {"I32", DType::kI32},  {"I16", DType::kI16}, {"I8", DType::kI8},
      {"U8", DType::kU8},   {"BOOL", DType::kBool}};
  auto it = names.find(s);
  if (it == names.end()) throw ModelFormatError(where + ": unsupported dtype \"" + s + "\"");
  return it->second;
}

double half_to_double(std::uint16_t h) {
  const int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(frac, -24);
  } else if (exp == 31) {
    v = frac ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(frac + 1024, exp - 25);
  }
  return sign ? -v : v;
}

template <typename T>
T load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // unaligned-safe; files are little-endian like our hosts
  return v;
}

}  // namespace

std::size_t dtype_size(DType d) {
  switch (d) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16:
      return 2;
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return 1;
  }
  return 0;
}

std::string to_string(DType d) {
  switch (d) {
    case DType::kF64:
      return "F64";
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kI64:
      return "I64";
    case DType::kI32:
      return "I32";
    case DType::kI16:
      return "I16";
    case DType::kI8:
      return "I8";
    case DType::kU8:
      return "U8";
    case DType::kBool:
      return "BOOL";
  }
  return "?";
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

SafetensorsFile SafetensorsFile::read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelFormatError("cannot open model file \"" + path + "\"");
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  if (in.bad()) throw ModelFormatError("error while reading model file \"" + path + "\"");
  return parse(std::move(bytes), path);
}

SafetensorsFile SafetensorsFile::parse(std::vector<std::uint8_t> bytes, const std::string& origin) {
  SafetensorsFile f;
  f.origin_ = origin;
  f.bytes_ = std::move(bytes);
  const std::string where = "model file \"" + origin + "\"";
  if (f.bytes_.size() < 8)
    throw ModelFormatError(where + " is truncated: " + std::to_string(f.bytes_.size()) +
                           " bytes, not even the 8-byte header length");
  const std::uint64_t header_len = load<std::uint64_t>(f.bytes_.data());
  if (header_len > kMaxHeaderBytes || header_len > f.bytes_.size() - 8)
    throw ModelFormatError(where + " is truncated or not a safetensors file: header length " +
                           std::to_string(header_len) + " but the file has " +
                           std::to_string(f.bytes_.size()) + " bytes");
  const char* header_begin = reinterpret_cast<const char*>(f.bytes_.data() + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_begin, header_begin + header_len);
  } catch (const nlohmann::json::exception& e) {
    throw ModelFormatError(where + ": header is not valid JSON (" + e.what() + ")");
  }
  if (!header.is_object()) throw ModelFormatError(where + ": header is not a JSON object");

  const std::uint8_t* data = f.bytes_.data() + 8 + header_len;
  const std::size_t data_len = f.bytes_.size() - 8 - header_len;
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) throw ModelFormatError(where + ": __metadata__ is not an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string())
          throw ModelFormatError(where + ": metadata value \"" + m.key() + "\" is not a string");
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string tw = where + ", tensor \"" + name + "\"";
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets"))
      throw ModelFormatError(tw + ": entry needs dtype, shape and data_offsets");
    const auto& jd = entry["dtype"];
    const auto& js = entry["shape"];
    const auto& jo = entry["data_offsets"];
    if (!jd.is_string() || !js.is_array() || !jo.is_array() || jo.size() != 2)
      throw ModelFormatError(tw + ": malformed dtype, shape or data_offsets");
    TensorView t;
    t.name = name;
    t.dtype = parse_dtype(jd.get<std::string>(), tw);
    std::uint64_t numel = 1;
    for (const auto& d : js) {
      if (!d.is_number_unsigned())
        throw ModelFormatError(tw + ": shape entries must be non-negative integers");
      const std::uint64_t dim = d.get<std::uint64_t>();
      if (dim != 0 && numel > (std::uint64_t(1) << 48) / dim)
        throw ModelFormatError(tw + ": shape " + js.dump() + " is implausibly large");
      numel *= dim;
      t.shape.push_back(static_cast<std::int64_t>(dim));
    }
    for (const auto& o : jo)
      if (!o.is_number_unsigned())
        throw ModelFormatError(tw + ": data_offsets must be non-negative integers");
    const std::uint64_t begin = jo[0].get<std::uint64_t>(), end = jo[1].get<std::uint64_t>();
    if (begin > end || end > data_len)
      throw ModelFormatError(tw + ": data_offsets [" + std::to_string(begin) + ", " +
                             std::to_string(end) + "] outside the " + std::to_string(data_len) +
                             "-byte data section (file truncated?)");
    if (end - begin != numel * dtype_size(t.dtype))
      throw ModelFormatError(tw + ": " + std::to_string(end - begin) + " bytes for shape " +
                             shape_string(t.shape) + " of " + to_string(t.dtype) + " (expected " +
                             std::to_string(numel * dtype_size(t.dtype)) + ")");
    t.data = data + begin;
    t.nbytes = end - begin;
    ranges.emplace_back(begin, end);
    f.tensors_.emplace(name, std::move(t));
  }
  // As the reference implementation requires: the tensors tile the data section exactly.
  std::sort(ranges.begin(), ranges.end());
  std::size_t expect = 0;
  for (const auto& r : ranges) {
    if (r.first != expect)
      throw ModelFormatError(
          where + ": tensor data " +
          (r.first < expect ? std::string("overlaps") : std::string("has a gap")) + " at byte " +
          std::to_string(std::min(r.first, expect)));
    expect = r.second;
  }
  if (expect != data_len)
    throw ModelFormatError(where + ": " + std::to_string(data_len - expect) +
                           " bytes after the last tensor");
  return f;
}

const std::string& SafetensorsFile::metadata(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end())
    throw ModelFormatError("model file \"" + origin_ + "\" has no metadata entry \"" + key + "\"");
  return it->second;
}

const TensorView& SafetensorsFile::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw ModelFormatError("model file \"" + origin_ + "\" has no tensor \"" + name + "\"");
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

std::vector<double> SafetensorsFile::to_double(const std::string& name,
                                               const std::vector<std::int64_t>& expected) const {
  const TensorView& t = tensor(name);
  if (!expected.empty() && t.shape != expected)
    throw ModelFormatError("model file \"" + origin_ + "\", tensor \"" + name + "\": shape " +
                           shape_string(t.shape) + ", expected " + shape_string(expected));
  const std::size_t n = static_cast<std::size_t>(t.numel());
  std::vector<double> out(n);
  const std::size_t s = dtype_size(t.dtype);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t* p = t.data + i * s;
    switch (t.dtype) {
      case DType::kF64:
        out[i] = load<double>(p);
        break;
      case DType::kF32:
        out[i] = load<float>(p);
        break;
      case DType::kF16:
        out[i] = half_to_double(load<std::uint16_t>(p));
        break;
      case DType::kBF16: {
        const std::uint32_t bits = std::uint32_t(load<std::uint16_t>(p)) << 16;
        float v;
        std::memcpy(&v, &bits, 4);
        out[i] = v;
        break;
      }
      case DType::kI64:
        out[i] = static_cast<double>(load<std::int64_t>(p));
        break;
      case DType::kI32:
        out[i] = load<std::int32_t>(p);
        break;
      case DType::kI16:
        out[i] = load<std::int16_t>(p);
        break;
      case DType::kI8:
        out[i] = load<std::int8_t>(p);
        break;
      case DType::kU8:
      case DType::kBool:
        out[i] = *p;
        break;
    }
  }
  return out;
}

}  // namespace clebsch
