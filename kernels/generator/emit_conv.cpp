// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// emit_conv_module(): the CUDA source of a convolution module (see emit_conv.h). The device
// helpers and the pass loops come from templates/*.cuh.in verbatim; this file writes what is
// specific to the problem: constants, one struct per group and pass with the unrolled per-edge
// body and the stores, and the kernel entry points that dispatch grid rows or loop over units.
//
// Per-edge math of one uvu path (channel u, second-operand channel v, CG entries (i, j, k, C)):
//   forward          acc_k += w t_k,            t_k = sum C x_i y_j
//   backward         gx_i += w a_i, gy_j += w b_j, gw = sum_i x_i a_i,
//                    a_i = sum C y_j g_k,       b_j = sum C x_i g_k
//   double forward   acc_k += w (T(dx,y) + T(x,dy))_k + dw T(x,y)_k
//   double backward  gx_i += w a'_i + dw a_i, gy_j += w b'_j + dw b_j,
//                    gw = sum_i (dx_i a_i + x_i a'_i),  a' = a with dy, b' = b with dx
// (w = 1 and dw = 0 for an instruction without weights, which then has no gw).
//
// Three forms of the per-edge contractions, chosen per module (ScheduleOptions::loop_cg_above)
// and pass (ScheduleOptions::matrix_cg):
//   - unrolled (the default, every MACE/NequIP model with l <= 3): one multiply-add per CG entry
//     with the coefficient as an immediate; fastest to run, but NVRTC's time grows much faster
//     than the code: 55-60 s per module at l = 4, 3-6 min at l = 6, 20+ min at l = 7;
//   - looped (a module whose largest instruction has more non-zeros than the threshold, 100 by
//     default: l >= 5): per instruction and per index (i, j, k) a table of its entries ordered
//     by that index (kCgIjk<n><a>: i | j << 8 | k << 16, kCgC<n><a>: C) in global memory; for
//     each output index one `#pragma unroll 1` loop over its entries sums into a register
//     (outputs are never read back per entry); the operands x, dx, grad_out are copied to small
//     local arrays that the loop indexes with loop variables (local memory), Y and dY are read
//     from the staged shared-memory rows. The code per instruction is constant in its non-zero
//     count. Every output value is summed in CG order with the same products and fused
//     multiply-adds as the unrolled form (test_kernels_emulated checks it against the host
//     reference with the form forced on small problems). Measured on the H200 (bench/NOTES.md):
//     about 9x slower than the unrolled form at l = 4 (forward 4.6 ms against 0.52 ms in float32)
//     and only 3-4x faster than e3nn at l = 5: it keeps l >= 5 compilable, not fast. The per-
//     entry operand and table loads are the cost. Looped modules use the matrix form below in
//     every pass by default; the looped form is what matrix_cg (and matrix_cg_double) false give;
//   - matrix (every pass of a looped module): per edge and instruction the warp builds
//     M(Y)_ik = sum_j C_ijk Y_j once in its shared-memory scratch (tables kMj/kMc:
//     the one or two j of each (i, k) and their C), and each lane contracts it densely with its
//     channel's operands: t_k = sum_i x_i M_ik forward (M by rows k), a_i = sum_k M_ik g_k
//     backward (grad_x, and grad_W = sum_i x_i a_i; M^T by rows i, tables kMTj/kMTc, so that a
//     lane keeps one partial sum per channel, not d1). Per multiply-add a lane reads one
//     shared-memory broadcast from 16-byte vector loads, no table and no indexed operand.
//     A forward that gathered x row by row after the M build (i-major, accumulators only) ran
//     1.4-2.1x slower on the H200 (bench/NOTES.md run 11): x's latency no longer overlapped the
//     build. grad_Y = sum_ik C_ijk P_ik needs P_ik = sum over channels of w x_i g_k: the
//     lanes form the products of the instruction's non-zero (i, k) pairs (unrolled, operands
//     in registers), sum them over the
//     warp 32 pairs at a time with transposed shuffle reductions into shared memory, and lane
//     j contracts P with C (tables kPptr/kPpair/kPc) into the warp's grad_Y row, which replaces
//     the per-lane gy registers of the other forms. Its groups hold one output block each and
//     give a lane up to four channels (Group::lane_channels), so that one M, its shared-memory
//     loads and one warp reduction serve all of them. The code per instruction grows with
//     d1 x d3 and its pair count, not with the non-zeros times the operand count. The double
//     passes build M(Y) and M(dY) per instruction: the double forward sums (w dx + dW x) M(Y) +
//     (w x) M(dY), the double backward forms M(Y)^T g and M(dY)^T g for grad_x and grad_W and
//     the pair products (dW x_i + w dx_i) g_k for grad_Y (H200, high-l-5 double backward:
//     float32 67.6 -> 12.5 ms, float64 81.4 -> 24.9 against the looped form; run 11).
//     float64 groups may run their contraction on the tensor cores instead (Group::mma,
//     templates/conv_mma.cuh.in): the (double) forward's out = A M with the channels as rows,
//     the sender passes' P with the channels as the k dimension.
#include "clebsch/cuda/generator/emit_conv.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>
#include <sstream>

#include "clebsch/support/error.h"
#include "kernel_templates.h"

namespace clebsch::cuda {
namespace {

std::string str(int v) { return std::to_string(v); }

// Indented line writer.
class Writer {
 public:
  Writer& operator()(const std::string& text) {
    if (!text.empty()) os_ << std::string(2 * depth_, ' ') << text;
    os_ << '\n';
    return *this;
  }
  void open(const std::string& text) {
    (*this)(text);
    ++depth_;
  }
  void close(const std::string& text = "}") {
    --depth_;
    (*this)(text);
  }
  void raw(const std::string& text) { os_ << text; }
  std::string str() const { return os_.str(); }

 private:
  std::ostringstream os_;
  int depth_ = 0;
};

std::string block_name(const TpBlock& b) { return blocks_str({b}); }

// Value names of the unrolled code.
std::string xn(int a, int i) { return "x" + str(a) + "_" + str(i); }
std::string dxn(int a, int i) { return "dx" + str(a) + "_" + str(i); }
std::string yn(int b, int v, int j) { return "y" + str(b) + "_" + str(v) + "_" + str(j); }
std::string dyn(int b, int v, int j) { return "dy" + str(b) + "_" + str(v) + "_" + str(j); }
std::string gn(int o, int k) { return "g" + str(o) + "_" + str(k); }
std::string wn(int path, int v) { return "w" + str(path) + "_" + str(v); }
std::string dwn(int path, int v) { return "dw" + str(path) + "_" + str(v); }

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

// One accumulation of the looped form: out[index] += C * left[left_index] * right[right_index],
// the indices being the loop's ci, cj, ck.
struct LoopTerm {
  std::string out, index, left, left_index, right, right_index;
};

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

class ModuleEmitter {
 public:
  ModuleEmitter(const TpProblem& p, const Schedule& s)
      : p_(p), s_(s), looped_(uses_looped_cg(p, s.options)) {
    for (const PassSchedule& ps : s.passes) any_matrix_ |= ps.smem.m_offset >= 0;
    for (Pass pass : {Pass::kForward, Pass::kDoubleForward})
      for (const Group& g : s.pass(pass).groups) forward_mma_ |= g.mma;
    for (const PassSchedule& ps : s.passes)
      for (const Group& g : ps.groups) any_mma_ |= g.mma;
  }

