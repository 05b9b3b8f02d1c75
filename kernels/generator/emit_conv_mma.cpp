// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The tensor-core variants of the matrix form (Group::unit kTensorCores,
// templates/conv_mma.cuh.in), float64 on sm_80 and later: the (double) forward's out = A M with the
// channels as the rows of m8n8k4 DMMAs, each lane building its own B fragments of M(Y) in registers
// (no shared-memory M), and the sender passes' grad_Y pair products P with the channels as the
// MMAs' k dimension, in place of the warp shuffles of emit_conv_matrix.cpp.
#include "clebsch/cuda/generator/emit_conv_detail.h"

namespace clebsch::cuda::emit_detail {

// Forward, float64 matrix group on the tensor cores (Group::unit): a warp covers 32 nc channels
// as 4 nc row tiles of 8 (lane 4 r + q: channel 8 m + r of tile m, k-step entry i = 4 s + q of
// A, C values k = 8 t + 2 q + h). Ops holds each lane's x entry per (in1 block, tile, k-step)
// and W per (instruction, Y channel, tile); per instruction and Y channel the lane builds its
// B entries of M(Y) in registers and the tiles run their MMAs, A = W x formed per tile.
void ModuleEmitter::emit_mma_receiver_group(Writer& w, const PassSchedule& ps, int gi) {
  const Group& g = ps.groups[gi];
  const int nc = g.lane_channels, tiles_m = 4 * nc, ob = g.out_blocks.at(0);
  const int d3 = p_.out()[ob].dim(), tiles_k = (d3 + 7) / 8;
  auto steps = [&](int a) { return (p_.in1()[a].dim() + 3) / 4; };
  auto xf = [&](int a, int m, int st) { return "x" + str(a) + "_" + str(m) + "_" + str(st); };
  auto wf = [&](int n, int v, int m) { return "w" + str(n) + "_" + str(v) + "_" + str(m); };
  const bool dbl = is_double_pass(ps.pass);
  auto dxf = [&](int a, int m, int st) { return "d" + xf(a, m, st); };
  auto dwf = [&](int n, int v, int m) { return "d" + wf(n, v, m); };
  group_comment(w, ps, g, gi);
  w("// float64 tensor cores: " + str(tiles_m) + " row tiles of 8 channels, " + str(tiles_k) +
    " column tile(s)");
  w.open("struct " + group_name(ps.pass, gi) + " {");
  w("static constexpr int kAcc = " + str(tiles_m * tiles_k * 2) + ";");
  w("static constexpr bool kPrefetch = false;");
  std::vector<std::string> names, loads;
  for (int m = 0; m < tiles_m; ++m) {
    const std::string ok = "ok" + str(m), c = "c" + str(m);
    for (int a : g.in1_blocks) {
      const TpBlock& b = p_.in1()[a];
      for (int st = 0; st < steps(a); ++st) {
        const bool partial = 4 * st + 4 > b.dim();
        const std::string in = partial ? " && q < " + str(b.dim() - 4 * st) : "";
        const std::string at = str(b.offset) + " + " + c + " * " + str(b.dim()) + " + " +
                               str(4 * st) + " + q) : real(0)";
        names.push_back(xf(a, m, st));
        loads.push_back("(" + ok + in + ") ? ldg(x + " + at);
        if (!dbl) continue;
        names.push_back(dxf(a, m, st));
        loads.push_back("(" + ok + in + " && dx) ? ldg(dx + " + at);
      }
    }
    for_each_weight(g, [&](const TpPath& path, int n, int v, int m2) {
      const std::string at =
          str(path.weight_offset) + " + " + c + " * " + str(m2) + " + " + str(v) + ") : real(0)";
      names.push_back(wf(n, v, m));
      loads.push_back("(" + ok + " && w) ? ldcs(w + " + at);
      if (!dbl) return;
      names.push_back(dwf(n, v, m));
      loads.push_back("(" + ok + " && dw) ? ldcs(dw + " + at);
    });
  }
  emit_ops_struct(w, names);
  const std::string first = "(u >> 5) * " + str(32 * nc) + " + ((u & 31) >> 2)";
  w.open("CLEBSCH_INLINE static void load(const ConvArgs& a, int s, int e, int u, Ops& o) {");
  w("const int q = u & 3;");
  emit_row_pointers(w, "s >= 0", dbl, false);
  if (dbl) w("(void)dx, (void)dw;");
  w("(void)x, (void)w, (void)q;");
  for (int m = 0; m < tiles_m; ++m) {
    w("const int c" + str(m) + " = " + first + " + " + str(8 * m) + ";");
    w("const bool ok" + str(m) + " = s >= 0 && c" + str(m) + " < " + str(g.mul) + ";");
  }
  for (std::size_t k = 0; k < names.size(); ++k) w("o." + names[k] + " = " + loads[k] + ";");
  w.close();
  w.open(
      "CLEBSCH_INLINE static void compute(const Ops& o, const real* ys, const real* dys, "
      "real (&acc)[kAcc]) {");
  w("(void)dys;");
  for (int n : g.paths) {
    const TpPath& path = p_.paths()[n];
    if (path.cg.empty()) continue;
    const TpBlock& b2 = p_.in2()[path.in2];
    const int a = path.in1, ns = steps(a);
    w(path_comment(path, n));
    for (int v = 0; v < b2.mul; ++v) {
      w.open("{");
      w("real b[" + str(ns) + "][" + str(tiles_k) + "];");
      // The double forward: (w dx + dW x) M(Y) + (w x) M(dY), one B set live at a time.
      for (int set = 0; set < (dbl ? 2 : 1); ++set) {
        const bool by_dy = set == 1;
        const char* y = by_dy ? "dys" : "ys";
        w("mma_fragments<" + str(ns) + ", " + str(tiles_k) + ", kMatrixJ>(b, kMFj" + str(n) +
          ", kMFc" + str(n) + ", " + y + " + " + str(b2.offset + v * b2.dim()) + ");");
        // k-step outermost: consecutive MMAs go to different accumulators, so that each
        // accumulator's chain waits for one MMA per k-step round, not per instruction.
        for (int st = 0; st < ns; ++st)
          for (int m = 0; m < tiles_m; ++m) {
            const std::string x = "o." + xf(a, m, st), wv = "o." + wf(n, v, m);
            std::string e = x;
            if (dbl && !by_dy)
              e = path.has_weight ? "madd(" + wv + ", o." + dxf(a, m, st) + ", o." + dwf(n, v, m) +
                                        " * " + x + ")"
                                  : "o." + dxf(a, m, st);
            else if (path.has_weight)
              e = wv + " * " + x;
            w.open("{");
            w("const real x = " + e + ";");
            for (int t = 0; t < tiles_k; ++t) {
              const int at = (m * tiles_k + t) * 2;
              w("mma_f64(acc[" + str(at) + "], acc[" + str(at + 1) + "], x, b[" + str(st) + "][" +
                str(t) + "]);");
            }
            w.close();
          }
      }
      w.close();
    }
  }
  w.close();
  const TpBlock& b = p_.out()[ob];
  emit_output_stores(w, "", [&](bool atomic) {
    w("const int q = u & 3;");
    for (int m = 0; m < tiles_m; ++m) {
      w("const int c" + str(m) + " = " + first + " + " + str(8 * m) + ";");
      w.open("if (c" + str(m) + " < " + str(g.mul) + ") {");
      for (int t = 0; t < tiles_k; ++t)
        for (int h = 0; h < 2; ++h) {
          const std::string k = str(8 * t + h) + " + 2 * q";
          const std::string at =
              "o + " + str(b.offset) + " + c" + str(m) + " * " + str(d3) + " + " + k;
          const std::string v = "acc[" + str((m * tiles_k + t) * 2 + h) + "]";
          const std::string put =
              atomic ? "atomicAdd(" + at + ", " + v + ");" : "*(" + at + ") = " + v + ";";
          // Columns past d3 are the padding of the last tile.
          w(8 * t + 8 > d3 ? "if (" + k + " < " + str(d3) + ") " + put : put);
        }
      w.close();
    }
  });
  w.close("};");
}

// The same sum on the tensor cores (Group::unit): P_ik over the warp's 32 nc channels by
// mma_pairs from the rows in memory, stored dense (i d3 + k) into pp by mma_store_pairs.
// Double passes: P = sum_u (w dx_ui + dW x_ui) g_uk, A formed as it loads (mma_pairs_double).
void ModuleEmitter::emit_mma_pairs(Writer& w, const Group& g, int n, int v, bool dbl) {
  const TpPath& path = p_.paths()[n];
  const TpBlock &b1 = p_.in1()[path.in1], &b2 = p_.in2()[path.in2], &b3 = p_.out()[path.out];
  const int d1 = b1.dim(), d3 = b3.dim(), mt = (d1 + 7) / 8, nt = (d3 + 7) / 8;
  const std::string tiles = str(mt) + ", " + str(nt);
  const std::string shape = tiles + ", " + str(g.lane_channels) + ", " + str(d1) + ", " + str(d3);
  const std::string rows = "o.gr + " + str(b3.offset) + ", ";
  const std::string tail = ", " + str(b2.mul) + ", u0 - lane, " + str(g.mul) + ");";
  const std::string x1 = " + " + str(b1.offset), wat = " + " + str(path.weight_offset + v);
  w("real pa[" + str(mt) + "][" + str(nt) + "][2] = {};");
  if (dbl && path.has_weight) {
    auto row = [](const std::string& r, const std::string& at) {
      return r + " ? " + r + at + " : nullptr";
    };
    w("mma_pairs_double<" + shape + ">(pa, o.xr" + x1 + ", " + row("o.dxr", x1) + ", " + rows +
      row("o.wr", wat) + ", " + row("o.dwr", wat) + tail);
  } else {
    // x by W (backward), dx alone (a double pass's instruction without weights).
    const std::string a = dbl ? "o.dxr" : "o.xr";
    const std::string wt = path.has_weight ? "o.wr" : "";
    std::string cond = dbl ? a : "";
    if (!wt.empty()) cond += (cond.empty() ? "" : " && ") + wt;
    const std::string call = "mma_pairs<" + shape + ", " + (wt.empty() ? "false" : "true") +
                             ">(pa, " + a + x1 + ", " + rows + (wt.empty() ? "nullptr" : wt + wat) +
                             tail;
    w(cond.empty() ? call : "if (" + cond + ") " + call);
  }
  w("mma_store_pairs<" + tiles + ", " + str(d1) + ", " + str(d3) + ">(pp, pa);");
}

}  // namespace clebsch::cuda::emit_detail
