// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The linear maps of the MACE host kernels (mace_kernels.h) on ir_mul rows: NodeLinear (e3nn
// o3.Linear) and SpeciesLinear (the skip_tp with the one-hot species), forward and transposed,
// and the conversions between e3nn's mul_ir rows and ir_mul. Inside a block of mul copies of an
// irrep, ir_mul stores the channels of one m contiguously, so an instruction is 2l+1 GEMMs of
// rows by its [mul_in][mul_out] weights; both maps share that loop and differ only in which rows
// a task takes (a block of consecutive rows, or the rows of one species) and whose weights.
#include "clebsch/engine/mace_kernels.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "clebsch/support/error.h"

namespace clebsch::mace_detail {

namespace {

// Rows per task of a parallel node loop.
constexpr std::size_t kRowBlock = 64;

// Which output blocks of a map (irreps_out forward, irreps_in transposed) some instruction
// writes, and per instruction whether it is the first into its block: the first overwrites, the
// others add, and blocks nobody writes are zeroed unless accumulating.
struct BlockWrites {
  std::vector<char> written, first;
};

template <class Ins>
BlockWrites block_writes(const std::vector<Ins>& ins, std::size_t num_blocks, bool transpose) {
  BlockWrites b{std::vector<char>(num_blocks, 0), std::vector<char>(ins.size(), 0)};
  for (std::size_t q = 0; q < ins.size(); ++q) {
    const int yb = transpose ? ins[q].i_in : ins[q].i_out;
    if (!b.written[yb]) b.first[q] = 1;
    b.written[yb] = 1;
  }
  return b;
}

// The map on `count` rows of one task: row r of X and Y is rows[r] when `rows` is given, else r
// (X and Y then start at the task's first row). weights(ins) is the packed matrix of an
// instruction for this task and direction.
template <class T, class Ins, class Weights>
void map_rows(const std::vector<Ins>& ins_list, const BlockWrites& bw, const Irreps& y_irreps,
              const std::vector<int>& y_off, bool transpose, bool accumulate, std::size_t count,
              const int* rows, const T* X, std::size_t ldx, T* Y, std::size_t ldy,
              const Weights& weights) {
  if (!accumulate)
    for (std::size_t b = 0; b < y_irreps.size(); ++b)
      if (!bw.written[b])
        for (std::size_t r = 0; r < count; ++r)
          std::fill_n(Y + (rows ? static_cast<std::size_t>(rows[r]) : r) * ldy + y_off[b],
                      y_irreps[b].dim(), T(0));
  for (std::size_t q = 0; q < ins_list.size(); ++q) {
    const Ins& ins = ins_list[q];
    const bool acc = accumulate || !bw.first[q];
    const std::size_t xo = transpose ? ins.off_out : ins.off_in;
    const std::size_t yo = transpose ? ins.off_in : ins.off_out;
    const std::size_t xm = transpose ? ins.mul_out : ins.mul_in;
    const std::size_t ym = transpose ? ins.mul_in : ins.mul_out;
    const PackedMatrix<T>& w = weights(ins);
    for (int m = 0; m < ins.dim_m; ++m)
      gemm(w, count, X + xo + m * xm, ldx, rows, Y + yo + m * ym, ldy, rows, acc);
  }
}

// One row between e3nn's mul_ir layout (u*(2l+1)+m inside a block) and ir_mul ((m+l)*mul+u).
template <bool kToIrMul, class T>
void convert_row(const Irreps& irreps, const T* in, T* out) {
  int off = 0;
  for (const MulIrrep& b : irreps) {
    const int d = b.ir.dim();
    for (int u = 0; u < b.mul; ++u)
      for (int m = 0; m < d; ++m) {
        const int ir_mul = off + m * b.mul + u, mul_ir = off + u * d + m;
        if constexpr (kToIrMul)
          out[ir_mul] = in[mul_ir];
        else
          out[mul_ir] = in[ir_mul];
      }
    off += b.mul * d;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// NodeLinear
// ---------------------------------------------------------------------------------------------

template <class T>
NodeLinear<T>::NodeLinear(const model::Linear& linear)
    : in_(linear.irreps_in), out_(linear.irreps_out), dim_in_(in_.dim()), dim_out_(out_.dim()) {
  const std::vector<int> off_in = in_.offsets(), off_out = out_.offsets();
  for (const auto& src : linear.instructions) {
    if (src.i_in < 0 || src.i_in >= static_cast<int>(in_.size()) || src.i_out < 0 ||
        src.i_out >= static_cast<int>(out_.size()))
      throw ModelFormatError("linear " + in_.str() + " -> " + out_.str() +
                             ": instruction index out of range (" + std::to_string(src.i_in) +
                             ", " + std::to_string(src.i_out) + ")");
    const MulIrrep& a = in_[src.i_in];
    const MulIrrep& b = out_[src.i_out];
    if (a.ir != b.ir || a.mul != src.mul_in || b.mul != src.mul_out)
      throw ModelFormatError("linear " + in_.str() + " -> " + out_.str() + ": instruction (" +
                             std::to_string(src.i_in) + ", " + std::to_string(src.i_out) +
                             ") joins " + std::to_string(a.mul) + "x" + a.ir.str() + " and " +
                             std::to_string(b.mul) + "x" + b.ir.str());
    const std::size_t n = static_cast<std::size_t>(src.mul_in) * src.mul_out;
    if (src.weight_offset < 0 || src.weight_offset + n > linear.weight.size())
      throw ModelFormatError("linear " + in_.str() + " -> " + out_.str() +
                             ": weight block out of range");
    Ins ins;
    ins.i_in = src.i_in;
    ins.i_out = src.i_out;
    ins.mul_in = src.mul_in;
    ins.mul_out = src.mul_out;
    ins.dim_m = a.ir.dim();
    ins.off_in = off_in[src.i_in];
    ins.off_out = off_out[src.i_out];
    const double* w = linear.weight.data() + src.weight_offset;
    ins.w = PackedMatrix<T>(src.mul_in, src.mul_out, w, src.mul_out, src.path_weight);
    ins.wt = PackedMatrix<T>(src.mul_out, src.mul_in, w, src.mul_out, src.path_weight, true);
    flops_per_row_ += 2.0 * n * ins.dim_m;
    ins_.push_back(std::move(ins));
  }
}

template <class T>
void NodeLinear<T>::run(bool transpose, std::size_t n, const T* X, std::size_t ldx, T* Y,
                        std::size_t ldy, bool accumulate, bool parallel) const {
  // Forward: X holds irreps_in rows and Y irreps_out rows; transpose: X holds cotangents of
  // irreps_out and Y receives irreps_in.
  const Irreps& y_irreps = transpose ? in_ : out_;
  const std::vector<int> y_off = y_irreps.offsets();
  const BlockWrites bw = block_writes(ins_, y_irreps.size(), transpose);
  const auto weights = [transpose](const Ins& ins) -> const PackedMatrix<T>& {
    return transpose ? ins.wt : ins.w;
  };
  const std::size_t n_blocks = (n + kRowBlock - 1) / kRowBlock;
  const bool par = parallel && n_blocks > 1 && flops_per_row_ * n > kParallelWork;
#pragma omp parallel for schedule(static) if (par)
  for (std::size_t blk = 0; blk < n_blocks; ++blk) {
    const std::size_t r0 = blk * kRowBlock, m_rows = std::min(kRowBlock, n - r0);
    map_rows(ins_, bw, y_irreps, y_off, transpose, accumulate, m_rows, nullptr, X + r0 * ldx, ldx,
             Y + r0 * ldy, ldy, weights);
  }
}

template <class T>
void NodeLinear<T>::forward(std::size_t n, const T* X, std::size_t ldx, T* Y, std::size_t ldy,
                            bool accumulate, bool parallel) const {
  run(false, n, X, ldx, Y, ldy, accumulate, parallel);
}

template <class T>
void NodeLinear<T>::backward(std::size_t n, const T* gY, std::size_t ldy, T* gX, std::size_t ldx,
                             bool accumulate, bool parallel) const {
  run(true, n, gY, ldy, gX, ldx, accumulate, parallel);
}

template class NodeLinear<float>;
template class NodeLinear<double>;

// ---------------------------------------------------------------------------------------------
// SpeciesLinear
// ---------------------------------------------------------------------------------------------

template <class T>
SpeciesLinear<T>::SpeciesLinear(const model::TensorProduct& tp, int num_species,
                                const std::string& where)
    : in_(tp.descriptor.irreps_in1()),
      out_(tp.descriptor.irreps_out()),
      dim_in_(in_.dim()),
      dim_out_(out_.dim()),
      num_species_(num_species) {
  const TensorProduct& d = tp.descriptor;
  if (d.irreps_in2().size() != 1 || d.irreps_in2()[0].ir.l() != 0 ||
      d.irreps_in2()[0].ir.p() != 1 || d.irreps_in2()[0].mul != num_species)
    throw ModelFormatError(where + ": second input is " + d.irreps_in2().str() +
                           ", expected the one-hot species " + std::to_string(num_species) + "x0e");
  if (tp.external_weights) throw ModelFormatError(where + ": expected internal (shared) weights");
  if (tp.weight.size() != static_cast<std::size_t>(d.weight_numel()))
    throw ModelFormatError(where + ": has " + std::to_string(tp.weight.size()) +
                           " weights, expected " + std::to_string(d.weight_numel()));
  for (std::size_t n = 0; n < d.paths().size(); ++n) {
    const TensorProductPath& p = d.paths()[n];
    const std::string w = where + ".instructions[" + std::to_string(n) + "]";
    if (p.ins.mode() != ConnectionMode::kUvw || !p.ins.has_weight())
      throw ModelFormatError(w + ": mode " + to_string(p.ins.mode()) + ", expected weighted uvw");
    if (p.ir1.l() != p.ir_out.l())
      throw ModelFormatError(w + ": couples l=" + std::to_string(p.ir1.l()) +
                             " to l=" + std::to_string(p.ir_out.l()) + " through a scalar");
    if (p.cg.empty()) continue;  // a zero coupling contributes nothing
    // Coupling with a scalar: P[i,0,k] = c delta_ik, the same c for every m.
    const double c0 = p.cg.front().c;
    bool ok = static_cast<int>(p.cg.size()) == p.ir1.dim();
    for (const CgEntry& e : p.cg)
      ok = ok && e.i == e.k && e.j == 0 && std::abs(e.c - c0) <= 1e-12 * std::abs(c0);
    if (!ok) throw ModelFormatError(w + ": coupling with the one-hot input is not c * identity");
    Ins ins;
    ins.i_in = p.ins.i_in1();
    ins.i_out = p.ins.i_out();
    ins.mul_in = p.mul1;
    ins.mul_out = p.mul_out;
    ins.dim_m = p.ir1.dim();
    ins.off_in = p.offset1;
    ins.off_out = p.offset_out;
    const std::size_t ldb = static_cast<std::size_t>(num_species) * p.mul_out;
    for (int s = 0; s < num_species; ++s) {
      const double* B =
          tp.weight.data() + p.weight_offset + static_cast<std::size_t>(s) * p.mul_out;
      ins.w.emplace_back(p.mul1, p.mul_out, B, ldb, c0);
      ins.wt.emplace_back(p.mul_out, p.mul1, B, ldb, c0, true);
    }
    ins_.push_back(std::move(ins));
  }
}

template <class T>
void SpeciesLinear<T>::run(bool transpose, std::size_t n, const int* species, const T* X,
                           std::size_t ldx, T* Y, std::size_t ldy, bool accumulate,
                           bool parallel) const {
  const Irreps& y_irreps = transpose ? in_ : out_;
  const std::vector<int> y_off = y_irreps.offsets();
  const BlockWrites bw = block_writes(ins_, y_irreps.size(), transpose);
  // Rows grouped by species, cut into tasks of kRowBlock rows of one species.
  std::vector<int> order(n);
  std::vector<std::size_t> start(num_species_ + 1, 0);
  for (std::size_t r = 0; r < n; ++r) ++start[species[r] + 1];
  for (int s = 0; s < num_species_; ++s) start[s + 1] += start[s];
  {
    std::vector<std::size_t> next(start.begin(), start.end() - 1);
    for (std::size_t r = 0; r < n; ++r) order[next[species[r]]++] = static_cast<int>(r);
  }
  struct Task {
    int s;
    std::size_t begin, count;
  };
  std::vector<Task> tasks;
  for (int s = 0; s < num_species_; ++s)
    for (std::size_t b = start[s]; b < start[s + 1]; b += kRowBlock)
      tasks.push_back({s, b, std::min(kRowBlock, start[s + 1] - b)});
  const bool par = parallel && tasks.size() > 1 && flops_per_row() * n > kParallelWork;
#pragma omp parallel for schedule(static) if (par)
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    const Task& task = tasks[t];
    const auto weights = [&](const Ins& ins) -> const PackedMatrix<T>& {
      return transpose ? ins.wt[task.s] : ins.w[task.s];
    };
    map_rows(ins_, bw, y_irreps, y_off, transpose, accumulate, task.count,
             order.data() + task.begin, X, ldx, Y, ldy, weights);
  }
}

template <class T>
void SpeciesLinear<T>::forward(std::size_t n, const int* species, const T* X, std::size_t ldx, T* Y,
                               std::size_t ldy, bool accumulate, bool parallel) const {
  run(false, n, species, X, ldx, Y, ldy, accumulate, parallel);
}

template <class T>
void SpeciesLinear<T>::backward(std::size_t n, const int* species, const T* gY, std::size_t ldy,
                                T* gX, std::size_t ldx, bool accumulate, bool parallel) const {
  run(true, n, species, gY, ldy, gX, ldx, accumulate, parallel);
}

template class SpeciesLinear<float>;
template class SpeciesLinear<double>;

// ---------------------------------------------------------------------------------------------
// Layout conversion
// ---------------------------------------------------------------------------------------------

template <class T>
void mul_ir_to_ir_mul(const Irreps& irreps, const T* in, T* out) {
  convert_row<true>(irreps, in, out);
}

template <class T>
void ir_mul_to_mul_ir(const Irreps& irreps, const T* in, T* out) {
  convert_row<false>(irreps, in, out);
}

template void mul_ir_to_ir_mul<float>(const Irreps&, const float*, float*);
template void mul_ir_to_ir_mul<double>(const Irreps&, const double*, double*);
template void ir_mul_to_mul_ir<float>(const Irreps&, const float*, float*);
template void ir_mul_to_mul_ir<double>(const Irreps&, const double*, double*);

}  // namespace clebsch::mace_detail
