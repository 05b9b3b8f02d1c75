// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// NequipDeviceGate and NequipDeviceSelfConnection (see nequip_device_ops.h).
#include "clebsch/cuda/engine/nequip_device_ops.h"

#include <cmath>

#include "clebsch/cuda/nn/device_linear.h"
#include "clebsch/cuda/templates/device_args.h"
#include "clebsch/engine/nequip_self_connection.h"
#include "clebsch/model/gate_channels.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda {
namespace {

struct Act {
  int kind = -1;  // identity
  double cst = 1.0;
};

// The device kernels switch on the model's kind as an int (clebsch_act, nq_act).
static_assert(int(model::Activation::Kind::kSilu) == kActSilu &&
              int(model::Activation::Kind::kTanh) == kActTanh &&
              int(model::Activation::Kind::kSigmoid) == kActSigmoid &&
              int(model::Activation::Kind::kAbs) == kActAbs &&
              int(model::Activation::Kind::kSsp) == kActSsp &&
              int(model::Activation::Kind::kGelu) == kActGelu &&
              int(model::Activation::Kind::kMish) == kActMish);

Act act_of(const std::optional<model::Activation>& a, const std::string& where) {
  if (!a) return {};
  if (!std::isfinite(a->cst))
    throw Error("NequipEngine: " + where + " activation " + a->name + " has non-finite cst");
  return {static_cast<int>(a->kind), a->cst};
}

}  // namespace

// ---- gate -----------------------------------------------------------------------------------

template <class T>
NequipDeviceGate<T>::NequipDeviceGate(DeviceBackend& backend, const model::Gate& m,
                                      const std::string& where)
    : dim_in_(m.irreps_in.dim()), dim_out_(m.irreps_out.dim()) {
  const auto [scalar_acts, gate_acts, copy_begin, copy_dim] = model::check_gate<Act>(
      m, "NequipEngine: " + where,
      [&](const std::optional<model::Activation>& a) { return act_of(a, where); });
  const int ns = static_cast<int>(m.index_scalars.size());
  std::vector<int> src(dim_out_, 0), gate(dim_out_, -1), kind(dim_out_, -1);
  std::vector<double> cst(dim_out_, 1.0);
  std::vector<int> in_kind(dim_in_, 0), in_out(dim_in_, 0), in_dim(dim_in_, 0), in_gate(dim_in_, 0),
      in_act(dim_in_, -1);
  std::vector<double> in_cst(dim_in_, 1.0);
  // Each input feeds one output role; a model whose index lists overlap is not a Gate.
  const auto claim = [&](int c) {
    if (in_kind[c] != 0)
      throw Error("NequipEngine: " + where + " uses input " + std::to_string(c) + " twice");
  };
  for (int q = 0; q < ns; ++q) {
    const int c = m.index_scalars[q];
    src[q] = c, kind[q] = scalar_acts[q].kind, cst[q] = scalar_acts[q].cst;
    claim(c);
    in_kind[c] = 1, in_out[c] = q, in_act[c] = scalar_acts[q].kind, in_cst[c] = scalar_acts[q].cst;
  }
  for (std::size_t k = 0; k < m.index_gates.size(); ++k) {
    const int g = m.index_gates[k];
    const int b = ns + copy_begin[k];
    claim(g);
    in_kind[g] = 2, in_out[g] = b, in_dim[g] = copy_dim[k];
    in_act[g] = gate_acts[k].kind, in_cst[g] = gate_acts[k].cst;
    for (int mm = 0; mm < copy_dim[k]; ++mm) {
      const int o = b + mm, c = m.index_gated[copy_begin[k] + mm];
      src[o] = c, gate[o] = g, kind[o] = gate_acts[k].kind, cst[o] = gate_acts[k].cst;
      claim(c);
      in_kind[c] = 3, in_out[c] = o, in_gate[c] = g;
      in_act[c] = gate_acts[k].kind, in_cst[c] = gate_acts[k].cst;
    }
  }
  const auto up = [&](DeviceArray<int>& d, const std::vector<int>& h) {
    d = DeviceArray<int>(backend);
    d.upload(h);
  };
  up(src_, src), up(gate_, gate), up(act_kind_, kind), up(in_kind_, in_kind), up(in_out_, in_out);
  up(in_dim_, in_dim), up(in_gate_, in_gate), up(in_act_kind_, in_act);
  act_cst_ = DeviceArray<double>(backend);
  act_cst_.upload(cst);
  in_act_cst_ = DeviceArray<double>(backend);
  in_act_cst_.upload(in_cst);
  backend.synchronize(nullptr);  // the host vectors above die here
}

template <class T>
NequipGateArgs NequipDeviceGate<T>::args(long long rows) const {
  NequipGateArgs a{};
  a.src = src_.data(), a.gate = gate_.data(), a.act_kind = act_kind_.data();
  a.act_cst = act_cst_.data();
  a.in_kind = in_kind_.data(), a.in_out = in_out_.data(), a.in_dim = in_dim_.data();
  a.in_gate = in_gate_.data(), a.in_act_kind = in_act_kind_.data();
  a.in_act_cst = in_act_cst_.data();
  a.rows = rows, a.dim_in = dim_in_, a.dim_out = dim_out_;
  return a;
}

template <class T>
void NequipDeviceGate<T>::forward(DeviceBackend& backend, const DeviceKernel& kernel,
                                  long long rows, const T* x, T* out, long long ld_out,
                                  Stream s) const {
  NequipGateArgs a = args(rows);
  a.x = x, a.out = out, a.ld_out = ld_out;
  backend.launch(kernel, grid_for(rows * dim_out_), s, a);
}

template <class T>
void NequipDeviceGate<T>::backward(DeviceBackend& backend, const DeviceKernel& kernel,
                                   long long rows, const T* x, const T* gy, long long ld_out, T* gx,
                                   Stream s) const {
  NequipGateArgs a = args(rows);
  a.x = x, a.gy = gy, a.gx = gx, a.ld_out = ld_out;
  backend.launch(kernel, grid_for(rows * dim_in_), s, a);
}

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

template class NequipDeviceGate<float>;
template class NequipDeviceGate<double>;
template class NequipDeviceSelfConnection<float>;
template class NequipDeviceSelfConnection<double>;

}  // namespace clebsch::cuda
