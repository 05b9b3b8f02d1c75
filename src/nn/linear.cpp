// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Validation, default path weights and host forward/backward of o3.Linear (see linear.h).
#include "clebsch/nn/linear.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "clebsch/support/error.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace clebsch {
namespace {

std::vector<LinearPath> default_paths(const Irreps& in, const Irreps& out,
                                      const std::vector<std::pair<int, int>>& pairs,
                                      PathNormalization normalization, const std::string& what) {
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    const auto [i_in, i_out] = pairs[k];
    if (i_in < 0 || i_in >= static_cast<int>(in.size()) || i_out < 0 ||
        i_out >= static_cast<int>(out.size()))
      throw Error(what + ": instruction " + std::to_string(k) + " (" + std::to_string(i_in) + ", " +
                  std::to_string(i_out) + ") is out of range: irreps_in has " +
                  std::to_string(in.size()) + " entries, irreps_out " + std::to_string(out.size()));
  }
  std::vector<LinearPath> paths;
  for (const auto& [i_in, i_out] : pairs) {
    // e3nn's alpha(ins): sum over the instructions i into the same output of
    // mul_in(i) ('element') or of mul_in(ins) ('path'); 0 becomes 1 so empty paths stay finite.
    long alpha = 0;
    for (const auto& [j_in, j_out] : pairs)
      if (j_out == i_out)
        alpha += normalization == PathNormalization::kElement ? in[j_in].mul : in[i_in].mul;
    if (alpha == 0 || normalization == PathNormalization::kNone) alpha = 1;
    paths.push_back({i_in, i_out, std::pow(static_cast<double>(alpha), -0.5)});
  }
  return paths;
}

std::vector<std::pair<int, int>> all_pairs(const Irreps& in, const Irreps& out) {
  std::vector<std::pair<int, int>> pairs;
  for (int i = 0; i < static_cast<int>(in.size()); ++i)
    for (int o = 0; o < static_cast<int>(out.size()); ++o)
      if (in[i].ir == out[o].ir) pairs.emplace_back(i, o);
  return pairs;
}

std::string describe(const Irreps& in, const Irreps& out) {
  return "Linear " + (in.empty() ? std::string("(empty)") : in.str()) + " -> " +
         (out.empty() ? std::string("(empty)") : out.str());
}

// Rows [begin, end) of thread t among n threads: contiguous static chunks, so that per-thread
// partial sums are reduced in a fixed order and results do not depend on scheduling.
std::pair<std::size_t, std::size_t> chunk(std::size_t n_rows, int t, int n) {
  return {n_rows * t / n, n_rows * (t + 1) / n};
}

int thread_id() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

int num_threads() {
#ifdef _OPENMP
  return omp_get_num_threads();
#else
  return 1;
#endif
}

}  // namespace

Linear::Linear(Irreps irreps_in, Irreps irreps_out, PathNormalization normalization)
    : irreps_in_(std::move(irreps_in)), irreps_out_(std::move(irreps_out)) {
  init(default_paths(irreps_in_, irreps_out_, all_pairs(irreps_in_, irreps_out_), normalization,
                     describe(irreps_in_, irreps_out_)));
}

Linear::Linear(Irreps irreps_in, Irreps irreps_out, const std::vector<std::pair<int, int>>& pairs,
               PathNormalization normalization)
    : irreps_in_(std::move(irreps_in)), irreps_out_(std::move(irreps_out)) {
  init(default_paths(irreps_in_, irreps_out_, pairs, normalization,
                     describe(irreps_in_, irreps_out_)));
}

Linear::Linear(Irreps irreps_in, Irreps irreps_out, const std::vector<LinearPath>& paths)
    : irreps_in_(std::move(irreps_in)), irreps_out_(std::move(irreps_out)) {
  init(paths);
}

