// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Host implementation of the fused tensor-product convolution (see convolution.h). Each output
// row has exactly one owner: receiver rows in the forward pass, sender rows and edge rows in the
// backward pass. So there are no atomics and no per-edge scratch, and the result does not depend
// on the thread count or the schedule.
#include "clebsch/o3/convolution.h"

#include <algorithm>
#include <limits>
#include <string>

#include "clebsch/support/error.h"

namespace clebsch {
namespace {

using detail::tensor_product_row;
using detail::WeightRole;

int checked_count(std::int64_t n, const char* what) {
  if (n < 0) throw Error(std::string(what) + " must be >= 0, got " + std::to_string(n));
  if (n > std::numeric_limits<int>::max())
    throw CapacityError(std::string(what) + "=" + std::to_string(n) +
                        " exceeds the 32-bit index range of EdgeIndex");
  return static_cast<int>(n);
}

// Stable counting sort of the edges by key: ptr[n+1] offsets, order[] edge ids, ascending edge id
// inside each node.
void build_csr(const std::vector<int>& key, int num_nodes, std::vector<int>& ptr,
               std::vector<int>& order) {
  ptr.assign(static_cast<std::size_t>(num_nodes) + 1, 0);
  for (int k : key) ++ptr[k + 1];
  for (int n = 0; n < num_nodes; ++n) ptr[n + 1] += ptr[n];
  order.resize(key.size());
  std::vector<int> next(ptr.begin(), ptr.end() - 1);
  for (std::size_t e = 0; e < key.size(); ++e) order[next[key[e]]++] = static_cast<int>(e);
}

std::int64_t same_size(const std::vector<int>& sender, const std::vector<int>& receiver) {
  if (sender.size() != receiver.size())
    throw Error("EdgeIndex: " + std::to_string(sender.size()) + " senders but " +
                std::to_string(receiver.size()) + " receivers");
  return static_cast<std::int64_t>(sender.size());
}

void check_weights(const TensorProduct& tp) {
  if (tp.shared_weights() && tp.weight_numel() > 0)
    throw Error("the convolution needs per-edge weights (shared_weights=false), got " + tp.str());
}

template <typename T>
T* zeroed(T* p, std::int64_t row, int dim) {
  if (!p) return nullptr;
  T* r = p + row * dim;
  std::fill(r, r + dim, T(0));
  return r;
}

template <typename T>
const T* at(const T* p, std::int64_t row, int dim) {
  return p ? p + row * dim : nullptr;
}

}  // namespace

EdgeIndex::EdgeIndex(std::int64_t num_senders, std::int64_t num_receivers, std::int64_t num_edges,
                     const int* sender, const int* receiver)
    : num_senders_(checked_count(num_senders, "num_senders")),
      num_receivers_(checked_count(num_receivers, "num_receivers")) {
  const int ne = checked_count(num_edges, "num_edges");
  if (ne > 0 && (!sender || !receiver)) throw Error("EdgeIndex: sender/receiver array is null");
  sender_.assign(sender, sender + ne);
  receiver_.assign(receiver, receiver + ne);
  for (int e = 0; e < ne; ++e) {
    if (sender_[e] < 0 || sender_[e] >= num_senders_)
      throw Error("edge " + std::to_string(e) + ": sender " + std::to_string(sender_[e]) +
                  " is out of range [0, " + std::to_string(num_senders_) + ")");
    if (receiver_[e] < 0 || receiver_[e] >= num_receivers_)
      throw Error("edge " + std::to_string(e) + ": receiver " + std::to_string(receiver_[e]) +
                  " is out of range [0, " + std::to_string(num_receivers_) + ")");
  }
  build_csr(receiver_, num_receivers_, receiver_ptr_, by_receiver_);
  build_csr(sender_, num_senders_, sender_ptr_, by_sender_);
}

EdgeIndex::EdgeIndex(std::int64_t num_senders, std::int64_t num_receivers,
                     const std::vector<int>& sender, const std::vector<int>& receiver)
    : EdgeIndex(num_senders, num_receivers, same_size(sender, receiver), sender.data(),
                receiver.data()) {}

template <typename T>
void convolution_forward(const TensorProduct& tp, const EdgeIndex& edges, const T* x, const T* Y,
                         const T* W, T* out) {
  check_weights(tp);
  CLEBSCH_EXPECTS(out && (edges.num_edges() == 0 || (x && Y)));
  CLEBSCH_EXPECTS(edges.num_edges() == 0 || W || tp.weight_numel() == 0);
  const int n1 = tp.dim_in1(), n2 = tp.dim_in2(), no = tp.dim_out(), nw = tp.weight_numel();
  const int* ptr = edges.receiver_ptr().data();
  const int* order = edges.by_receiver().data();
  const int* sender = edges.sender().data();
#pragma omp parallel for schedule(dynamic, 16)
  for (int i = 0; i < edges.num_receivers(); ++i) {
    T* o = zeroed(out, i, no);
    for (int n = ptr[i]; n < ptr[i + 1]; ++n) {
      const int e = order[n];
      tensor_product_row<T>(tp, x + std::int64_t(sender[e]) * n1, Y + std::int64_t(e) * n2,
                            at(W, e, nw), WeightRole::kValue, nullptr, o, nullptr, nullptr,
                            nullptr);
    }
  }
}

template <typename T>
void convolution_backward(const TensorProduct& tp, const EdgeIndex& edges, const T* x, const T* Y,
                          const T* W, const T* grad_out, T* grad_x, T* grad_Y, T* grad_W) {
  check_weights(tp);
  CLEBSCH_EXPECTS(edges.num_edges() == 0 || (x && Y && grad_out));
  CLEBSCH_EXPECTS(edges.num_edges() == 0 || W || tp.weight_numel() == 0);
  if (!grad_x && !grad_Y && !grad_W) return;
  const int n1 = tp.dim_in1(), n2 = tp.dim_in2(), no = tp.dim_out(), nw = tp.weight_numel();
  const int* ptr = edges.sender_ptr().data();
  const int* order = edges.by_sender().data();
  const int* receiver = edges.receiver().data();
#pragma omp parallel for schedule(dynamic, 16)
  for (int s = 0; s < edges.num_senders(); ++s) {
    T* gx = zeroed(grad_x, s, n1);
    for (int n = ptr[s]; n < ptr[s + 1]; ++n) {
      const int e = order[n];
      tensor_product_row<T>(tp, x + std::int64_t(s) * n1, Y + std::int64_t(e) * n2, at(W, e, nw),
                            WeightRole::kValue, grad_out + std::int64_t(receiver[e]) * no, nullptr,
                            gx, zeroed(grad_Y, e, n2), zeroed(grad_W, e, nw));
    }
  }
}

template <typename T>
void convolution_double_backward(const TensorProduct& tp, const EdgeIndex& edges, const T* x,
                                 const T* Y, const T* W, const T* grad_out, const T* dx,
                                 const T* dY, const T* dW, T* grad_x, T* grad_Y, T* grad_W,
                                 T* grad_grad_out) {
  check_weights(tp);
  CLEBSCH_EXPECTS(edges.num_edges() == 0 || (x && Y && grad_out));
  CLEBSCH_EXPECTS(edges.num_edges() == 0 || W || tp.weight_numel() == 0);
  const int n1 = tp.dim_in1(), n2 = tp.dim_in2(), no = tp.dim_out(), nw = tp.weight_numel();
  const int* sender = edges.sender().data();
  const int* receiver = edges.receiver().data();

  // Receiver pass: the three forward products that the cotangents make, into grad_grad_out.
  if (grad_grad_out) {
    const int* ptr = edges.receiver_ptr().data();
    const int* order = edges.by_receiver().data();
#pragma omp parallel for schedule(dynamic, 16)
    for (int i = 0; i < edges.num_receivers(); ++i) {
      T* o = zeroed(grad_grad_out, i, no);
      for (int n = ptr[i]; n < ptr[i + 1]; ++n) {
        const int e = order[n], s = sender[e];
        const T* xs = x + std::int64_t(s) * n1;
        const T* y = Y + std::int64_t(e) * n2;
        const T* w = at(W, e, nw);
        if (dx)
          tensor_product_row<T>(tp, dx + std::int64_t(s) * n1, y, w, WeightRole::kValue, nullptr, o,
                                nullptr, nullptr, nullptr);
        if (dY)
          tensor_product_row<T>(tp, xs, dY + std::int64_t(e) * n2, w, WeightRole::kValue, nullptr,
                                o, nullptr, nullptr, nullptr);
        if (dW)
          tensor_product_row<T>(tp, xs, y, dW + std::int64_t(e) * nw, WeightRole::kTangent, nullptr,
                                o, nullptr, nullptr, nullptr);
      }
    }
  }

  // Sender pass: the backward products, into grad_x (owned by the sender) and per-edge rows.
  if (grad_x || grad_Y || grad_W) {
    const int* ptr = edges.sender_ptr().data();
    const int* order = edges.by_sender().data();
#pragma omp parallel for schedule(dynamic, 16)
    for (int s = 0; s < edges.num_senders(); ++s) {
      T* gx = zeroed(grad_x, s, n1);
      const T* xs = x + std::int64_t(s) * n1;
      for (int n = ptr[s]; n < ptr[s + 1]; ++n) {
        const int e = order[n];
        const T* y = Y + std::int64_t(e) * n2;
        const T* w = at(W, e, nw);
        const T* g = grad_out + std::int64_t(receiver[e]) * no;
        T* gy = zeroed(grad_Y, e, n2);
        T* gw = zeroed(grad_W, e, nw);
        if (dx)
          tensor_product_row<T>(tp, dx + std::int64_t(s) * n1, y, w, WeightRole::kValue, g, nullptr,
                                nullptr, gy, gw);
        if (dY)
          tensor_product_row<T>(tp, xs, dY + std::int64_t(e) * n2, w, WeightRole::kValue, g,
                                nullptr, gx, nullptr, gw);
        if (dW)
          tensor_product_row<T>(tp, xs, y, dW + std::int64_t(e) * nw, WeightRole::kTangent, g,
                                nullptr, gx, gy, nullptr);
      }
    }
  }
}

#define CLEBSCH_INSTANTIATE(T)                                                                     \
  template void convolution_forward<T>(const TensorProduct&, const EdgeIndex&, const T*, const T*, \
                                       const T*, T*);                                              \
  template void convolution_backward<T>(const TensorProduct&, const EdgeIndex&, const T*,          \
                                        const T*, const T*, const T*, T*, T*, T*);                 \
  template void convolution_double_backward<T>(const TensorProduct&, const EdgeIndex&, const T*,   \
                                               const T*, const T*, const T*, const T*, const T*,   \
                                               const T*, T*, T*, T*, T*);
CLEBSCH_INSTANTIATE(float)
CLEBSCH_INSTANTIATE(double)
#undef CLEBSCH_INSTANTIATE

}  // namespace clebsch
