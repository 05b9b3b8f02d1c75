// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Reader of the safetensors container that model files use: an 8-byte little-endian header length,
// a JSON header mapping tensor names to {dtype, shape, data_offsets}, an optional "__metadata__"
// map of strings, then the raw little-endian tensor bytes. Everything is validated before use
// (header bounds, JSON shape, dtype, shape products, offsets inside the buffer, contiguous and
// non-overlapping), so a truncated or corrupt file raises ModelFormatError naming the problem and
// never reads out of bounds.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace clebsch {

/// Element types of safetensors ("F64", "F32", "I64", ...).
enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

/// Size in bytes of one element.
std::size_t dtype_size(DType dtype);
/// The safetensors name ("F64", ...).
std::string to_string(DType dtype);

/// One tensor inside a loaded file. Views the file's bytes; valid while the file object lives.
struct TensorView {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  const std::uint8_t* data;
  std::size_t nbytes;
  /// Product of the shape (1 for a scalar).
  std::int64_t numel() const;
};

/// A whole safetensors file held in memory (model files are megabytes, not gigabytes).
class SafetensorsFile {
 public:
  /// Reads and validates @p path. @throws ModelFormatError naming the file and the problem.
  static SafetensorsFile read(const std::string& path);
  /// Validates bytes already in memory; @p origin names them in messages.
  static SafetensorsFile parse(std::vector<std::uint8_t> bytes, const std::string& origin);

  /// The "__metadata__" map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// A metadata value. @throws ModelFormatError naming the missing key.
  const std::string& metadata(const std::string& key) const;
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  /// @throws ModelFormatError naming the missing tensor.
  const TensorView& tensor(const std::string& name) const;
  /// Names of all tensors, sorted.
  std::vector<std::string> names() const;
  /// The tensor's values converted to double (F64, F32, F16, BF16, integer types), row-major.
  /// @param expected_shape when non-empty, the shape the tensor must have (else ModelFormatError).
  std::vector<double> to_double(const std::string& name,
                                const std::vector<std::int64_t>& expected_shape = {}) const;
  const std::string& origin() const { return origin_; }

 private:
  SafetensorsFile() = default;
  std::string origin_;
  std::vector<std::uint8_t> bytes_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, TensorView> tensors_;
};

/// Shape as text, e.g. "[3, 4]", for messages.
std::string shape_string(const std::vector<std::int64_t>& shape);

}  // namespace clebsch