void Linear::init(const std::vector<LinearPath>& paths) {
  const std::string what = describe(irreps_in_, irreps_out_);
  offsets_in_ = irreps_in_.offsets();
  offsets_out_ = irreps_out_.offsets();
  for (std::size_t k = 0; k < paths.size(); ++k) {
    const LinearPath& p = paths[k];
    const std::string name = what + ": instruction " + std::to_string(k) + " (" +
                             std::to_string(p.i_in) + ", " + std::to_string(p.i_out) + ")";
    if (p.i_in < 0 || p.i_in >= static_cast<int>(irreps_in_.size()))
      throw Error(name + ": i_in=" + std::to_string(p.i_in) + " is out of range, irreps_in has " +
                  std::to_string(irreps_in_.size()) + " entries");
    if (p.i_out < 0 || p.i_out >= static_cast<int>(irreps_out_.size()))
      throw Error(name + ": i_out=" + std::to_string(p.i_out) +
                  " is out of range, irreps_out has " + std::to_string(irreps_out_.size()) +
                  " entries");
    const MulIrrep& a = irreps_in_[p.i_in];
    const MulIrrep& b = irreps_out_[p.i_out];
    if (a.ir != b.ir)
      throw Error(name + " joins " + a.ir.str() + " to " + b.ir.str() +
                  ": a Linear path needs equal irreps");
    if (!std::isfinite(p.path_weight)) {
      std::ostringstream s;
      s << name << ": path_weight must be finite, got " << p.path_weight;
      throw Error(s.str());
    }
    LinearInstruction ins{p.i_in, p.i_out, p.path_weight, a.mul, b.mul, weight_numel_};
    weight_numel_ += ins.weight_numel();
    instructions_.push_back(ins);
  }
}

template <class T>
void Linear::forward(const T* weight, std::size_t n_rows, const T* x, T* y) const {
  const std::size_t dim_in = irreps_in_.dim(), dim_out = irreps_out_.dim();
  CLEBSCH_EXPECTS(n_rows == 0 || (x != nullptr && y != nullptr));
  CLEBSCH_EXPECTS(weight_numel_ == 0 || weight != nullptr);
  std::size_t scratch = 0;
  for (const auto& ins : instructions_)
    scratch = std::max(scratch, static_cast<std::size_t>(irreps_out_[ins.i_out].dim()));

#pragma omp parallel
  {
    // tmp[m*mul_out + w] keeps the inner loop over w contiguous in both W and tmp.
    std::vector<T> tmp(scratch);
#pragma omp for schedule(static)
    for (std::ptrdiff_t r = 0; r < static_cast<std::ptrdiff_t>(n_rows); ++r) {
      const T* xr = x + r * dim_in;
      T* yr = y + r * dim_out;
      std::fill(yr, yr + dim_out, T(0));
      for (const auto& ins : instructions_) {
        const int d = irreps_in_[ins.i_in].ir.dim(), mi = ins.mul_in, mo = ins.mul_out;
        if (mi == 0 || mo == 0) continue;
        const T* w = weight + ins.weight_offset;
        const T* xin = xr + offsets_in_[ins.i_in];
        std::fill(tmp.begin(), tmp.begin() + d * mo, T(0));
        for (int u = 0; u < mi; ++u) {
          const T* wu = w + static_cast<std::size_t>(u) * mo;
          for (int m = 0; m < d; ++m) {
            const T xv = xin[u * d + m];
            T* t = tmp.data() + m * mo;
            for (int o = 0; o < mo; ++o) t[o] += xv * wu[o];
          }
        }
        const T pw = static_cast<T>(ins.path_weight);
        T* yout = yr + offsets_out_[ins.i_out];
        for (int o = 0; o < mo; ++o)
          for (int m = 0; m < d; ++m) yout[o * d + m] += pw * tmp[m * mo + o];
      }
    }
  }
}

