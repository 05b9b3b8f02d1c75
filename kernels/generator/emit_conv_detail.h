// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Internals of the module emitter (emit_conv.h), shared by its translation units: the indented
// line writer, the names of the values in the unrolled code, the unrolled CG contraction, and
// ModuleEmitter, whose members are defined by what they emit: module assembly and kernel entry
// points (emit_conv.cpp), pieces several group forms share (emit_conv_shared.cpp), the constant
// tables (emit_conv_tables.cpp), the one-channel-per-lane groups of the receiver passes
// (emit_conv_receiver.cpp) and sender passes (emit_conv_sender.cpp) with the looped form's
// loops (emit_conv_looped.cpp), the matrix form (emit_conv_matrix.cpp) and the tensor-core
// form (emit_conv_mma.cpp). Not part of the library's interface.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "clebsch/cuda/generator/emit_conv.h"

namespace clebsch::cuda::emit_detail {

inline std::string str(int v) { return std::to_string(v); }

/// Indented line writer.
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

inline std::string block_name(const TpBlock& b) { return blocks_str({b}); }

// Value names of the unrolled code.
inline std::string xn(int a, int i) { return "x" + str(a) + "_" + str(i); }
inline std::string dxn(int a, int i) { return "dx" + str(a) + "_" + str(i); }
inline std::string yn(int b, int v, int j) { return "y" + str(b) + "_" + str(v) + "_" + str(j); }
inline std::string dyn(int b, int v, int j) { return "dy" + str(b) + "_" + str(v) + "_" + str(j); }
inline std::string gn(int o, int k) { return "g" + str(o) + "_" + str(k); }
inline std::string wn(int path, int v) { return "w" + str(path) + "_" + str(v); }
inline std::string dwn(int path, int v) { return "dw" + str(path) + "_" + str(v); }

/// Emits out_m = sum over entries C * left(e) * right(e) into index(e), for the distinct indices
/// only (the unrolled form; see emit_conv_shared.cpp).
void contraction(Writer& w, const std::string& out, int n_out, const std::vector<CgEntry>& cg,
                 const std::function<int(const CgEntry&)>& index,
                 const std::function<std::string(const CgEntry&)>& left,
                 const std::function<std::string(const CgEntry&)>& right, DType dtype);

/// Which entries of a contraction output are written (the rest stay zero and are skipped).
std::vector<char> used_indices(const std::vector<CgEntry>& cg, int n,
                               const std::function<int(const CgEntry&)>& index);

/// One accumulation of the looped form: out[index] += C * left[left_index] * right[right_index],
/// the indices being the loop's ci, cj, ck.
struct LoopTerm {
  std::string out, index, left, left_index, right, right_index;
};

/// The source of one module (emit_conv_module()): the problem and its schedule, read only.
class ModuleEmitter {
 public:
  ModuleEmitter(const TpProblem& p, const Schedule& s);
  std::string run();

 private:
  // ---- module assembly and kernel entry points (emit_conv.cpp) ------------------------------
  std::string cfg_name(Pass pass) const;
  /// Whether group @p gi of @p ps stages the block's W4 slice (SharedMemoryPlan::w4_slice_bytes).
  bool stages_w4_slice(const PassSchedule& ps, int gi) const;
  std::string group_name(Pass pass, int g) const {
    return cfg_name(pass).substr(3) + "Group" + str(g);
  }
  void emit_config(Writer& w, const PassSchedule& ps);
  void group_comment(Writer& w, const PassSchedule& ps, const Group& g, int gi);
  std::string path_comment(const TpPath& path, int n);
  std::vector<int> unwritten_out(const PassSchedule& ps);
  void emit_receiver_kernel(Writer& w, const PassSchedule& ps, int gi);
  void emit_sender_kernel(Writer& w, const PassSchedule& ps, int gi);

