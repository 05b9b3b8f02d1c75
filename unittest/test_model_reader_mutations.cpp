// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Mutation test of the model reader: 12,000 mutated and truncated versions of two real exports
// (unittest/potentials/seed_*.safetensors, made by the exporter from random-weight mace-torch and
// nequip models) go through SafetensorsFile::parse and parse_model. Every one must end either in
// a model (whose invariants are then re-checked, as an engine relies on them) or in a
// ModelFormatError with a message naming the file; any other exception, a crash, or (in the
// sanitized build, test_model_reader_mutations_sanitized) any AddressSanitizer or UBSan report
// fails. The mutations aim at the model JSON inside the container (numbers, brackets, names,
// whole subtrees), at the tensors (bit flips, shapes and names in the container header) and at
// the file itself (truncation, header length). Deterministic (fixed seeds).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "clebsch/model/model_reader.h"
#include "clebsch/model/safetensors.h"
#include "clebsch/support/error.h"

#ifndef CLEBSCH_SEED_MODELS_DIR
#error "CLEBSCH_SEED_MODELS_DIR must name unittest/potentials"
#endif

namespace clebsch {
namespace {

using nlohmann::json;
using Bytes = std::vector<std::uint8_t>;
using Rng = std::mt19937_64;

constexpr int kMutantsPerSeed = 6000;

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void collect(const json& j, const json::json_pointer& here, std::vector<json::json_pointer>* out);

// A seed split into its container header (JSON) and data section, with its model JSON parsed
// and the pointers to all of its nodes (computed once: mutants are many).
struct Seed {
  std::string name;
  Bytes bytes;
  json header;
  Bytes data;
  json model;
  std::vector<json::json_pointer> nodes;
};

Seed load_seed(const std::string& name) {
  Seed s;
  s.name = name;
  s.bytes = read_bytes(std::string(CLEBSCH_SEED_MODELS_DIR) + "/" + name);
  if (s.bytes.size() < 8) return s;
  std::uint64_t n = 0;
  std::memcpy(&n, s.bytes.data(), 8);
  s.header = json::parse(s.bytes.begin() + 8, s.bytes.begin() + 8 + static_cast<long>(n));
  s.data.assign(s.bytes.begin() + 8 + static_cast<long>(n), s.bytes.end());
  s.model = json::parse(s.header["__metadata__"]["model_json"].get<std::string>());
  collect(s.model, json::json_pointer(), &s.nodes);
  return s;
}

Bytes assemble(const json& header, const Bytes& data) {
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  Bytes out(8 + h.size());
  const std::uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, h.data(), h.size());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::size_t pick(Rng& rng, std::size_t n) { return n ? rng() % n : 0; }

// --- mutations of the model JSON text ----------------------------------------------------------

std::string mutate_text(std::string s, Rng& rng) {
  static const std::string tokens = "{}[]\",:0123456789-+eE.xtfn ";
  const int edits = 1 + static_cast<int>(rng() % 3);
  for (int e = 0; e < edits && !s.empty(); ++e) {
    const std::size_t at = pick(rng, s.size());
    switch (rng() % 6) {
      case 0: {  // a digit becomes another digit: numbers, indices, multiplicities, l
        std::vector<std::size_t> digits;
        for (std::size_t i = 0; i < s.size(); ++i)
          if (s[i] >= '0' && s[i] <= '9') digits.push_back(i);
        if (!digits.empty()) s[digits[pick(rng, digits.size())]] = char('0' + rng() % 10);
        break;
      }
      case 1:  // a JSON-significant character anywhere
        s[at] = tokens[pick(rng, tokens.size())];
        break;
      case 2:  // delete a short run
        s.erase(at, 1 + rng() % 8);
        break;
      case 3:  // duplicate a short run
        s.insert(at, s.substr(at, 1 + rng() % 12));
        break;
      case 4: {  // change a letter of a name (keys, op names, modes, irreps parities)
        std::vector<std::size_t> letters;
        for (std::size_t i = 0; i < s.size(); ++i)
          if (s[i] >= 'a' && s[i] <= 'z') letters.push_back(i);
        if (!letters.empty()) s[letters[pick(rng, letters.size())]] = char('a' + rng() % 26);
        break;
      }
      default: {  // swap a bracket for its partner or another bracket
        static const std::string brackets = "{}[]";
        std::vector<std::size_t> at_brackets;
        for (std::size_t i = 0; i < s.size(); ++i)
          if (brackets.find(s[i]) != std::string::npos) at_brackets.push_back(i);
        if (!at_brackets.empty())
          s[at_brackets[pick(rng, at_brackets.size())]] = brackets[rng() % 4];
        break;
      }
    }
  }
  return s;
}

// --- mutations of the model JSON tree ----------------------------------------------------------

void collect(const json& j, const json::json_pointer& here, std::vector<json::json_pointer>* out) {
  out->push_back(here);
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) collect(it.value(), here / it.key(), out);
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) collect(j[i], here / i, out);
  }
}

