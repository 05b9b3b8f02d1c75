// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The model reader's op parsers (potentials/FORMAT.md section 4): linear, tensor_product, mlp,
// activation, gate and MACE's symmetric contraction. Each checks its own fields against each
// other (indices in range, path shapes and weight offsets as the op lays them out, weight tensor
// shapes, output irreps as e3nn derives them) and, where a library descriptor exists, builds it
// from the file so that the engines' own construction cannot fail later: clebsch::Linear,
// clebsch::TensorProduct (with the exported couplings) and clebsch::Gate (whose gather indices
// must equal the exported ones). Consistency between ops is checked by the architecture parsers.
#include <algorithm>
#include <cmath>
#include <limits>

#include "clebsch/model/model_reader_detail.h"
#include "clebsch/model/model_reader_linear.h"
#include "clebsch/nn/activation.h"
#include "clebsch/nn/gate.h"
#include "clebsch/o3/clebsch_gordan.h"
#include "clebsch/o3/tensor_product.h"
#include "clebsch/support/error.h"

namespace clebsch::model_reader {
namespace {

void check_op(const Node& node, const char* op) { node.at("op").one_of({op}); }

// A block index into @p irreps, named @p irreps_field in the message.
int block_index(const Node& node, const Irreps& irreps, const char* irreps_field) {
  const std::int64_t v = node.integer(std::numeric_limits<std::int64_t>::min(),
                                      std::numeric_limits<std::int64_t>::max());
  if (v < 0 || v >= static_cast<std::int64_t>(irreps.size()))
    node.fail("is " + std::to_string(v) + ", out of range: " + irreps_field + " \"" + irreps.str() +
              "\" has " + std::to_string(irreps.size()) + " blocks");
  return static_cast<int>(v);
}

// An exported [d0, d1, ...] that must equal @p expected; the message says what implies it.
void expect_shape(const Node& node, const std::vector<std::int64_t>& expected,
                  const std::string& why) {
  std::vector<std::int64_t> found;
  for (std::size_t i = 0; i < node.size(); ++i)
    found.push_back(node[i].integer(0, std::int64_t(1) << 48));
  if (found != expected)
    node.fail("is " + shape_text(found) + ", expected " + shape_text(expected) + " (" + why + ")");
}

// Parity of phi under x -> -x: +1 even, -1 odd, 0 neither (e3nn's nn.Activation measures it).
int parity(model::Activation::Kind kind) {
  switch (kind) {
    case model::Activation::Kind::kTanh:
      return -1;
    case model::Activation::Kind::kAbs:
      return 1;
    case model::Activation::Kind::kSilu:
    case model::Activation::Kind::kSigmoid:
    case model::Activation::Kind::kSsp:
    case model::Activation::Kind::kGelu:
    case model::Activation::Kind::kMish:
      return 0;
  }
  return 0;
}

// The acts of an activation list (one per block of @p irreps, scalars only), and e3nn's output
// irreps: an even scalar stays even; an odd one takes the activation's parity, and an activation
// that is neither even nor odd cannot act on it.
Irreps activation_output(const Node& acts_node, const Irreps& irreps,
                         std::vector<std::optional<model::Activation>>* acts) {
  if (acts_node.size() != irreps.size())
    acts_node.fail("has " + std::to_string(acts_node.size()) +
                   " entries, expected one per block "
                   "of \"" +
                   irreps.str() + "\" (" + std::to_string(irreps.size()) + ")");
  std::vector<MulIrrep> out;
  for (std::size_t b = 0; b < irreps.size(); ++b) {
    const Node a = acts_node[b];
    std::optional<model::Activation> act = parse_activation(a);
    const MulIrrep& in = irreps[b];
    if (!act) {
      out.push_back(in);
    } else {
      if (in.ir.l() != 0)
        a.fail("an activation on the non-scalar block " + std::to_string(in.mul) + "x" +
               in.ir.str());
      int p = in.ir.p();
      if (p == -1) {
        p = parity(act->kind);
        if (p == 0)
          a.fail("activation \"" + act->name +
                 "\" is neither even nor odd and cannot act on the "
                 "odd scalars " +
                 std::to_string(in.mul) + "x0o");
      }
      out.push_back({in.mul, Irrep(0, p)});
    }
    acts->push_back(std::move(act));
  }
  return Irreps(out);
}

// e3nn's ElementwiseTensorProduct(a, b) output irreps for scalar b: both simplified, blocks split
// where the other side splits, each pair (mul, l_a, p_a) x (mul, 0, p_b) -> (mul, l_a, p_a p_b).
// The caller guarantees a.num_irreps() == b.num_irreps().
Irreps elementwise_output(const Irreps& a_in, const Irreps& b_in) {
  const Irreps as = a_in.simplify(), bs = b_in.simplify();
  std::vector<MulIrrep> a(as.begin(), as.end()), b(bs.begin(), bs.end());
  std::vector<MulIrrep> out;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i].mul < b[i].mul) {
      b.insert(b.begin() + i + 1, MulIrrep{b[i].mul - a[i].mul, b[i].ir});
      b[i].mul = a[i].mul;
    } else if (b[i].mul < a[i].mul) {
      a.insert(a.begin() + i + 1, MulIrrep{a[i].mul - b[i].mul, a[i].ir});
      a[i].mul = b[i].mul;
    }
    out.push_back({a[i].mul, Irrep(a[i].ir.l(), a[i].ir.p() * b[i].ir.p())});
  }
  return Irreps(out);
}

