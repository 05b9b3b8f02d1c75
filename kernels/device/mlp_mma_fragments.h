// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The weights of a tensor-core MLP chain (templates/mlp_chain_mma.cuh.in) in the order its MMAs
// read them: for every k-step and column tile, the B fragment of each lane, lane after lane. A
// warp then loads a fragment as one coalesced 256-byte (float64) or 512-byte (float32) read,
// where the row-major weights cost four rows of L1 sectors per fragment (the chains' backward
// ran at 6-15 TFLOP/s on an H100, run 28, bound by those loads). Float32 fragments are stored
// split for 3xTF32, {big(b0), big(b1), small(b0), small(b1)} per lane, rounded here exactly as
// the device's cvt.rna.tf32.f32 rounds: the split is made once per model, not once per warp
// and row tile.
//
// Layouts, per matrix (lanes: float64 (r, i) = (lane / 4, lane % 4), float32 (g, t) likewise):
//   float64, step s, column tile j < nj:  f[(s nj + j) 32 + lane] = B_s(i, 8 j + r)
//   float32, step s, column tile j < nj:  f[((s nj + j) 32 + lane) 4 + {0, 1, 2, 3}] =
//     {big B_s(t, 8 j + g), big B_s(t + 4, 8 j + g), small ..., small ...}
// where B_s(k, c) is the weight that step s multiplies at k index k (0..3 in float64, 0..7 in
// float32) and column c: for a chain layer taking the previous layer's registers (the permuted
// k order of the kernel's comment) W[8 (s / 2) + 2 i + s % 2][c] (float64) and W[8 s + 2 (k % 4)
// + k / 4][c] (float32); for the first layer, reading x in natural order, W[4 s + k][c] and
// W[8 s + k][c]. Columns and rows past the matrix are zeros, so the kernel needs no bounds.
#pragma once

#include <vector>

#include "clebsch/cuda/templates/device_args.h"

namespace clebsch::cuda {

/// Whether the chain of @p a has the shapes the tensor-core kernels take (1 to 4 layers, every
/// layer 64 wide, at most 64 inputs): GenericKernels routes there only for such chains.
bool mlp_mma_shapes(const MlpChainArgs& a);

/// Appends to @p w (where W_l is at a.w_off[l], row-major [dims[l]][dims[l + 1]]) every layer's
/// W_l and W_l^T in fragment order, at 16-byte aligned offsets, and sets a.wf_off and a.wtf_off;
/// sets them to -1 when !mlp_mma_shapes(a).
template <class T>
void append_mlp_mma_fragments(MlpChainArgs& a, std::vector<T>& w);

/// cvt.rna.tf32.f32 on the host: @p x rounded to TF32 (nearest, ties away from zero).
float tf32_round_host(float x);

}  // namespace clebsch::cuda
