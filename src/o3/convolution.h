// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The fused tensor-product graph convolution of MACE and NequIP interactions, on the host:
//   out[i] = sum_{e: receiver(e) = i} TP(x[sender(e)], Y[e], W[e])
// computed as gather -> TP -> scatter without materialising per-edge messages, with its backward
// and double backward. It is the reference the CUDA kernels mirror: the receiver-sorted pass is
// the deterministic accumulation mode (one owner per output row, edges in a fixed order), and the
// sender-sorted pass produces dL/dx without atomics.
//
// Layouts (row-major; dims are those of the TensorProduct `tp`):
//   x        [num_senders][tp.dim_in1()]      node features, gathered by sender
//   Y        [num_edges][tp.dim_in2()]        per-edge attributes (spherical harmonics)
//   W        [num_edges][tp.weight_numel()]   per-edge weights (radial MLP output); tp must have
//                                             per-row weights (shared_weights = false) unless it
//                                             has no weights at all
//   out      [num_receivers][tp.dim_out()]
// Gradients have the layout of the tensor they belong to. MACE: sender = edge_index[0],
// receiver = edge_index[1]; NequIP: sender = edge_index[1], receiver = edge_index[0].
#pragma once

#include <cstdint>
#include <vector>

#include "clebsch/o3/tensor_product.h"

namespace clebsch {

/// An edge list with the two CSR orderings the convolution needs, built once per neighbour list
/// and reused by every layer and direction. Memory: O(num_edges + num_nodes) 32-bit integers, no
/// floating-point scratch. Within one node, edges keep their original (edge id) order, so every
/// sum has a fixed order.
class EdgeIndex {
 public:
  /// @param sender, receiver arrays of num_edges node indices.
  /// @throws Error naming the edge and the value when an index is negative or not below
  ///         num_senders / num_receivers; CapacityError when a count exceeds 2^31 - 1.
  EdgeIndex(std::int64_t num_senders, std::int64_t num_receivers, std::int64_t num_edges,
            const int* sender, const int* receiver);
  EdgeIndex(std::int64_t num_senders, std::int64_t num_receivers, const std::vector<int>& sender,
            const std::vector<int>& receiver);

  int num_senders() const { return num_senders_; }
  int num_receivers() const { return num_receivers_; }
  int num_edges() const { return static_cast<int>(sender_.size()); }
  const std::vector<int>& sender() const { return sender_; }
  const std::vector<int>& receiver() const { return receiver_; }
  /// CSR by receiver: the edges into node i are by_receiver()[receiver_ptr()[i] ..
  /// receiver_ptr()[i+1]), ascending edge id.
  const std::vector<int>& receiver_ptr() const { return receiver_ptr_; }
  const std::vector<int>& by_receiver() const { return by_receiver_; }
  /// CSR by sender, likewise.
  const std::vector<int>& sender_ptr() const { return sender_ptr_; }
  const std::vector<int>& by_sender() const { return by_sender_; }

 private:
  int num_senders_, num_receivers_;
  std::vector<int> sender_, receiver_;
  std::vector<int> receiver_ptr_, by_receiver_, sender_ptr_, by_sender_;
};

/// out[i] = sum_{e: receiver(e)=i} TP(x[sender(e)], Y[e], W[e]); out is overwritten (rows with no
/// incoming edge are zero). Parallel over receivers; bitwise independent of the thread count.
/// @throws Error if tp has shared weights (and any weights at all).
template <typename T>
void convolution_forward(const TensorProduct& tp, const EdgeIndex& edges, const T* x, const T* Y,
                         const T* W, T* out);

/// Gradients of L = sum_i <grad_out[i], out[i]>, in one pass over the edges sorted by sender:
/// grad_x[s] = sum_{e: sender(e)=s} dL/dx1 of edge e (scattered without atomics), grad_Y[e] and
/// grad_W[e] per edge. A null output is not computed; the others are overwritten.
/// @throws Error if tp has shared weights (and any weights at all).
template <typename T>
void convolution_backward(const TensorProduct& tp, const EdgeIndex& edges, const T* x, const T* Y,
                          const T* W, const T* grad_out, T* grad_x, T* grad_Y, T* grad_W);

/// Reverse pass of convolution_backward: with cotangents (dx, dY, dW) of (grad_x, grad_Y,
/// grad_W), the gradients of S = <grad_x, dx> + <grad_Y, dY> + <grad_W, dW> with respect to
/// (x, Y, W, grad_out). Per edge e = (s -> r), with g = grad_out[r]:
///   grad_grad_out[r] += TP(dx[s], Y, W) + TP(x[s], dY, W) + TP(x[s], Y, dW)   (receiver pass)
///   grad_x[s] += T1*(dY, W, g) + T1*(Y, dW, g)                                (sender pass)
///   grad_Y[e]  = T2*(dx[s], W, g) + T2*(x[s], dW, g)
///   grad_W[e]  = T3*(dx[s], Y, g) + T3*(x[s], dY, g)
/// A null cotangent counts as zero; a null output is not computed; the others are overwritten.
/// @throws Error if tp has shared weights (and any weights at all).
template <typename T>
void convolution_double_backward(const TensorProduct& tp, const EdgeIndex& edges, const T* x,
                                 const T* Y, const T* W, const T* grad_out, const T* dx,
                                 const T* dY, const T* dW, T* grad_x, T* grad_Y, T* grad_W,
                                 T* grad_grad_out);

}  // namespace clebsch