// Every coupling of an equivariant bilinear map (l1, l2) -> l3 is a multiple of wigner_3j (the
// space of intertwiners is one-dimensional), and the exporter probed it as path_weight times the
// exporting e3nn's wigner_3j, whose sign may differ from ours (e3nn 0.4.4 vs 0.6). So the
// coupling must be c * wigner_3j with |c| = path_weight. Tolerances allow float32-built modules
// (their constants carry float32 rounding); corruption is many orders larger.
void check_coupling(const Node& cg_node, const std::vector<double>& P, int l1, int l2, int l3,
                    double path_weight) {
  const std::vector<double>& C = wigner_3j(l1, l2, l3);
  double c = 0, pmax = 0;
  for (std::size_t i = 0; i < C.size(); ++i) c += P[i] * C[i];  // ||C||_F = 1
  double dev = 0;
  for (std::size_t i = 0; i < C.size(); ++i) {
    dev = std::max(dev, std::abs(P[i] - c * C[i]));
    pmax = std::max(pmax, std::abs(P[i]));
  }
  constexpr double kTol = 1e-5;
  const std::string triple =
      "(" + std::to_string(l1) + ", " + std::to_string(l2) + ", " + std::to_string(l3) + ")";
  if (dev > kTol * std::max(1.0, pmax))
    cg_node.fail("the coupling is not a multiple of wigner_3j" + triple + " (max deviation " +
                 number_text(dev) + "), so it is not equivariant");
  if (std::abs(std::abs(c) - path_weight) > kTol * std::max(1.0, path_weight))
    cg_node.fail("the coupling is " + number_text(c) + " * wigner_3j" + triple +
                 ", but path_weight is " + number_text(path_weight) +
                 " (the coupling includes it)");
}

}  // namespace

std::optional<model::Activation> parse_activation(const Node& node) {
  if (node.is_null()) return std::nullopt;
  model::Activation a;
  a.name = node.at("name").one_of({"silu", "tanh", "sigmoid", "abs", "ssp", "gelu", "mish"});
  using K = model::Activation::Kind;
  a.kind = a.name == "silu"      ? K::kSilu
           : a.name == "tanh"    ? K::kTanh
           : a.name == "sigmoid" ? K::kSigmoid
           : a.name == "abs"     ? K::kAbs
           : a.name == "gelu"    ? K::kGelu
           : a.name == "mish"    ? K::kMish
                                 : K::kSsp;
  a.cst = node.at("cst").number();
  return a;
}