std::string mutate_string(std::string s, Rng& rng) {
  if (s.empty()) return "x";
  const std::size_t at = pick(rng, s.size());
  switch (rng() % 5) {
    case 0:  // irreps: flip a parity
      for (char& c : s)
        if ((c == 'e' || c == 'o') && rng() % 2) {
          c = c == 'e' ? 'o' : 'e';
          break;
        }
      return s;
    case 1:  // a digit (multiplicity, l, version, ...)
      for (std::size_t k = 0; k < s.size(); ++k) {
        char& c = s[(at + k) % s.size()];
        if (c >= '0' && c <= '9') {
          c = char('0' + rng() % 10);
          break;
        }
      }
      return s;
    case 2:
      s.erase(at, 1);
      return s;
    case 3:
      return s + (rng() % 2 ? "+1x1o" : "x");
    default:
      s[at] = char(' ' + rng() % 95);
      return s;
  }
}

json random_value(Rng& rng) {
  switch (rng() % 12) {
    case 0:
      return nullptr;
    case 1:
      return true;
    case 2:
      return 0;
    case 3:
      return -1;
    case 4:
      return 1e300;
    case 5:
      return 2147483648LL;
    case 6:
      return 3.5;
    case 7:
      return "x";
    case 8:
      return json::array();
    case 9:
      return json::object();
    case 10:
      return "2x0e+1x1o";
    default:
      return std::int64_t(rng() % 20);
  }
}

// Mutates one node of @p root (a copy of the seed's model, whose nodes are @p nodes).
void mutate_node(json& root, const std::vector<json::json_pointer>& nodes, Rng& rng) {
  const json::json_pointer& p = nodes[pick(rng, nodes.size())];
  json& v = root[p];
  const int op = static_cast<int>(rng() % 8);
  if (op == 0 && !p.empty()) {  // remove it (key or element)
    json& parent = root[p.parent_pointer()];
    if (parent.is_object()) {
      parent.erase(p.back());
    } else if (parent.is_array()) {
      parent.erase(static_cast<std::size_t>(std::stoul(p.back())));
    }
    return;
  }
  if (op == 1) {
    v = random_value(rng);
    return;
  }
  if (v.is_number_integer()) {
    const std::int64_t x = v.get<std::int64_t>();
    const std::int64_t deltas[] = {1, -1, 2, -2, 1000, -1000000};
    v = x + deltas[pick(rng, 6)];
  } else if (v.is_number_float()) {
    const double factors[] = {-1.0, 0.0, 1.0001, 2.0, 1e-300, 1e300};
    v = v.get<double>() * factors[pick(rng, 6)];
  } else if (v.is_string()) {
    v = mutate_string(v.get<std::string>(), rng);
  } else if (v.is_array() && !v.empty()) {
    switch (rng() % 3) {
      case 0:
        std::swap(v[pick(rng, v.size())], v[pick(rng, v.size())]);
        break;
      case 1:
        v.push_back(v[pick(rng, v.size())]);
        break;
      default:
        v.erase(pick(rng, v.size()));
        break;
    }
  } else if (v.is_object() && !v.empty()) {
    // Replace one member by a sibling's value (a plausible value of the wrong kind).
    auto a = std::next(v.begin(), static_cast<long>(pick(rng, v.size())));
    auto b = std::next(v.begin(), static_cast<long>(pick(rng, v.size())));
    json tmp = b.value();
    a.value() = tmp;
  } else {
    v = random_value(rng);
  }
}

