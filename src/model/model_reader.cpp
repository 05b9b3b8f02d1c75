// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The model reader's entry points and top level (potentials/FORMAT.md sections 1, 2, 3 and 8):
// format name and version, units, species, cutoffs, graph and spherical-harmonics conventions,
// then the architecture section (model_reader_mace.cpp, model_reader_nequip.cpp), and finally the
// check that every tensor of the file was referenced. Also the JSON cursor (Node) that every
// part of the reader uses to turn type and range problems into messages with a JSON path.
#include "clebsch/model/model_reader.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>

#include "clebsch/model/model_reader_detail.h"
#include "clebsch/support/error.h"

namespace clebsch {
namespace model_reader {
namespace {

std::string join_path(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

const char* json_type(const nlohmann::json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number_integer()) return "an integer";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "an array";
  if (j.is_object()) return "an object";
  return "a binary value";
}

}  // namespace

std::string number_text(double x) {
  std::ostringstream os;
  os.precision(17);
  os << x;
  return os.str();
}

// ---------------------------------------------------------------------------------------------
// Node

void Node::fail(const std::string& what) const {
  throw ModelFormatError("model file \"" + ctx_->file.origin() + "\": " +
                         (path_.empty() ? std::string("model_json") : path_) + ": " + what);
}

std::string Node::found() const {
  // Parsed JSON holds valid UTF-8, but replace rather than throw in any case.
  std::string text = value_->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  constexpr std::size_t kMax = 80;
  if (text.size() > kMax) text = text.substr(0, kMax) + "...";
  return text;
}

Node Node::at(const char* key) const {
  if (!value_->is_object()) fail(std::string("expected an object, found ") + found());
  auto it = value_->find(key);
  if (it == value_->end()) fail(std::string("missing required field \"") + key + "\"");
  return Node(*ctx_, *it, join_path(path_, key));
}

std::optional<Node> Node::optional(const char* key) const {
  if (!value_->is_object()) fail(std::string("expected an object, found ") + found());
  auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return std::nullopt;
  return Node(*ctx_, *it, join_path(path_, key));
}

Node Node::object(const char* key) const {
  Node n = at(key);
  if (!n.json().is_object())
    n.fail(std::string("expected an object, found ") + json_type(n.json()) + " " + n.found());
  return n;
}

std::size_t Node::size() const {
  if (!value_->is_array())
    fail(std::string("expected an array, found ") + json_type(*value_) + " " + found());
  return value_->size();
}

Node Node::operator[](std::size_t i) const {
  if (!value_->is_array() || i >= value_->size())
    fail("element " + std::to_string(i) + " does not exist");
  return Node(*ctx_, (*value_)[i], path_ + "[" + std::to_string(i) + "]");
}

std::int64_t Node::integer(std::int64_t lo, std::int64_t hi) const {
  if (!value_->is_number_integer())
    fail(std::string("expected an integer, found ") + json_type(*value_) + " " + found());
  std::int64_t v = 0;
  if (value_->is_number_unsigned()) {
    const std::uint64_t u = value_->get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail("expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
           "], found " + found());
    v = static_cast<std::int64_t>(u);
  } else {
    v = value_->get<std::int64_t>();
  }
  if (v < lo || v > hi)
    fail("expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], found " +
         std::to_string(v));
  return v;
}

double Node::number() const {
  if (!value_->is_number())
    fail(std::string("expected a number, found ") + json_type(*value_) + " " + found());
  const double v = value_->get<double>();
  if (!std::isfinite(v)) fail("expected a finite number, found " + found());
  return v;
}

double Node::positive() const {
  const double v = number();
  if (!(v > 0)) fail("expected a number > 0, found " + number_text(v));
  return v;
}

bool Node::boolean() const {
  if (!value_->is_boolean())
    fail(std::string("expected true or false, found ") + json_type(*value_) + " " + found());
  return value_->get<bool>();
}

std::string Node::string() const {
  if (!value_->is_string())
    fail(std::string("expected a string, found ") + json_type(*value_) + " " + found());
  return value_->get<std::string>();
}

std::string Node::one_of(std::initializer_list<const char*> choices) const {
  const std::string s = string();
  std::string list;
  for (const char* c : choices) {
    if (s == c) return s;
    list += (list.empty() ? "\"" : ", \"") + std::string(c) + "\"";
  }
  fail("expected one of " + list + ", found " + found());
}

Irreps Node::irreps() const {
  const std::string text = string();
  Irreps irreps;
  try {
    irreps = Irreps(text);
  } catch (const Error& e) {
    fail(std::string("not a valid irreps string: ") + e.what());
  }
  if (irreps_dim(irreps) > kMaxIrrepsDim)
    fail("irreps \"" + text + "\" have dimension " + std::to_string(irreps_dim(irreps)) +
         ", more than the supported " + std::to_string(kMaxIrrepsDim));
  return irreps;
}

std::vector<double> Node::numbers(std::int64_t n) const {
  const std::size_t len = size();
  if (n >= 0 && len != static_cast<std::size_t>(n))
    fail("expected " + std::to_string(n) + " numbers, found " + std::to_string(len));
  std::vector<double> out;
  out.reserve(len);
  for (std::size_t i = 0; i < len; ++i) out.push_back((*this)[i].number());
  return out;
}

std::vector<int> Node::integers(int lo, int hi) const {
  const std::size_t len = size();
  std::vector<int> out;
  out.reserve(len);
  for (std::size_t i = 0; i < len; ++i) out.push_back((*this)[i].index(lo, hi));
  return out;
}

std::vector<std::int64_t> Node::tensor_shape() const {
  if (!value_->is_object() || !value_->contains("tensor"))
    fail("expected a tensor reference {\"tensor\": name, \"shape\": [...]}, found " + found());
  const Node name_node = at("tensor");
  const std::string name = name_node.string();
  const Node shape_node = at("shape");
  std::vector<std::int64_t> shape;
  for (std::size_t i = 0; i < shape_node.size(); ++i)
    shape.push_back(shape_node[i].integer(0, std::int64_t(1) << 48));
  const SafetensorsFile& file = ctx_->file;
  if (!file.has(name))
    name_node.fail("references tensor \"" + name + "\", which the file does not hold");
  const TensorView& t = file.tensor(name);
  if (t.dtype != DType::kF64)
    name_node.fail("tensor \"" + name + "\" is stored as " + to_string(t.dtype) +
                   "; model files store every tensor as F64");
  if (t.shape != shape)
    shape_node.fail("is " + shape_text(shape) + " but tensor \"" + name + "\" has shape " +
                    shape_text(t.shape) + " in the file");
  if (t.numel() == 0) shape_node.fail("tensor \"" + name + "\" is empty");
  return shape;
}

std::vector<double> Node::tensor(const std::vector<std::int64_t>& expected,
                                 const std::string& why) const {
  const std::vector<std::int64_t> shape = tensor_shape();
  if (shape != expected)
    at("shape").fail("is " + shape_text(shape) + ", expected " + shape_text(expected) +
                     (why.empty() ? std::string() : " (" + why + ")"));
  const std::string name = at("tensor").string();
  std::vector<double> values = ctx_->file.to_double(name);
  for (std::size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]))
      fail("tensor \"" + name + "\" holds the non-finite value " + number_text(values[i]) +
           " at flat index " + std::to_string(i));
  ctx_->referenced.insert(name);
  return values;
}

