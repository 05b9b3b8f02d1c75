// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Validation, sparse symmetrised precomputation and host forward/backward of MACE's
// SymmetricContraction (see symmetric_contraction.h).
#include "clebsch/nn/symmetric_contraction.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "clebsch/support/error.h"

// The channel loops below run over distinct rows of distinct buffers; saying so lets the
// compiler vectorise them (it cannot prove it through the computed row offsets).
#if defined(__GNUC__) || defined(__clang__)
#define CLEBSCH_RESTRICT __restrict__
#else
#define CLEBSCH_RESTRICT
#endif

namespace clebsch {
namespace {

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

// Shape without its size-1 dimensions, except the last one (K), which is always kept.
std::vector<std::int64_t> squeeze_but_last(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i + 1 < shape.size(); ++i)
    if (shape[i] != 1) out.push_back(shape[i]);
  if (!shape.empty()) out.push_back(shape.back());
  return out;
}

std::string weight_name(int nu, int correlation) {
  return nu == correlation ? std::string("weights_max")
                           : "weights." + std::to_string(correlation - 1 - nu);
}

void check_values(const DenseTensor& t, const std::string& what) {
  std::int64_t n = 1;
  for (auto d : t.shape) {
    if (d < 0) throw Error(what + " has a negative dimension in shape " + shape_str(t.shape));
    n *= d;
  }
  if (static_cast<std::int64_t>(t.values.size()) != n)
    throw Error(what + " has " + std::to_string(t.values.size()) + " values, its shape " +
                shape_str(t.shape) + " needs " + std::to_string(n));
  for (std::size_t i = 0; i < t.values.size(); ++i)
    if (!std::isfinite(t.values[i]))
      throw Error(what + " has a non-finite value at flat index " + std::to_string(i));
}

}  // namespace

ContractionTensors ContractionTensors::from_module(
    Irrep ir_out, int correlation, const std::map<std::string, DenseTensor>& tensors) {
  if (correlation < 1)
    throw Error("Contraction " + ir_out.str() + ": correlation must be >= 1, got " +
                std::to_string(correlation));
  ContractionTensors out{ir_out, {}, {}};
  auto get = [&](const std::string& name) -> const DenseTensor& {
    const auto it = tensors.find(name);
    if (it == tensors.end())
      throw Error("Contraction " + ir_out.str() + " (correlation " + std::to_string(correlation) +
                  "): tensor " + name + " is missing");
    return it->second;
  };
  for (int nu = 1; nu <= correlation; ++nu) {
    out.U.push_back(get("U_matrix_" + std::to_string(nu)));
    out.W.push_back(get(weight_name(nu, correlation)));
  }
  return out;
}

