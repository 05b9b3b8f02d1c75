// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The receiver passes' groups with one channel per lane (forward and double forward, unrolled
// or looped form): per group a struct with the gathered operands (Ops, load()), the per-edge
// compute() into the lane's accumulators, and their add() and store() into the output row.
#include <map>

#include "clebsch/cuda/generator/emit_conv_detail.h"

namespace clebsch::cuda::emit_detail {

void ModuleEmitter::emit_receiver_group(Writer& w, const PassSchedule& ps, int gi) {
  const Group& g = ps.groups[gi];
  const bool dbl = is_double_pass(ps.pass);
  group_comment(w, ps, g, gi);
  std::map<int, int> base;  // out block -> first accumulator
  int n_acc = 0;
  for (int o : g.out_blocks) base[o] = n_acc, n_acc += p_.out()[o].dim();
  w.open("struct " + group_name(ps.pass, gi) + " {");
  w("static constexpr int kAcc = " + str(n_acc) + ";");
  emit_prefetch_constant(w, g);
  emit_ops_and_load(w, g, dbl, false);
  w.open(
      "CLEBSCH_INLINE static void compute(const Ops& o, const real* ys, const real* dys, real "
      "(&acc)[kAcc]) {");
  w("(void)ys, (void)dys;");
  emit_compute_prologue(w, g, dbl, false);
  for (int n : g.paths) {
    const TpPath& path = p_.paths()[n];
    if (path.cg.empty()) continue;
    const TpBlock& ob = p_.out()[path.out];
    const int m2 = p_.in2()[path.in2].mul, d3 = ob.dim();
    w(path_comment(path, n));
    for (int v = 0; v < m2; ++v) {
      w.open("{");
      if (looped_) {
        receiver_path_looped(w, n, v, dbl, base[path.out]);
        w.close();
        continue;
      }
      auto k_of = [](const CgEntry& e) { return e.k; };
      auto x_of = [&](const CgEntry& e) { return xn(path.in1, e.i); };
      auto dx_of = [&](const CgEntry& e) { return dxn(path.in1, e.i); };
      auto y_of = [&](const CgEntry& e) { return yn(path.in2, v, e.j); };
      auto dy_of = [&](const CgEntry& e) { return dyn(path.in2, v, e.j); };
      const std::vector<char> used = used_indices(path.cg, d3, k_of);
      if (!dbl) {
        contraction(w, "t", d3, path.cg, k_of, x_of, y_of, p_.dtype());
      } else {
        // t = T(dx, y) + T(x, dy): both contractions accumulate into one t.
        contraction(w, "t", d3, path.cg, k_of, dx_of, y_of, p_.dtype());
        w.open("{");
        contraction(w, "q", d3, path.cg, k_of, x_of, dy_of, p_.dtype());
        for (int k = 0; k < d3; ++k)
          if (used[k]) w("t" + str(k) + " += q" + str(k) + ";");
        w.close();
      }
      emit_accumulate(w, used, base[path.out], path.has_weight ? wn(n, v) : "",
                      [](int k) { return "t" + str(k); });
      if (dbl && path.has_weight) {
        // + dW T(x, y); dW is zero when absent.
        w.open("{");
        contraction(w, "s", d3, path.cg, k_of, x_of, y_of, p_.dtype());
        emit_accumulate(w, used, base[path.out], dwn(n, v), [](int k) { return "s" + str(k); });
        w.close();
      }
      w.close();
    }
  }
  w.close();
  emit_output_stores(w, "if (u >= " + str(g.mul) + ") return;", [&](bool atomic) {
    for (int o : g.out_blocks) {
      const TpBlock& b = p_.out()[o];
      for (int k = 0; k < b.dim(); ++k) {
        const std::string at = "o + " + str(b.offset) + " + u * " + str(b.dim()) + " + " + str(k);
        const std::string v = "acc[" + str(base[o] + k) + "]";
        w(atomic ? "atomicAdd(" + at + ", " + v + ");" : "*(" + at + ") = " + v + ";");
      }
    }
  });
  w.close("};");
}

}  // namespace clebsch::cuda::emit_detail
