// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// NequipDeviceSelfConnection (see nequip_device_ops.h).
#include "clebsch/cuda/engine/nequip_device_ops.h"

#include "clebsch/cuda/nn/device_linear.h"
#include "clebsch/engine/nequip_self_connection.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda {

// ---- self-connection ------------------------------------------------------------------------

template <class T>
NequipDeviceSelfConnection<T>::NequipDeviceSelfConnection(DeviceBackend& backend,
                                                          const model::TensorProduct& m,
                                                          const std::vector<double>& type_embedding,
                                                          int num_species, int embedding_dim,
                                                          const std::string& where)
    : weights_(backend) {
  nequip_ops::check_self_connection(m, embedding_dim, where);
  const TensorProduct& tp = m.descriptor;
  dim_in_ = tp.dim_in1();
  dim_out_ = tp.dim_out();
  std::vector<T> w;
  for (const TensorProductPath& p : tp.paths()) {
    nequip_ops::check_self_connection_path(p, where);
    if (p.cg.empty()) continue;
    // A scalar second input couples l to l through c times the identity; the GEMM form needs it.
    const double c0 = p.cg.front().c;
    bool identity = p.ir1.l() == p.ir_out.l() && static_cast<int>(p.cg.size()) == p.ir1.dim();
    for (const CgEntry& e : p.cg)
      identity = identity && e.i == e.k && e.j == 0 && std::abs(e.c - c0) <= 1e-12 * std::abs(c0);
    if (!identity)
      throw Error("NequipEngine: " + where + " instruction " + p.ins.str() +
                  " couples its inputs other than by c times the identity");
    DeviceLinearBlock b;
    b.off_in = static_cast<int>(p.offset1), b.off_out = static_cast<int>(p.offset_out);
    b.mul_in = p.mul1, b.mul_out = p.mul_out, b.d = p.ir1.dim();
    b.w_offset = static_cast<long long>(w.size());
    // K'[species][mul_in][mul_out]: rows of mul_out, one matrix per species.
    b.ldb = p.mul_out;
    b.select_stride = static_cast<long long>(p.mul1) * p.mul_out;
    for (double k :
         nequip_ops::contract_type_embedding(m, p, type_embedding, num_species, embedding_dim))
      w.push_back(static_cast<T>(c0 * k));
    blocks_.push_back(b);
  }
  for (DeviceLinearBlock& b : blocks_) b.append_transposed(w, num_species);
  weights_.upload(w);
  backend.synchronize(nullptr);
}

template <class T>
void NequipDeviceSelfConnection<T>::run(const GenericKernels& gk, bool transpose, long long n,
                                        const T* X, long long ldx, T* Y, long long ldy,
                                        const int* species, Stream s) const {
  if (n <= 0) return;
  for (const DeviceLinearBlock& b : blocks_) {
    GemmArgs g = b.gemm(transpose, n, X, ldx, Y, ldy, weights_.data(), species);
    g.beta = 1.0;
    gk.gemm(dtype_of<T>(), g, s);
  }
}

template <class T>
void NequipDeviceSelfConnection<T>::forward(const GenericKernels& gk, long long n, const T* X,
                                            long long ldx, T* Y, long long ldy, const int* species,
                                            Stream s) const {
  run(gk, false, n, X, ldx, Y, ldy, species, s);
}

template <class T>
void NequipDeviceSelfConnection<T>::backward(const GenericKernels& gk, long long n, const T* gY,
                                             long long ldy, T* gX, long long ldx,
                                             const int* species, Stream s) const {
  run(gk, true, n, gY, ldy, gX, ldx, species, s);
}

template class NequipDeviceSelfConnection<float>;
template class NequipDeviceSelfConnection<double>;

}  // namespace clebsch::cuda
