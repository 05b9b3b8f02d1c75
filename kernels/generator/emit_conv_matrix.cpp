// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The matrix CG form's groups (ScheduleOptions::looped_cg_form: every pass of a looped module), one
// output block each. Per edge and instruction the warp builds M(Y)_ik = sum_j C_ijk Y_j once in
// its shared-memory scratch (tables kMj/kMc: the one or two j of each (i, k) and their C), and
// each lane contracts it densely with its channel's operands: t_k = sum_i x_i M_ik forward (M by
// rows k), a_i = sum_k M_ik g_k backward (grad_x, and grad_W = sum_i x_i a_i; M^T by rows i,
// tables kMTj/kMTc, so that a lane keeps one partial sum per channel, not d1). Per multiply-add
// a lane reads one shared-memory broadcast from 16-byte vector loads, no table and no indexed
// operand. A forward that gathered x row by row after the M build (i-major, accumulators only)
// ran 1.4-2.1x slower on the H200 (bench/NOTES.md run 11): x's latency no longer overlapped the
// build. grad_Y = sum_ik C_ijk P_ik needs P_ik = sum over channels of w x_i g_k: the lanes form
// the products of the instruction's non-zero (i, k) pairs (unrolled, operands in registers), sum
// them over the warp 32 pairs at a time with transposed shuffle reductions into shared memory,
// and lane j contracts P with C (tables kPptr/kPpair/kPc) into the warp's grad_Y row, which
// replaces the per-lane gy registers of the other forms. A group gives a lane up to four
// channels (Group::lane_channels), so that one M, its shared-memory loads and one warp reduction
// serve all of them. The code per instruction grows with d1 x d3 and its pair count, not with
// the non-zeros times the operand count. The double passes build M(Y) and M(dY) per
// instruction: the double forward sums (w dx + dW x) M(Y) + (w x) M(dY), the double backward
// forms M(Y)^T g and M(dY)^T g for grad_x and grad_W and the pair products (dW x_i + w dx_i) g_k
// for grad_Y (H200, high-l-5 double backward: float32 67.6 -> 12.5 ms, float64 81.4 -> 24.9
// against the looped form; run 11). The tensor-core variants are in emit_conv_mma.cpp.
// Channel h of a lane: u0 + 32 h, u0 = 32 * lane_channels * chunk + lane.
#include <map>

#include "clebsch/cuda/generator/emit_conv_detail.h"

