// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// MACE-rule convolution tensor products and the benchmark shapes of docs/kernels.md.
#include "clebsch/cuda/generator/conv_shapes.h"

#include <algorithm>

#include "clebsch/support/error.h"

namespace clebsch::cuda {

TensorProduct conv_tensor_product(const Irreps& node_irreps, const Irreps& edge_irreps,
                                  const Irreps& target) {
  std::vector<MulIrrep> mid;
  struct Ins {
    int i1, i2, io;
  };
  std::vector<Ins> ins;
  for (std::size_t i = 0; i < node_irreps.size(); ++i)
    for (std::size_t j = 0; j < edge_irreps.size(); ++j)
      for (const Irrep& ir : node_irreps[i].ir* edge_irreps[j].ir) {
        bool wanted = false;
        for (const MulIrrep& t : target) wanted |= t.ir == ir;
        if (!wanted) continue;
        ins.push_back({int(i), int(j), int(mid.size())});
        mid.push_back({node_irreps[i].mul, ir});
      }
  const Irreps::Sorted sorted = Irreps(mid).sort();
  std::vector<Instruction> instructions;
  for (const Ins& t : ins)
    instructions.emplace_back(t.i1, t.i2, sorted.p[t.io], ConnectionMode::kUvu);
  TensorProductOptions options;
  options.shared_weights = false;
  return TensorProduct(node_irreps, edge_irreps, sorted.irreps, instructions, options);
}

TensorProduct summed_tensor_product(const Irreps& node_irreps, const Irreps& edge_irreps,
                                    const Irreps& out_irreps) {
  std::vector<Instruction> instructions;
  for (std::size_t i = 0; i < node_irreps.size(); ++i)
    for (std::size_t j = 0; j < edge_irreps.size(); ++j) {
      const std::vector<Irrep> product = node_irreps[i].ir * edge_irreps[j].ir;
      for (std::size_t o = 0; o < out_irreps.size(); ++o)
        if (std::find(product.begin(), product.end(), out_irreps[o].ir) != product.end())
          instructions.emplace_back(int(i), int(j), int(o), ConnectionMode::kUvu);
    }
  TensorProductOptions options;
  options.shared_weights = false;
  return TensorProduct(node_irreps, edge_irreps, out_irreps, instructions, options);
}

TensorProduct shape_tensor_product(const ConvShape& shape) {
  return shape.summed ? summed_tensor_product(shape.node_irreps, shape.edge_irreps, shape.target)
                      : conv_tensor_product(shape.node_irreps, shape.edge_irreps, shape.target);
}

namespace {

// 128x(0e+1o+2e+...) up to L with the natural parity (-1)^l.
Irreps natural(int mul, int lmax) {
  std::vector<MulIrrep> items;
  for (int l = 0; l <= lmax; ++l) items.push_back({mul, Irrep(l, l % 2 ? -1 : 1)});
  return Irreps(items);
}

}  // namespace

std::vector<ConvShape> benchmark_shapes() {
  std::vector<ConvShape> shapes = {
      {"mace-medium", Irreps("128x0e+128x1o"), Irreps("0e+1o+2e+3o"),
       Irreps("128x0e+128x1o+128x2e"), 10000, 160000},
      {"mace-large", Irreps("128x0e+128x1o+128x2e"), Irreps("0e+1o+2e+3o"),
       Irreps("128x0e+128x1o+128x2e+128x3o"), 10000, 160000},
      {"nequip-benzene", Irreps("64x0o+64x0e+64x1o+64x1e+64x2o+64x2e+64x3o+64x3e"),
       Irreps("0e+1o+2e+3o"), Irreps("64x0o+64x0e+64x1o+64x1e+64x2o+64x2e+64x3o+64x3e"), 10000,
       160000},
      {"nequip-water", Irreps("32x0o+32x0e+32x1o+32x1e"), Irreps("0e+1o"),
       Irreps("32x0o+32x0e+32x1o+32x1e"), 10000, 160000},
  };
  shapes.push_back({"e3nn-summed-l3", Irreps("64x0o+64x0e+64x1o+64x1e+64x2o+64x2e+64x3o+64x3e"),
                    Irreps("0e+1o+2e+3o"),
                    Irreps("64x0o+64x0e+64x1o+64x1e+64x2o+64x2e+64x3o+64x3e"), 10000, 160000,
                    true});
  for (int L = 4; L <= 8; ++L)
    shapes.push_back({"high-l-" + std::to_string(L), natural(128, L), natural(1, L),
                      natural(128, L), 1000, 16000});
  return shapes;
}

ConvShape benchmark_shape(const std::string& name) {
  for (ConvShape& s : benchmark_shapes())
    if (s.name == name) return s;
  std::string known;
  for (const ConvShape& s : benchmark_shapes()) known += (known.empty() ? "" : ", ") + s.name;
  throw Error("unknown benchmark shape \"" + name + "\"; known: " + known);
}

std::vector<CoverageShape> coverage_shapes() {
  TensorProductOptions o;
  o.shared_weights = false;
  TensorProduct weightless(Irreps("40x0e+40x1o"), Irreps("2x1o+1x2e"), Irreps("40x1o+40x0e+40x2o"),
                           {Instruction(0, 0, 0, ConnectionMode::kUvu, true),
                            Instruction(1, 0, 1, ConnectionMode::kUvu, false),
                            Instruction(1, 1, 2, ConnectionMode::kUvu, true)},
                           o);
  return {
      {"MaceLike", conv_tensor_product(Irreps("48x0e+48x1o"), Irreps("0e+1o+2e+3o"),
                                       Irreps("48x0e+48x1o+48x2e"))},
      {"MaceLarge", conv_tensor_product(Irreps("32x0e+32x1o+32x2e"), Irreps("0e+1o+2e+3o"),
                                        Irreps("32x0e+32x1o+32x2e+32x3o"))},
      {"NequipLike", conv_tensor_product(Irreps("8x0o+8x0e+8x1o+8x1e+8x2e"), Irreps("0e+1o+2e"),
                                         Irreps("8x0o+8x0e+8x1o+8x1e+8x2e"))},
      {"NonUniform", conv_tensor_product(Irreps("128x0e+64x1o+32x2e"), Irreps("0e+1o+2e"),
                                         Irreps("128x0e+64x1o+32x2e"))},
      {"HighL8",
       conv_tensor_product(Irreps("33x8e+5x7o"), Irreps("0e+1o+8e"), Irreps("0e+1o+7o+8e"))},
      {"WeightlessMul2", std::move(weightless)},
      // Up to six instructions into one block; ScheduleOptions::sender_split_registers small
      // splits them over sender groups (test_kernels_emulated).
      {"SummedPaths", summed_tensor_product(Irreps("6x0o+6x0e+6x1o+6x1e+6x2e"), Irreps("0e+1o+2e"),
                                            Irreps("6x0e+6x1o+6x1e+6x2e"))},
  };
}

}  // namespace clebsch::cuda