// --- mutations of the container ----------------------------------------------------------------

// Change a tensor's entry in the container header consistently enough to pass the container
// checks where possible: permute or reshape its shape (same element count), rename it.
void mutate_tensor_entry(json& header, Rng& rng) {
  std::vector<std::string> names;
  for (auto it = header.begin(); it != header.end(); ++it)
    if (it.key() != "__metadata__") names.push_back(it.key());
  if (names.empty()) return;
  const std::string name = names[pick(rng, names.size())];
  json& entry = header[name];
  switch (rng() % 3) {
    case 0: {  // reverse the shape
      auto shape = entry["shape"].get<std::vector<std::int64_t>>();
      std::reverse(shape.begin(), shape.end());
      entry["shape"] = shape;
      break;
    }
    case 1: {  // flatten it, or give it an extra unit axis
      auto shape = entry["shape"].get<std::vector<std::int64_t>>();
      std::int64_t n = 1;
      for (auto d : shape) n *= d;
      if (rng() % 2) {
        entry["shape"] = std::vector<std::int64_t>{n};
      } else {
        shape.insert(shape.begin(), 1);
        entry["shape"] = shape;
      }
      break;
    }
    default: {  // rename (the JSON still references the old name)
      json moved = entry;
      header.erase(name);
      header[name + "_"] = moved;
      break;
    }
  }
}

// --- invariants an engine relies on, re-checked on every accepted mutant -------------------

void check_linear(const model::Linear& l) {
  std::size_t n = 0;
  for (const auto& ins : l.instructions) {
    ASSERT_LT(ins.i_in, static_cast<int>(l.irreps_in.size()));
    ASSERT_LT(ins.i_out, static_cast<int>(l.irreps_out.size()));
    ASSERT_EQ(ins.weight_offset, static_cast<int>(n));
    n += std::size_t(ins.mul_in) * std::size_t(ins.mul_out);
  }
  ASSERT_EQ(l.weight.size(), n);
}

void check_tp(const model::TensorProduct& tp) {
  ASSERT_EQ(tp.descriptor.shared_weights(), !tp.external_weights);
  ASSERT_EQ(tp.weight.size(), tp.external_weights ? 0u : std::size_t(tp.descriptor.weight_numel()));
}

void check_mlp(const model::Mlp& m, int dim_in) {
  int width = dim_in;
  for (const auto& layer : m.layers) {
    ASSERT_EQ(layer.h_in, width);
    ASSERT_EQ(layer.weight.size(), std::size_t(layer.h_in) * std::size_t(layer.h_out));
    ASSERT_TRUE(layer.bias.empty() || layer.bias.size() == std::size_t(layer.h_out));
    width = layer.h_out;
  }
}

void check_invariants(const model::Model& m) {
  const std::size_t S = m.species.size();
  ASSERT_GT(S, 0u);
  ASSERT_EQ(m.r_max_pairs.size(), S * S);
  if (m.mace) {
    const model::Mace& mace = *m.mace;
    ASSERT_EQ(mace.interactions.size(), mace.products.size());
    ASSERT_EQ(mace.atomic_energies.size(), S);
    check_linear(mace.node_embedding);
    for (std::size_t t = 0; t < mace.interactions.size(); ++t) {
      const auto& I = mace.interactions[t];
      check_linear(I.linear_up);
      check_linear(I.linear);
      check_tp(I.conv_tp);
      check_tp(I.skip_tp);
      check_mlp(I.radial_mlp, mace.radial.num_basis);
      ASSERT_EQ(I.radial_mlp.dim_out(), I.conv_tp.descriptor.weight_numel());
      ASSERT_EQ(I.conv_tp.descriptor.dim_in2(), m.sh_irreps.dim());
      const auto& C = mace.products[t].contraction;
      for (const auto& con : C.contractions)
        for (const auto& term : con.terms) {
          ASSERT_EQ(term.W.size(), S * std::size_t(term.K) * std::size_t(C.num_features));
          std::size_t u = 1;
          for (auto d : term.u_shape) u *= std::size_t(d);
          ASSERT_EQ(term.U.size(), u);
        }
      check_linear(mace.products[t].linear);
    }
    for (const auto& r : mace.readouts) ASSERT_LT(r.layer, static_cast<int>(mace.products.size()));
  }
  if (m.nequip) {
    const model::Nequip& nq = *m.nequip;
    ASSERT_EQ(nq.type_embedding.size(), S * std::size_t(nq.embedding_dim));
    ASSERT_EQ(nq.radial.rmax_recip.size(), S * S);
    for (const auto& L : nq.layers) {
      check_linear(L.linear_1);
      check_linear(L.linear_2);
      check_tp(L.tp);
      if (L.sc) check_tp(*L.sc);
      ASSERT_EQ(L.norm_const.size(), S);
      check_mlp(L.edge_mlp, nq.radial.num_basis);
      ASSERT_EQ(L.edge_mlp.dim_out(), L.tp.descriptor.weight_numel());
      const int dim_in = L.gate.irreps_in.dim();
      for (const auto* idx : {&L.gate.index_scalars, &L.gate.index_gates, &L.gate.index_gated})
        for (int i : *idx) ASSERT_TRUE(i >= 0 && i < dim_in);
    }
    ASSERT_EQ(nq.scales.size(), S);
  }
}