SymmetricContraction::SymmetricContraction(Irreps irreps_in,
                                           std::vector<ContractionTensors> contractions)
    : irreps_in_(std::move(irreps_in)) {
  const std::string me = "SymmetricContraction";
  if (irreps_in_.empty()) throw Error(me + ": irreps_in is empty");
  channels_ = irreps_in_[0].mul;
  for (const auto& mi : irreps_in_)
    if (mi.mul != channels_ || mi.mul < 1)
      throw Error(me + ": irreps_in " + irreps_in_.str() +
                  " must hold the same nonzero multiplicity C for every irrep (MACE reshapes A "
                  "to [nodes, C, D])");
  for (const auto& mi : irreps_in_) dim_a_ += mi.ir.dim();
  if (contractions.empty()) throw Error(me + ": no contraction (output irrep) given");

  const int D = dim_a_;
  std::vector<MulIrrep> out_items;
  num_elements_ = -1;

  // Symmetrised nonzeros, keyed by the sorted index tuple, then (row, w_row).
  struct Acc {
    double sum = 0, abs_sum = 0;
    int count = 0;
  };
  std::map<std::vector<int>, std::map<std::pair<int, int>, Acc>> acc;

  for (std::size_t ci = 0; ci < contractions.size(); ++ci) {
    const ContractionTensors& ct = contractions[ci];
    const int L = ct.ir_out.l(), dimL = 2 * L + 1;
    const std::string where =
        me + ": contraction " + std::to_string(ci) + " (" + ct.ir_out.str() + ")";
    const int corr = static_cast<int>(ct.U.size());
    if (corr < 1) throw Error(where + " has no U_matrix tensors (correlation 0)");
    if (ct.W.size() != ct.U.size())
      throw Error(where + " has " + std::to_string(ct.U.size()) + " U_matrix tensors but " +
                  std::to_string(ct.W.size()) + " weight tensors");
    correlations_.push_back(corr);
    row_offsets_.push_back(num_rows_);
    out_items.push_back({channels_, ct.ir_out});

    for (int nu = 1; nu <= corr; ++nu) {
      const DenseTensor& U = ct.U[nu - 1];
      const DenseTensor& W = ct.W[nu - 1];
      const std::string u_name = where + ": U_matrix_" + std::to_string(nu);
      const std::string w_name =
          where + ": " + weight_name(nu, corr) + " (nu = " + std::to_string(nu) + ")";
      if (U.shape.empty())
        throw Error(u_name + " has shape [], expected [" + std::to_string(dimL) + ", " +
                    std::to_string(D) + " x" + std::to_string(nu) + ", K]");
      const std::int64_t K = U.shape.back();
      std::vector<std::int64_t> full{dimL};
      for (int t = 0; t < nu; ++t) full.push_back(D);
      full.push_back(K);
      if (K < 1 || squeeze_but_last(U.shape) != squeeze_but_last(full))
        throw Error(u_name + " has shape " + shape_str(U.shape) + ", expected " + shape_str(full) +
                    " (size-1 dimensions other than K may be absent)");
      check_values(U, u_name);
      if (W.shape.size() != 3 || W.shape[1] != K || W.shape[2] != channels_ || W.shape[0] < 1 ||
          (num_elements_ >= 0 && W.shape[0] != num_elements_))
        throw Error(
            w_name + " has shape " + shape_str(W.shape) + ", expected [" +
            (num_elements_ >= 0 ? std::to_string(num_elements_) : std::string("n_elements")) +
            ", " + std::to_string(K) + ", " + std::to_string(channels_) + "]");
      check_values(W, w_name);
      num_elements_ = static_cast<int>(W.shape[0]);

      // The dense index space must fit the flat walk below.
      double dense = dimL * static_cast<double>(K);
      for (int t = 0; t < nu; ++t) dense *= D;
      if (dense > 4e9)
        throw CapacityError(u_name + " has " + std::to_string(dense) +
                            " entries, more than the supported 4e9");

      const int w_row0 = num_w_rows_;
      num_w_rows_ += static_cast<int>(K);
      std::vector<int> idx(nu);
      const std::size_t n_entries = U.values.size();
      for (std::size_t flat = 0; flat < n_entries; ++flat) {
        const double u = U.values[flat];
        if (u == 0) continue;
        ++dense_nonzeros_;
        // Decode [M, i1..i_nu, k] from the row-major flat index.
        std::size_t rest = flat;
        const int k = static_cast<int>(rest % K);
        rest /= K;
        for (int t = nu - 1; t >= 0; --t) {
          idx[t] = static_cast<int>(rest % D);
          rest /= D;
        }
        const int M = static_cast<int>(rest);
        std::vector<int> key = idx;
        std::sort(key.begin(), key.end());
        Acc& a = acc[key][{num_rows_ + M, w_row0 + k}];
        a.sum += u;
        a.abs_sum += std::abs(u);
        ++a.count;
      }
    }
    num_rows_ += dimL;
  }
  irreps_out_ = Irreps(out_items);

  // Monomials: the D degree-1 ones first (their values are A itself), then every needed tuple and
  // all of its prefixes, ordered by degree, so that a parent always precedes its children.
  auto by_degree = [](const std::vector<int>& a, const std::vector<int>& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  };
  std::set<std::vector<int>, decltype(by_degree)> needed(by_degree);
  for (int i = 0; i < D; ++i) needed.insert({i});
  for (const auto& kv : acc)
    for (std::size_t n = 1; n <= kv.first.size(); ++n)
      needed.insert(std::vector<int>(kv.first.begin(), kv.first.begin() + n));
  std::map<std::vector<int>, int> id;
  for (const auto& tuple : needed) {
    const int m = static_cast<int>(monomials_.size());
    id[tuple] = m;
    if (tuple.size() == 1) {
      monomials_.push_back({-1, tuple[0]});
    } else {
      const std::vector<int> prefix(tuple.begin(), tuple.end() - 1);
      monomials_.push_back({id.at(prefix), tuple.back()});
    }
  }

  constexpr double eps = std::numeric_limits<double>::epsilon();
  // acc is ordered by monomial tuple, and each tuple's entries by (row, w_row), so pairs come
  // out grouped; a pair's terms are contiguous.
  std::vector<std::pair<std::pair<int, int>, Term>> kept;  // ((monomial, row), term)
  for (const auto& kv : acc) {
    const int m = id.at(kv.first);
    for (const auto& [rw, a] : kv.second) {
      // Antisymmetric parts of U cancel in the sum; what is left of them is rounding noise
      // (below the error bound of the sum itself), which carries no information.
      if (std::abs(a.sum) <= a.count * eps * a.abs_sum) continue;
      kept.push_back({{m, rw.first}, Term{rw.second, a.sum}});
    }
  }
  // Monomial-major order keeps one monomial's values hot while its pairs are used.
  std::stable_sort(kept.begin(), kept.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t t = 0; t < kept.size(); ++t) {
    if (t == 0 || kept[t].first != kept[t - 1].first)
      pairs_.push_back({kept[t].first.first, kept[t].first.second, static_cast<int>(t)});
    terms_.push_back(kept[t].second);
  }
  coefs_d_.reserve(terms_.size());
  for (const auto& t : terms_) coefs_d_.push_back(t.coef);
  coefs_f_.assign(coefs_d_.begin(), coefs_d_.end());

  // Weight table [z][w_row][c], in the order the w_rows were assigned above.
  weights_d_.assign(static_cast<std::size_t>(num_elements_) * num_w_rows_ * channels_, 0.0);
  int w_row0 = 0;
  for (const auto& ct : contractions)
    for (const auto& W : ct.W) {
      const int K = static_cast<int>(W.shape[1]);
      for (int z = 0; z < num_elements_; ++z)
        for (int k = 0; k < K; ++k)
          for (int c = 0; c < channels_; ++c)
            weights_d_[(static_cast<std::size_t>(z) * num_w_rows_ + w_row0 + k) * channels_ + c] =
                W.values[(static_cast<std::size_t>(z) * K + k) * channels_ + c];
      w_row0 += K;
    }
  weights_f_.assign(weights_d_.begin(), weights_d_.end());
}