model::Linear parse_linear(const Node& node) {
  check_op(node, "linear");
  model::Linear lin;
  lin.irreps_in = node.at("irreps_in").irreps();
  lin.irreps_out = node.at("irreps_out").irreps();
  const Node list = node.at("instructions");
  std::int64_t offset = 0;
  std::vector<int> i_in, i_out;
  std::vector<double> path_weight;
  std::vector<std::int64_t> offsets;
  for (std::size_t n = 0; n < list.size(); ++n) {
    const Node e = list[n];
    model::Linear::Instruction ins{};
    ins.i_in = block_index(e.at("i_in"), lin.irreps_in, "irreps_in");
    ins.i_out = block_index(e.at("i_out"), lin.irreps_out, "irreps_out");
    const MulIrrep &a = lin.irreps_in[ins.i_in], &b = lin.irreps_out[ins.i_out];
    if (a.ir != b.ir)
      e.fail("joins input block " + std::to_string(ins.i_in) + " (" + a.ir.str() +
             ") to output block " + std::to_string(ins.i_out) + " (" + b.ir.str() +
             "); a linear map only joins equal irreps");
    ins.mul_in = a.mul;
    ins.mul_out = b.mul;
    expect_shape(e.at("path_shape"), {a.mul, b.mul}, "[mul_in, mul_out] of the two blocks");
    ins.path_weight = e.at("path_weight").number();
    const Node off = e.at("weight_offset");
    if (off.integer(0, kMaxWeights) != offset)
      off.fail("is " + off.found() + ", expected " + std::to_string(offset) +
               " (the weight blocks follow each other in instruction order)");
    ins.weight_offset = static_cast<int>(offset);
    offset += std::int64_t(a.mul) * b.mul;
    if (offset > kMaxWeights) e.fail("the instructions need more than 2^30 weights");
    lin.instructions.push_back(ins);
    i_in.push_back(ins.i_in);
    i_out.push_back(ins.i_out);
    path_weight.push_back(ins.path_weight);
    offsets.push_back(ins.weight_offset);
  }
  const std::optional<Node> weight = node.optional("weight");
  if (offset == 0) {
    if (weight) weight->fail("must be null: the instructions have no weights");
  } else {
    if (!weight)
      node.at("weight").fail("is null, but the instructions need " + std::to_string(offset) +
                             " weights");
    lin.weight = weight->tensor({offset}, "the sum of mul_in*mul_out over the instructions");
  }
  // The engines build clebsch::Linear from this; it must accept it and agree on the layout.
  const std::string problem = linear_descriptor_problem(lin.irreps_in, lin.irreps_out, i_in, i_out,
                                                        path_weight, offsets, offset);
  if (!problem.empty()) node.fail(problem);
  if (auto b = node.optional("bias"))
    b->fail("is set, but this linear has no bias in the format (only readout linears do)");
  return lin;
}

model::Linear parse_linear_with_bias(const Node& node) {
  const nlohmann::json& j = node.json();
  if (j.is_object() && j.contains("bias") && !j["bias"].is_null()) {
    nlohmann::json copy = j;
    copy.erase("bias");
    // The weights from a copy without the bias (same path in messages), then the bias.
    model::Linear lin = parse_linear(Node(node.ctx(), copy, node.path()));
    lin.bias = node.at("bias").tensor({irreps_dim(lin.irreps_out)}, "[dim(irreps_out)]");
    return lin;
  }
  return parse_linear(node);
}

