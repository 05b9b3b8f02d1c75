// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The looped CG form's per-edge bodies (ScheduleOptions::loop_cg_above), for the receiver and
// sender groups of emit_conv_receiver.cpp and emit_conv_sender.cpp in a module whose largest
// instruction has more non-zeros than the threshold (100 by default: l >= 5). Per instruction
// and per index (i, j, k) a table of its entries ordered by that index (kCgIjk<n><a>:
// i | j << 8 | k << 16, kCgC<n><a>: C, emit_conv_tables.cpp) in global memory; for each output
// index one `#pragma unroll 1` loop over its entries sums into a register (outputs are never
// read back per entry); the operands x, dx, grad_out are copied to small local arrays that the
// loop indexes with loop variables (local memory), Y and dY are read from the staged
// shared-memory rows. The code per instruction is constant in its non-zero count. Every output
// value is summed in CG order with the same products and fused multiply-adds as the unrolled
// form (test_kernels_emulated checks it against the host reference with the form forced on
// small problems). Measured on the H200 (bench/NOTES.md): about 9x slower than the unrolled
// form at l = 4 (forward 4.6 ms against 0.52 ms in float32) and only 3-4x faster than e3nn at
// l = 5: it keeps l >= 5 compilable, not fast. The per-entry operand and table loads are the
// cost. Looped modules use the matrix form (emit_conv_matrix.cpp) in every pass by default; the
// looped form is what looped_cg_form (and looped_cg_form_double) kLooped give.
#include "clebsch/cuda/generator/emit_conv_detail.h"