template <>
const std::vector<double>& SymmetricContraction::weights<double>() const {
  return weights_d_;
}
template <>
const std::vector<float>& SymmetricContraction::weights<float>() const {
  return weights_f_;
}
template <>
const std::vector<double>& SymmetricContraction::coefs<double>() const {
  return coefs_d_;
}
template <>
const std::vector<float>& SymmetricContraction::coefs<float>() const {
  return coefs_f_;
}

// An exception must not escape an OpenMP region, so species are checked before it (O(nodes)).
void SymmetricContraction::check_species(std::size_t n_nodes, const int* species) const {
  for (std::size_t i = 0; i < n_nodes; ++i)
    if (species[i] < 0 || species[i] >= num_elements_)
      throw Error("SymmetricContraction: node " + std::to_string(i) + " has species " +
                  std::to_string(species[i]) + ", expected 0.." +
                  std::to_string(num_elements_ - 1));
}

// Fork/join costs microseconds (far more on a loaded machine, where OpenMP's spinning threads
// compete for cores): small batches run on the calling thread.
bool SymmetricContraction::worth_threads(std::size_t n_nodes) const {
  const double work = static_cast<double>(n_nodes) * channels_ *
                      static_cast<double>(pairs_.size() + monomials_.size());
  return n_nodes > 1 && work > 2e5;
}

// E[b][cc] for pair p and channel block b (lanes past C are zero):
//   E = sum over the pair's terms of coef * W[species, w_row, b*CB + cc],
// i.e. U contracted with the species' weights over k, done once per species and call.
template <class T>
void SymmetricContraction::effective_weights(int species, long long p, T* E) const {
  constexpr int CB = kChannelBlock;
  const int C = channels_;
  const std::vector<T>& W = weights<T>();
  const std::vector<T>& coef = coefs<T>();
  const T* W_z = W.data() + static_cast<std::size_t>(species) * num_w_rows_ * C;
  const int t0 = pairs_[p].term_begin;
  const int t1 = p + 1 < static_cast<long long>(pairs_.size()) ? pairs_[p + 1].term_begin
                                                               : static_cast<int>(terms_.size());
  const std::size_t n_pairs = pairs_.size();
  for (int c0 = 0, b = 0; c0 < C; c0 += CB, ++b) {
    const int cb = std::min(CB, C - c0);
    T* e = E + (b * n_pairs + p) * CB;
    std::fill(e, e + CB, T(0));
    for (int t = t0; t < t1; ++t) {
      const T u = coef[t];
      const T* w = W_z + static_cast<std::size_t>(terms_[t].w_row) * C + c0;
      for (int cc = 0; cc < cb; ++cc) e[cc] += u * w[cc];
    }
  }
}