// ---------------------------------------------------------------------------------------------
// Helpers

std::string shape_text(const std::vector<std::int64_t>& shape) { return shape_string(shape); }

std::int64_t irreps_dim(const Irreps& irreps) {
  std::int64_t d = 0;
  for (const MulIrrep& m : irreps) d += std::int64_t(m.mul) * m.ir.dim();
  return d;
}

bool same_layout(const Irreps& a, const Irreps& b) { return a.simplify() == b.simplify(); }

void expect_layout(const Node& node, const Irreps& found, const Irreps& expected,
                   const std::string& expected_what) {
  if (!same_layout(found, expected))
    node.fail("is \"" + found.str() + "\", which does not match " + expected_what + " \"" +
              expected.str() + "\"");
}

void expect_irreps(const Node& node, const Irreps& found, const Irreps& expected,
                   const std::string& expected_what) {
  if (found != expected)
    node.fail("is \"" + found.str() + "\", expected " + expected_what + " \"" + expected.str() +
              "\"");
}

Irreps scalars(int n) { return Irreps(std::vector<MulIrrep>{{n, Irrep(0, 1)}}); }

// ---------------------------------------------------------------------------------------------
// Top level

namespace {

// Element symbols by atomic number (0: unknown), as ase.data.chemical_symbols.
constexpr std::array<const char*, 119> kElements = {
    "X",  "H",  "He", "Li", "Be", "B",  "C",  "N",  "O",  "F",  "Ne", "Na", "Mg", "Al", "Si",
    "P",  "S",  "Cl", "Ar", "K",  "Ca", "Sc", "Ti", "V",  "Cr", "Mn", "Fe", "Co", "Ni", "Cu",
    "Zn", "Ga", "Ge", "As", "Se", "Br", "Kr", "Rb", "Sr", "Y",  "Zr", "Nb", "Mo", "Tc", "Ru",
    "Rh", "Pd", "Ag", "Cd", "In", "Sn", "Sb", "Te", "I",  "Xe", "Cs", "Ba", "La", "Ce", "Pr",
    "Nd", "Pm", "Sm", "Eu", "Gd", "Tb", "Dy", "Ho", "Er", "Tm", "Yb", "Lu", "Hf", "Ta", "W",
    "Re", "Os", "Ir", "Pt", "Au", "Hg", "Tl", "Pb", "Bi", "Po", "At", "Rn", "Fr", "Ra", "Ac",
    "Th", "Pa", "U",  "Np", "Pu", "Am", "Cm", "Bk", "Cf", "Es", "Fm", "Md", "No", "Lr", "Rf",
    "Db", "Sg", "Bh", "Hs", "Mt", "Ds", "Rg", "Cn", "Nh", "Fl", "Mc", "Lv", "Ts", "Og"};

// "MAJOR.MINOR" with short digit runs; false on anything else.
bool parse_version(const std::string& text, int* major, int* minor) {
  const std::size_t dot = text.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == text.size()) return false;
  const std::string a = text.substr(0, dot), b = text.substr(dot + 1);
  for (const std::string* s : {&a, &b}) {
    if (s->size() > 6) return false;
    for (char c : *s)
      if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  *major = std::stoi(a);
  *minor = std::stoi(b);
  return true;
}

// The container-level check, made before the JSON is parsed so that a file of a future major
// version is rejected for what it is rather than for whatever its JSON no longer holds.
std::string check_metadata(const SafetensorsFile& file) {
  const std::string where = "model file \"" + file.origin() + "\"";
  const auto& meta = file.metadata();
  auto it = meta.find("format");
  if (it == meta.end())
    throw ModelFormatError(where +
                           " is not a Clebsch model file: its safetensors __metadata__ "
                           "has no \"format\" entry");
  if (it->second != kModelFormatName)
    throw ModelFormatError(where + " is not a Clebsch model file: __metadata__.format is \"" +
                           it->second + "\", expected \"" + kModelFormatName + "\"");
  it = meta.find("format_version");
  if (it == meta.end())
    throw ModelFormatError(where + ": __metadata__ has no \"format_version\" entry");
  int major = 0, minor = 0;
  if (!parse_version(it->second, &major, &minor))
    throw ModelFormatError(where + ": __metadata__.format_version is \"" + it->second +
                           "\", expected \"MAJOR.MINOR\"");
  if (major != kModelFormatMajor)
    throw ModelFormatError(where + " has format_version " + it->second +
                           ", this reader understands " + std::to_string(kModelFormatMajor) +
                           ".x (" + kModelFormatVersion + ")");
  if (meta.find("model_json") == meta.end())
    throw ModelFormatError(where + ": __metadata__ has no \"model_json\" entry");
  return it->second;
}

void parse_species(const Node& root, model::Model& m) {
  const Node list = root.at("species");
  const std::size_t n = list.size();
  if (n == 0) list.fail("the model has no species");
  if (n > 10000) list.fail("implausibly many species: " + std::to_string(n));
  std::set<std::string> symbols;
  for (std::size_t i = 0; i < n; ++i) {
    const Node s = list[i];
    model::Species sp;
    s.at("index").index(static_cast<int>(i), static_cast<int>(i));
    sp.Z = s.at("Z").index(0, 118);
    const Node sym = s.at("symbol");
    sp.symbol = sym.string();
    if (sp.symbol.empty()) sym.fail("is empty");
    if (sp.Z > 0 && sp.symbol != kElements[sp.Z])
      sym.fail("is \"" + sp.symbol + "\", but Z = " + std::to_string(sp.Z) + " is " +
               kElements[sp.Z]);
    if (!symbols.insert(sp.symbol).second)
      sym.fail("\"" + sp.symbol +
               "\" names two species; symbols must be unique (LAMMPS maps "
               "elements to species by symbol)");
    if (auto t = s.optional("type_name")) sp.type_name = t->string();
    m.species.push_back(std::move(sp));
  }
}

void parse_cutoffs(const Node& root, model::Model& m) {
  m.r_max = root.at("r_max").positive();
  const int S = m.num_species();
  const Node pairs = root.at("r_max_pairs");
  if (pairs.size() != static_cast<std::size_t>(S))
    pairs.fail("has " + std::to_string(pairs.size()) + " rows, expected one per species (" +
               std::to_string(S) + ")");
  for (int i = 0; i < S; ++i) {
    const Node row = pairs[i];
    if (row.size() != static_cast<std::size_t>(S))
      row.fail("has " + std::to_string(row.size()) + " entries, expected " + std::to_string(S));
    for (int j = 0; j < S; ++j) {
      const Node e = row[j];
      const double r = e.positive();
      // The exporter derives NequIP's pair cutoffs as 1/(1/r), a few ulps off r_max.
      if (r > m.r_max * (1 + 1e-12))
        e.fail("is " + number_text(r) + ", larger than r_max = " + number_text(m.r_max));
      m.r_max_pairs.push_back(r);
    }
  }
}

void parse_spherical_harmonics(const Node& root, model::Model& m) {
  const Node sh = root.object("spherical_harmonics");
  m.sh_lmax = sh.at("lmax").index(0, kMaxL);
  const Node irreps = sh.at("irreps");
  m.sh_irreps = irreps.irreps();
  // 1x0e+1x1o+1x2e+... (or all-even labels, which change nothing numerically: FORMAT.md 3.3).
  bool natural = true, even = true;
  bool ok = static_cast<int>(m.sh_irreps.size()) == m.sh_lmax + 1;
  for (std::size_t l = 0; ok && l < m.sh_irreps.size(); ++l) {
    const MulIrrep& b = m.sh_irreps[l];
    ok = b.mul == 1 && b.ir.l() == static_cast<int>(l);
    natural = natural && b.ir.p() == (l % 2 ? -1 : 1);
    even = even && b.ir.p() == 1;
  }
  if (!ok || !(natural || even))
    irreps.fail("is \"" + m.sh_irreps.str() + "\", expected the spherical harmonics l = 0.." +
                std::to_string(m.sh_lmax) + " (lmax), e.g. \"" +
                Irreps::spherical_harmonics(m.sh_lmax).str() + "\"");
  if (!sh.at("normalize").boolean()) sh.at("normalize").fail("must be true (FORMAT.md 3.3)");
  sh.at("normalization").one_of({"component"});
}

model::Model parse_root(const SafetensorsFile& file, Context& ctx, const nlohmann::json& json,
                        const std::string& meta_version) {
  const Node root(ctx, json, "");
  if (!json.is_object()) root.fail("is not a JSON object");
  model::Model m;
  root.at("format").one_of({kModelFormatName});
  const Node version = root.at("format_version");
  m.format_version = version.string();
  if (m.format_version != meta_version)
    version.fail("is \"" + m.format_version + "\" but __metadata__.format_version is \"" +
                 meta_version + "\"");

  const Node source = root.object("source");
  m.source_sha256 = source.at("sha256").string();

  const Node units = root.object("units");
  const std::pair<const char*, const char*> metal[] = {{"energy", "eV"},
                                                       {"length", "Angstrom"},
                                                       {"force", "eV/Angstrom"},
                                                       {"virial", "eV"},
                                                       {"stress", "eV/Angstrom^3"}};
  for (const auto& [key, unit] : metal) units.at(key).one_of({unit});

  m.model_dtype = root.at("model_dtype").one_of({"float32", "float64"});
  root.at("tensor_dtype").one_of({"float64"});

  parse_species(root, m);
  ctx.num_species = m.num_species();
  parse_cutoffs(root, m);

  const Node graph = root.object("graph");
  m.edge_vector =
      graph.at("edge_vector").one_of({"centre_minus_neighbour", "neighbour_minus_centre"}) ==
              "centre_minus_neighbour"
          ? model::EdgeVector::kCentreMinusNeighbour
          : model::EdgeVector::kNeighbourMinusCentre;
  parse_spherical_harmonics(root, m);

  const std::string arch = root.at("arch").one_of({"mace", "nequip"});
  if (arch == "mace") {
    m.arch = model::Arch::kMace;
    // MACE has one cutoff; a smaller pair cutoff would silently drop edges the model sees.
    const Node pairs = root.at("r_max_pairs");
    for (int i = 0; i < m.num_species(); ++i)
      for (int j = 0; j < m.num_species(); ++j) {
        const double r = m.r_max_pairs[i * m.num_species() + j];
        if (std::abs(r - m.r_max) > 1e-12 * m.r_max)
          pairs[i][j].fail("is " + number_text(r) +
                           ", but a MACE model has the one cutoff r_max = " + number_text(m.r_max));
      }
    m.mace = parse_mace(root.object("mace"), m);
  } else {
    m.arch = model::Arch::kNequip;
    m.nequip = parse_nequip(root.object("nequip"), m);
  }

  // FORMAT.md 1: every tensor of the file is referenced; a stray one means the JSON and the
  // tensors do not belong together.
  for (const std::string& name : file.names()) {
    if (!ctx.referenced.count(name))
      throw ModelFormatError("model file \"" + file.origin() + "\": tensor \"" + name +
                             "\" is not referenced by model_json");
    m.num_values += static_cast<std::size_t>(file.tensor(name).numel());
  }
  return m;
}

}  // namespace
}  // namespace model_reader

model::Model parse_model(const SafetensorsFile& file) {
  const std::string where = "model file \"" + file.origin() + "\"";
  const std::string meta_version = model_reader::check_metadata(file);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(file.metadata("model_json"));
  } catch (const nlohmann::json::exception& e) {
    throw ModelFormatError(where + ": __metadata__.model_json is not valid JSON (" + e.what() +
                           ")");
  }
  model_reader::Context ctx{file, {}, 0};
  try {
    return model_reader::parse_root(file, ctx, json, meta_version);
  } catch (const ModelFormatError&) {
    throw;
  } catch (const nlohmann::json::exception& e) {
    // Every access is type-checked first; this is a safety net that still names the file.
    throw ModelFormatError(where + ": malformed model_json (" + e.what() + ")");
  } catch (const Error& e) {
    // Likewise for a library component that rejects a value the reader did not pre-check.
    throw ModelFormatError(where + ": " + e.what());
  }
}

model::Model read_model(const std::string& path) {
  return parse_model(SafetensorsFile::read(path));
}

}  // namespace clebsch