  std::string run() {
    Writer w;
    w("// clebsch conv module | problem " + p_.hash_hex() + " | generator " +
      str(kGeneratorVersion));
    w("// " + p_.str());
    w("// schedule: " + s_.str());
    if (looped_)
      w("// looped CG form: the largest instruction has more than " +
        str(s_.options.loop_cg_above) + " CG non-zeros");
    // Module text, pinned by the golden file: the path is the generator's as it was when the
    // line was written (before kernels/generator/), kept so that modules and cache keys stay.
    w("// Generated by kernels/emit_conv.cpp: CG coefficients in e3nn's real basis (m = -l..l),");
    w("// Frobenius-normalised wigner_3j times the path coefficient, as literals.");
    w("typedef " + std::string(p_.dtype() == DType::kFloat32 ? "float" : "double") + " real;");
    w("constexpr int kDim1 = " + str(p_.dim_in1()) + ", kDim2 = " + str(p_.dim_in2()) +
      ", kDimOut = " + str(p_.dim_out()) + ", kNumWeights = " + str(p_.weight_numel()) + ";");
    w("constexpr int kWarps = " + str(s_.options.warps_per_block) + ";");
    w(std::string("constexpr bool kDeterministic = ") +
      (p_.accumulation() == Accumulation::kDeterministic ? "true" : "false") + ";");
    w.raw(templates::k_conv_prelude);
    w.raw(templates::k_conv_passes);
    bool any_looped_pass = false;  // the double passes may be in the matrix form too
    for (const PassSchedule& ps : s_.passes) any_looped_pass |= !matrix(ps.pass);
    if (looped_ && any_looped_pass) emit_cg_tables(w);
    if (any_matrix_) {
      w.raw(templates::k_conv_matrix);
      if (any_mma_) w.raw(templates::k_conv_mma);
      emit_matrix_tables(w);
    }
    for (const PassSchedule& ps : s_.passes) {
      w("");
      w("// ==== " + to_string(ps.pass) + " pass " + std::string(60, '='));
      emit_config(w, ps);
      for (std::size_t g = 0; g < ps.groups.size(); ++g) {
        const bool mat = matrix(ps.pass);
        if (is_receiver_pass(ps.pass)) {
          if (mat)
            emit_matrix_receiver_group(w, ps, int(g));
          else
            emit_receiver_group(w, ps, int(g));
          emit_receiver_kernel(w, ps, int(g));
        } else {
          if (mat)
            emit_matrix_sender_group(w, ps, int(g));
          else
            emit_sender_group(w, ps, int(g));
          emit_sender_kernel(w, ps, int(g));
        }
      }
    }
    return w.str();
  }

 private:
  std::string lit(double c) const { return emit_literal(c, p_.dtype()); }
  std::string cfg_name(Pass pass) const {
    switch (pass) {
      case Pass::kForward: return "CfgForward";
      case Pass::kBackward: return "CfgBackward";
      case Pass::kDoubleForward: return "CfgDoubleForward";
      case Pass::kDoubleBackward: return "CfgDoubleBackward";
    }
    return "?";
  }
  std::string group_name(Pass pass, int g) const {
    return cfg_name(pass).substr(3) + "Group" + str(g);
  }

  // Instruction n's CG entries ordered by one of their indices (axis 'i', 'j' or 'k'), stably:
  // within one value of that index the entries stay in CG order.
  std::vector<std::size_t> order_by(std::size_t n, char axis) const {
    const std::vector<CgEntry>& cg = p_.paths()[n].cg;
    std::vector<std::size_t> order(cg.size());
    for (std::size_t m = 0; m < order.size(); ++m) order[m] = m;
    auto key = [&](std::size_t m) {
      return axis == 'i' ? cg[m].i : axis == 'j' ? cg[m].j : cg[m].k;
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return key(a) < key(b); });
    return order;
  }

  // "decl[n] = { ... };": per_line formatted values a line.
  template <class T>
  void table(Writer& w, const std::string& decl, const std::vector<T>& values, int per_line,
             const std::function<std::string(const T&)>& fmt) {
    w.open(decl + "[" + str(int(values.size())) + "] = {");
    for (std::size_t m = 0; m < values.size(); m += per_line) {
      std::string line;
      for (std::size_t q = m; q < std::min(values.size(), m + per_line); ++q)
        line += fmt(values[q]) + ", ";
      w(line.substr(0, line.size() - 1));
    }
    w.close("};");
  }

  // The CG tables of the looped form: per instruction and per index (i, j, k) the entries in
  // the order of that index (order_by), so that a loop over the entries of one output index
  // sums into a register. l <= 8: an index fits 8 bits. Global memory, not __constant__
  // (high-l-8 float64 needs 840 KB for the three orders).
  void emit_cg_tables(Writer& w) {
    w("");
    w("// ==== CG tables (looped form) " + std::string(60, '='));
    w("// kCgIjk<n><a>[m] = i | j << 8 | k << 16 and kCgC<n><a>[m] = C: entries of instruction n");
    w("// ordered by index a (CG order within each value of it).");
    for (std::size_t n = 0; n < p_.paths().size(); ++n) {
      const std::vector<CgEntry>& cg = p_.paths()[n].cg;
      if (cg.empty()) continue;
      for (char axis : {'i', 'j', 'k'}) {
        const std::vector<std::size_t> order = order_by(n, axis);
        const std::string tag = str(int(n)) + axis;
        std::vector<unsigned> ijk;
        std::vector<double> c;
        for (std::size_t m : order) {
          const CgEntry& e = cg[m];
          ijk.push_back(unsigned(e.i | e.j << 8 | e.k << 16));
          c.push_back(e.c);
        }
        table<unsigned>(w, "__device__ const unsigned kCgIjk" + tag, ijk, 12,
                        [](const unsigned& v) { return str(int(v)) + "u"; });
        table<double>(w, "__device__ const real kCgC" + tag, c, 6,
                      [&](const double& v) { return lit(v); });
      }
    }
  }