// P[m][cc] = value of monomial m for channel c0+cc (cc < kChannelBlock; lanes >= cb are zero).
template <class T>
void SymmetricContraction::monomials_block(const T* A_node, int c0, int cb, T* P) const {
  constexpr int B = kChannelBlock;
  const int D = dim_a_;
  for (int i = 0; i < D; ++i) {
    T* p = P + static_cast<std::size_t>(i) * B;
    for (int cc = 0; cc < B; ++cc)
      p[cc] = cc < cb ? A_node[static_cast<std::size_t>(c0 + cc) * D + i] : T(0);
  }
  const int n_mono = static_cast<int>(monomials_.size());
  for (int m = D; m < n_mono; ++m) {
    // m > parent and m >= D > last: the written row is never read here.
    const T* CLEBSCH_RESTRICT pa = P + static_cast<std::size_t>(monomials_[m].parent) * B;
    const T* CLEBSCH_RESTRICT pl = P + static_cast<std::size_t>(monomials_[m].last) * B;
    T* CLEBSCH_RESTRICT p = P + static_cast<std::size_t>(m) * B;
    for (int cc = 0; cc < B; ++cc) p[cc] = pa[cc] * pl[cc];
  }
}

// Forward (kBackward = false: out = B) or vector-Jacobian product (out = grad_A). Nodes are
// processed species by species, so that the weights of a species are contracted with U once
// (effective_weights) and then shared by all its nodes; every pair then costs one multiply-add
// per channel instead of one per term.
template <class T, bool kBackward>
void SymmetricContraction::run(std::size_t n_nodes, const int* species, const T* A, const T* grad_B,
                               T* out) const {
  constexpr int CB = kChannelBlock;
  const int C = channels_, D = dim_a_, R = num_rows_;
  const int n_blocks = (C + CB - 1) / CB;
  const long long n_pairs = static_cast<long long>(pairs_.size());
  const int n_mono = static_cast<int>(monomials_.size());
  check_species(n_nodes, species);

  // Counting sort of the nodes by species.
  std::vector<std::size_t> start(num_elements_ + 1, 0), order(n_nodes);
  for (std::size_t i = 0; i < n_nodes; ++i) ++start[species[i] + 1];
  for (int z = 0; z < num_elements_; ++z) start[z + 1] += start[z];
  {
    std::vector<std::size_t> next(start.begin(), start.end() - 1);
    for (std::size_t i = 0; i < n_nodes; ++i) order[next[species[i]]++] = i;
  }
  std::vector<T> E(static_cast<std::size_t>(n_blocks) * n_pairs * CB);

  const bool parallel = worth_threads(n_nodes);
#pragma omp parallel if (parallel)
  {
    std::vector<T> P(monomials_.size() * CB), rows(static_cast<std::size_t>(R) * CB);
    std::vector<T> gP(kBackward ? monomials_.size() * CB : 0);
    for (int z = 0; z < num_elements_; ++z) {
      const long long begin = static_cast<long long>(start[z]);
      const long long end = static_cast<long long>(start[z + 1]);
      if (begin == end) continue;  // same decision on every thread: the barriers stay matched
#pragma omp for schedule(static)
      for (long long p = 0; p < n_pairs; ++p) effective_weights(z, p, E.data());
#pragma omp for schedule(static)
      for (long long q = begin; q < end; ++q) {
        const std::size_t i = order[q];
        const T* A_node = A + i * C * D;
        for (int c0 = 0, b = 0; c0 < C; c0 += CB, ++b) {
          const int cb = std::min(CB, C - c0);
          const T* E_b = E.data() + static_cast<std::size_t>(b) * n_pairs * CB;
          monomials_block(A_node, c0, cb, P.data());
          if constexpr (!kBackward) {
            std::fill(rows.begin(), rows.end(), T(0));
            for (long long p = 0; p < n_pairs; ++p) {
              const T* CLEBSCH_RESTRICT e = E_b + p * CB;
              const T* CLEBSCH_RESTRICT pm =
                  P.data() + static_cast<std::size_t>(pairs_[p].monomial) * CB;
              T* CLEBSCH_RESTRICT o = rows.data() + static_cast<std::size_t>(pairs_[p].row) * CB;
              for (int cc = 0; cc < CB; ++cc) o[cc] += e[cc] * pm[cc];
            }
            // Scatter to the c-major layout of each L block.
            T* B_node = out + i * C * R;
            for (std::size_t k = 0; k < row_offsets_.size(); ++k) {
              const int r0 = row_offsets_[k], dimL = irreps_out_[k].ir.dim();
              T* B_L = B_node + static_cast<std::size_t>(C) * r0;
              for (int cc = 0; cc < cb; ++cc)
                for (int M = 0; M < dimL; ++M)
                  B_L[static_cast<std::size_t>(c0 + cc) * dimL + M] =
                      rows[static_cast<std::size_t>(r0 + M) * CB + cc];
            }
          } else {
            const T* gB_node = grad_B + i * C * R;
            std::fill(rows.begin(), rows.end(), T(0));
            for (std::size_t k = 0; k < row_offsets_.size(); ++k) {
              const int r0 = row_offsets_[k], dimL = irreps_out_[k].ir.dim();
              const T* gB_L = gB_node + static_cast<std::size_t>(C) * r0;
              for (int cc = 0; cc < cb; ++cc)
                for (int M = 0; M < dimL; ++M)
                  rows[static_cast<std::size_t>(r0 + M) * CB + cc] =
                      gB_L[static_cast<std::size_t>(c0 + cc) * dimL + M];
            }
            std::fill(gP.begin(), gP.end(), T(0));
            for (long long p = 0; p < n_pairs; ++p) {
              const T* CLEBSCH_RESTRICT e = E_b + p * CB;
              const T* CLEBSCH_RESTRICT g =
                  rows.data() + static_cast<std::size_t>(pairs_[p].row) * CB;
              T* CLEBSCH_RESTRICT gp =
                  gP.data() + static_cast<std::size_t>(pairs_[p].monomial) * CB;
              for (int cc = 0; cc < CB; ++cc) gp[cc] += e[cc] * g[cc];
            }
            // Reverse sweep of P[m] = P[parent] * A[last]: children (higher degree) come later
            // in the order, so each gP[m] is complete when it is reached.
            for (int m = n_mono - 1; m >= D; --m) {
              const Monomial& mono = monomials_[m];
              const T* CLEBSCH_RESTRICT g = gP.data() + static_cast<std::size_t>(m) * CB;
              const T* CLEBSCH_RESTRICT pa = P.data() + static_cast<std::size_t>(mono.parent) * CB;
              const T* CLEBSCH_RESTRICT pl = P.data() + static_cast<std::size_t>(mono.last) * CB;
              if (mono.parent == mono.last) {  // A[i]^2: one row gets both contributions
                T* CLEBSCH_RESTRICT ga = gP.data() + static_cast<std::size_t>(mono.parent) * CB;
                for (int cc = 0; cc < CB; ++cc) ga[cc] += T(2) * g[cc] * pl[cc];
              } else {
                T* CLEBSCH_RESTRICT ga = gP.data() + static_cast<std::size_t>(mono.parent) * CB;
                for (int cc = 0; cc < CB; ++cc) ga[cc] += g[cc] * pl[cc];
                T* CLEBSCH_RESTRICT gl = gP.data() + static_cast<std::size_t>(mono.last) * CB;
                for (int cc = 0; cc < CB; ++cc) gl[cc] += g[cc] * pa[cc];
              }
            }
            T* gA_node = out + i * C * D;
            for (int cc = 0; cc < cb; ++cc)
              for (int d = 0; d < D; ++d)
                gA_node[static_cast<std::size_t>(c0 + cc) * D + d] =
                    gP[static_cast<std::size_t>(d) * CB + cc];
          }
        }
      }
      // The implicit barrier of the node loop protects E before the next species rewrites it.
    }
  }
}

template <class T>
void SymmetricContraction::forward(std::size_t n_nodes, const int* species, const T* A,
                                   T* B) const {
  run<T, false>(n_nodes, species, A, nullptr, B);
}

template <class T>
void SymmetricContraction::backward(std::size_t n_nodes, const int* species, const T* A,
                                    const T* grad_B, T* grad_A) const {
  run<T, true>(n_nodes, species, A, grad_B, grad_A);
}

template void SymmetricContraction::forward<float>(std::size_t, const int*, const float*,
                                                   float*) const;
template void SymmetricContraction::forward<double>(std::size_t, const int*, const double*,
                                                    double*) const;
template void SymmetricContraction::backward<float>(std::size_t, const int*, const float*,
                                                    const float*, float*) const;
template void SymmetricContraction::backward<double>(std::size_t, const int*, const double*,
                                                     const double*, double*) const;

}  // namespace clebsch