namespace clebsch::cuda::emit_detail {

namespace {

// An operand row of one instruction as a local array: "const real xa[3] = {x0_0, x0_1, x0_2};".
std::string local_array(const std::string& name, int n, const std::function<std::string(int)>& at) {
  std::string init;
  for (int m = 0; m < n; ++m) init += (m ? ", " : "") + at(m);
  return "const real " + name + "[" + str(n) + "] = {" + init + "};";
}

// Zero-initialised accumulators of the looped form: "real t[5] = {}, q[5] = {};".
std::string zero_arrays(const std::vector<std::pair<std::string, int>>& arrays) {
  std::string decl;
  for (const auto& [name, n] : arrays)
    decl += (decl.empty() ? "" : ", ") + name + "[" + str(n) + "] = {}";
  return "real " + decl + ";";
}

}  // namespace

// The loops of the looped form over instruction n's tables. Terms are grouped by the index
// of their output (ci, cj or ck); for each value of it that has entries, one `#pragma unroll
// 1` loop walks them (the table ordered by that index) and sums every term of the group into
// a register, stored once into the output array at a constant index: no output is read and
// written through local memory per entry, and the code does not grow with the non-zero count.
void ModuleEmitter::cg_loop(Writer& w, int n, const std::vector<LoopTerm>& terms) {
  const std::vector<CgEntry>& cg = p_.paths()[n].cg;
  if (cg.empty()) return;  // no table: the accumulators stay zero
  for (const char* index : {"ck", "ci", "cj"}) {
    std::vector<const LoopTerm*> group;
    for (const LoopTerm& t : terms)
      if (t.index == index) group.push_back(&t);
    if (group.empty()) continue;
    const char axis = index[1];
    const std::vector<std::size_t> order = order_by(std::size_t(n), axis);
    const std::string tag = str(n) + axis;
    auto key = [&](std::size_t q) {
      const CgEntry& e = cg[order[q]];
      return axis == 'i' ? e.i : axis == 'j' ? e.j : e.k;
    };
    for (std::size_t start = 0; start < order.size();) {
      std::size_t end = start;
      while (end < order.size() && key(end) == key(start)) ++end;
      const std::string value = str(int(key(start)));
      w.open("{");
      std::string decl;
      for (std::size_t g = 0; g < group.size(); ++g)
        decl += std::string(g ? ", " : "") + "s" + str(int(g)) + " = 0";
      w("real " + decl + ";");
      w("#pragma unroll 1");
      w.open("for (int m = " + str(int(start)) + "; m < " + str(int(end)) + "; ++m) {");
      w("const unsigned e = kCgIjk" + tag + "[m];");
      w("const int ci = int(e & 255u), cj = int((e >> 8) & 255u), ck = int(e >> 16);");
      w("const real c = kCgC" + tag + "[m];");
      w("(void)ci, (void)cj, (void)ck;");
      for (std::size_t g = 0; g < group.size(); ++g) {
        const LoopTerm& t = *group[g];
        const std::string acc = "s" + str(int(g));
        w(acc + " = madd(c, " + t.left + "[" + t.left_index + "] * " + t.right + "[" +
          t.right_index + "], " + acc + ");");
      }
      w.close();
      for (std::size_t g = 0; g < group.size(); ++g)
        w(group[g]->out + "[" + value + "] = s" + str(int(g)) + ";");
      w.close("}");
      start = end;
    }
  }
}

// Receiver pass, looped form, instruction n and second-operand channel v (inside its braces).
void ModuleEmitter::receiver_path_looped(Writer& w, int n, int v, bool dbl, int acc_base) {
  const TpPath& path = p_.paths()[n];
  const TpBlock &b1 = p_.in1()[path.in1], &b2 = p_.in2()[path.in2];
  const int d1 = b1.dim(), d3 = p_.out()[path.out].dim();
  const std::string y_at = str(b2.offset + v * b2.dim());
  auto k_of = [](const CgEntry& e) { return e.k; };
  const std::vector<char> used = used_indices(path.cg, d3, k_of);
  w(local_array("xa", d1, [&](int i) { return xn(path.in1, i); }));
  w("const real* ya = ys + " + y_at + ";");
  const bool with_s = dbl && path.has_weight;
  if (!dbl) {
    w(zero_arrays({{"t", d3}}));
    cg_loop(w, n, {{"t", "ck", "xa", "ci", "ya", "cj"}});
  } else {
    // t = T(dx, y) + T(x, dy) (summed after, as the unrolled form), s = T(x, y) for dW.
    w(local_array("dxa", d1, [&](int i) { return dxn(path.in1, i); }));
    w("const real* dya = dys + " + y_at + ";");
    std::vector<std::pair<std::string, int>> arrays = {{"t", d3}, {"q", d3}};
    std::vector<LoopTerm> terms = {{"t", "ck", "dxa", "ci", "ya", "cj"},
                                   {"q", "ck", "xa", "ci", "dya", "cj"}};
    if (with_s) {
      arrays.push_back({"s", d3});
      terms.push_back({"s", "ck", "xa", "ci", "ya", "cj"});
    }
    w(zero_arrays(arrays));
    cg_loop(w, n, terms);
    for (int k = 0; k < d3; ++k)
      if (used[k]) w("t[" + str(k) + "] += q[" + str(k) + "];");
  }
  emit_accumulate(w, used, acc_base, path.has_weight ? wn(n, v) : "",
                  [](int k) { return "t[" + str(k) + "]"; });
  if (with_s)
    emit_accumulate(w, used, acc_base, dwn(n, v), [](int k) { return "s[" + str(k) + "]"; });
}

// Sender pass, looped form: the contractions a, b (and a', b') of instruction n and channel v
// into the arrays ca, cb (cpa, cpb); the caller writes them out as in the unrolled form.
void ModuleEmitter::sender_contractions_looped(Writer& w, int n, int v, bool dbl) {
  const TpPath& path = p_.paths()[n];
  const TpBlock &b1 = p_.in1()[path.in1], &b2 = p_.in2()[path.in2];
  const int d1 = b1.dim(), d2 = b2.dim(), d3 = p_.out()[path.out].dim();
  const std::string y_at = str(b2.offset + v * b2.dim());
  w(local_array("xa", d1, [&](int i) { return xn(path.in1, i); }));
  w(local_array("ga", d3, [&](int k) { return gn(path.out, k); }));
  w("const real* ya = ys + " + y_at + ";");
  std::vector<std::pair<std::string, int>> arrays = {{"ca", d1}, {"cb", d2}};
  std::vector<LoopTerm> terms = {{"ca", "ci", "ya", "cj", "ga", "ck"},
                                 {"cb", "cj", "xa", "ci", "ga", "ck"}};
  if (dbl) {
    w(local_array("dxa", d1, [&](int i) { return dxn(path.in1, i); }));
    w("const real* dya = dys + " + y_at + ";");
    arrays.push_back({"cpa", d1});
    arrays.push_back({"cpb", d2});
    terms.push_back({"cpa", "ci", "dya", "cj", "ga", "ck"});
    terms.push_back({"cpb", "cj", "dxa", "ci", "ga", "ck"});
  }
  w(zero_arrays(arrays));
  cg_loop(w, n, terms);
}

}  // namespace clebsch::cuda::emit_detail
