// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Printing one layer's symmetric contraction as straight-line kernels (see
// mace_symcon_source.h). The pairs of the tables are regrouped by monomial: each monomial's
// value (forward) or its derivatives (backward) are formed once and serve every output it feeds.
#include "clebsch/cuda/engine/mace_symcon_source.h"

#include <map>
#include <sstream>

#include "clebsch/cuda/engine/device_source_tables.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda {
namespace {

std::string a_var(int i) { return "a" + std::to_string(i); }

// Left to right, (a_i * a_j) * a_k, so that monomials sharing a prefix share its product once
// the compiler has merged equal expressions.
std::string product(const std::vector<int>& f) {
  std::string s = a_var(f[0]);
  for (std::size_t k = 1; k < f.size(); ++k) s = (k > 1 ? "(" + s + ")" : s) + " * " + a_var(f[k]);
  return s;
}

// The pair's effective weight: sum over its terms of coefficient * weight row (of this thread's
// species and channel).
std::string weight_expr(const ContractionTables& t, int pair) {
  std::string s;
  for (int q = t.pair_term_begin[pair]; q < t.pair_term_begin[pair + 1]; ++q) {
    if (!s.empty()) s += " + ";
    const std::string w = "w" + std::to_string(t.term_w_row[q]);
    s += t.term_coef[q] == 1.0 ? w : "T(" + double_literal(t.term_coef[q]) + ") * " + w;
  }
  return s.empty() ? "T(0)" : s;
}

struct Plan {
  std::map<std::vector<int>, std::vector<int>> monomials;  // sorted factors -> pairs
  std::vector<int> pair_slot;                              // pair -> output component
  std::vector<bool> a_used, w_used;
};

Plan plan(const ContractionTables& t) {
  std::map<std::pair<int, int>, int> slot_of;
  for (std::size_t k = 0; k < t.slot_base.size(); ++k)
    slot_of[{t.slot_base[k], t.slot_stride[k]}] = static_cast<int>(k);
  Plan pl;
  pl.a_used.assign(t.D, false);
  pl.w_used.assign(t.num_w_rows, false);
  for (int p = 0; p < t.num_pairs(); ++p) {
    const auto it = slot_of.find({t.pair_b_base[p], t.pair_b_stride[p]});
    if (it == slot_of.end())
      throw ModelFormatError("symmetric contraction: pair " + std::to_string(p) +
                             " writes no output component of the tables");
    pl.pair_slot.push_back(it->second);
    std::vector<int> f(t.pair_factors.begin() + 4 * p,
                       t.pair_factors.begin() + 4 * p + t.pair_nu[p]);
    for (int i : f) pl.a_used[i] = true;
    for (int q = t.pair_term_begin[p]; q < t.pair_term_begin[p + 1]; ++q)
      pl.w_used[t.term_w_row[q]] = true;
    pl.monomials[f].push_back(p);
  }
  return pl;
}

// The loop header and the loads every pass shares: this thread's A components and weight rows.
void emit_prologue(std::ostringstream& o, const ContractionTables& t, const SymconLayout& a,
                   const Plan& pl, const std::string& name, const std::string& what) {
  o << "// " << what << "\n";
  o << "extern \"C\" __global__ void " << name << "(SymConArgs p) {\n"
    << "  const T* __restrict__ A = static_cast<const T*>(p.A);\n"
    << "  const T* __restrict__ W = static_cast<const T*>(p.weights);\n"
    << "  CLEBSCH_GRID_LOOP(t, p.rows * " << t.C << ") {\n"
    << "    const long long n = t / " << t.C
    << ";\n"
    // 64-bit channel index: with an int c, ptxas of CUDA 13.0 (H200) folded the 32-bit offsets
    // base + c * stride of one irrep block into the address of its first component for some
    // components (found by probing unit inputs: the l = 2 block read 16 + 5c for 17 + 5c, 19 + 5c
    // and 20 + 5c), a wrong result that the emulated backend cannot show.
    << "    const long long c = t - n * " << t.C << ";\n"
    << "    const T* ar = A + n * " << a.row << ";\n"
    << "    const T* wr = W + static_cast<long long>(p.species[n]) * " << t.num_w_rows * t.C
    << " + c;\n";
  for (int i = 0; i < t.D; ++i)
    if (pl.a_used[i])
      o << "    const T " << a_var(i) << " = ar[" << a.base[i] << " + c * " << a.stride[i]
        << "];\n";
  for (int r = 0; r < t.num_w_rows; ++r)
    if (pl.w_used[r]) o << "    const T w" << r << " = wr[" << r * t.C << "];\n";
}

std::string slot_address(const ContractionTables& t, int k) {
  return "n * " + std::to_string(t.dim_b) + " + " + std::to_string(t.slot_base[k]) + " + c * " +
         std::to_string(t.slot_stride[k]);
}

void emit_forward(std::ostringstream& o, const ContractionTables& t, const SymconLayout& a,
                  const Plan& pl, int layer) {
  emit_prologue(o, t, a, pl, symcon_kernel_name(layer, false),
                "Layer " + std::to_string(layer) +
                    " symmetric contraction: B[n][slot] = sum over monomials m(A) of "
                    "(sum_k coef_k W[species][k][c]) m(A), each output written once.");
  o << "    T* __restrict__ B = static_cast<T*>(p.B);\n";
  const std::size_t slots = t.slot_base.size();
  for (std::size_t k = 0; k < slots; ++k) o << "    T b" << k << " = T(0);\n";
  for (const auto& [f, pairs] : pl.monomials) {
    o << "    {\n      const T m = " << product(f) << ";\n";
    for (int p : pairs)
      o << "      b" << pl.pair_slot[p] << " += (" << weight_expr(t, p) << ") * m;\n";
    o << "    }\n";
  }
  for (std::size_t k = 0; k < slots; ++k)
    o << "    B[" << slot_address(t, static_cast<int>(k)) << "] = b" << k << ";\n";
  o << "  }\n}\n\n";
}

void emit_backward(std::ostringstream& o, const ContractionTables& t, const SymconLayout& a,
                   const Plan& pl, int layer) {
  emit_prologue(o, t, a, pl, symcon_kernel_name(layer, true),
                "Layer " + std::to_string(layer) +
                    " symmetric contraction, reverse mode: gA = (dB/dA)^T gB; per monomial "
                    "g = sum over its outputs of weight * gB, then g times each partial "
                    "derivative.");
  o << "    const T* __restrict__ gB = static_cast<const T*>(p.B);\n"
    << "    T* __restrict__ gA = static_cast<T*>(p.gA);\n";
  std::vector<bool> slot_used(t.slot_base.size(), false);
  for (int k : pl.pair_slot) slot_used[k] = true;
  for (std::size_t k = 0; k < slot_used.size(); ++k)
    if (slot_used[k])
      o << "    const T gb" << k << " = gB[" << slot_address(t, static_cast<int>(k)) << "];\n";
  for (int i = 0; i < t.D; ++i) o << "    T ga" << i << " = T(0);\n";
  for (const auto& [f, pairs] : pl.monomials) {
    o << "    {\n      const T g = ";
    for (std::size_t q = 0; q < pairs.size(); ++q)
      o << (q ? " + " : "") << "(" << weight_expr(t, pairs[q]) << ") * gb"
        << pl.pair_slot[pairs[q]];
    o << ";\n";
    // d(a_x^m rest)/d a_x = m a_x^(m-1) rest: one term per distinct factor.
    for (std::size_t i = 0; i < f.size(); ++i) {
      if (i > 0 && f[i] == f[i - 1]) continue;
      int mult = 0;
      for (int x : f) mult += x == f[i];
      std::vector<int> rest = f;
      rest.erase(rest.begin() + static_cast<long>(i));
      std::string term = mult > 1 ? "(T(" + std::to_string(mult) + ") * g)" : "g";
      if (!rest.empty()) term += " * (" + product(rest) + ")";
      o << "      ga" << f[i] << " += " << term << ";\n";
    }
    o << "    }\n";
  }
  for (int i = 0; i < t.D; ++i)
    o << "    gA[n * " << a.row << " + " << a.base[i] << " + c * " << a.stride[i] << "] = ga" << i
      << ";\n";
  o << "  }\n}\n\n";
}

}  // namespace