  // The loops of the looped form over instruction n's tables. Terms are grouped by the index
  // of their output (ci, cj or ck); for each value of it that has entries, one `#pragma unroll
  // 1` loop walks them (the table ordered by that index) and sums every term of the group into
  // a register, stored once into the output array at a constant index: no output is read and
  // written through local memory per entry, and the code does not grow with the non-zero count.
  void cg_loop(Writer& w, int n, const std::vector<LoopTerm>& terms) {
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
  void receiver_path_looped(Writer& w, int n, int v, bool dbl, int acc_base) {
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
    for (int k = 0; k < d3; ++k) {
      if (!used[k]) continue;
      const std::string acc = "acc[" + str(acc_base + k) + "]";
      if (path.has_weight)
        w(acc + " = madd(" + wn(n, v) + ", t[" + str(k) + "], " + acc + ");");
      else
        w(acc + " += t[" + str(k) + "];");
    }
    if (with_s)
      for (int k = 0; k < d3; ++k) {
        if (!used[k]) continue;
        const std::string acc = "acc[" + str(acc_base + k) + "]";
        w(acc + " = madd(" + dwn(n, v) + ", s[" + str(k) + "], " + acc + ");");
      }
  }

  // Sender pass, looped form: the contractions a, b (and a', b') of instruction n and channel v
  // into the arrays ca, cb (cpa, cpb); the caller writes them out as in the unrolled form.
  void sender_contractions_looped(Writer& w, int n, int v, bool dbl) {
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

  bool matrix(Pass pass) const { return s_.pass(pass).smem.m_offset >= 0; }
  int stride(int d) const { return matrix_cg_stride(d, p_.dtype()); }

  // Instruction n's non-zero (i, k) pairs in (i, k) order: the products x_i grad_out_k of the
  // matrix form's grad_Y, and their positions in its P buffer.
  std::vector<std::pair<int, int>> pairs(int n) const {
    std::vector<std::pair<int, int>> v;
    for (const CgEntry& e : p_.paths()[n].cg) v.push_back({e.i, e.k});
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  }

  // Largest number of CG entries of one (i, k) pair over the module: the terms of an M entry.
  int matrix_j() const {
    int most = 1;
    for (const TpPath& path : p_.paths()) {
      std::map<std::pair<int, int>, int> count;
      for (const CgEntry& e : path.cg) most = std::max(most, ++count[{e.i, e.k}]);
    }
    return most;
  }

  // The matrix form's tables, per instruction n with entries: for the receiver passes
  // kMj<n>/kMc<n> build M (entry q = k * stride(d1) + i: the j of its terms, 8 bits each, and
  // their C, zero in unused slots and in the padding); for the sender passes kMTj<n>/kMTc<n>
  // build M^T (entry q = i * stride(d3) + k), and kPptr<n>/kPpair<n>/kPc<n> list the entries by
  // j (CG order within one j) as positions in the pair list and C.
  // One M (or M^T) table pair <name>j<tag>/<name>c<tag> of `size` entries, entry at(e) of each
  // CG entry.
  void emit_m_table(Writer& w, const std::string& name, const std::string& tag,
                    const TpPath& path, int kj, int size,
                    const std::function<int(const CgEntry&)>& at) {
    std::vector<unsigned> js(std::size_t(size), 0u);
    std::vector<double> cs(js.size() * kj, 0.0);
    std::vector<int> used(js.size(), 0);
    for (const CgEntry& e : path.cg) {
      const std::size_t q = std::size_t(at(e));
      js[q] |= unsigned(e.j) << (8 * used[q]);
      cs[q * kj + used[q]++] = e.c;
    }
    table<unsigned>(w, "__device__ const unsigned " + name + "j" + tag, js, 12,
                    [](const unsigned& v) { return str(int(v)) + "u"; });
    table<double>(w, "__device__ const real " + name + "c" + tag, cs, 6,
                  [&](const double& v) { return lit(v); });
  }

  void emit_matrix_tables(Writer& w) {
    const int kj = matrix_j();
    if (kj > 4) throw Error("emit_conv_module: an (i, k) pair with more than 4 CG terms");
    w("");
    w("// ==== matrix CG form tables " + std::string(60, '='));
    w("constexpr int kMatrixJ = " + str(kj) + ", kMatrixStride = " + str(matrix_cg_buffer(p_)) +
      ";");
    for (std::size_t n = 0; n < p_.paths().size(); ++n) {
      const TpPath& path = p_.paths()[n];
      if (path.cg.empty()) continue;
      const int d1 = p_.in1()[path.in1].dim(), d3 = p_.out()[path.out].dim();
      const int d1p = stride(d1), d3p = stride(d3);
      const std::string tag = str(int(n));
      if (matrix(Pass::kForward) || matrix(Pass::kDoubleForward))
        emit_m_table(w, "kM", tag, path, kj, d3 * d1p,
                     [&](const CgEntry& e) { return e.k * d1p + e.i; });
      if (forward_mma_) {
        // Fragment order (mma_fragments): entry (s T + t) 32 + 4 (k % 8) + i % 4 for s = i / 4,
        // t = k / 8.
        const int steps = (d1 + 3) / 4, tiles = (d3 + 7) / 8;
        emit_m_table(w, "kMF", tag, path, kj, steps * tiles * 32, [&](const CgEntry& e) {
          return ((e.i / 4) * tiles + e.k / 8) * 32 + 4 * (e.k % 8) + e.i % 4;
        });
      }
      if (!matrix(Pass::kBackward) && !matrix(Pass::kDoubleBackward)) continue;
      emit_m_table(w, "kMT", tag, path, kj, d1 * d3p,
                   [&](const CgEntry& e) { return e.i * d3p + e.k; });
      const std::vector<std::pair<int, int>> pl = pairs(int(n));
      const std::vector<std::size_t> order = order_by(n, 'j');
      const int d2 = p_.in2()[path.in2].dim();
      std::vector<int> ptr(std::size_t(d2 + 1), 0);
      std::vector<unsigned> at;
      std::vector<double> c;
      for (std::size_t m : order) {
        const CgEntry& e = path.cg[m];
        ++ptr[std::size_t(e.j + 1)];
        at.push_back(unsigned(std::lower_bound(pl.begin(), pl.end(), std::make_pair(e.i, e.k)) -
                              pl.begin()));
        c.push_back(e.c);
      }
      for (int j = 0; j < d2; ++j) ptr[std::size_t(j + 1)] += ptr[std::size_t(j)];
      table<int>(w, "__device__ const int kPptr" + tag, ptr, 16,
                 [](const int& v) { return str(v); });
      table<unsigned>(w, "__device__ const unsigned kPpair" + tag, at, 12,
                      [](const unsigned& v) { return str(int(v)) + "u"; });
      if (sender_mma_path(int(n))) {
        // The same entries as positions i d3 + k of the dense P of mma_store_pairs.
        std::vector<unsigned> dense;
        for (std::size_t m : order) dense.push_back(unsigned(path.cg[m].i * d3 + path.cg[m].k));
        table<unsigned>(w, "__device__ const unsigned kPdense" + tag, dense, 12,
                        [](const unsigned& v) { return str(int(v)) + "u"; });
      }
      table<double>(w, "__device__ const real kPc" + tag, c, 6,
                    [&](const double& v) { return lit(v); });
    }
  }

  // Whether path @p n is in a sender-pass group on the tensor cores (its P is dense).
  bool sender_mma_path(int n) const {
    for (Pass pass : {Pass::kBackward, Pass::kDoubleBackward})
      for (const Group& g : s_.pass(pass).groups)
        if (g.mma && std::find(g.paths.begin(), g.paths.end(), n) != g.paths.end()) return true;
    return false;
  }

  // A sender group's gradient accumulators: where each in1 (in2) block starts in the per-lane
  // grad_x (grad_Y) values, their counts, and whether the group is the first of its pass to
  // write a block (an earlier group touching it means accumulate).
  struct SenderLayout {
    std::map<int, int> gx_base, gy_base;
    int n_gx = 0, n_gy = 0;
    std::vector<char> gx_first, gy_first;
  };
  SenderLayout sender_layout(const PassSchedule& ps, int gi) const {
    const Group& g = ps.groups[gi];
    SenderLayout l;
    for (int a : g.in1_blocks) l.gx_base[a] = l.n_gx, l.n_gx += p_.in1()[a].dim();
    for (int b : g.in2_blocks)
      l.gy_base[b] = l.n_gy, l.n_gy += p_.in2()[b].mul * p_.in2()[b].dim();
    l.gx_first.assign(p_.in1().size(), 1);
    l.gy_first.assign(p_.in2().size(), 1);
    for (int h = 0; h < gi; ++h) {
      for (int a : ps.groups[h].in1_blocks) l.gx_first[a] = 0;
      for (int b : ps.groups[h].in2_blocks) l.gy_first[b] = 0;
    }
    return l;
  }

  // ---- matrix form groups (one output block, lane_channels channels per lane) ----------------
  // Channel h of a lane: u0 + 32 h, u0 = 32 * lane_channels * chunk + lane.

  std::string hs(const std::string& name, int h) const { return name + "_" + str(h); }

  // struct Ops: the per-edge operands of one lane, eight declarations to a line.
  void emit_ops_struct(Writer& w, const std::vector<std::string>& names,
                       const std::string& extra = "") {
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

  // A receiver group's add (atomic mode) and store (deterministic) of its accumulators into
  // output row r: `guard` (may be empty) then the row pointer o, then body(atomic).
  void emit_output_stores(Writer& w, const std::string& guard,
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

  // struct Ops and load() of a matrix group: x, W (the double passes also dx, dW; the sender
  // passes grad_out) of each of the lane's channels; zeros for a skipped edge, a channel past the
  // multiplicity or an absent cotangent.
  void emit_matrix_ops(Writer& w, const Group& g, bool sender, bool dbl) {
    const int nc = g.lane_channels;
    std::vector<std::string> names;
    std::vector<std::string> loads;
    for (int h = 0; h < nc; ++h) {
      const std::string uh = "(u0 + " + str(32 * h) + ")", ok = "ok" + str(h);
      for (int a : g.in1_blocks) {
        const TpBlock& b = p_.in1()[a];
        for (int i = 0; i < b.dim(); ++i) {
          const std::string at = " + " + str(b.offset) + " + " + uh + " * " + str(b.dim()) +
                                 " + " + str(i) + ")";
          names.push_back(hs(xn(a, i), h));
          loads.push_back(ok + " ? ldg(x" + at + " : real(0)");
          if (!dbl) continue;
          names.push_back(hs(dxn(a, i), h));
          loads.push_back("(" + ok + " && dx) ? ldg(dx" + at + " : real(0)");
        }
      }
      for (int n : g.paths) {
        const TpPath& path = p_.paths()[n];
        if (!path.has_weight) continue;
        const int m2 = p_.in2()[path.in2].mul;
        for (int v = 0; v < m2; ++v) {
          const std::string at = " + " + str(path.weight_offset) + " + " + uh + " * " + str(m2) +
                                 " + " + str(v) + ")";
          names.push_back(hs(wn(n, v), h));
          loads.push_back("(" + ok + " && w) ? ldcs(w" + at + " : real(0)");
          if (!dbl) continue;
          names.push_back(hs(dwn(n, v), h));
          loads.push_back("(" + ok + " && dw) ? ldcs(dw" + at + " : real(0)");
        }
      }
      if (sender)
        for (int o : g.out_blocks) {
          const TpBlock& b = p_.out()[o];
          for (int k = 0; k < b.dim(); ++k) {
            names.push_back(hs(gn(o, k), h));
            loads.push_back(ok + " ? ldg(gr + " + str(b.offset) + " + " + uh + " * " +
                            str(b.dim()) + " + " + str(k) + ") : real(0)");
          }
        }
    }
    // A sender group on the tensor cores also reads other lanes' channels (mma_pairs): the
    // edge's rows.
    const bool rows = sender && g.mma;
    emit_ops_struct(w, names,
                    rows ? std::string("const real *xr, *wr, *gr") + (dbl ? ", *dxr, *dwr;" : ";")
                         : "");
    w.open(std::string("CLEBSCH_INLINE static void load(const ConvArgs& a, int s, ") +
           (sender ? "int r, " : "") + "int e, int u, Ops& o) {");
    w("const int u0 = lane_channel(u);");
    for (int h = 0; h < nc; ++h)
      w("const bool ok" + str(h) + " = s >= 0 && u0 + " + str(32 * h) + " < " + str(g.mul) + ";");
    w("const real* x = (const real*)a.x + (long long)(s >= 0 ? s : 0) * kDim1;");
    w("const real* w = a.w ? (const real*)a.w + (long long)(s >= 0 ? e : 0) * kNumWeights : "
      "nullptr;");
    if (dbl) {
      w("const real* dx = a.dx ? (const real*)a.dx + (long long)(s >= 0 ? s : 0) * kDim1 : "
        "nullptr;");
      w("const real* dw = a.dw ? (const real*)a.dw + (long long)(s >= 0 ? e : 0) * kNumWeights : "
        "nullptr;");
    }
    if (sender) w("const real* gr = (const real*)a.g + (long long)(s >= 0 ? r : 0) * kDimOut;");
    w(std::string("(void)x, (void)w") + (dbl ? ", (void)dx, (void)dw" : "") + ";");
    for (std::size_t k = 0; k < names.size(); ++k) w("o." + names[k] + " = " + loads[k] + ";");
    if (rows)
      w(std::string("o.xr = x, o.wr = w, o.gr = gr") + (dbl ? ", o.dxr = dx, o.dwr = dw;" : ";"));
    w.close();
    w("CLEBSCH_INLINE static int lane_channel(int u) { return (u >> 5) * " + str(32 * nc) +
      " + (u & 31); }");
  }

  // "{{a_0, b_0}, {a_1, b_1}}": a [lane_channels][n] array initialiser.
  std::string channel_rows(int nc, int n, const std::function<std::string(int, int)>& at) const {
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
  std::string build_call(int n, int v, bool transposed, const std::string& m = "mm",
                         const std::string& ys = "ys") const {
    const TpPath& path = p_.paths()[n];
    const TpBlock& b2 = p_.in2()[path.in2];
    const int d1 = p_.in1()[path.in1].dim(), d3 = p_.out()[path.out].dim();
    const int size = transposed ? d1 * stride(d3) : d3 * stride(d1);
    const std::string t = transposed ? "kMT" : "kM";
    return "build_matrix<" + str(size) + ", kMatrixJ>(" + m + ", " + t + "j" + str(n) + ", " + t +
           "c" + str(n) + ", " + ys + " + " + str(b2.offset + v * b2.dim()) + ");";
  }

  // Double forward, matrix form, instruction n and Y channel v: the warp builds M(Y) and M(dY)
  // (buffer set `parity`), each lane sums (w dx + dW x) M(Y) + (w x) M(dY) into the
  // accumulators: T(dx, Y) w + T(x, dY) w + T(x, Y) dW, the weights folded into the rows.
  void emit_matrix_double_forward(Writer& w, const Group& g, int n, int v, int parity, int d3) {
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
      channel_rows(nc, d1, [&](int h, int i) {
        return path.has_weight ? "madd(o." + hs(wv, h) + ", " + dx(h, i) + ", o." + hs(dwv, h) +
                                     " * " + x(h, i) + ")"
                               : dx(h, i);
      }) +
      ";");
    w("const real xw[" + str(nc) + "][" + str(d1) + "] = " +
      channel_rows(nc, d1, [&](int h, int i) {
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

  // Receiver pass, matrix form: per instruction and Y channel v the warp builds M (two buffers
  // alternate, so one barrier per instruction suffices), each lane contracts it with the x of
  // its channels.
  void emit_matrix_receiver_group(Writer& w, const PassSchedule& ps, int gi) {
    const Group& g = ps.groups[gi];
    if (g.mma) return emit_mma_receiver_group(w, ps, gi);
    const int nc = g.lane_channels, ob = g.out_blocks.at(0), d3 = p_.out()[ob].dim();
    group_comment(w, ps, g, gi);
    w("// matrix form, " + str(nc) + " channel(s) per lane");
    w.open("struct " + group_name(ps.pass, gi) + " {");
    w("static constexpr int kAcc = " + str(nc * d3) + ";");
    w(std::string("static constexpr bool kPrefetch = ") + (g.prefetch ? "true" : "false") + ";");
    const bool dbl = is_double_pass(ps.pass);
    emit_matrix_ops(w, g, false, dbl);
    w.open("CLEBSCH_INLINE static void compute(const Ops& o, const real* ys, const real* dys, "
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
          channel_rows(nc, d1, [&](int h, int i) { return "o." + hs(xn(path.in1, i), h); }) +
          ";");
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
          const std::string at = "o + " + str(b.offset) + " + (u0 + " + str(32 * h) + ") * " +
                                 str(d3) + " + " + str(k);
          const std::string v = "acc[" + str(h * d3 + k) + "]";
          w(atomic ? "atomicAdd(" + at + ", " + v + ");" : "*(" + at + ") = " + v + ";");
        }
        w.close();
      }
    });
    w.close("};");
  }

  // Forward, float64 matrix group on the tensor cores (Group::mma): a warp covers 32 nc channels
  // as 4 nc row tiles of 8 (lane 4 r + q: channel 8 m + r of tile m, k-step entry i = 4 s + q of
  // A, C values k = 8 t + 2 q + h). Ops holds each lane's x entry per (in1 block, tile, k-step)
  // and W per (instruction, Y channel, tile); per instruction and Y channel the lane builds its
  // B entries of M(Y) in registers and the tiles run their MMAs, A = W x formed per tile.
  void emit_mma_receiver_group(Writer& w, const PassSchedule& ps, int gi) {
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
      for (int n : g.paths) {
        const TpPath& path = p_.paths()[n];
        if (!path.has_weight) continue;
        const int m2 = p_.in2()[path.in2].mul;
        for (int v = 0; v < m2; ++v) {
          const std::string at = str(path.weight_offset) + " + " + c + " * " + str(m2) + " + " +
                                 str(v) + ") : real(0)";
          names.push_back(wf(n, v, m));
          loads.push_back("(" + ok + " && w) ? ldcs(w + " + at);
          if (!dbl) continue;
          names.push_back(dwf(n, v, m));
          loads.push_back("(" + ok + " && dw) ? ldcs(dw + " + at);
        }
      }
    }
    emit_ops_struct(w, names);
    const std::string first = "(u >> 5) * " + str(32 * nc) + " + ((u & 31) >> 2)";
    w.open("CLEBSCH_INLINE static void load(const ConvArgs& a, int s, int e, int u, Ops& o) {");
    w("const int q = u & 3;");
    w("const real* x = (const real*)a.x + (long long)(s >= 0 ? s : 0) * kDim1;");
    w("const real* w = a.w ? (const real*)a.w + (long long)(s >= 0 ? e : 0) * kNumWeights : "
      "nullptr;");
    if (dbl) {
      w("const real* dx = a.dx ? (const real*)a.dx + (long long)(s >= 0 ? s : 0) * kDim1 : "
        "nullptr;");
      w("const real* dw = a.dw ? (const real*)a.dw + (long long)(s >= 0 ? e : 0) * kNumWeights : "
        "nullptr;");
      w("(void)dx, (void)dw;");
    }
    w("(void)x, (void)w, (void)q;");
    for (int m = 0; m < tiles_m; ++m) {
      w("const int c" + str(m) + " = " + first + " + " + str(8 * m) + ";");
      w("const bool ok" + str(m) + " = s >= 0 && c" + str(m) + " < " + str(g.mul) + ";");
    }
    for (std::size_t k = 0; k < names.size(); ++k) w("o." + names[k] + " = " + loads[k] + ";");
    w.close();
    w.open("CLEBSCH_INLINE static void compute(const Ops& o, const real* ys, const real* dys, "
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
                e = path.has_weight ? "madd(" + wv + ", o." + dxf(a, m, st) + ", o." +
                                          dwf(n, v, m) + " * " + x + ")"
                                    : "o." + dxf(a, m, st);
              else if (path.has_weight)
                e = wv + " * " + x;
              w.open("{");
              w("const real x = " + e + ";");
              for (int t = 0; t < tiles_k; ++t) {
                const int at = (m * tiles_k + t) * 2;
                w("mma_f64(acc[" + str(at) + "], acc[" + str(at + 1) + "], x, b[" + str(st) +
                  "][" + str(t) + "]);");
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
            const std::string at = "o + " + str(b.offset) + " + c" + str(m) + " * " + str(d3) +
                                   " + " + k;
            const std::string v = "acc[" + str((m * tiles_k + t) * 2 + h) + "]";
            const std::string put = atomic ? "atomicAdd(" + at + ", " + v + ");"
                                           : "*(" + at + ") = " + v + ";";
            // Columns past d3 are the padding of the last tile.
            w(8 * t + 8 > d3 ? "if (" + k + " < " + str(d3) + ") " + put : put);
          }
        w.close();
      }
    });
    w.close("};");
  }

  // grad_Y's pair products of instruction n, Y channel v: xe_i g_k with xe = w x (double:
  // w dx + dW x; without weights x, dx), summed over the lane's channels in registers and over
  // the warp 32 pairs at a time (transposed reductions) into pp at the pair's position in
  // pairs(n). The weights go into xe once per i (d1 values live beside grad_out) rather than
  // into grad_out per k (the double pass needed w g and dW g: 2 d3).
  void emit_shuffle_pairs(Writer& w, const Group& g, int n, int v, bool dbl) {
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
      w("store_reduced<" + str(count) + ">(pp, " + str(int(base)) + ", Transposed<" +
        str(count) + ">::reduce<0>(pv, lane), lane);");
      w.close();
    }
  }

