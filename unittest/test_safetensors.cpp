// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The safetensors reader: decoding of valid files, and a named ModelFormatError for every kind of
// corruption, including 10,000 random mutations and truncations (run under ASan/UBSan by the
// sanitizer build of this file).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "clebsch/model/safetensors.h"
#include "clebsch/support/error.h"
#include "safetensors_builder.h"

using clebsch::ModelFormatError;
using clebsch::SafetensorsFile;
using clebsch::test::SafetensorsBuilder;

namespace {

std::vector<std::uint8_t> sample() {
  return SafetensorsBuilder()
      .f64("a", {2, 3}, {1, 2, 3, 4, 5, 6.5})
      .f32("b", {3}, {0.5f, -1.25f, 3.0f})
      .i64("c", {}, {42})
      .metadata("model_json", R"({"arch":"test"})")
      .bytes();
}

template <typename F>
void expect_format_error(F&& f, const std::string& substring) {
  try {
    f();
    FAIL() << "no exception; expected ModelFormatError containing \"" << substring << "\"";
  } catch (const ModelFormatError& e) {
    EXPECT_NE(std::string(e.what()).find(substring), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Safetensors, DecodesTensorsAndMetadata) {
  const auto file = SafetensorsFile::parse(sample(), "sample");
  EXPECT_EQ(file.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(file.to_double("a", {2, 3}), (std::vector<double>{1, 2, 3, 4, 5, 6.5}));
  EXPECT_EQ(file.to_double("b"), (std::vector<double>{0.5, -1.25, 3.0}));
  EXPECT_EQ(file.to_double("c"), (std::vector<double>{42}));
  EXPECT_EQ(file.tensor("c").numel(), 1);
  EXPECT_EQ(file.metadata("model_json"), R"({"arch":"test"})");
}

TEST(Safetensors, RejectsWrongShapeRequest) {
  const auto file = SafetensorsFile::parse(sample(), "sample");
  expect_format_error([&] { file.to_double("a", {3, 2}); }, "shape [2, 3], expected [3, 2]");
}

TEST(Safetensors, NamesMissingTensorAndMetadata) {
  const auto file = SafetensorsFile::parse(sample(), "sample");
  expect_format_error([&] { file.tensor("zz"); }, "no tensor \"zz\"");
  expect_format_error([&] { file.metadata("zz"); }, "no metadata entry \"zz\"");
}

TEST(Safetensors, RejectsTruncatedFiles) {
  auto bytes = sample();
  expect_format_error([&] { SafetensorsFile::parse({1, 2, 3}, "tiny"); }, "truncated");
  bytes.resize(bytes.size() - 1);
  expect_format_error([&] { SafetensorsFile::parse(bytes, "cut"); }, "outside the");
  bytes.resize(20);
  expect_format_error([&] { SafetensorsFile::parse(bytes, "cut"); }, "header length");
}

TEST(Safetensors, RejectsBadHeaders) {
  auto bytes = sample();
  bytes[8] = '[';
  expect_format_error([&] { SafetensorsFile::parse(bytes, "x"); }, "not valid JSON");
  auto with = [](const std::string& json) {
    std::vector<std::uint8_t> b(8 + json.size());
    const std::uint64_t n = json.size();
    std::memcpy(b.data(), &n, 8);
    std::memcpy(b.data() + 8, json.data(), json.size());
    return b;
  };
  expect_format_error([&] { SafetensorsFile::parse(with("[1]"), "x"); }, "not a JSON object");
  expect_format_error(
      [&] {
        SafetensorsFile::parse(with(R"({"t":{"dtype":"Q8","shape":[],"data_offsets":[0,0]}})"),
                               "x");
      },
      "unsupported dtype \"Q8\"");
  expect_format_error(
      [&] {
        SafetensorsFile::parse(with(R"({"t":{"dtype":"F64","shape":[-1],"data_offsets":[0,0]}})"),
                               "x");
      },
      "non-negative");
  expect_format_error(
      [&] {
        SafetensorsFile::parse(with(R"({"t":{"dtype":"F64","shape":[2],"data_offsets":[0,0]}})"),
                               "x");
      },
      "0 bytes for shape [2]");
  expect_format_error([&] { SafetensorsFile::parse(with(R"({"t":{"dtype":"F64"}})"), "x"); },
                      "needs dtype, shape and data_offsets");
  expect_format_error([&] { SafetensorsFile::parse(with(R"({"__metadata__":{"k":1}})"), "x"); },
                      "not a string");
}

TEST(Safetensors, RejectsOverlapsGapsAndTrailingBytes) {
  auto build = [](const std::string& json, std::size_t data) {
    std::vector<std::uint8_t> b(8 + json.size() + data, 0);
    const std::uint64_t n = json.size();
    std::memcpy(b.data(), &n, 8);
    std::memcpy(b.data() + 8, json.data(), json.size());
    return b;
  };
  const std::string two = R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F64","shape":[1],"data_offsets":[4,12]}})";
  expect_format_error([&] { SafetensorsFile::parse(build(two, 12), "x"); }, "overlaps");
  const std::string gap = R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[8,16]}})";
  expect_format_error([&] { SafetensorsFile::parse(build(gap, 16), "x"); }, "gap");
  const std::string one = R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})";
  expect_format_error([&] { SafetensorsFile::parse(build(one, 9), "x"); }, "after the last tensor");
}

TEST(Safetensors, MissingFileIsNamed) {
  expect_format_error([] { SafetensorsFile::read("/nonexistent/model.safetensors"); },
                      "cannot open model file \"/nonexistent/model.safetensors\"");
}

// Random corruption must end in either a valid file or ModelFormatError; any other exception, a
// crash, or (under the sanitizers) an out-of-bounds access fails the test.
TEST(Safetensors, SurvivesTenThousandMutations) {
  const auto base = sample();
  std::mt19937_64 rng(12345);
  int rejected = 0;
  for (int trial = 0; trial < 10000; ++trial) {
    auto bytes = base;
    const int kind = trial % 4;
    if (kind == 0) {  // truncate anywhere
      bytes.resize(rng() % bytes.size());
    } else if (kind == 1) {  // flip a few bits anywhere
      for (int k = 0, n = 1 + rng() % 4; k < n; ++k)
        bytes[rng() % bytes.size()] ^= 1u << (rng() % 8);
    } else if (kind == 2) {  // overwrite header characters with JSON-significant ones
      const char tokens[] = "{}[]\",:0123456789-eE. ";
      for (int k = 0, n = 1 + rng() % 3; k < n; ++k)
        bytes[8 + rng() % (bytes.size() - 8)] = tokens[rng() % (sizeof(tokens) - 1)];
    } else {  // corrupt the header length
      const std::uint64_t len = rng() % (bytes.size() + 16);
      std::memcpy(bytes.data(), &len, 8);
    }
    try {
      const auto f = SafetensorsFile::parse(bytes, "mutant");
      for (const auto& name : f.names()) (void)f.to_double(name);
    } catch (const ModelFormatError& e) {
      ++rejected;
      EXPECT_GT(std::string(e.what()).size(), 10u);
    }
  }
  EXPECT_GT(rejected, 5000);  // most mutants must be caught, not silently accepted
}