// --- the test ----------------------------------------------------------------------------------

// True for the reader's field-level messages, `model file "<f>": <json.path[3]>: <what>`, as
// opposed to the container's and the JSON parser's (`model file "<f>" is truncated ...`,
// `...: header is not valid JSON ...`, `...: __metadata__.model_json is not valid JSON ...`).
bool names_a_field(const std::string& what) {
  const std::string prefix = "model file \"mutant.safetensors\": ";
  if (what.compare(0, prefix.size(), prefix) != 0) return false;
  std::size_t i = prefix.size();
  const std::size_t begin = i;
  while (i < what.size() && (std::isalnum(static_cast<unsigned char>(what[i])) || what[i] == '_' ||
                             what[i] == '.' || what[i] == '[' || what[i] == ']'))
    ++i;
  return i > begin && i < what.size() && what[i] == ':' &&
         what.compare(begin, i - begin, "__metadata__.model_json") != 0;
}

enum Kind { kTruncate, kFlipData, kText, kTree, kHeaderBytes, kTensorEntry, kHeaderLength, kKinds };
const char* kKindNames[kKinds] = {"truncate",        "flip tensor bits", "model_json text",
                                  "model_json tree", "header bytes",     "tensor entries",
                                  "header length"};

Bytes make_mutant(const Seed& seed, Kind kind, Rng& rng) {
  Bytes bytes = seed.bytes;
  switch (kind) {
    case kTruncate:  // anywhere, but mostly inside the header where the structure is
      bytes.resize(rng() % 4 ? pick(rng, bytes.size() - seed.data.size())
                             : pick(rng, bytes.size()));
      return bytes;
    case kFlipData: {
      Bytes data = seed.data;
      for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n && !data.empty(); ++k)
        data[pick(rng, data.size())] ^= std::uint8_t(1u << (rng() % 8));
      return assemble(seed.header, data);
    }
    case kText: {
      json header = seed.header;
      header["__metadata__"]["model_json"] =
          mutate_text(header["__metadata__"]["model_json"].get<std::string>(), rng);
      return assemble(header, seed.data);
    }
    case kTree: {
      json header = seed.header;
      json model = seed.model;
      mutate_node(model, seed.nodes, rng);
      header["__metadata__"]["model_json"] = model.dump();
      return assemble(header, seed.data);
    }
    case kHeaderBytes: {
      static const char tokens[] = "{}[]\",:0123456789-eE. ";
      const std::size_t header_end = bytes.size() - seed.data.size();
      for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k)
        bytes[8 + pick(rng, header_end - 8)] = std::uint8_t(tokens[pick(rng, sizeof(tokens) - 1)]);
      return bytes;
    }
    case kTensorEntry: {
      json header = seed.header;
      mutate_tensor_entry(header, rng);
      return assemble(header, seed.data);
    }
    default: {
      const std::uint64_t len = rng() % (bytes.size() + 64);
      std::memcpy(bytes.data(), &len, 8);
      return bytes;
    }
  }
}