  // The same sum on the tensor cores (Group::mma): P_ik over the warp's 32 nc channels by
  // mma_pairs from the rows in memory, stored dense (i d3 + k) into pp by mma_store_pairs.
  // Double passes: P = sum_u (w dx_ui + dW x_ui) g_uk, A formed as it loads (mma_pairs_double).
  void emit_mma_pairs(Writer& w, const Group& g, int n, int v, bool dbl) {
    const TpPath& path = p_.paths()[n];
    const TpBlock &b1 = p_.in1()[path.in1], &b2 = p_.in2()[path.in2], &b3 = p_.out()[path.out];
    const int d1 = b1.dim(), d3 = b3.dim(), mt = (d1 + 7) / 8, nt = (d3 + 7) / 8;
    const std::string tiles = str(mt) + ", " + str(nt);
    const std::string shape =
        tiles + ", " + str(g.lane_channels) + ", " + str(d1) + ", " + str(d3);
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
                               ">(pa, " + a + x1 + ", " + rows +
                               (wt.empty() ? "nullptr" : wt + wat) + tail;
      w(cond.empty() ? call : "if (" + cond + ") " + call);
    }
    w("mma_store_pairs<" + tiles + ", " + str(d1) + ", " + str(d3) + ">(pp, pa);");
  }