namespace clebsch::cuda::emit_detail {

// struct Ops and load() of a matrix group: x, W (the double passes also dx, dW; the sender
// passes grad_out) of each of the lane's channels; zeros for a skipped edge, a channel past the
// multiplicity or an absent cotangent.
void ModuleEmitter::emit_matrix_ops(Writer& w, const Group& g, bool sender, bool dbl) {
  const int nc = g.lane_channels;
  std::vector<std::string> names;
  std::vector<std::string> loads;
  for (int h = 0; h < nc; ++h) {
    const std::string uh = "(u0 + " + str(32 * h) + ")", ok = "ok" + str(h);
    for (int a : g.in1_blocks) {
      const TpBlock& b = p_.in1()[a];
      for (int i = 0; i < b.dim(); ++i) {
        const std::string at =
            " + " + str(b.offset) + " + " + uh + " * " + str(b.dim()) + " + " + str(i) + ")";
        names.push_back(hs(xn(a, i), h));
        loads.push_back(ok + " ? ldg(x" + at + " : real(0)");
        if (!dbl) continue;
        names.push_back(hs(dxn(a, i), h));
        loads.push_back("(" + ok + " && dx) ? ldg(dx" + at + " : real(0)");
      }
    }
    for_each_weight(g, [&](const TpPath& path, int n, int v, int m2) {
      const std::string at =
          " + " + str(path.weight_offset) + " + " + uh + " * " + str(m2) + " + " + str(v) + ")";
      names.push_back(hs(wn(n, v), h));
      loads.push_back("(" + ok + " && w) ? ldcs(w" + at + " : real(0)");
      if (!dbl) return;
      names.push_back(hs(dwn(n, v), h));
      loads.push_back("(" + ok + " && dw) ? ldcs(dw" + at + " : real(0)");
    });
    if (sender)
      for (int o : g.out_blocks) {
        const TpBlock& b = p_.out()[o];
        for (int k = 0; k < b.dim(); ++k) {
          names.push_back(hs(gn(o, k), h));
          loads.push_back(ok + " ? ldg(gr + " + str(b.offset) + " + " + uh + " * " + str(b.dim()) +
                          " + " + str(k) + ") : real(0)");
        }
      }
  }
  // A sender group on the tensor cores also reads other lanes' channels (mma_pairs): the
  // edge's rows.
  const bool rows = sender && g.on_tensor_cores();
  emit_ops_struct(
      w, names,
      rows ? std::string("const real *xr, *wr, *gr") + (dbl ? ", *dxr, *dwr;" : ";") : "");
  w.open(std::string("CLEBSCH_INLINE static void load(const ConvArgs& a, int s, ") +
         (sender ? "int r, " : "") + "int e, int u, Ops& o) {");
  w("const int u0 = lane_channel(u);");
  for (int h = 0; h < nc; ++h)
    w("const bool ok" + str(h) + " = s >= 0 && u0 + " + str(32 * h) + " < " + str(g.mul) + ";");
  emit_row_pointers(w, "s >= 0", dbl, sender);
  w(std::string("(void)x, (void)w") + (dbl ? ", (void)dx, (void)dw" : "") + ";");
  for (std::size_t k = 0; k < names.size(); ++k) w("o." + names[k] + " = " + loads[k] + ";");
  if (rows)
    w(std::string("o.xr = x, o.wr = w, o.gr = gr") + (dbl ? ", o.dxr = dx, o.dwr = dw;" : ";"));
  w.close();
  w("CLEBSCH_INLINE static int lane_channel(int u) { return (u >> 5) * " + str(32 * nc) +
    " + (u & 31); }");
}

// "{{a_0, b_0}, {a_1, b_1}}": a [lane_channels][n] array initialiser.
std::string ModuleEmitter::channel_rows(int nc, int n,
                                        const std::function<std::string(int, int)>& at) const {
  std::string rows;
  for (int h = 0; h < nc; ++h) {
    std::string row;
    for (int m = 0; m < n; ++m) row += (m ? ", " : "") + at(h, m);
    rows += (h ? ", {" : "{") + row + "}";
  }
  return "{" + rows + "}";
}

// Builds M (receiver passes) or M^T (transposed: sender passes) of instruction n from channel
// v of Y (or of dY: ys "dys") into the buffer m.
std::string ModuleEmitter::build_call(int n, int v, bool transposed, const std::string& m,
                                      const std::string& ys) const {
  const TpPath& path = p_.paths()[n];
  const TpBlock& b2 = p_.in2()[path.in2];
  const int d1 = p_.in1()[path.in1].dim(), d3 = p_.out()[path.out].dim();
  const int size = transposed ? d1 * stride(d3) : d3 * stride(d1);
  const std::string t = transposed ? "kMT" : "kM";
  return "build_matrix<" + str(size) + ", kMatrixJ>(" + m + ", " + t + "j" + str(n) + ", " + t +
         "c" + str(n) + ", " + ys + " + " + str(b2.offset + v * b2.dim()) + ");";
}

// Receiver pass, matrix form: per instruction and Y channel v the warp builds M (two buffers
// alternate, so one barrier per instruction suffices), each lane contracts it with the x of
// its channels.
void ModuleEmitter::emit_matrix_receiver_group(Writer& w, const PassSchedule& ps, int gi) {
  const Group& g = ps.groups[gi];
  if (g.on_tensor_cores()) return emit_mma_receiver_group(w, ps, gi);
  const int nc = g.lane_channels, ob = g.out_blocks.at(0), d3 = p_.out()[ob].dim();
  group_comment(w, ps, g, gi);
  w("// matrix form, " + str(nc) + " channel(s) per lane");
  w.open("struct " + group_name(ps.pass, gi) + " {");
  w("static constexpr int kAcc = " + str(nc * d3) + ";");
  emit_prefetch_constant(w, g);
  const bool dbl = is_double_pass(ps.pass);
  emit_matrix_ops(w, g, false, dbl);
  w.open(
      "CLEBSCH_INLINE static void compute(const Ops& o, const real* ys, const real* dys, "
      "real (&acc)[kAcc]) {");
  w("(void)dys;");
  w("real* ms = matrix_scratch<" + cfg_name(ps.pass) + ">();");
  int parity = 0;
  for (int n : g.paths) {
    const TpPath& path = p_.paths()[n];
    if (path.cg.empty()) continue;
    const int d1 = p_.in1()[path.in1].dim();
    w(path_comment(path, n));
    for (int v = 0; v < p_.in2()[path.in2].mul; ++v) {
      w.open("{");
      if (dbl) {
        emit_matrix_double_forward(w, g, n, v, parity, d3);
        parity ^= 1;
        w.close();
        continue;
      }
      w("real* mm = ms + " + str(parity) + " * kMatrixStride;");
      parity ^= 1;
      w(build_call(n, v, false));
      w("const real xa[" + str(nc) + "][" + str(d1) + "] = " +
        channel_rows(nc, d1, [&](int h, int i) { return "o." + hs(xn(path.in1, i), h); }) + ";");
      w("real t[" + str(nc) + "][" + str(d3) + "];");
      w("matrix_apply<" + str(nc) + ", " + str(d1) + ", " + str(stride(d1)) + ", " + str(d3) +
        ">(xa, mm, t);");
      for (int h = 0; h < nc; ++h)
        for (int k = 0; k < d3; ++k) {
          const std::string acc = "acc[" + str(h * d3 + k) + "]";
          const std::string tk = "t[" + str(h) + "][" + str(k) + "]";
          w(path.has_weight ? acc + " = madd(o." + hs(wn(n, v), h) + ", " + tk + ", " + acc + ");"
                            : acc + " += " + tk + ";");
        }
      w.close();
    }
  }
  // The next edge's first instruction may rebuild the buffer a slower lane still reads.
  w("__syncwarp();");
  w.close();
  const TpBlock& b = p_.out()[ob];
  emit_output_stores(w, "", [&](bool atomic) {
    w("const int u0 = lane_channel(u);");
    for (int h = 0; h < nc; ++h) {
      w.open("if (u0 + " + str(32 * h) + " < " + str(g.mul) + ") {");
      for (int k = 0; k < d3; ++k) {
        const std::string at =
            "o + " + str(b.offset) + " + (u0 + " + str(32 * h) + ") * " + str(d3) + " + " + str(k);
        const std::string v = "acc[" + str(h * d3 + k) + "]";
        w(atomic ? "atomicAdd(" + at + ", " + v + ");" : "*(" + at + ") = " + v + ";");
      }
      w.close();
    }
  });
  w.close("};");
}

// Double forward, matrix form, instruction n and Y channel v: the warp builds M(Y) and M(dY)
// (buffer set `parity`), each lane sums (w dx + dW x) M(Y) + (w x) M(dY) into the
// accumulators: T(dx, Y) w + T(x, dY) w + T(x, Y) dW, the weights folded into the rows.
void ModuleEmitter::emit_matrix_double_forward(Writer& w, const Group& g, int n, int v, int parity,
                                               int d3) {
  const TpPath& path = p_.paths()[n];
  const int nc = g.lane_channels, d1 = p_.in1()[path.in1].dim();
  w("real* mm = ms + " + str(2 * parity) + " * kMatrixStride;");
  w("real* md = ms + " + str(2 * parity + 1) + " * kMatrixStride;");
  w(build_call(n, v, false));
  w(build_call(n, v, false, "md", "dys"));
  auto x = [&](int h, int i) { return "o." + hs(xn(path.in1, i), h); };
  auto dx = [&](int h, int i) { return "o." + hs(dxn(path.in1, i), h); };
  const std::string wv = wn(n, v), dwv = dwn(n, v);
  w("const real xe[" + str(nc) + "][" + str(d1) + "] = " +
    channel_rows(nc, d1,
                 [&](int h, int i) {
                   return path.has_weight ? "madd(o." + hs(wv, h) + ", " + dx(h, i) + ", o." +
                                                hs(dwv, h) + " * " + x(h, i) + ")"
                                          : dx(h, i);
                 }) +
    ";");
  w("const real xw[" + str(nc) + "][" + str(d1) + "] = " +
    channel_rows(nc, d1,
                 [&](int h, int i) {
                   return path.has_weight ? "o." + hs(wv, h) + " * " + x(h, i) : x(h, i);
                 }) +
    ";");
  w("real t[" + str(nc) + "][" + str(d3) + "], q[" + str(nc) + "][" + str(d3) + "];");
  const std::string shape =
      "<" + str(nc) + ", " + str(d1) + ", " + str(stride(d1)) + ", " + str(d3) + ">";
  w("matrix_apply" + shape + "(xe, mm, t);");
  w("matrix_apply" + shape + "(xw, md, q);");
  for (int h = 0; h < nc; ++h)
    for (int k = 0; k < d3; ++k) {
      const std::string acc = "acc[" + str(h * d3 + k) + "]";
      const std::string hk = "[" + str(h) + "][" + str(k) + "]";
      w(acc + " += t" + hk + " + q" + hk + ";");
    }
}

// Sender pass, matrix form: per instruction and Y channel v the warp builds M; each lane forms
// a_i = sum_k M_ik g_k for its channels (grad_x, and grad_W = sum_i x_i a_i), and grad_Y comes
// from the products w x_i g_k of the instruction's pairs, summed over the lane's channels in
// registers and over the warp 32 pairs at a time (transposed reductions; on the tensor cores
// in a group with Group::unit kTensorCores) into P, contracted with C by lane j into the warp's
// grad_Y row gys (the per-lane gy of the other forms is a one-value placeholder here).
void ModuleEmitter::emit_matrix_sender_group(Writer& w, const PassSchedule& ps, int gi) {
  const Group& g = ps.groups[gi];
  const int nc = g.lane_channels;
  group_comment(w, ps, g, gi);
  w("// matrix form, " + str(nc) + " channel(s) per lane");
  SenderLayout lay = sender_layout(ps, gi);
  std::map<int, int>&gx_base = lay.gx_base, &gy_base = lay.gy_base;
  const int n_gx = lay.n_gx, n_gy = lay.n_gy;
  const std::vector<char>&gx_first = lay.gx_first, &gy_first = lay.gy_first;
  w.open("struct " + group_name(ps.pass, gi) + " {");
  w("static constexpr int kGx = " + str(nc * n_gx) + ", kGy = 1, kChunks = " + str(g.chunks) + ";");
  emit_prefetch_constant(w, g);
  const bool dbl = is_double_pass(ps.pass);
  // Scratch: the matrices of two instructions (M^T(Y); double: and M^T(dY)), two P buffers,
  // the grad_Y row.
  const int mats = dbl ? 2 : 1, gys_at = 2 * mats + 2;
  emit_matrix_ops(w, g, true, dbl);
  w.open(
      "CLEBSCH_INLINE static void compute(const Ops& o, const real* ys, const real* dys, "
      "real* gw, int u, real (&gx)[kGx], real (&gy)[kGy]) {");
  w("(void)dys, (void)gy;");
  w("const int lane = threadIdx.x & 31, u0 = lane_channel(u);");
  w("real* ms = matrix_scratch<" + cfg_name(ps.pass) + ">();");
  w("real* gys = ms + " + str(gys_at) + " * kMatrixStride;");
  w("for (int j = lane; j < " + str(n_gy) + "; j += 32) gys[j] = real(0);");
  int parity = 0;
  for (int n : g.paths) {
    const TpPath& path = p_.paths()[n];
    if (path.cg.empty()) continue;
    const TpBlock &b1 = p_.in1()[path.in1], &b2 = p_.in2()[path.in2];
    const int d1 = b1.dim(), d2 = b2.dim(), d3 = p_.out()[path.out].dim();
    w(path_comment(path, n));
    for (int v = 0; v < b2.mul; ++v) {
      w.open("{");
      w("real* mm = ms + " + str(mats * parity) + " * kMatrixStride;");
      if (dbl) w("real* md = ms + " + str(2 * parity + 1) + " * kMatrixStride;");
      w("real* pp = ms + " + str(2 * mats + parity) + " * kMatrixStride;");
      parity ^= 1;
      w(build_call(n, v, true));
      if (dbl) w(build_call(n, v, true, "md", "dys"));
      w("const real ga[" + str(nc) + "][" + str(d3) + "] = " +
        channel_rows(nc, d3, [&](int h, int k) { return "o." + hs(gn(path.out, k), h); }) + ";");
      const std::string shape =
          "<" + str(nc) + ", " + str(d1) + ", " + str(d3) + ", " + str(stride(d3)) + ">";
      w("real ca[" + str(nc) + "][" + str(d1) + "];");
      w("matrix_apply_transposed" + shape + "(ga, mm, ca);");
      if (dbl) {
        w("real cpa[" + str(nc) + "][" + str(d1) + "];");
        w("matrix_apply_transposed" + shape + "(ga, md, cpa);");
      }
      for (int h = 0; h < nc; ++h) {
        std::string gw_expr = "real(0)";
        for (int i = 0; i < d1; ++i) {
          const std::string gx = "gx[" + str(h * n_gx + gx_base[path.in1] + i) + "]";
          const std::string hi = "[" + str(h) + "][" + str(i) + "]";
          const std::string a = "ca" + hi, ap = "cpa" + hi;
          const std::string x = "o." + hs(xn(path.in1, i), h), wv = "o." + hs(wn(n, v), h);
          if (!dbl) {
            w(path.has_weight ? gx + " = madd(" + wv + ", " + a + ", " + gx + ");"
                              : gx + " += " + a + ";");
            gw_expr = "madd(" + x + ", " + a + ", " + gw_expr + ")";
          } else if (path.has_weight) {
            // grad_x += dW a + w a'; grad_W = sum_i dx_i a_i + x_i a'_i.
            w(gx + " = madd(o." + hs(dwn(n, v), h) + ", " + a + ", madd(" + wv + ", " + ap + ", " +
              gx + "));");
            gw_expr = "madd(" + x + ", " + ap + ", madd(o." + hs(dxn(path.in1, i), h) + ", " + a +
                      ", " + gw_expr + "))";
          } else {
            w(gx + " += " + ap + ";");
          }
        }
        if (path.has_weight)
          w("if (gw && u0 + " + str(32 * h) + " < " + str(g.mul) + ") stcs(gw + " +
            str(path.weight_offset) + " + (u0 + " + str(32 * h) + ") * " + str(b2.mul) + " + " +
            str(v) + ", " + gw_expr + ");");
      }
      // grad_Y last: a and a' are dead by then, which the pair products' registers reuse.
      if (g.on_tensor_cores())
        emit_mma_pairs(w, g, n, v, dbl);
      else
        emit_shuffle_pairs(w, g, n, v, dbl);
      w("matrix_grad_y<" + str(d2) + ">(gys + " + str(gy_base[path.in2] + v * d2) + ", pp, kPptr" +
        str(n) + (g.on_tensor_cores() ? ", kPdense" : ", kPpair") + str(n) + ", kPc" + str(n) +
        ");");
      w.close();
    }
  }
  // The next edge's first instruction may rebuild the buffers a slower lane still reads.
  w("__syncwarp();");
  w.close();
  emit_gx_stores(w, "", [&](bool atomic) {
    w("const int u0 = lane_channel(u);");
    for (int h = 0; h < nc; ++h) {
      w.open("if (u0 + " + str(32 * h) + " < " + str(g.mul) + ") {");
      for (int a : g.in1_blocks) {
        const TpBlock& b = p_.in1()[a];
        for (int i = 0; i < b.dim(); ++i) {
          const std::string at = "o[" + str(b.offset) + " + (u0 + " + str(32 * h) + ") * " +
                                 str(b.dim()) + " + " + str(i) + "]";
          const std::string v = "gx[" + str(h * n_gx + gx_base[a] + i) + "]";
          w(atomic ? "atomicAdd(&" + at + ", " + v + ");" : gx_store(at, v, gx_first[a]));
        }
      }
      w.close();
    }
  });
  emit_gy_maps(w, g, gy_base, gy_first);
  // The lane-summed row gys is copied (or added) into the edge's shared-memory grad_Y row; the
  // barrier after keeps the next edge's zeroing of gys behind the copy.
  w.open(
      "CLEBSCH_INLINE static void write_gy(real* row, int lane, bool accumulate, const real "
      "(&gy)[kGy]) {");
  w("(void)gy;");
  w("const real* gys = matrix_scratch<" + cfg_name(ps.pass) + ">() + " + str(gys_at) +
    " * kMatrixStride;");
  w.open("for (int j = lane; j < " + str(n_gy) + "; j += 32) {");
  w("real* p = row + gy_offset(j);");
  w("*p = accumulate ? *p + gys[j] : gys[j];");
  w.close();
  w("__syncwarp();");
  w.close();
  w.close("};");
}

// grad_Y's pair products of instruction n, Y channel v: xe_i g_k with xe = w x (double:
// w dx + dW x; without weights x, dx), summed over the lane's channels in registers and over
// the warp 32 pairs at a time (transposed reductions) into pp at the pair's position in
// pairs(n). The weights go into xe once per i (d1 values live beside grad_out) rather than
// into grad_out per k (the double pass needed w g and dW g: 2 d3).
void ModuleEmitter::emit_shuffle_pairs(Writer& w, const Group& g, int n, int v, bool dbl) {
  const TpPath& path = p_.paths()[n];
  const int nc = g.lane_channels, d1 = p_.in1()[path.in1].dim();
  auto xe = [&](int i, int h) { return "xe" + str(i) + "_" + str(h); };
  for (int h = 0; h < nc; ++h)
    for (int i = 0; i < d1; ++i) {
      const std::string x = "o." + hs(xn(path.in1, i), h), dx = "o." + hs(dxn(path.in1, i), h);
      const std::string wv = "o." + hs(wn(n, v), h), dwv = "o." + hs(dwn(n, v), h);
      std::string e = dbl ? dx : x;
      if (path.has_weight)
        e = dbl ? "madd(" + wv + ", " + dx + ", " + dwv + " * " + x + ")" : wv + " * " + x;
      w("const real " + xe(i, h) + " = " + e + ";");
    }
  const std::vector<std::pair<int, int>> pl = pairs(n);
  for (std::size_t base = 0; base < pl.size(); base += 32) {
    const int count = int(std::min<std::size_t>(32, pl.size() - base));
    std::string init;
    for (int q = 0; q < count; ++q) {
      const auto [i, k] = pl[base + q];
      std::string e;
      for (int h = 0; h < nc; ++h) {
        const std::string a = xe(i, h), b = "o." + hs(gn(path.out, k), h);
        e = e.empty() ? a + " * " + b : "madd(" + a + ", " + b + ", " + e + ")";
      }
      init += (q ? ", " : "") + e;
    }
    w.open("{");
    w("const real pv[" + str(count) + "] = {" + init + "};");
    w("store_reduced<" + str(count) + ">(pp, " + str(int(base)) + ", Transposed<" + str(count) +
      ">::reduce<0>(pv, lane), lane);");
    w.close();
  }
}

}  // namespace clebsch::cuda::emit_detail