  // ---- shared by the group forms (emit_conv_shared.cpp) -------------------------------------
  std::string lit(double c) const { return emit_literal(c, p_.dtype()); }
  std::vector<std::size_t> order_by(std::size_t n, char axis) const;
  /// "static constexpr bool kPrefetch = ...;" of a group struct.
  void emit_prefetch_constant(Writer& w, const Group& g);
  void emit_ops_struct(Writer& w, const std::vector<std::string>& names,
                       const std::string& extra = "");
  void emit_row_pointers(Writer& w, const std::string& valid, bool dbl, bool sender);
  void emit_output_stores(Writer& w, const std::string& guard,
                          const std::function<void(bool)>& body);
  void emit_accumulate(Writer& w, const std::vector<char>& used, int acc_base,
                       const std::string& weight, const std::function<std::string(int)>& value);
  /// A sender group's gradient accumulators: where each in1 (in2) block starts in the per-lane
  /// grad_x (grad_Y) values, their counts, and whether the group is the first of its pass to
  /// write a block (an earlier group touching it means accumulate).
  struct SenderLayout {
    std::map<int, int> gx_base, gy_base;
    int n_gx = 0, n_gy = 0;
    std::vector<char> gx_first, gy_first;
  };
  SenderLayout sender_layout(const PassSchedule& ps, int gi) const;
  void emit_gx_stores(Writer& w, const std::string& guard, const std::function<void(bool)>& body);
  static std::string gx_store(const std::string& at, const std::string& v, bool first);
  void emit_gy_maps(Writer& w, const Group& g, std::map<int, int>& gy_base,
                    const std::vector<char>& gy_first);
  void for_each_weight(const Group& g,
                       const std::function<void(const TpPath&, int, int, int)>& f) const;
  /// The group's per-edge gathered operands of one lane, as the fields of struct Ops: x (and
  /// dx) of its in1 blocks, W (and dW) of its weighted instructions, grad_out of its output
  /// blocks.
  struct Field {
    std::string name, expr;  // expr: the load, given ok, x, dx, w, dw, gr
  };
  std::vector<Field> operand_fields(const Group& g, bool with_d, bool with_g);
  void emit_ops_and_load(Writer& w, const Group& g, bool dbl, bool sender);
  /// The fused radial form's constants and column maps of group @p g (fused_ passes).
  void emit_fused_constants(Writer& w, const Group& g);
  void emit_compute_prologue(Writer& w, const Group& g, bool dbl, bool sender);

  // ---- constant tables (emit_conv_tables.cpp) -----------------------------------------------
  /// "decl[n] = { ... };": per_line formatted values a line.
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
  void unsigned_table(Writer& w, const std::string& name, const std::vector<unsigned>& values);
  void real_table(Writer& w, const std::string& name, const std::vector<double>& values);
  void emit_cg_tables(Writer& w);
  std::vector<std::pair<int, int>> pairs(int n) const;
  int matrix_j() const;
  void emit_m_table(Writer& w, const std::string& name, const std::string& tag, const TpPath& path,
                    int kj, int size, const std::function<int(const CgEntry&)>& at);
  void emit_matrix_tables(Writer& w);
  bool sender_mma_path(int n) const;

  // ---- one channel per lane: receiver and sender groups (emit_conv_receiver.cpp,
  // emit_conv_sender.cpp), the looped form's bodies (emit_conv_looped.cpp) ------------------
  void emit_receiver_group(Writer& w, const PassSchedule& ps, int gi);
  void emit_sender_group(Writer& w, const PassSchedule& ps, int gi);
  void cg_loop(Writer& w, int n, const std::vector<LoopTerm>& terms);
  void receiver_path_looped(Writer& w, int n, int v, bool dbl, int acc_base);
  void sender_contractions_looped(Writer& w, int n, int v, bool dbl);

  // ---- the matrix form (emit_conv_matrix.cpp) -----------------------------------------------
  bool matrix(Pass pass) const { return s_.pass(pass).smem.m_offset >= 0; }
  int stride(int d) const { return matrix_cg_stride(d, p_.dtype()); }
  /// Channel h of a lane: u0 + 32 h, u0 = 32 * lane_channels * chunk + lane.
  std::string hs(const std::string& name, int h) const { return name + "_" + str(h); }
  void emit_matrix_ops(Writer& w, const Group& g, bool sender, bool dbl);
  std::string channel_rows(int nc, int n, const std::function<std::string(int, int)>& at) const;
  std::string build_call(int n, int v, bool transposed, const std::string& m = "mm",
                         const std::string& ys = "ys") const;
  void emit_matrix_double_forward(Writer& w, const Group& g, int n, int v, int parity, int d3);
  void emit_matrix_receiver_group(Writer& w, const PassSchedule& ps, int gi);
  void emit_shuffle_pairs(Writer& w, const Group& g, int n, int v, bool dbl);
  void emit_matrix_sender_group(Writer& w, const PassSchedule& ps, int gi);

  // ---- the tensor-core form (emit_conv_mma.cpp) ---------------------------------------------
  void emit_mma_receiver_group(Writer& w, const PassSchedule& ps, int gi);
  void emit_mma_pairs(Writer& w, const Group& g, int n, int v, bool dbl);

  const TpProblem& p_;
  const Schedule& s_;
  const bool looped_;
  bool any_matrix_ = false;
  bool forward_mma_ = false;  // a (double) forward group on the tensor cores (Group::unit)
  bool any_mma_ = false;      // a group of any pass on the tensor cores
  // The pass being emitted runs in the fused radial form (fused_pass()): its groups read W from
  // the lane's shared-memory weights row and the sender groups write dE/dW there.
  bool fused_ = false;
  Pass fused_pass_ = Pass::kForward;
};

}  // namespace clebsch::cuda::emit_detail