  // Sender pass, matrix form: per instruction and Y channel v the warp builds M; each lane forms
  // a_i = sum_k M_ik g_k for its channels (grad_x, and grad_W = sum_i x_i a_i), and grad_Y comes
  // from the products w x_i g_k of the instruction's pairs, summed over the lane's channels in
  // registers and over the warp 32 pairs at a time (transposed reductions; on the tensor cores
  // in a Group::mma group) into P, contracted with C by lane j into the warp's grad_Y row gys
  // (the per-lane gy of the other forms is a one-value placeholder here).
  void emit_matrix_sender_group(Writer& w, const PassSchedule& ps, int gi) {
    const Group& g = ps.groups[gi];
    const int nc = g.lane_channels;
    group_comment(w, ps, g, gi);
    w("// matrix form, " + str(nc) + " channel(s) per lane");
    SenderLayout lay = sender_layout(ps, gi);
    std::map<int, int>&gx_base = lay.gx_base, &gy_base = lay.gy_base;
    const int n_gx = lay.n_gx, n_gy = lay.n_gy;
    const std::vector<char>&gx_first = lay.gx_first, &gy_first = lay.gy_first;
    w.open("struct " + group_name(ps.pass, gi) + " {");
    w("static constexpr int kGx = " + str(nc * n_gx) + ", kGy = 1, kChunks = " + str(g.chunks) +
      ";");
    w(std::string("static constexpr bool kPrefetch = ") + (g.prefetch ? "true" : "false") + ";");
    const bool dbl = is_double_pass(ps.pass);
    // Scratch: the matrices of two instructions (M^T(Y); double: and M^T(dY)), two P buffers,
    // the grad_Y row.
    const int mats = dbl ? 2 : 1, gys_at = 2 * mats + 2;
    emit_matrix_ops(w, g, true, dbl);
    w.open("CLEBSCH_INLINE static void compute(const Ops& o, const real* ys, const real* dys, "
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
          channel_rows(nc, d3, [&](int h, int k) { return "o." + hs(gn(path.out, k), h); }) +
          ";");
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
              w(gx + " = madd(o." + hs(dwn(n, v), h) + ", " + a + ", madd(" + wv + ", " + ap +
                ", " + gx + "));");
              gw_expr = "madd(" + x + ", " + ap + ", madd(o." + hs(dxn(path.in1, i), h) + ", " +
                        a + ", " + gw_expr + "))";
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
        if (g.mma)
          emit_mma_pairs(w, g, n, v, dbl);
        else
          emit_shuffle_pairs(w, g, n, v, dbl);
        w("matrix_grad_y<" + str(d2) + ">(gys + " + str(gy_base[path.in2] + v * d2) +
          ", pp, kPptr" + str(n) + (g.mma ? ", kPdense" : ", kPpair") + str(n) + ", kPc" +
          str(n) + ");");
        w.close();
      }
    }
    // The next edge's first instruction may rebuild the buffers a slower lane still reads.
    w("__syncwarp();");
    w.close();
    for (const char* mode : {"add_gx", "store_gx"}) {
      const bool atomic = std::string(mode) == "add_gx";
      w.open(std::string("CLEBSCH_INLINE static void ") + mode +
             "(const ConvArgs& a, long long s, int u, const real (&gx)[kGx]) {");
      w("real* o = (real*)a.grad_x + s * kDim1;");
      w("const int u0 = lane_channel(u);");
      for (int h = 0; h < nc; ++h) {
        w.open("if (u0 + " + str(32 * h) + " < " + str(g.mul) + ") {");
        for (int a : g.in1_blocks) {
          const TpBlock& b = p_.in1()[a];
          for (int i = 0; i < b.dim(); ++i) {
            const std::string at = "o[" + str(b.offset) + " + (u0 + " + str(32 * h) + ") * " +
                                   str(b.dim()) + " + " + str(i) + "]";
            const std::string v = "gx[" + str(h * n_gx + gx_base[a] + i) + "]";
            if (atomic)
              w("atomicAdd(&" + at + ", " + v + ");");
            else
              w(at + (gx_first[a] ? " = a.accumulate_grad_x ? " + at + " + " + v + " : " + v + ";"
                                  : " += " + v + ";"));
          }
        }
        w.close();
      }
      w.close();
    }
    emit_gy_maps(w, g, gy_base, gy_first);
    // The lane-summed row gys is copied (or added) into the edge's shared-memory grad_Y row; the
    // barrier after keeps the next edge's zeroing of gys behind the copy.
    w.open("CLEBSCH_INLINE static void write_gy(real* row, int lane, bool accumulate, const real "
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

  void emit_config(Writer& w, const PassSchedule& ps) {
    const SharedMemoryPlan& sm = ps.smem;
    w("struct " + cfg_name(ps.pass) + " {");
    w("  static constexpr int kTile = " + str(sm.tile) + ", kEdgeOffset = " +
      str(sm.edge_offset) + ", kSenderOffset = " + str(sm.sender_offset) +
      ", kReceiverOffset = " + str(sm.receiver_offset) + ";");
    w("  static constexpr int kYOffset = " + str(sm.y_offset) + ", kDyOffset = " +
      str(sm.dy_offset) + ", kGyOffset = " + str(sm.gy_offset) +
      ", kBytesPerWarp = " + str(sm.bytes_per_warp) + ";");
    w(std::string("  static constexpr bool kReceiverRows = ") +
      (is_receiver_pass(ps.pass) ? "true" : "false") + ";");
    if (looped_) w("  static constexpr int kMOffset = " + str(sm.m_offset) + ";");
    w("};");
  }

  void group_comment(Writer& w, const PassSchedule& ps, const Group& g, int gi) {
    std::string outs;
    for (int o : g.out_blocks)
      outs += (outs.empty() ? "" : ", ") + str(o) + " (" + block_name(p_.out()[o]) + ")";
    w("");
    w("// " + to_string(ps.pass) + " group " + str(gi) + ": output blocks " + outs + "; mul " +
      str(g.mul) + " in " + str(g.chunks) + " chunk(s) of 32 channels; ~" + str(g.live_values) +
      " live values per lane");
  }

  // The group's per-edge gathered operands of one lane, as the fields of struct Ops: x (and dx)
  // of its in1 blocks, W (and dW) of its weighted instructions, grad_out of its output blocks.
  struct Field {
    std::string name, expr;  // expr: the load, given ok, x, dx, w, dw, gr
  };
  std::vector<Field> operand_fields(const Group& g, bool with_d, bool with_g) {
    std::vector<Field> f;
    for (int a : g.in1_blocks) {
      const TpBlock& b = p_.in1()[a];
      for (int i = 0; i < b.dim(); ++i) {
        const std::string at = str(b.offset) + " + u * " + str(b.dim()) + " + " + str(i);
        f.push_back({xn(a, i), "ok ? ldg(x + " + at + ") : real(0)"});
        if (with_d) f.push_back({dxn(a, i), "(ok && dx) ? ldg(dx + " + at + ") : real(0)"});
      }
    }
    for (int n : g.paths) {
      const TpPath& path = p_.paths()[n];
      if (!path.has_weight) continue;
      const int m2 = p_.in2()[path.in2].mul;
      for (int v = 0; v < m2; ++v) {
        const std::string at =
            str(path.weight_offset) + " + u * " + str(m2) + " + " + str(v);
        f.push_back({wn(n, v), "(ok && w) ? ldcs(w + " + at + ") : real(0)"});
        if (with_d) f.push_back({dwn(n, v), "(ok && dw) ? ldcs(dw + " + at + ") : real(0)"});
      }
    }
    if (with_g)
      for (int o : g.out_blocks) {
        const TpBlock& b = p_.out()[o];
        for (int k = 0; k < b.dim(); ++k)
          f.push_back({gn(o, k), "ok ? ldg(gr + " + str(b.offset) + " + u * " + str(b.dim()) +
                                     " + " + str(k) + ") : real(0)"});
      }
    return f;
  }

  // struct Ops and load(): the gathers of one edge for one lane; zeros for an idle lane (u past
  // the group's multiplicity) or a skipped edge (s < 0), so that computing them adds nothing.
  void emit_ops_and_load(Writer& w, const Group& g, bool dbl, bool sender) {
    const std::vector<Field> fields = operand_fields(g, dbl, sender);
    w("// Gathered operands of one edge and lane (registers).");
    std::vector<std::string> names;
    for (const Field& f : fields) names.push_back(f.name);
    emit_ops_struct(w, names);
    w.open(std::string("CLEBSCH_INLINE static void load(const ConvArgs& a, int s, ") +
           (sender ? "int r, " : "") + "int e, int u, Ops& o) {");
    w("const bool ok = s >= 0 && u < " + str(g.mul) + ";");
    w("const real* x = (const real*)a.x + (long long)(ok ? s : 0) * kDim1;");
    w("const real* w = a.w ? (const real*)a.w + (long long)(ok ? e : 0) * kNumWeights : nullptr;");
    if (dbl) {
      w("const real* dx = a.dx ? (const real*)a.dx + (long long)(ok ? s : 0) * kDim1 : nullptr;");
      w("const real* dw = a.dw ? (const real*)a.dw + (long long)(ok ? e : 0) * kNumWeights : "
        "nullptr;");
    }
    if (sender) w("const real* gr = (const real*)a.g + (long long)(ok ? r : 0) * kDimOut;");
    w(std::string("(void)x, (void)w") + (dbl ? ", (void)dx, (void)dw" : "") + ";");
    for (const Field& f : fields) w("o." + f.name + " = " + f.expr + ";");
    w.close();
  }

  // At the top of compute(): the operands as named values, the staged attributes Y (and dY).
  void emit_compute_prologue(Writer& w, const Group& g, bool dbl, bool sender) {
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

  std::string path_comment(const TpPath& path, int n) {
    return "// instruction " + str(n) + " " + path.description + ": " +
           block_name(p_.in1()[path.in1]) + " x " + block_name(p_.in2()[path.in2]) + " -> " +
           block_name(p_.out()[path.out]) + ", " + str(int(path.cg.size())) + " CG non-zeros";
  }

  void emit_receiver_group(Writer& w, const PassSchedule& ps, int gi) {
    const Group& g = ps.groups[gi];
    const bool dbl = is_double_pass(ps.pass);
    group_comment(w, ps, g, gi);
    std::map<int, int> base;  // out block -> first accumulator
    int n_acc = 0;
    for (int o : g.out_blocks) base[o] = n_acc, n_acc += p_.out()[o].dim();
    w.open("struct " + group_name(ps.pass, gi) + " {");
    w("static constexpr int kAcc = " + str(n_acc) + ";");
    w(std::string("static constexpr bool kPrefetch = ") + (g.prefetch ? "true" : "false") + ";");
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
        for (int k = 0; k < d3; ++k) {
          if (!used[k]) continue;
          const std::string acc = "acc[" + str(base[path.out] + k) + "]";
          if (path.has_weight)
            w(acc + " = madd(" + wn(n, v) + ", t" + str(k) + ", " + acc + ");");
          else
            w(acc + " += t" + str(k) + ";");
        }
        if (dbl && path.has_weight) {
          // + dW T(x, y); dW is zero when absent.
          w.open("{");
          contraction(w, "s", d3, path.cg, k_of, x_of, y_of, p_.dtype());
          for (int k = 0; k < d3; ++k) {
            if (!used[k]) continue;
            const std::string acc = "acc[" + str(base[path.out] + k) + "]";
            w(acc + " = madd(" + dwn(n, v) + ", s" + str(k) + ", " + acc + ");");
          }
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
          const std::string at =
              "o + " + str(b.offset) + " + u * " + str(b.dim()) + " + " + str(k);
          const std::string v = "acc[" + str(base[o] + k) + "]";
          w(atomic ? "atomicAdd(" + at + ", " + v + ");" : "*(" + at + ") = " + v + ";");
        }
      }
    });
    w.close("};");
  }

  // Output blocks no group writes: zeros in deterministic mode (atomic mode memsets them).
  std::vector<int> unwritten_out(const PassSchedule& ps) {
    std::vector<char> written(p_.out().size(), 0);
    for (const Group& g : ps.groups)
      for (int o : g.out_blocks) written[o] = 1;
    std::vector<int> r;
    for (std::size_t o = 0; o < p_.out().size(); ++o)
      if (!written[o] && p_.out()[o].mul > 0) r.push_back(int(o));
    return r;
  }

  // One kernel per group: grid row blockIdx.y = chunk. Group 0 also zero-fills, in
  // deterministic mode, the output blocks no instruction writes (atomic mode memsets them).
  void emit_receiver_kernel(Writer& w, const PassSchedule& ps, int gi) {
    const std::string cfg = cfg_name(ps.pass);
    const std::vector<int> zero_blocks = unwritten_out(ps);
    w("");
    w.open("extern \"C\" __global__ void __launch_bounds__(" +
           str(ps.launch.threads_per_block) + ") " + kernel_name(ps.pass, gi) + "(ConvArgs a) {");
    if (gi == 0 && !zero_blocks.empty() && p_.accumulation() == Accumulation::kDeterministic) {
      w.open("if (blockIdx.y == 0) {");
      w("const long long row = (long long)blockIdx.x * kWarps + (threadIdx.x >> 5);");
      w.open("if (row < a.num_rows) {");
      w("real* o = (real*)a.out + row * kDimOut;");
      for (int o : zero_blocks) {
        const TpBlock& b = p_.out()[o];
        w("// output block " + str(o) + " (" + block_name(b) + ") has no instruction");
        w("for (int i = threadIdx.x & 31; i < " + str(b.mul * b.dim()) + "; i += 32) o[" +
          str(b.offset) + " + i] = real(0);");
      }
      w.close();
      w.close();
    }
    w("receiver_pass<" + cfg + ", " + group_name(ps.pass, gi) + ">(a, blockIdx.y);");
    w.close();
  }

  void emit_sender_group(Writer& w, const PassSchedule& ps, int gi) {
    const Group& g = ps.groups[gi];
    const bool dbl = is_double_pass(ps.pass);
    group_comment(w, ps, g, gi);
    SenderLayout lay = sender_layout(ps, gi);
    std::map<int, int>&gx_base = lay.gx_base, &gy_base = lay.gy_base;
    const int n_gx = lay.n_gx, n_gy = lay.n_gy;
    const std::vector<char>&gx_first = lay.gx_first, &gy_first = lay.gy_first;

    w.open("struct " + group_name(ps.pass, gi) + " {");
    w("static constexpr int kGx = " + str(n_gx) + ", kGy = " + str(n_gy) + ", kChunks = " +
      str(g.chunks) + ";");
    w(std::string("static constexpr bool kPrefetch = ") + (g.prefetch ? "true" : "false") + ";");
    emit_ops_and_load(w, g, dbl, true);
    w.open(
        "CLEBSCH_INLINE static void compute(const Ops& o, const real* ys, const real* dys, real* "
        "gw, int u, real (&gx)[kGx], real (&gy)[kGy]) {");
    w("(void)ys, (void)dys, (void)gw;");
    w("const bool ok = u < " + str(g.mul) + ";");
    w("(void)ok;");
    emit_compute_prologue(w, g, dbl, true);
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
        for (int i = 0; i < d1; ++i) {
          if (!ui[i]) continue;
          const std::string a = r("ca", i), ap = r("cpa", i);
          if (!dbl)
            w(gx_at(i) + (path.has_weight ? " = madd(" + wv + ", " + a + ", " + gx_at(i) + ");"
                                          : " += " + a + ";"));
          else if (path.has_weight)
            w(gx_at(i) + " = madd(" + dwv + ", " + a + ", madd(" + wv + ", " + ap + ", " +
              gx_at(i) + "));");
          else
            w(gx_at(i) + " += " + ap + ";");
        }
        for (int j = 0; j < d2; ++j) {
          if (!uj[j]) continue;
          const std::string b = r("cb", j), bp = r("cpb", j);
          if (!dbl)
            w(gy_at(j) + (path.has_weight ? " = madd(" + wv + ", " + b + ", " + gy_at(j) + ");"
                                          : " += " + b + ";"));
          else if (path.has_weight)
            w(gy_at(j) + " = madd(" + dwv + ", " + b + ", madd(" + wv + ", " + bp + ", " +
              gy_at(j) + "));");
          else
            w(gy_at(j) + " += " + bp + ";");
        }
        if (path.has_weight) {
          // gw = sum_i x_i a_i  (double backward: sum_i dx_i a_i + x_i a'_i); written once,
          // streaming.
          std::string expr = "real(0)";
          for (int i = 0; i < d1; ++i) {
            if (!ui[i]) continue;
            if (!dbl)
              expr = "madd(" + xn(path.in1, i) + ", " + r("ca", i) + ", " + expr + ")";
            else
              expr = "madd(" + xn(path.in1, i) + ", " + r("cpa", i) + ", madd(" +
                     dxn(path.in1, i) + ", " + r("ca", i) + ", " + expr + "))";
          }
          w("if (gw && ok) stcs(gw + " + str(path.weight_offset) + " + u * " + str(b2.mul) +
            " + " + str(v) + ", " + expr + ");");
        }
        w.close();
      }
    }
    w.close();

    // grad_x: atomic adds per run of one sender (atomic mode) or one store per row.
    w.open("CLEBSCH_INLINE static void add_gx(const ConvArgs& a, long long s, int u, const real "
           "(&gx)[kGx]) {");
    w("if (u >= " + str(g.mul) + ") return;");
    w("real* o = (real*)a.grad_x + s * kDim1;");
    for (int a : g.in1_blocks) {
      const TpBlock& b = p_.in1()[a];
      for (int i = 0; i < b.dim(); ++i)
        w("atomicAdd(o + " + str(b.offset) + " + u * " + str(b.dim()) + " + " + str(i) + ", gx[" +
          str(gx_base[a] + i) + "]);");
    }
    w.close();
    w.open("CLEBSCH_INLINE static void store_gx(const ConvArgs& a, long long s, int u, const real "
           "(&gx)[kGx]) {");
    w("if (u >= " + str(g.mul) + ") return;");
    w("real* o = (real*)a.grad_x + s * kDim1;");
    for (int a : g.in1_blocks) {
      const TpBlock& b = p_.in1()[a];
      for (int i = 0; i < b.dim(); ++i) {
        const std::string at =
            "o[" + str(b.offset) + " + u * " + str(b.dim()) + " + " + str(i) + "]";
        const std::string v = "gx[" + str(gx_base[a] + i) + "]";
        // A first writer stores, unless the caller accumulates batches of edges into grad_x.
        w(at + (gx_first[a] ? " = a.accumulate_grad_x ? " + at + " + " + v + " : " + v + ";"
                            : " += " + v + ";"));
      }
    }
    w.close();

    emit_gy_maps(w, g, gy_base, gy_first);
    // Transposed warp reduction of each batch of up to 32 values; the owner lane of a value
    // stores it into (or adds it to) the edge's shared-memory grad_Y row.
    w.open("CLEBSCH_INLINE static void write_gy(real* row, int lane, bool accumulate, const real "
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

  // grad_Y: which values of a row the group touches (gy_offset: the row offset of the group's
  // compact index j), and whether the group is their first writer.
  void emit_gy_maps(Writer& w, const Group& g, std::map<int, int>& gy_base,
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

  // One kernel per group: each warp runs the group's chunks in turn over its staged edges. The
  // last group also zero-fills the gradient blocks that no instruction reads from (grad_x in
  // deterministic mode; atomic mode memsets grad_x) and grad_Y blocks of unused attributes.
  void emit_sender_kernel(Writer& w, const PassSchedule& ps, int gi) {
    const std::string cfg = cfg_name(ps.pass);
    const bool last = gi + 1 == int(ps.groups.size());
    std::vector<char> in1_touched(p_.in1().size(), 0), in2_touched(p_.in2().size(), 0);
    for (const Group& g : ps.groups) {
      for (int a : g.in1_blocks) in1_touched[a] = 1;
      for (int b : g.in2_blocks) in2_touched[b] = 1;
    }
    w("");
    w.open("extern \"C\" __global__ void __launch_bounds__(" +
           str(ps.launch.threads_per_block) + ") " + kernel_name(ps.pass, gi) + "(ConvArgs a) {");
    w("const Tile t = warp_tile<" + cfg + ">(clebsch_smem, threadIdx.x >> 5);");
    w("SenderWork work = sender_work<" + cfg + ">(a);");
    w("if (!work.valid) return;");
    w("for (int c = 0; c < " + str(ps.groups[gi].chunks) + "; ++c) sender_unit<" + cfg + ", " +
      group_name(ps.pass, gi) + ">(a, t, work, c);");
    bool any_x = false, any_y = false;
    for (std::size_t blk = 0; blk < p_.in1().size(); ++blk)
      any_x |= !in1_touched[blk] && p_.in1()[blk].mul > 0;
    for (std::size_t blk = 0; blk < p_.in2().size(); ++blk)
      any_y |= !in2_touched[blk] && p_.in2()[blk].mul > 0;
    if (last && any_x && p_.accumulation() == Accumulation::kDeterministic) {
      w.open("if (a.grad_x && !a.accumulate_grad_x) {");
      w("real* o = (real*)a.grad_x + work.row * kDim1;");
      for (std::size_t blk = 0; blk < p_.in1().size(); ++blk) {
        const TpBlock& b = p_.in1()[blk];
        if (in1_touched[blk] || b.mul == 0) continue;
        w("for (int i = threadIdx.x & 31; i < " + str(b.mul * b.dim()) + "; i += 32) o[" +
          str(b.offset) + " + i] = real(0);");
      }
      w.close();
    }
    if (last && any_y) {
      w.open("if (a.grad_y) {");
      w.open("for (long long n = work.begin; n < work.end; ++n) {");
      w("const long long e = a.order ? (long long)a.order[n] : n;");
      w("if (e < 0 || e >= a.num_edges) continue;");
      w("real* o = (real*)a.grad_y + e * kDim2;");
      for (std::size_t blk = 0; blk < p_.in2().size(); ++blk) {
        const TpBlock& b = p_.in2()[blk];
        if (in2_touched[blk]) continue;
        w("for (int i = threadIdx.x & 31; i < " + str(b.mul * b.dim()) + "; i += 32) o[" +
          str(b.offset) + " + i] = real(0);");
      }
      w.close();
      w.close();
    }
    w.close();
  }

  const TpProblem& p_;
  const Schedule& s_;
  const bool looped_;
  bool any_matrix_ = false;
  bool forward_mma_ = false;  // a (double) forward group on the tensor cores (Group::mma)
  bool any_mma_ = false;      // a group of any pass on the tensor cores
};

}  // namespace

std::string emit_literal(double value, DType dtype) {
  char buf[64];
  std::to_chars_result r;
  if (dtype == DType::kFloat32)
    r = std::to_chars(buf, buf + sizeof buf, static_cast<float>(value));
  else
    r = std::to_chars(buf, buf + sizeof buf, value);
  if (r.ec != std::errc()) throw Error("emit_literal: cannot format a coefficient");
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  if (dtype == DType::kFloat32) s += "f";
  return s;
}

std::string emit_conv_module(const TpProblem& problem, const Schedule& schedule) {
  problem.validate();
  if (schedule.passes.size() != kNumPasses)
    throw Error("emit_conv_module: schedule has " + std::to_string(schedule.passes.size()) +
                " passes, expected " + std::to_string(kNumPasses));
  return ModuleEmitter(problem, schedule).run();
}

}  // namespace clebsch::cuda