model::TensorProduct parse_tensor_product(const Node& node, const char* mode, bool external) {
  check_op(node, "tensor_product");
  const Irreps in1 = node.at("irreps_in1").irreps();
  const Irreps in2 = node.at("irreps_in2").irreps();
  const Irreps out = node.at("irreps_out").irreps();
  const Node source = node.at("weight_source");
  const bool is_external = source.one_of({"internal", "external"}) == "external";
  if (is_external != external)
    source.fail(std::string("is \"") + (is_external ? "external" : "internal") + "\", expected \"" +
                (external ? "external" : "internal") + "\" for this tensor product");
  const Node includes = node.at("cg_includes_path_weight");
  if (!includes.boolean())
    includes.fail("is false; format 1.x couplings always include the path weight");
  const Node numel_node = node.at("weight_numel");
  const std::int64_t weight_numel = numel_node.integer(0, kMaxWeights);

  const Node list = node.at("instructions");
  std::vector<Instruction> instructions;
  std::vector<std::vector<double>> couplings;
  std::vector<double> path_weights;
  std::int64_t offset = 0;
  for (std::size_t n = 0; n < list.size(); ++n) {
    const Node e = list[n];
    const int i1 = block_index(e.at("i_in1"), in1, "irreps_in1");
    const int i2 = block_index(e.at("i_in2"), in2, "irreps_in2");
    const int io = block_index(e.at("i_out"), out, "irreps_out");
    const Node mode_node = e.at("mode");
    const std::string m = mode_node.one_of({"uvw", "uvu", "uuu"});
    if (m != mode)
      mode_node.fail("is \"" + m + "\", expected \"" + mode + "\" for this tensor product");
    const Node hw = e.at("has_weight");
    if (!hw.boolean()) hw.fail("is false; format 1.x instructions always have weights");
    const Node pw = e.at("path_weight");
    const double path_weight = pw.number();
    if (path_weight < 0) pw.fail("is negative: " + number_text(path_weight));
    const std::int64_t m1 = in1[i1].mul, m2 = in2[i2].mul, mo = out[io].mul;
    std::vector<std::int64_t> shape;
    if (m == "uvw") shape = {m1, m2, mo};
    if (m == "uvu") shape = {m1, m2};
    if (m == "uuu") shape = {m1};
    expect_shape(e.at("path_shape"), shape, "the multiplicities of the blocks in mode " + m);
    std::int64_t size = 1;
    for (std::int64_t s : shape) size *= s;  // each < 2^20: no overflow
    const Node off = e.at("weight_offset");
    if (off.integer(0, kMaxWeights) != offset)
      off.fail("is " + off.found() + ", expected " + std::to_string(offset) +
               " (the weight blocks follow each other in instruction order)");
    offset += size;
    if (offset > kMaxWeights) e.fail("the instructions need more than 2^30 weights");
    const Node cg = e.at("cg");
    couplings.push_back(cg.tensor({in1[i1].ir.dim(), in2[i2].ir.dim(), out[io].ir.dim()},
                                  "[2l1+1, 2l2+1, 2l_out+1] of the instruction's irreps"));
    path_weights.push_back(path_weight);
    try {
      instructions.emplace_back(i1, i2, io, m, true, path_weight);
    } catch (const Error& err) {
      e.fail(err.what());
    }
  }
  if (offset != weight_numel)
    numel_node.fail("is " + std::to_string(weight_numel) + ", but the instructions use " +
                    std::to_string(offset) + " weights");

  model::TensorProduct tp;
  tp.external_weights = external;
  try {
    tp.descriptor = clebsch::TensorProduct::with_couplings(in1, in2, out, instructions, couplings,
                                                           /*shared_weights=*/!external);
  } catch (const Error& err) {
    list.fail(err.what());
  }
  for (std::size_t n = 0; n < instructions.size(); ++n) {
    const TensorProductPath& p = tp.descriptor.paths()[n];
    check_coupling(list[n].at("cg"), couplings[n], p.ir1.l(), p.ir2.l(), p.ir_out.l(),
                   path_weights[n]);
  }
  const std::optional<Node> weight = node.optional("weight");
  if (external || weight_numel == 0) {
    if (weight)
      weight->fail(external ? "must be null: the weights come per edge from another op"
                            : "must be null: the product has no weights");
  } else {
    if (!weight)
      node.at("weight").fail("is null, but an internal-weight product needs its " +
                             std::to_string(weight_numel) + " weights");
    tp.weight = weight->tensor({weight_numel}, "weight_numel");
  }
  return tp;
}

