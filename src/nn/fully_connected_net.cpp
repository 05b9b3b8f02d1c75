// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Host forward and backward of the bias-free e3nn FullyConnectedNet (see fully_connected_net.h).
#include "clebsch/nn/fully_connected_net.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "clebsch/support/error.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace clebsch {
namespace {

std::string hs_str(const std::vector<int>& hs) {
  std::string s = "[";
  for (std::size_t i = 0; i < hs.size(); ++i) s += (i ? ", " : "") + std::to_string(hs[i]);
  return s + "]";
}

// e3nn scales the weight matrix before the product (w = W / sqrt(h_in)), so the same is done
// here, once per call, to round the way e3nn does.
template <class T>
std::vector<T> scaled_weights(const std::vector<int>& hs, const std::vector<std::size_t>& offsets,
                              const T* weight) {
  std::vector<T> ws(offsets.back());
  for (std::size_t j = 0; j + 1 < hs.size(); ++j) {
    const T norm = static_cast<T>(std::sqrt(static_cast<double>(hs[j])));
    for (std::size_t k = offsets[j]; k < offsets[j + 1]; ++k) ws[k] = weight[k] / norm;
  }
  return ws;
}

// out[o] = sum_i in[i] * w[i*n_out + o], looping o innermost so w is read contiguously.
template <class T>
void matvec(const T* in, const T* w, int n_in, int n_out, T* out) {
  std::fill(out, out + n_out, T(0));
  for (int i = 0; i < n_in; ++i) {
    const T v = in[i];
    const T* wi = w + static_cast<std::size_t>(i) * n_out;
    for (int o = 0; o < n_out; ++o) out[o] += v * wi[o];
  }
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

FullyConnectedNet::FullyConnectedNet(std::vector<int> hs, ScaledActivation act)
    : hs_(std::move(hs)), act_(act) {
  if (hs_.size() < 2)
    throw Error("FullyConnectedNet " + hs_str(hs_) +
                ": needs at least two layer widths (input and output)");
  for (std::size_t j = 0; j < hs_.size(); ++j)
    if (hs_[j] < 1)
      throw Error("FullyConnectedNet " + hs_str(hs_) + ": width " + std::to_string(j) +
                  " must be >= 1, got " + std::to_string(hs_[j]));
  weight_offsets_.assign(1, 0);
  for (std::size_t j = 0; j + 1 < hs_.size(); ++j)
    weight_offsets_.push_back(weight_offsets_.back() + static_cast<std::size_t>(hs_[j]) *
                                                           static_cast<std::size_t>(hs_[j + 1]));
}

template <class T>
void FullyConnectedNet::forward(const T* weight, std::size_t n_rows, const T* x, T* y) const {
  CLEBSCH_EXPECTS(n_rows == 0 || (weight != nullptr && x != nullptr && y != nullptr));
  const std::vector<T> ws = scaled_weights(hs_, weight_offsets_, weight);
  const int n_layers = num_layers();
  const int width = *std::max_element(hs_.begin(), hs_.end());

#pragma omp parallel
  {
    std::vector<T> a(width), b(width);
#pragma omp for schedule(static)
    for (std::ptrdiff_t r = 0; r < static_cast<std::ptrdiff_t>(n_rows); ++r) {
      std::copy(x + r * hs_[0], x + (r + 1) * hs_[0], a.begin());
      for (int j = 0; j < n_layers; ++j) {
        const int n_out = hs_[j + 1];
        matvec(a.data(), ws.data() + weight_offsets_[j], hs_[j], n_out, b.data());
        if (j + 1 < n_layers)
          for (int o = 0; o < n_out; ++o) b[o] = act_(b[o]);
        std::swap(a, b);
      }
      std::copy(a.begin(), a.begin() + hs_.back(), y + r * hs_.back());
    }
  }
}

template <class T>
void FullyConnectedNet::backward(const T* weight, std::size_t n_rows, const T* x, const T* grad_y,
                                 std::common_type_t<T>* grad_x,
                                 std::common_type_t<T>* grad_weight) const {
  CLEBSCH_EXPECTS(n_rows == 0 || (weight != nullptr && x != nullptr && grad_y != nullptr));
  const std::vector<T> ws = scaled_weights(hs_, weight_offsets_, weight);
  const int n_layers = num_layers();
  const int width = *std::max_element(hs_.begin(), hs_.end());
  // h_offsets[j]: where layer j's input activation h_j sits in the per-row scratch.
  std::vector<std::size_t> h_offsets(1, 0);
  for (int j = 0; j < n_layers; ++j) h_offsets.push_back(h_offsets.back() + hs_[j]);
  const std::size_t numel = grad_weight ? weight_numel() : 0;
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
    // h: inputs of every layer; dphi: phi~'(z) of every hidden layer's pre-activation z,
    // stored at the offset of the layer the activation feeds.
    std::vector<T> h(h_offsets.back()), dphi(h_offsets.back()), g(width), gp(width), z(width);
    T* gw = partial.data() + static_cast<std::size_t>(t) * numel;
    const auto [begin, end] = chunk(n_rows, t, nt);
    for (std::size_t r = begin; r < end; ++r) {
      std::copy(x + r * hs_[0], x + (r + 1) * hs_[0], h.begin());
      for (int j = 0; j + 1 < n_layers; ++j) {
        const int n_out = hs_[j + 1];
        matvec(h.data() + h_offsets[j], ws.data() + weight_offsets_[j], hs_[j], n_out, z.data());
        T* hn = h.data() + h_offsets[j + 1];
        T* dn = dphi.data() + h_offsets[j + 1];
        for (int o = 0; o < n_out; ++o) act_.value_and_derivative(z[o], hn + o, dn + o);
      }
      std::copy(grad_y + r * hs_.back(), grad_y + (r + 1) * hs_.back(), g.begin());
      for (int j = n_layers - 1; j >= 0; --j) {
        const int n_in = hs_[j], n_out = hs_[j + 1];
        if (j + 1 < n_layers) {
          const T* dn = dphi.data() + h_offsets[j + 1];
          for (int o = 0; o < n_out; ++o) g[o] *= dn[o];
        }
        const T* hj = h.data() + h_offsets[j];
        if (grad_weight) {
          // Gradient wrt the scaled matrix; the 1/sqrt(n_in) is applied after the row sum.
          T* gwj = gw + weight_offsets_[j];
          for (int i = 0; i < n_in; ++i) {
            const T v = hj[i];
            T* row = gwj + static_cast<std::size_t>(i) * n_out;
            for (int o = 0; o < n_out; ++o) row[o] += v * g[o];
          }
        }
        if (j == 0 && !grad_x) break;
        const T* wsj = ws.data() + weight_offsets_[j];
        for (int i = 0; i < n_in; ++i) {
          const T* wi = wsj + static_cast<std::size_t>(i) * n_out;
          T s = 0;
          for (int o = 0; o < n_out; ++o) s += wi[o] * g[o];
          gp[i] = s;
        }
        std::swap(g, gp);
      }
      if (grad_x) std::copy(g.begin(), g.begin() + hs_[0], grad_x + r * hs_[0]);
    }
  }

  if (grad_weight) {
    std::fill(grad_weight, grad_weight + weight_numel(), T(0));
    for (int t = 0; t < used_threads; ++t)
      for (std::size_t k = 0; k < weight_numel(); ++k)
        grad_weight[k] += partial[static_cast<std::size_t>(t) * numel + k];
    for (int j = 0; j < n_layers; ++j) {
      const T norm = static_cast<T>(std::sqrt(static_cast<double>(hs_[j])));
      for (std::size_t k = weight_offsets_[j]; k < weight_offsets_[j + 1]; ++k)
        grad_weight[k] /= norm;
    }
  }
}

template void FullyConnectedNet::forward<float>(const float*, std::size_t, const float*,
                                                float*) const;
template void FullyConnectedNet::forward<double>(const double*, std::size_t, const double*,
                                                 double*) const;
template void FullyConnectedNet::backward<float>(const float*, std::size_t, const float*,
                                                 const float*, float*, float*) const;
template void FullyConnectedNet::backward<double>(const double*, std::size_t, const double*,
                                                  const double*, double*, double*) const;

}  // namespace clebsch