template <class T>
void Linear::backward(const T* weight, std::size_t n_rows, const std::common_type_t<T>* x,
                      const T* grad_y, std::common_type_t<T>* grad_x,
                      std::common_type_t<T>* grad_weight) const {
  const std::size_t dim_in = irreps_in_.dim(), dim_out = irreps_out_.dim();
  CLEBSCH_EXPECTS(n_rows == 0 || grad_y != nullptr);
  CLEBSCH_EXPECTS(grad_weight == nullptr || n_rows == 0 || x != nullptr);
  CLEBSCH_EXPECTS(grad_x == nullptr || weight_numel_ == 0 || weight != nullptr);
  std::size_t scratch = 0;
  for (const auto& ins : instructions_)
    scratch = std::max(scratch, static_cast<std::size_t>(irreps_out_[ins.i_out].dim()));
  const std::size_t numel = grad_weight ? weight_numel_ : 0;
  std::vector<T> partial;  // one weight-gradient accumulator per thread
  int used_threads = 1;

#pragma omp parallel
  {
    const int nt = num_threads(), t = thread_id();
#pragma omp single
    {
      used_threads = nt;
      partial.assign(static_cast<std::size_t>(nt) * numel, T(0));
    }  // implicit barrier: partial is ready for every thread
    std::vector<T> gt(scratch);
    T* gw = partial.data() + static_cast<std::size_t>(t) * numel;
    const auto [begin, end] = chunk(n_rows, t, nt);
    for (std::size_t r = begin; r < end; ++r) {
      const T* gy = grad_y + r * dim_out;
      if (grad_x) std::fill(grad_x + r * dim_in, grad_x + (r + 1) * dim_in, T(0));
      for (const auto& ins : instructions_) {
        const int d = irreps_in_[ins.i_in].ir.dim(), mi = ins.mul_in, mo = ins.mul_out;
        if (mi == 0 || mo == 0) continue;
        // gt[m*mul_out + w] = grad_y[i_out][w, m]: transposed so both products below run over
        // w contiguously.
        const T* gout = gy + offsets_out_[ins.i_out];
        for (int o = 0; o < mo; ++o)
          for (int m = 0; m < d; ++m) gt[m * mo + o] = gout[o * d + m];
        if (grad_x) {
          const T pw = static_cast<T>(ins.path_weight);
          const T* w = weight + ins.weight_offset;
          T* gxin = grad_x + r * dim_in + offsets_in_[ins.i_in];
          for (int u = 0; u < mi; ++u) {
            const T* wu = w + static_cast<std::size_t>(u) * mo;
            for (int m = 0; m < d; ++m) {
              const T* g = gt.data() + m * mo;
              T s = 0;
              for (int o = 0; o < mo; ++o) s += wu[o] * g[o];
              gxin[u * d + m] += pw * s;
            }
          }
        }
        if (grad_weight) {
          // The path weight is applied once, after the sum over rows.
          const T* xin = x + r * dim_in + offsets_in_[ins.i_in];
          T* gwi = gw + ins.weight_offset;
          for (int u = 0; u < mi; ++u) {
            T* gwu = gwi + static_cast<std::size_t>(u) * mo;
            for (int m = 0; m < d; ++m) {
              const T xv = xin[u * d + m];
              const T* g = gt.data() + m * mo;
              for (int o = 0; o < mo; ++o) gwu[o] += xv * g[o];
            }
          }
        }
      }
    }
  }

  if (grad_weight) {
    std::fill(grad_weight, grad_weight + weight_numel_, T(0));
    for (int t = 0; t < used_threads; ++t)
      for (std::size_t k = 0; k < weight_numel_; ++k)
        grad_weight[k] += partial[static_cast<std::size_t>(t) * numel + k];
    for (const auto& ins : instructions_) {
      const T pw = static_cast<T>(ins.path_weight);
      for (std::size_t k = 0; k < ins.weight_numel(); ++k) grad_weight[ins.weight_offset + k] *= pw;
    }
  }
}

template void Linear::forward<float>(const float*, std::size_t, const float*, float*) const;
template void Linear::forward<double>(const double*, std::size_t, const double*, double*) const;
template void Linear::backward<float>(const float*, std::size_t, const float*, const float*, float*,
                                      float*) const;
template void Linear::backward<double>(const double*, std::size_t, const double*, const double*,
                                       double*, double*) const;

}  // namespace clebsch