model::Mlp parse_mlp(const Node& node, int dim_in, bool allow_layer_norm) {
  check_op(node, "mlp");
  const Node layers = node.at("layers");
  if (layers.size() == 0) layers.fail("is empty; an mlp has at least one layer");
  model::Mlp mlp;
  int width = dim_in;
  for (std::size_t k = 0; k < layers.size(); ++k) {
    const Node L = layers[k];
    model::Mlp::Layer layer;
    const Node w = L.at("weight");
    const std::vector<std::int64_t> shape = w.tensor_shape();
    if (shape.size() != 2)
      w.at("shape").fail("is " + shape_text(shape) + ", expected [h_in, h_out]");
    if (shape[0] != width)
      w.at("shape").fail(
          "is " + shape_text(shape) + ", but the layer's input has width " + std::to_string(width) +
          (k == 0 ? std::string(" (the mlp's input)") : " (the previous layer's h_out)"));
    if (shape[1] > kMaxIrrepsDim)
      w.at("shape").fail("h_out " + std::to_string(shape[1]) + " is too large");
    layer.h_in = width;
    layer.h_out = static_cast<int>(shape[1]);
    layer.weight = w.tensor(shape);
    if (auto b = L.optional("bias")) layer.bias = b->tensor({shape[1]}, "[h_out]");
    layer.weight_scale = L.at("weight_scale").number();
    if (auto ln = L.optional("layer_norm")) {
      if (!allow_layer_norm) ln->fail("is set, but this mlp cannot have a LayerNorm");
      model::Mlp::Layer::LayerNorm norm;
      norm.weight = ln->at("weight").tensor({shape[1]}, "[h_out]");
      norm.bias = ln->at("bias").tensor({shape[1]}, "[h_out]");
      norm.eps = ln->at("eps").positive();
      layer.layer_norm = std::move(norm);
    }
    layer.activation = parse_activation(L.at("activation"));
    layer.out_scale = L.at("out_scale").number();
    width = layer.h_out;
    mlp.layers.push_back(std::move(layer));
  }
  return mlp;
}

model::ScalarActivation parse_scalar_activation(const Node& node) {
  check_op(node, "activation");
  model::ScalarActivation act;
  act.irreps_in = node.at("irreps_in").irreps();
  const Node out = node.at("irreps_out");
  act.irreps_out = out.irreps();
  const Irreps expected = activation_output(node.at("acts"), act.irreps_in, &act.acts);
  expect_layout(out, act.irreps_out, expected, "what the acts give for irreps_in,");
  return act;
}

