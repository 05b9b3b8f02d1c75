// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The constant tables of a module, in global memory: the looped form's CG entries per
// instruction and index, the matrix form's M and M^T builds, grad_Y's pair lists and the
// tensor-core form's fragment-ordered M and dense pair positions.
#include "clebsch/cuda/generator/emit_conv_detail.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda::emit_detail {

// "__device__ const unsigned <name>[n] = {...};", twelve values a line.
void ModuleEmitter::unsigned_table(Writer& w, const std::string& name,
                                   const std::vector<unsigned>& values) {
  table<unsigned>(w, "__device__ const unsigned " + name, values, 12,
                  [](const unsigned& v) { return str(int(v)) + "u"; });
}

// "__device__ const real <name>[n] = {...};": literals of the module's type, six a line.
void ModuleEmitter::real_table(Writer& w, const std::string& name,
                               const std::vector<double>& values) {
  table<double>(w, "__device__ const real " + name, values, 6,
                [&](const double& v) { return lit(v); });
}

// The CG tables of the looped form: per instruction and per index (i, j, k) the entries in
// the order of that index (order_by), so that a loop over the entries of one output index
// sums into a register. l <= 8: an index fits 8 bits. Global memory, not __constant__
// (high-l-8 float64 needs 840 KB for the three orders).
void ModuleEmitter::emit_cg_tables(Writer& w) {
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
      unsigned_table(w, "kCgIjk" + tag, ijk);
      real_table(w, "kCgC" + tag, c);
    }
  }
}

// Instruction n's non-zero (i, k) pairs in (i, k) order: the products x_i grad_out_k of the
// matrix form's grad_Y, and their positions in its P buffer.
std::vector<std::pair<int, int>> ModuleEmitter::pairs(int n) const {
  std::vector<std::pair<int, int>> v;
  for (const CgEntry& e : p_.paths()[n].cg) v.push_back({e.i, e.k});
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// Largest number of CG entries of one (i, k) pair over the module: the terms of an M entry.
int ModuleEmitter::matrix_j() const {
  int most = 1;
  for (const TpPath& path : p_.paths()) {
    std::map<std::pair<int, int>, int> count;
    for (const CgEntry& e : path.cg) most = std::max(most, ++count[{e.i, e.k}]);
  }
  return most;
}

// One M (or M^T) table pair <name>j<tag>/<name>c<tag> of `size` entries, entry at(e) of each
// CG entry.
void ModuleEmitter::emit_m_table(Writer& w, const std::string& name, const std::string& tag,
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
  unsigned_table(w, name + "j" + tag, js);
  real_table(w, name + "c" + tag, cs);
}

// The matrix form's tables, per instruction n with entries: for the receiver passes
// kMj<n>/kMc<n> build M (entry q = k * stride(d1) + i: the j of its terms, 8 bits each, and
// their C, zero in unused slots and in the padding); for the sender passes kMTj<n>/kMTc<n>
// build M^T (entry q = i * stride(d3) + k), and kPptr<n>/kPpair<n>/kPc<n> list the entries by
// j (CG order within one j) as positions in the pair list and C.
void ModuleEmitter::emit_matrix_tables(Writer& w) {
  const int kj = matrix_j();
  if (kj > 4) throw Error("emit_conv_module: an (i, k) pair with more than 4 CG terms");
  w("");
  w("// ==== matrix CG form tables " + std::string(60, '='));
  w("constexpr int kMatrixJ = " + str(kj) + ", kMatrixStride = " + str(matrix_cg_buffer(p_)) + ";");
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
      at.push_back(
          unsigned(std::lower_bound(pl.begin(), pl.end(), std::make_pair(e.i, e.k)) - pl.begin()));
      c.push_back(e.c);
    }
    for (int j = 0; j < d2; ++j) ptr[std::size_t(j + 1)] += ptr[std::size_t(j)];
    table<int>(w, "__device__ const int kPptr" + tag, ptr, 16, [](const int& v) { return str(v); });
    unsigned_table(w, "kPpair" + tag, at);
    if (sender_mma_path(int(n))) {
      // The same entries as positions i d3 + k of the dense P of mma_store_pairs.
      std::vector<unsigned> dense;
      for (std::size_t m : order) dense.push_back(unsigned(path.cg[m].i * d3 + path.cg[m].k));
      unsigned_table(w, "kPdense" + tag, dense);
    }
    real_table(w, "kPc" + tag, c);
  }
}

// Whether path @p n is in a sender-pass group on the tensor cores (its P is dense).
bool ModuleEmitter::sender_mma_path(int n) const {
  for (Pass pass : {Pass::kBackward, Pass::kDoubleBackward})
    for (const Group& g : s_.pass(pass).groups)
      if (g.on_tensor_cores() && std::find(g.paths.begin(), g.paths.end(), n) != g.paths.end())
        return true;
  return false;
}

}  // namespace clebsch::cuda::emit_detail
