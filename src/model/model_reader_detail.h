// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Internals of the model reader (model_reader.h), shared by its translation units: a cursor over
// the model JSON that knows its JSON path and turns every type or range problem into a
// ModelFormatError naming the file, the path and the value found, the tensor-reference decoder,
// and the per-op and per-architecture parsers. Not part of the library's interface.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "clebsch/model/model.h"
#include "clebsch/model/safetensors.h"
#include "clebsch/o3/irreps.h"

namespace clebsch::model_reader {

/// Largest total dimension of an irreps string the reader accepts. Real models are in the
/// thousands; the bound keeps every dimension, offset and path size of a corrupt file far from
/// int overflow (three multiplicities multiply to < 2^60).
inline constexpr std::int64_t kMaxIrrepsDim = std::int64_t(1) << 20;
/// Largest weight count of one op (and the largest MLP width).
inline constexpr std::int64_t kMaxWeights = std::int64_t(1) << 30;

/// What every cursor of one file shares.
struct Context {
  const SafetensorsFile& file;
  /// Names of the tensors referenced so far (every tensor of the file must be).
  std::set<std::string> referenced;
  /// Number of model species (known once `species` is parsed).
  int num_species = 0;
};

/// A position in the model JSON: the value and its JSON path, e.g.
/// `mace.interactions[1].conv_tp.instructions[3].i_in1`. Every accessor checks the JSON type
/// (and range) before reading, so malformed input can only end in fail().
class Node {
 public:
  Node(Context& ctx, const nlohmann::json& value, std::string path)
      : ctx_(&ctx), value_(&value), path_(std::move(path)) {}

  const std::string& path() const { return path_; }
  Context& ctx() const { return *ctx_; }
  const nlohmann::json& json() const { return *value_; }

  /// Throws ModelFormatError "model file "<origin>": <path>: <what>".
  [[noreturn]] void fail(const std::string& what) const;
  /// The value as short JSON text for messages (long values are cut).
  std::string found() const;

  // --- structure ---
  bool is_null() const { return value_->is_null(); }
  /// Member @p key, which must exist (its value may be null). Fails if this is not an object.
  Node at(const char* key) const;
  /// Member @p key, or nullopt when it is absent or null.
  std::optional<Node> optional(const char* key) const;
  /// Member @p key, which must be an object.
  Node object(const char* key) const;
  /// Array length. Fails if this is not an array.
  std::size_t size() const;
  /// Element @p i of an array (i < size()).
  Node operator[](std::size_t i) const;

  // --- values ---
  /// An integer in [lo, hi]; a JSON float (even 2.0) is not an integer.
  std::int64_t integer(std::int64_t lo, std::int64_t hi) const;
  /// int-valued integer() with a range.
  int index(int lo, int hi) const { return static_cast<int>(integer(lo, hi)); }
  /// A finite number (integer or float).
  double number() const;
  /// A finite number > 0.
  double positive() const;
  bool boolean() const;
  std::string string() const;
  /// A string equal to one of @p choices.
  std::string one_of(std::initializer_list<const char*> choices) const;
  /// An e3nn irreps string, parsed, with total dimension <= kMaxIrrepsDim.
  Irreps irreps() const;
  /// An array of exactly @p n finite numbers (any length when n < 0).
  std::vector<double> numbers(std::int64_t n) const;
  /// An array of integers in [lo, hi].
  std::vector<int> integers(int lo, int hi) const;

  // --- tensor references {"tensor": name, "shape": [...]} ---
  /// The reference's shape, after checking that the tensor exists in the file, is F64, is not
  /// empty and has exactly that shape. Use it when the op does not fix every dimension.
  std::vector<std::int64_t> tensor_shape() const;
  /// The tensor's values, after tensor_shape()'s checks, that its shape equals @p expected
  /// (why names the rule that implies it), and that every value is finite. Marks it referenced.
  std::vector<double> tensor(const std::vector<std::int64_t>& expected,
                             const std::string& why = "") const;

 private:
  Context* ctx_;
  const nlohmann::json* value_;
  std::string path_;
};

/// "[2, 3]".
std::string shape_text(const std::vector<std::int64_t>& shape);
/// Total dimension with 64-bit arithmetic (irreps from Node::irreps() never overflow int).
std::int64_t irreps_dim(const Irreps& irreps);
/// True when the two irreps have the same memory layout (equal after simplify(), which merges
/// adjacent equal irreps and drops zero multiplicities): what a consumer of the features sees.
bool same_layout(const Irreps& a, const Irreps& b);
/// Fails at @p node unless @p found has the layout of @p expected; the message names
/// @p expected_what (e.g. "mace.interactions[0].linear_up.irreps_out").
void expect_layout(const Node& node, const Irreps& found, const Irreps& expected,
                   const std::string& expected_what);
/// Same, but the block lists must be identical (not only the layout).
void expect_irreps(const Node& node, const Irreps& found, const Irreps& expected,
                   const std::string& expected_what);
/// "<n>x0e" (the one-hot species or a scalar embedding).
Irreps scalars(int n);
/// @p x with 17 significant digits (every float64 printed back exactly), for messages.
std::string number_text(double x);
/// An architecture section's layer count (@p count_key, 1..1000), after checking that it names its
/// model class.
int architecture_depth(const Node& arch, const char* count_key);
/// Fails unless the array @p list has @p count elements ("has N <items>, but <count_key> is M").
void expect_count(const Node& list, int count, const char* items, const char* count_key);

// --- ops (model_reader_ops.cpp); each checks the node's "op" where the format has one ---

std::optional<model::Activation> parse_activation(const Node& node);
model::Linear parse_linear(const Node& node);
/// @param mode every instruction must have this connection mode (uvu for convolutions, uvw for
///   self-connections), as model.h promises the engines.
/// @param external true: weight_source "external" (per edge), else "internal".
model::TensorProduct parse_tensor_product(const Node& node, const char* mode, bool external);
/// @param dim_in the width the first layer must read.
model::Mlp parse_mlp(const Node& node, int dim_in, bool allow_layer_norm = false);
/// A linear that may carry a "bias" [dim(irreps_out)] (readouts of the newer MACE blocks).
model::Linear parse_linear_with_bias(const Node& node);
model::ScalarActivation parse_scalar_activation(const Node& node);
model::Gate parse_gate(const Node& node);
/// The symmetric contraction of MACE's products[t] (the fields inline in products[t]).
model::SymmetricContraction parse_symmetric_contraction(const Node& node);

// --- architectures ---

/// @param top the top-level fields already parsed (species, r_max, spherical harmonics).
model::Mace parse_mace(const Node& node, const model::Model& top);
model::Nequip parse_nequip(const Node& node, const model::Model& top);
/// The residual_nonlinear parts of a MACE interaction (model_reader_mace_arch.cpp).
model::MaceInteraction::NonLinear parse_nonlinear_interaction(const Node& n,
                                                              model::MaceInteraction& I,
                                                              const model::Model& top,
                                                              int num_basis);
/// The per-structure embedding of a MACE section (null: none).
std::optional<model::MaceEmbedding> parse_mace_embedding(const Node& node, const Irreps& h0);
/// The embedding's readout (null: none), C x 0e of h0 to one energy.
std::optional<model::Linear> parse_embedding_readout(const Node& node, const Irreps& h0);
/// The linear_mid / linear_2 of a nonlinear_bias readout.
void parse_bias_readout(const Node& n, model::MaceReadout& R, const Irreps& h,
                        const std::string& h_what);

}  // namespace clebsch::model_reader