model::Gate parse_gate(const Node& node) {
  check_op(node, "gate");
  model::Gate g;
  const Node in_node = node.at("irreps_in"), out_node = node.at("irreps_out");
  g.irreps_in = in_node.irreps();
  g.irreps_out = out_node.irreps();
  const Node sc_node = node.at("irreps_scalars"), gt_node = node.at("irreps_gates"),
             gd_node = node.at("irreps_gated");
  g.irreps_scalars = sc_node.irreps();
  g.irreps_gates = gt_node.irreps();
  g.irreps_gated = gd_node.irreps();
  auto only_scalars = [](const Node& n, const Irreps& irreps) {
    for (const MulIrrep& b : irreps)
      if (b.ir.l() != 0)
        n.fail("holds the non-scalar block " + std::to_string(b.mul) + "x" + b.ir.str());
  };
  only_scalars(sc_node, g.irreps_scalars);
  only_scalars(gt_node, g.irreps_gates);
  std::int64_t n_gates = 0, n_gated = 0;
  for (const MulIrrep& b : g.irreps_gates) n_gates += b.mul;
  for (const MulIrrep& b : g.irreps_gated) n_gated += b.mul;
  if (n_gates != n_gated)
    gt_node.fail("has " + std::to_string(n_gates) + " gates for " + std::to_string(n_gated) +
                 " gated irreps (irreps_gated \"" + g.irreps_gated.str() + "\"); one each");

  const Irreps scalars_out =
      activation_output(node.at("act_scalars"), g.irreps_scalars, &g.act_scalars);
  const Irreps gates_out = activation_output(node.at("act_gates"), g.irreps_gates, &g.act_gates);
  expect_layout(out_node, g.irreps_out, scalars_out + elementwise_output(g.irreps_gated, gates_out),
                "e3nn's Gate output for these scalars, gates, gated and acts,");

  const std::int64_t dim_in = irreps_dim(g.irreps_in);
  struct Part {
    const char* field;
    const Irreps& irreps;
    std::vector<int>* index;
  };
  const Part parts[] = {{"index_scalars", g.irreps_scalars, &g.index_scalars},
                        {"index_gates", g.irreps_gates, &g.index_gates},
                        {"index_gated", g.irreps_gated, &g.index_gated}};
  for (const Part& p : parts) {
    const Node list = node.at(p.field);
    if (static_cast<std::int64_t>(list.size()) != irreps_dim(p.irreps))
      list.fail("has " + std::to_string(list.size()) + " indices, expected the dimension of \"" +
                p.irreps.str() + "\" (" + std::to_string(irreps_dim(p.irreps)) + ")");
    *p.index = list.integers(0, static_cast<int>(dim_in) - 1);
  }

  // The gather e3nn's Gate does, from clebsch::Gate; activations do not change it, so any odd one
  // (which every scalar accepts) stands in for the exported ones.
  std::vector<int> gather;
  try {
    const ScaledActivation odd(ActivationKind::kTanh, 1.0);
    const Gate reference(
        g.irreps_scalars, std::vector<ScaledActivation>(g.irreps_scalars.size(), odd),
        g.irreps_gates, std::vector<ScaledActivation>(g.irreps_gates.size(), odd), g.irreps_gated);
    expect_layout(in_node, g.irreps_in, reference.irreps_in(),
                  "e3nn's Gate input for these scalars, gates and gated,");
    gather = reference.gather();
  } catch (const ModelFormatError&) {
    throw;
  } catch (const Error& e) {
    node.fail(std::string("rejected by clebsch::Gate: ") + e.what());
  }
  std::size_t q = 0;
  for (const Part& p : parts) {
    for (std::size_t i = 0; i < p.index->size(); ++i, ++q)
      if ((*p.index)[i] != gather.at(q))
        node.at(p.field)[i].fail("is " + std::to_string((*p.index)[i]) +
                                 ", but e3nn's Gate reads input " + std::to_string(gather.at(q)) +
                                 " there");
  }
  return g;
}

