// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Pieces of a module that several group forms emit alike: the unrolled CG contraction; the
// gathered operands of one lane (struct Ops and load(), their row pointers, the kPrefetch flag);
// a receiver group's accumulations and its add()/store() into the output row; a sender group's
// gradient layout, its add_gx()/store_gx() into the sender row and its grad_Y maps; and an
// instruction's CG entries in the order of one index, which the tables and loops follow.
#include <map>

#include "clebsch/cuda/generator/emit_conv_detail.h"

namespace clebsch::cuda::emit_detail {

// Emits out_m = sum over entries C * left(e) * right(e) into index(e), for the distinct indices
// only: declarations, the distinct products (so that a product used by several entries is
// computed once), then one fused multiply-add per entry, in CG order.
void contraction(Writer& w, const std::string& out, int n_out, const std::vector<CgEntry>& cg,
                 const std::function<int(const CgEntry&)>& index,
                 const std::function<std::string(const CgEntry&)>& left,
                 const std::function<std::string(const CgEntry&)>& right, DType dtype) {
  std::vector<char> used(n_out, 0);
  for (const CgEntry& e : cg) used[index(e)] = 1;
  std::string decl;
  for (int m = 0; m < n_out; ++m)
    if (used[m]) decl += (decl.empty() ? "" : ", ") + out + str(m) + " = real(0)";
  if (decl.empty()) return;
  w("real " + decl + ";");
  std::map<std::string, std::string> products;
  std::vector<std::string> order;
  for (const CgEntry& e : cg) {
    const std::string key = left(e) + " * " + right(e);
    if (products.emplace(key, "").second) order.push_back(key);
  }
  int n = 0;
  for (const std::string& key : order) {
    products[key] = out + "p" + str(n++);
    w("const real " + products[key] + " = " + key + ";");
  }
  for (const CgEntry& e : cg) {
    const std::string o = out + str(index(e));
    w(o + " = madd(" + emit_literal(e.c, dtype) + ", " + products[left(e) + " * " + right(e)] +
      ", " + o + ");");
  }
}

// Which entries of a contraction output are written (the rest stay zero and are skipped).
std::vector<char> used_indices(const std::vector<CgEntry>& cg, int n,
                               const std::function<int(const CgEntry&)>& index) {
  std::vector<char> used(n, 0);
  for (const CgEntry& e : cg) used[index(e)] = 1;
  return used;
}

// Instruction n's CG entries ordered by one of their indices (axis 'i', 'j' or 'k'), stably:
// within one value of that index the entries stay in CG order.
std::vector<std::size_t> ModuleEmitter::order_by(std::size_t n, char axis) const {
  const std::vector<CgEntry>& cg = p_.paths()[n].cg;
  std::vector<std::size_t> order(cg.size());
  for (std::size_t m = 0; m < order.size(); ++m) order[m] = m;
  auto key = [&](std::size_t m) { return axis == 'i' ? cg[m].i : axis == 'j' ? cg[m].j : cg[m].k; };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return key(a) < key(b); });
  return order;
}

// struct Ops: the per-edge operands of one lane, eight declarations to a line.
void ModuleEmitter::emit_ops_struct(Writer& w, const std::vector<std::string>& names,
                                    const std::string& extra) {
  w.open("struct Ops {");
  if (!extra.empty()) w(extra);
  for (std::size_t k = 0; k < names.size(); k += 8) {
    std::string line = "real ";
    for (std::size_t m = k; m < std::min(names.size(), k + 8); ++m)
      line += (m > k ? ", " : "") + names[m];
    w(line + ";");
  }
  w.close("};");
}

// "static constexpr bool kPrefetch = ...;": whether the group's pass loop loads the next edge's
// operands while computing the current one (Group::operand_load).
void ModuleEmitter::emit_prefetch_constant(Writer& w, const Group& g) {
  w(std::string("static constexpr bool kPrefetch = ") +
    (g.operand_load == OperandLoad::kPrefetchNextEdge ? "true" : "false") + ";");
}