SymconLayout symcon_layout(const Irreps& input, int C, int D, const std::string& where) {
  SymconLayout a;
  a.row = input.dim();
  const std::vector<int> off = input.offsets();
  for (std::size_t blk = 0; blk < input.size(); ++blk) {
    if (input[blk].mul != C)
      throw ModelFormatError(where + ": the contraction's input " + input.str() +
                             " has a block of multiplicity " + std::to_string(input[blk].mul) +
                             ", the contraction has " + std::to_string(C) + " channels");
    const int d = input[blk].ir.dim();
    for (int m = 0; m < d; ++m) {
      a.base.push_back(off[blk] + m);
      a.stride.push_back(d);
    }
  }
  if (static_cast<int>(a.base.size()) != D)
    throw ModelFormatError(where + ": the contraction's input " + input.str() + " has " +
                           std::to_string(a.base.size()) + " components per channel, the " +
                           "contraction expects " + std::to_string(D));
  return a;
}

std::string symcon_kernel_name(int layer, bool backward) {
  return std::string(backward ? "mace_symcon_backward_l" : "mace_symcon_forward_l") +
         std::to_string(layer);
}

std::string mace_symcon_source(const ContractionTables& t, const SymconLayout& a, int layer) {
  if (t.term_w_row.size() > kMaxSymconTerms)
    throw CapacityError("layer " + std::to_string(layer) + "'s symmetric contraction has " +
                        std::to_string(t.term_w_row.size()) + " terms; the CUDA engine prints " +
                        "at most " + std::to_string(kMaxSymconTerms) + " into its kernels");
  const Plan pl = plan(t);
  std::ostringstream o;
  o << "// ---- layer " << layer << " symmetric contraction (generated by "
    << "kernels/engine/mace_symcon_source.cpp): " << t.C << " channels, " << t.D << " components, "
    << t.num_pairs() << " pairs over " << pl.monomials.size() << " monomials, " << t.num_w_rows
    << " weight rows ----\n";
  emit_forward(o, t, a, pl, layer);
  emit_backward(o, t, a, pl, layer);
  return o.str();
}

}  // namespace clebsch::cuda