// Share of mutants per kind (out of 20): the JSON-level mutations reach the reader's own
// checks, so they get most of the budget.
Kind draw_kind(Rng& rng) {
  static const Kind table[20] = {kTruncate,    kTruncate,    kFlipData,    kFlipData,     kText,
                                 kText,        kText,        kText,        kTree,         kTree,
                                 kTree,        kTree,        kTree,        kTree,         kTree,
                                 kHeaderBytes, kTensorEntry, kTensorEntry, kHeaderLength, kText};
  return table[rng() % 20];
}

TEST(ModelReaderMutations, SeedsAreValidExports) {
  for (const char* name : {"seed_mace.safetensors", "seed_nequip.safetensors"}) {
    const Seed seed = load_seed(name);
    ASSERT_GT(seed.bytes.size(), 1000u) << name << " missing from " << CLEBSCH_SEED_MODELS_DIR;
    const model::Model m = parse_model(SafetensorsFile::parse(seed.bytes, name));
    check_invariants(m);
  }
}

TEST(ModelReaderMutations, TwelveThousandMutantsEndInAModelOrAModelFormatError) {
  std::map<std::string, std::array<int, 2>> counts;  // kind -> {accepted, rejected}
  int total = 0, rejected = 0, reader_level = 0, failures = 0;
  // CLEBSCH_SHOW_MUTANT_MESSAGES=n prints every n-th rejection, to review the messages.
  const char* show_env = std::getenv("CLEBSCH_SHOW_MUTANT_MESSAGES");
  const int show = show_env ? std::atoi(show_env) : 0;
  for (const char* name : {"seed_mace.safetensors", "seed_nequip.safetensors"}) {
    const Seed seed = load_seed(name);
    ASSERT_GT(seed.bytes.size(), 1000u) << name << " missing from " << CLEBSCH_SEED_MODELS_DIR;
    Rng rng(name[5] == 'm' ? 20261129 : 424242);
    for (int trial = 0; trial < kMutantsPerSeed; ++trial) {
      const Kind kind = draw_kind(rng);
      const Bytes bytes = make_mutant(seed, kind, rng);
      ++total;
      try {
        const model::Model m = parse_model(SafetensorsFile::parse(bytes, "mutant.safetensors"));
        ++counts[kKindNames[kind]][0];
        check_invariants(m);
        if (::testing::Test::HasFatalFailure()) {
          ADD_FAILURE() << name << " trial " << trial << " (" << kKindNames[kind]
                        << "): accepted model breaks an invariant";
          return;
        }
      } catch (const ModelFormatError& e) {
        ++counts[kKindNames[kind]][1];
        ++rejected;
        const std::string what = e.what();
        if (show > 0 && rejected % show == 0)
          std::cout << "  [" << kKindNames[kind] << "] " << what << "\n";
        // A message that names the file and says something about it.
        if (what.find("model file \"mutant.safetensors\"") == std::string::npos ||
            what.size() < 40) {
          if (++failures <= 10)
            ADD_FAILURE() << name << " trial " << trial << " (" << kKindNames[kind]
                          << "): poor message: " << what;
        }
        if (names_a_field(what)) ++reader_level;
      } catch (const std::exception& e) {
        if (++failures <= 10)
          ADD_FAILURE() << name << " trial " << trial << " (" << kKindNames[kind]
                        << "): threw a non-ModelFormatError: " << e.what();
      }
    }
  }
  for (const auto& [kind, c] : counts)
    std::cout << "  " << kind << ": " << c[0] << " accepted, " << c[1] << " rejected\n";
  std::cout << "  total " << total << " mutants, " << rejected << " rejected (" << reader_level
            << " of them past the container and JSON syntax)\n";
  EXPECT_GE(total, 10000);
  EXPECT_EQ(failures, 0);
  // Most mutants are caught, and a good share of the rejections come from the reader's own
  // field checks, not only from the JSON parser or the container.
  EXPECT_GT(rejected, total / 2);
  EXPECT_GT(reader_level, total / 4);
}

}  // namespace
}  // namespace clebsch