// In load(): the edge's rows of x and W (the double passes also dx and dW; the sender passes
// grad_out's row gr), row 0 where `valid` is false (a skipped edge or an idle lane).
void ModuleEmitter::emit_row_pointers(Writer& w, const std::string& valid, bool dbl, bool sender) {
  const std::string s = "(long long)(" + valid + " ? s : 0)";
  const std::string e = "(long long)(" + valid + " ? e : 0)";
  w("const real* x = (const real*)a.x + " + s + " * kDim1;");
  w("const real* w = a.w ? (const real*)a.w + " + e + " * kNumWeights : nullptr;");
  if (dbl) {
    w("const real* dx = a.dx ? (const real*)a.dx + " + s + " * kDim1 : nullptr;");
    w("const real* dw = a.dw ? (const real*)a.dw + " + e + " * kNumWeights : nullptr;");
  }
  if (sender)
    w("const real* gr = (const real*)a.g + (long long)(" + valid + " ? r : 0) * kDimOut;");
}

// A receiver group's add (atomic mode) and store (deterministic) of its accumulators into
// output row r: `guard` (may be empty) then the row pointer o, then body(atomic).
void ModuleEmitter::emit_output_stores(Writer& w, const std::string& guard,
                                       const std::function<void(bool)>& body) {
  for (const char* mode : {"add", "store"}) {
    const bool atomic = std::string(mode) == "add";
    w.open(std::string("CLEBSCH_INLINE static void ") + mode +
           "(const ConvArgs& a, long long r, int u, const real (&acc)[kAcc]) {");
    if (!guard.empty()) w(guard);
    w("real* o = (real*)a.out + r * kDimOut;");
    body(atomic);
    w.close();
  }
}

// acc[acc_base + k] += weight * value(k) for the written outputs k (a plain sum without weight).
void ModuleEmitter::emit_accumulate(Writer& w, const std::vector<char>& used, int acc_base,
                                    const std::string& weight,
                                    const std::function<std::string(int)>& value) {
  for (int k = 0; k < int(used.size()); ++k) {
    if (!used[k]) continue;
    const std::string acc = "acc[" + str(acc_base + k) + "]";
    if (!weight.empty())
      w(acc + " = madd(" + weight + ", " + value(k) + ", " + acc + ");");
    else
      w(acc + " += " + value(k) + ";");
  }
}

ModuleEmitter::SenderLayout ModuleEmitter::sender_layout(const PassSchedule& ps, int gi) const {
  const Group& g = ps.groups[gi];
  SenderLayout l;
  for (int a : g.in1_blocks) l.gx_base[a] = l.n_gx, l.n_gx += p_.in1()[a].dim();
  for (int b : g.in2_blocks) l.gy_base[b] = l.n_gy, l.n_gy += p_.in2()[b].mul * p_.in2()[b].dim();
  l.gx_first.assign(p_.in1().size(), 1);
  l.gy_first.assign(p_.in2().size(), 1);
  for (int h = 0; h < gi; ++h) {
    for (int a : ps.groups[h].in1_blocks) l.gx_first[a] = 0;
    for (int b : ps.groups[h].in2_blocks) l.gy_first[b] = 0;
  }
  return l;
}

// A sender group's add_gx (atomic mode) and store_gx (deterministic) of its grad_x sums into
// sender row s: `guard` (may be empty) then the row pointer o, then body(atomic).
void ModuleEmitter::emit_gx_stores(Writer& w, const std::string& guard,
                                   const std::function<void(bool)>& body) {
  for (const char* mode : {"add_gx", "store_gx"}) {
    const bool atomic = std::string(mode) == "add_gx";
    w.open(std::string("CLEBSCH_INLINE static void ") + mode +
           "(const ConvArgs& a, long long s, int u, const real (&gx)[kGx]) {");
    if (!guard.empty()) w(guard);
    w("real* o = (real*)a.grad_x + s * kDim1;");
    body(atomic);
    w.close();
  }
}