model::SymmetricContraction parse_symmetric_contraction(const Node& node) {
  model::SymmetricContraction sc;
  const Node in_node = node.at("irreps_in");
  sc.irreps_in = in_node.irreps();
  const Node out_node = node.at("irreps_out");
  sc.irreps_out = out_node.irreps();
  const Node c_node = node.at("num_features");
  sc.num_features = c_node.index(1, static_cast<int>(kMaxIrrepsDim));
  const int C = sc.num_features;
  int D = 0;
  for (const MulIrrep& b : sc.irreps_in) {
    if (b.mul != C)
      in_node.fail("has the block " + std::to_string(b.mul) + "x" + b.ir.str() +
                   "; every block must have num_features = " + std::to_string(C) + " channels");
    D += b.ir.dim();
  }
  const Node d_node = node.at("dim_a");
  sc.dim_a = d_node.index(0, static_cast<int>(kMaxIrrepsDim));
  if (sc.dim_a != D)
    d_node.fail("is " + std::to_string(sc.dim_a) + ", expected the sum of 2l+1 over irreps_in (" +
                std::to_string(D) + ")");
  const int S = node.ctx().num_species;
  const Node list = node.at("contractions");
  if (list.size() != sc.irreps_out.size())
    list.fail("has " + std::to_string(list.size()) +
              " entries, expected one per block of "
              "irreps_out \"" +
              sc.irreps_out.str() + "\"");
  for (std::size_t c = 0; c < list.size(); ++c) {
    const Node k = list[c];
    const MulIrrep& target = sc.irreps_out[c];
    model::SymmetricContraction::Contraction con{target.ir, target.mul, {}};
    const Node ir_node = k.at("irrep_out");
    const std::string ir_text = ir_node.string();
    bool same = false;
    try {
      same = Irrep(ir_text) == target.ir;
    } catch (const Error& e) {
      ir_node.fail(std::string("not an irrep: ") + e.what());
    }
    if (!same)
      ir_node.fail("is \"" + ir_text + "\", but irreps_out block " + std::to_string(c) + " is " +
                   target.ir.str());
    const int L = target.ir.l();
    const Node l_node = k.at("L");
    if (l_node.index(0, kMaxL) != L)
      l_node.fail("is " + l_node.found() + ", expected l of irrep_out = " + std::to_string(L));
    const Node mul_node = k.at("mul");
    if (mul_node.index(0, static_cast<int>(kMaxIrrepsDim)) != C || target.mul != C)
      mul_node.fail("is " + mul_node.found() + " and irreps_out block " + std::to_string(c) +
                    " has " + std::to_string(target.mul) +
                    " channels; both must equal num_features = " + std::to_string(C));
    const Node corr = k.at("correlation");
    const int correlation = corr.index(1, 16);
    const Node terms = k.at("terms");
    if (terms.size() != static_cast<std::size_t>(correlation))
      terms.fail("has " + std::to_string(terms.size()) +
                 " terms, expected one per nu = 1..correlation (" + std::to_string(correlation) +
                 ")");
    for (int t = 0; t < correlation; ++t) {
      const Node term = terms[t];
      const Node nu_node = term.at("nu");
      const int nu = nu_node.index(1, correlation);
      if (nu != t + 1)
        nu_node.fail("is " + std::to_string(nu) + ", expected " + std::to_string(t + 1) +
                     " (terms in order of nu)");
      const Node u = term.at("U");
      const std::vector<std::int64_t> ushape = u.tensor_shape();
      if (ushape.size() != static_cast<std::size_t>(nu) + 2)
        u.at("shape").fail("is " + shape_text(ushape) +
                           ", expected [2L+1, dim_a x nu, K] with nu = " + std::to_string(nu));
      std::vector<std::int64_t> expected(static_cast<std::size_t>(nu) + 2, D);
      expected.front() = 2 * L + 1;
      expected.back() = ushape.back();
      model::SymmetricContraction::Term tm;
      tm.nu = nu;
      tm.U = u.tensor(expected, "[2L+1, dim_a x nu, K]");
      tm.u_shape = expected;
      if (ushape.back() > kMaxWeights) u.at("shape").fail("K is too large");
      tm.K = static_cast<int>(ushape.back());
      tm.W = term.at("W").tensor({S, tm.K, C}, "[num_species, K, num_features]");
      con.terms.push_back(std::move(tm));
    }
    sc.contractions.push_back(std::move(con));
  }
  return sc;
}

int architecture_depth(const Node& arch, const char* count_key) {
  arch.at("model_class").string();
  return arch.at(count_key).index(1, 1000);
}

void expect_count(const Node& list, int count, const char* items, const char* count_key) {
  if (list.size() != static_cast<std::size_t>(count))
    list.fail("has " + std::to_string(list.size()) + " " + items + ", but " + count_key + " is " +
              std::to_string(count));
}

}  // namespace clebsch::model_reader
