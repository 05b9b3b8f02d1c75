// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The sender passes' groups with one channel per lane (backward and double backward, unrolled or
// looped form): per group a struct with the gathered operands (Ops, load()), the per-edge
// compute() of the lane's grad_x and grad_Y partials and its grad_W stores, the grad_x adds and
// stores into the sender's row and the warp-reduced grad_Y writes into the edge's row.
#include <map>

#include "clebsch/cuda/generator/emit_conv_detail.h"

namespace clebsch::cuda::emit_detail {

void ModuleEmitter::emit_sender_group(Writer& w, const PassSchedule& ps, int gi) {
  const Group& g = ps.groups[gi];
  const bool dbl = is_double_pass(ps.pass);
  group_comment(w, ps, g, gi);
  SenderLayout lay = sender_layout(ps, gi);
  std::map<int, int>&gx_base = lay.gx_base, &gy_base = lay.gy_base;
  const int n_gx = lay.n_gx, n_gy = lay.n_gy;
  const std::vector<char>&gx_first = lay.gx_first, &gy_first = lay.gy_first;

  w.open("struct " + group_name(ps.pass, gi) + " {");
  w("static constexpr int kGx = " + str(n_gx) + ", kGy = " + str(n_gy) +
    ", kChunks = " + str(g.chunks) + ";");
  emit_prefetch_constant(w, g);
  emit_ops_and_load(w, g, dbl, true);
  w.open(
      "CLEBSCH_INLINE static void compute(const Ops& o, const real* ys, const real* dys, real* "
      "gw, int u, real (&gx)[kGx], real (&gy)[kGy]) {");
  w("(void)ys, (void)dys, (void)gw;");
  w("const bool ok = u < " + str(g.mul) + ";");
  w("(void)ok;");
  emit_compute_prologue(w, g, dbl, true);
  int jw = 0;  // the fused form's weight index (for_each_weight's order)
  for (int n : g.paths) {
    const TpPath& path = p_.paths()[n];
    const TpBlock &b1 = p_.in1()[path.in1], &b2 = p_.in2()[path.in2];
    const int d1 = b1.dim(), d2 = b2.dim();
    w(path_comment(path, n));
    for (int v = 0; v < b2.mul; ++v) {
      w.open("{");
      auto i_of = [](const CgEntry& e) { return e.i; };
      auto j_of = [](const CgEntry& e) { return e.j; };
      auto x_of = [&](const CgEntry& e) { return xn(path.in1, e.i); };
      auto dx_of = [&](const CgEntry& e) { return dxn(path.in1, e.i); };
      auto y_of = [&](const CgEntry& e) { return yn(path.in2, v, e.j); };
      auto dy_of = [&](const CgEntry& e) { return dyn(path.in2, v, e.j); };
      auto g_of = [&](const CgEntry& e) { return gn(path.out, e.k); };
      const std::vector<char> ui = used_indices(path.cg, d1, i_of);
      const std::vector<char> uj = used_indices(path.cg, d2, j_of);
      auto gx_at = [&](int i) { return "gx[" + str(gx_base[path.in1] + i) + "]"; };
      auto gy_at = [&](int j) { return "gy[" + str(gy_base[path.in2] + v * d2 + j) + "]"; };
      const std::string wv = wn(n, v), dwv = dwn(n, v);
      // a_i = sum C y_j g_k ; b_j = sum C x_i g_k (and the primed versions with dy, dx)
      if (looped_) {
        sender_contractions_looped(w, n, v, dbl);
      } else {
        contraction(w, "ca", d1, path.cg, i_of, y_of, g_of, p_.dtype());
        contraction(w, "cb", d2, path.cg, j_of, x_of, g_of, p_.dtype());
        if (dbl) {
          contraction(w, "cpa", d1, path.cg, i_of, dy_of, g_of, p_.dtype());
          contraction(w, "cpb", d2, path.cg, j_of, dx_of, g_of, p_.dtype());
        }
      }
      // Contraction results: ca3 (unrolled) or ca[3] (looped).
      auto r = [&](const std::string& name, int m) {
        return looped_ ? name + "[" + str(m) + "]" : name + str(m);
      };
      // grad_x += w a (double: dW a + w a'), grad_Y += w b (double: dW b + w b'); without
      // weights the plain (primed) sums.
      auto update = [&](const std::string& at, const std::string& plain,
                        const std::string& primed) {
        if (!dbl)
          w(at + (path.has_weight ? " = madd(" + wv + ", " + plain + ", " + at + ");"
                                  : " += " + plain + ";"));
        else if (path.has_weight)
          w(at + " = madd(" + dwv + ", " + plain + ", madd(" + wv + ", " + primed + ", " + at +
            "));");
        else
          w(at + " += " + primed + ";");
      };
      for (int i = 0; i < d1; ++i)
        if (ui[i]) update(gx_at(i), r("ca", i), r("cpa", i));
      for (int j = 0; j < d2; ++j)
        if (uj[j]) update(gy_at(j), r("cb", j), r("cpb", j));
      if (path.has_weight) {
        // gw = sum_i x_i a_i  (double backward: sum_i dx_i a_i + x_i a'_i); written once,
        // streaming.
        std::string expr = "real(0)";
        for (int i = 0; i < d1; ++i) {
          if (!ui[i]) continue;
          if (!dbl)
            expr = "madd(" + xn(path.in1, i) + ", " + r("ca", i) + ", " + expr + ")";
          else
            expr = "madd(" + xn(path.in1, i) + ", " + r("cpa", i) + ", madd(" + dxn(path.in1, i) +
                   ", " + r("ca", i) + ", " + expr + "))";
        }
        if (fused_)
          // The lane's row of the sub-tile's weight gradients in shared memory (zero for an idle
          // lane, which contract_gh reads too).
          w("gw[" + str(32 * jw++) + "] = ok ? " + expr + " : real(0);");
        else
          w("if (gw && ok) stcs(gw + " + str(path.weight_offset) + " + u * " + str(b2.mul) + " + " +
            str(v) + ", " + expr + ");");
      }
      w.close();
    }
  }
  w.close();

  // grad_x: atomic adds per run of one sender (atomic mode) or one store per row.
  emit_gx_stores(w, "if (u >= " + str(g.mul) + ") return;", [&](bool atomic) {
    for (int a : g.in1_blocks) {
      const TpBlock& b = p_.in1()[a];
      for (int i = 0; i < b.dim(); ++i) {
        const std::string at = str(b.offset) + " + u * " + str(b.dim()) + " + " + str(i);
        const std::string v = "gx[" + str(gx_base[a] + i) + "]";
        w(atomic ? "atomicAdd(o + " + at + ", " + v + ");"
                 : gx_store("o[" + at + "]", v, gx_first[a]));
      }
    }
  });

  emit_gy_maps(w, g, gy_base, gy_first);
  // Transposed warp reduction of each batch of up to 32 values; the owner lane of a value
  // stores it into (or adds it to) the edge's shared-memory grad_Y row.
  w.open(
      "CLEBSCH_INLINE static void write_gy(real* row, int lane, bool accumulate, const real "
      "(&gy)[kGy]) {");
  for (int base = 0; base < n_gy; base += 32) {
    const int count = std::min(32, n_gy - base);
    w.open("{");
    w("const real v = Transposed<" + str(count) + ">::reduce<" + str(base) + ">(gy, lane);");
    w("constexpr int shift = Transposed<" + str(count) + ">::kShift;");
    w("const int j = " + str(base) + " + (lane >> shift);");
    w.open("if ((lane & ((1 << shift) - 1)) == 0 && j < " + str(base + count) + ") {");
    w("real* p = row + gy_offset(j);");
    w("*p = accumulate ? *p + v : v;");
    w.close();
    w.close();
  }
  w.close();
  w.close("};");
}

}  // namespace clebsch::cuda::emit_detail