// The store of grad_x value v into the sender row's element `at`: a block's first writer stores
// (adds when the caller accumulates batches of edges into grad_x), a later group adds.
std::string ModuleEmitter::gx_store(const std::string& at, const std::string& v, bool first) {
  return at + (first ? " = a.accumulate_grad_x ? " + at + " + " + v + " : " + v + ";"
                     : " += " + v + ";");
}

// grad_Y: which values of a row the group touches (gy_offset: the row offset of the group's
// compact index j), and whether the group is their first writer.
void ModuleEmitter::emit_gy_maps(Writer& w, const Group& g, std::map<int, int>& gy_base,
                                 const std::vector<char>& gy_first) {
  w.open("CLEBSCH_INLINE static int gy_offset(int j) {");
  for (int b : g.in2_blocks) {
    const TpBlock& blk = p_.in2()[b];
    const int n = blk.mul * blk.dim();
    w("if (j < " + str(gy_base[b] + n) + ") return " + str(blk.offset) + " + j - " +
      str(gy_base[b]) + ";");
  }
  w("return 0;");
  w.close();
  for (const char* fn : {"gy_touched", "gy_first"}) {
    const bool first = std::string(fn) == "gy_first";
    w.open(std::string("CLEBSCH_INLINE static bool ") + fn + "(int j) {");
    for (int b : g.in2_blocks) {
      const TpBlock& blk = p_.in2()[b];
      w("if (j >= " + str(blk.offset) + " && j < " + str(blk.offset + blk.mul * blk.dim()) +
        ") return " + (!first || gy_first[b] ? "true" : "false") + ";");
    }
    w("return false;");
    w.close();
  }
}

// f(path, n, v, m2) for each weight of the group's weighted instructions n: Y channel v < m2 (the
// instruction's Y multiplicity), channel u's weight at path.weight_offset + u m2 + v.
void ModuleEmitter::for_each_weight(
    const Group& g, const std::function<void(const TpPath&, int, int, int)>& f) const {
  for (int n : g.paths) {
    const TpPath& path = p_.paths()[n];
    if (!path.has_weight) continue;
    const int m2 = p_.in2()[path.in2].mul;
    for (int v = 0; v < m2; ++v) f(path, n, v, m2);
  }
}

std::vector<ModuleEmitter::Field> ModuleEmitter::operand_fields(const Group& g, bool with_d,
                                                                bool with_g) {
  std::vector<Field> f;
  for (int a : g.in1_blocks) {
    const TpBlock& b = p_.in1()[a];
    for (int i = 0; i < b.dim(); ++i) {
      const std::string at = str(b.offset) + " + u * " + str(b.dim()) + " + " + str(i);
      f.push_back({xn(a, i), "ok ? ldg(x + " + at + ") : real(0)"});
      if (with_d) f.push_back({dxn(a, i), "(ok && dx) ? ldg(dx + " + at + ") : real(0)"});
    }
  }
  int j = 0;  // the fused form's weight index: the lane's weights row ws holds weight j at j * 32
  for_each_weight(g, [&](const TpPath& path, int n, int v, int m2) {
    const std::string at = str(path.weight_offset) + " + u * " + str(m2) + " + " + str(v);
    if (fused_)
      f.push_back({wn(n, v), "ok ? ws[" + str(32 * j++) + "] : real(0)"});
    else
      f.push_back({wn(n, v), "(ok && w) ? ldcs(w + " + at + ") : real(0)"});
    if (with_d) f.push_back({dwn(n, v), "(ok && dw) ? ldcs(dw + " + at + ") : real(0)"});
  });
  if (with_g)
    for (int o : g.out_blocks) {
      const TpBlock& b = p_.out()[o];
      for (int k = 0; k < b.dim(); ++k)
        f.push_back({gn(o, k), "ok ? ldg(gr + " + str(b.offset) + " + u * " + str(b.dim()) + " + " +
                                   str(k) + ") : real(0)"});
    }
  return f;
}

