// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Fragment-ordered MLP chain weights (see mlp_mma_fragments.h).
#include "clebsch/cuda/device/mlp_mma_fragments.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace clebsch::cuda {

namespace {

constexpr int kWidth = 64;  // templates/mlp_chain_mma.cuh.in's kMmaWidth

// B_s(k, c) of one matrix: row-major rows x cols at w, read at (row(s, k), c), zero outside.
template <class T, class Row>
struct Source {
  const std::vector<T>& w;
  long long off;
  int rows, cols;
  Row row;
  T at(int s, int k, int c) const {
    const int i = row(s, k);
    if (i < 0 || i >= rows || c >= cols) return T(0);
    return w[static_cast<std::size_t>(off + static_cast<long long>(i) * cols + c)];
  }
};

template <class T, class Row>
void append_matrix(std::vector<T>& out, const Source<T, Row>& b, int steps, int tiles) {
  std::vector<T> f;
  for (int s = 0; s < steps; ++s)
    for (int j = 0; j < tiles; ++j)
      for (int lane = 0; lane < 32; ++lane) {
        const int hi = lane / 4, lo = lane % 4;
        if constexpr (std::is_same_v<T, double>) {
          f.push_back(b.at(s, lo, 8 * j + hi));
        } else {
          const float b0 = b.at(s, lo, 8 * j + hi), b1 = b.at(s, lo + 4, 8 * j + hi);
          const float big0 = tf32_round_host(b0), big1 = tf32_round_host(b1);
          f.push_back(big0), f.push_back(big1);
          f.push_back(tf32_round_host(b0 - big0)), f.push_back(tf32_round_host(b1 - big1));
        }
      }
  out.insert(out.end(), f.begin(), f.end());
}

}  // namespace

bool mlp_mma_shapes(const MlpChainArgs& a) {
  if (a.num_layers < 1 || a.num_layers > 4 || a.dims[0] < 1 || a.dims[0] > kWidth) return false;
  for (int l = 1; l <= a.num_layers; ++l)
    if (a.dims[l] != kWidth) return false;
  return true;
}

float tf32_round_host(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

template <class T>
void append_mlp_mma_fragments(MlpChainArgs& a, std::vector<T>& w) {
  for (int l = 0; l < CLEBSCH_MLP_MAX_LAYERS; ++l) a.wf_off[l] = a.wtf_off[l] = -1;
  if (!mlp_mma_shapes(a)) return;
  constexpr bool f64 = std::is_same_v<T, double>;
  constexpr int kStep = f64 ? 4 : 8;                                    // k values per MMA step
  const auto align = [&w] { w.resize((w.size() + 3) / 4 * 4, T(0)); };  // 16 bytes in float32
  // The permuted k order of a layer that takes the previous layer's registers.
  const auto permuted = [](int s, int k) {
    return f64 ? 8 * (s / 2) + 2 * k + s % 2 : 8 * s + 2 * (k % 4) + k / 4;
  };
  for (int l = 0; l < a.num_layers; ++l) {
    const int n_in = a.dims[l];
    align();
    a.wf_off[l] = static_cast<long long>(w.size());
    if (l == 0) {
      const auto natural = [](int s, int k) { return kStep * s + k; };
      const Source<T, decltype(natural)> b{w, a.w_off[0], n_in, kWidth, natural};
      append_matrix(w, b, (n_in + kStep - 1) / kStep, kWidth / 8);
    } else {
      const Source<T, decltype(permuted)> b{w, a.w_off[l], kWidth, kWidth, permuted};
      append_matrix(w, b, kWidth / kStep, kWidth / 8);
    }
    // W_l^T [64][n_in]: the backward's product into layer l's input; float32 pads its column
    // tiles to a multiple of 4 (the kernel takes them in halves of 4).
    align();
    a.wtf_off[l] = static_cast<long long>(w.size());
    const int tiles = f64 ? (n_in + 7) / 8 : 4 * ((n_in + 31) / 32);
    const Source<T, decltype(permuted)> bt{w, a.wt_off[l], kWidth, n_in, permuted};
    append_matrix(w, bt, kWidth / kStep, tiles);
  }
}

template void append_mlp_mma_fragments<float>(MlpChainArgs&, std::vector<float>&);
template void append_mlp_mma_fragments<double>(MlpChainArgs&, std::vector<double>&);

}  // namespace clebsch::cuda
