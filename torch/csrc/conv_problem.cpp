// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Parsing and caching of the operators' problem descriptions (conv_problem.h).
#include "conv_problem.h"

#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>
#include <vector>

#include "clebsch/support/error.h"

namespace clebsch::torch_ext {
namespace {

using nlohmann::json;

const json& field(const json& j, const char* name) {
  if (!j.is_object() || !j.contains(name))
    throw Error(std::string("clebsch conv problem: missing field \"") + name + "\"");
  return j.at(name);
}

IrrepNormalization irrep_normalization(const std::string& s) {
  if (s == "component") return IrrepNormalization::kComponent;
  if (s == "norm") return IrrepNormalization::kNorm;
  if (s == "none") return IrrepNormalization::kNone;
  throw Error("clebsch conv problem: irrep_normalization must be component, norm or none, got \"" +
              s + "\"");
}

PathNormalization path_normalization(const std::string& s) {
  if (s == "element") return PathNormalization::kElement;
  if (s == "path") return PathNormalization::kPath;
  if (s == "none") return PathNormalization::kNone;
  throw Error("clebsch conv problem: path_normalization must be element, path or none, got \"" + s +
              "\"");
}

std::vector<Instruction> instructions(const json& list) {
  if (!list.is_array()) throw Error("clebsch conv problem: \"instructions\" must be a list");
  std::vector<Instruction> out;
  for (std::size_t n = 0; n < list.size(); ++n) {
    const json& t = list[n];
    if (!t.is_array() || t.size() != 6)
      throw Error("clebsch conv problem: instruction " + std::to_string(n) +
                  " must be [i_in1, i_in2, i_out, mode, has_weight, path_weight], got " + t.dump());
    out.emplace_back(t[0].get<int>(), t[1].get<int>(), t[2].get<int>(), t[3].get<std::string>(),
                     t[4].get<bool>(), t[5].get<double>());
  }
  return out;
}

TensorProduct parse(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(std::string("clebsch conv problem: not valid JSON: ") + e.what());
  }
  try {
    Irreps in1(field(j, "irreps_in1").get<std::string>());
    Irreps in2(field(j, "irreps_in2").get<std::string>());
    Irreps out(field(j, "irreps_out").get<std::string>());
    std::vector<Instruction> ins = instructions(field(j, "instructions"));
    if (j.contains("couplings") && !j.at("couplings").is_null()) {
      auto couplings = j.at("couplings").get<std::vector<std::vector<double>>>();
      return TensorProduct::with_couplings(std::move(in1), std::move(in2), std::move(out),
                                           std::move(ins), couplings, /*shared_weights=*/false);
    }
    TensorProductOptions options;
    options.shared_weights = false;
    if (j.contains("irrep_normalization"))
      options.irrep_normalization = irrep_normalization(j.at("irrep_normalization"));
    if (j.contains("path_normalization"))
      options.path_normalization = path_normalization(j.at("path_normalization"));
    return TensorProduct(std::move(in1), std::move(in2), std::move(out), std::move(ins), options);
  } catch (const json::exception& e) {
    // A field of the wrong JSON type: name what the parser saw.
    throw Error(std::string("clebsch conv problem: ") + e.what());
  }
}

}  // namespace

std::shared_ptr<const TensorProduct> conv_problem(const std::string& problem) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::shared_ptr<const TensorProduct>> cache;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(problem);
    if (it != cache.end()) return it->second;
  }
  // Parsed outside the lock (a large problem takes milliseconds); a concurrent parse of the same
  // string yields an equal product, and the first one stored wins.
  auto tp = std::make_shared<const TensorProduct>(parse(problem));
  std::lock_guard<std::mutex> lock(mutex);
  return cache.emplace(problem, std::move(tp)).first->second;
}

}  // namespace clebsch::torch_ext