// struct Ops and load(): the gathers of one edge for one lane; zeros for an idle lane (u past
// the group's multiplicity) or a skipped edge (s < 0), so that computing them adds nothing.
void ModuleEmitter::emit_ops_and_load(Writer& w, const Group& g, bool dbl, bool sender) {
  const std::vector<Field> fields = operand_fields(g, dbl, sender);
  w("// Gathered operands of one edge and lane (registers).");
  std::vector<std::string> names;
  for (const Field& f : fields) names.push_back(f.name);
  emit_ops_struct(w, names);
  if (fused_) emit_fused_constants(w, g);
  w.open(std::string("CLEBSCH_INLINE static void load(const ConvArgs& a, int s, ") +
         (sender ? "int r, " : "") + "int e, int u, Ops& o" + (fused_ ? ", const real* ws" : "") +
         ") {");
  w("const bool ok = s >= 0 && u < " + str(g.mul) + ";");
  emit_row_pointers(w, "ok", dbl, sender);
  w(std::string("(void)x, (void)w") + (dbl ? ", (void)dx, (void)dw" : "") +
    (fused_ ? ", (void)ws" : "") + ";");
  for (const Field& f : fields) w("o." + f.name + " = " + f.expr + ";");
  w.close();
}

// The fused radial form's description of a group (conv_passes.cuh.in's make_weights and
// contract_gh read it): its multiplicity, its kJ weights per lane, weight j of channel u at
// column wcol(j) + u wmul(j) of a W row, and whether it is the first group of the pass to
// write dE/dh (it stores; later groups and chunks add).
void ModuleEmitter::emit_fused_constants(Writer& w, const Group& g) {
  std::vector<int> col, mul;
  for_each_weight(g, [&](const TpPath& path, int, int v, int m2) {
    col.push_back(path.weight_offset + v);
    mul.push_back(m2);
  });
  const PassSchedule& ps = s_.pass(fused_pass_);
  bool first = !col.empty();
  for (const Group& other : ps.groups) {
    if (&other == &g) break;
    if (group_weights(p_, other) > 0) first = false;
  }
  w("static constexpr int kMul = " + str(g.mul) + ", kJ = " + str(int(col.size())) + ";");
  w(std::string("static constexpr bool kFirstGh = ") + (first ? "true" : "false") + ";");
  // Functions, not constexpr arrays: device code may not index a host constexpr array.
  for (const auto& [name, v] :
       {std::pair<std::string, const std::vector<int>*>{"wcol", &col}, {"wmul", &mul}}) {
    w.open("CLEBSCH_INLINE static int " + name + "(int j) {");
    w.open("switch (j) {");
    for (std::size_t j = 0; j < v->size(); ++j)
      w("case " + str(int(j)) + ": return " + str((*v)[j]) + ";");
    w.close();
    w("return 0;");
    w.close();
  }
}

// At the top of compute(): the operands as named values, the staged attributes Y (and dY).
void ModuleEmitter::emit_compute_prologue(Writer& w, const Group& g, bool dbl, bool sender) {
  for (const Field& f : operand_fields(g, dbl, sender))
    w("const real " + f.name + " = o." + f.name + ";");
  for (int bi : g.in2_blocks) {
    const TpBlock& b = p_.in2()[bi];
    w("// in2 block " + str(bi) + ": " + block_name(b) + " (staged, warp-uniform)");
    for (int v = 0; v < b.mul; ++v)
      for (int j = 0; j < b.dim(); ++j) {
        const std::string at = str(b.offset + v * b.dim() + j);
        w("const real " + yn(bi, v, j) + " = ys[" + at + "];");
        if (dbl) w("const real " + dyn(bi, v, j) + " = dys[" + at + "];");
      }
  }
}

}  // namespace clebsch::cuda::emit_detail
