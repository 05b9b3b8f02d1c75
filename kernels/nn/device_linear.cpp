// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// DeviceLinear (see device_linear.h).
#include "clebsch/cuda/nn/device_linear.h"

#include <cmath>

#include "clebsch/support/error.h"

namespace clebsch::cuda {

template <class T>
DeviceLinear<T>::DeviceLinear(DeviceBackend& backend, const model::Linear& linear)
    : in_(linear.irreps_in),
      out_(linear.irreps_out),
      dim_in_(in_.dim()),
      dim_out_(out_.dim()),
      weights_(backend) {
  const std::vector<int> oi = in_.offsets(), oo = out_.offsets();
  std::vector<T> w;
  for (const auto& ins : linear.instructions) {
    Ins d;
    d.i_in = ins.i_in, d.i_out = ins.i_out;
    d.mul_in = ins.mul_in, d.mul_out = ins.mul_out;
    d.d = in_[ins.i_in].ir.dim();
    d.off_in = oi[ins.i_in], d.off_out = oo[ins.i_out];
    d.w_offset = static_cast<long long>(w.size());
    d.ldb = ins.mul_out, d.select_stride = 0;
    for (int k = 0; k < ins.mul_in * ins.mul_out; ++k)
      w.push_back(static_cast<T>(ins.path_weight * linear.weight[ins.weight_offset + k]));
    ins_.push_back(d);
  }
  weights_.upload(w);
}

template <class T>
DeviceLinear<T>::DeviceLinear(DeviceBackend& backend, const model::TensorProduct& tp,
                              int num_species, const std::string& where)
    : in_(tp.descriptor.irreps_in1()),
      out_(tp.descriptor.irreps_out()),
      dim_in_(in_.dim()),
      dim_out_(out_.dim()),
      per_species_(true),
      weights_(backend) {
  const TensorProduct& d = tp.descriptor;
  if (d.irreps_in2().size() != 1 || d.irreps_in2()[0].ir.l() != 0 ||
      d.irreps_in2()[0].ir.p() != 1 || d.irreps_in2()[0].mul != num_species)
    throw ModelFormatError(where + ": second input is " + d.irreps_in2().str() +
                           ", expected the one-hot species " + std::to_string(num_species) + "x0e");
  if (tp.external_weights || tp.weight.size() != static_cast<std::size_t>(d.weight_numel()))
    throw ModelFormatError(where + ": expected " + std::to_string(d.weight_numel()) +
                           " internal weights");
  std::vector<T> w;
  for (std::size_t n = 0; n < d.paths().size(); ++n) {
    const TensorProductPath& p = d.paths()[n];
    const std::string wh = where + ".instructions[" + std::to_string(n) + "]";
    if (p.ins.mode() != ConnectionMode::kUvw || !p.ins.has_weight())
      throw ModelFormatError(wh + ": mode " + to_string(p.ins.mode()) + ", expected weighted uvw");
    if (p.ir1.l() != p.ir_out.l())
      throw ModelFormatError(wh + ": couples l=" + std::to_string(p.ir1.l()) +
                             " to l=" + std::to_string(p.ir_out.l()) + " through a scalar");
    if (p.cg.empty()) continue;
    const double c0 = p.cg.front().c;
    bool ok = static_cast<int>(p.cg.size()) == p.ir1.dim();
    for (const CgEntry& e : p.cg)
      ok = ok && e.i == e.k && e.j == 0 && std::abs(e.c - c0) <= 1e-12 * std::abs(c0);
    if (!ok) throw ModelFormatError(wh + ": coupling with the one-hot input is not c * identity");
    Ins di;
    di.i_in = p.ins.i_in1(), di.i_out = p.ins.i_out();
    di.mul_in = p.mul1, di.mul_out = p.mul_out;
    di.d = p.ir1.dim();
    di.off_in = static_cast<int>(p.offset1), di.off_out = static_cast<int>(p.offset_out);
    di.w_offset = static_cast<long long>(w.size());
    // Weight W[u][s][w] (uvw, v = species): row u has stride S*mul_out, species s offset s*mul_out.
    di.ldb = static_cast<long long>(num_species) * p.mul_out;
    di.select_stride = p.mul_out;
    const std::size_t count = static_cast<std::size_t>(p.mul1) * num_species * p.mul_out;
    for (std::size_t k = 0; k < count; ++k)
      w.push_back(static_cast<T>(c0 * tp.weight[p.weight_offset + k]));
    ins_.push_back(di);
  }
  for (Ins& di : ins_) di.append_transposed(w, num_species);
  weights_.upload(w);
}

template <class T>
void DeviceLinear<T>::run(const GenericKernels& gk, bool transpose, long long n, const T* X,
                          long long ldx, T* Y, long long ldy, bool accumulate, const int* species,
                          Stream s) const {
  if (n <= 0) return;
  if (per_species_ && !species) throw Error("DeviceLinear: per-species map without species");
  const Irreps& y_irreps = transpose ? in_ : out_;
  const std::vector<int> y_off = y_irreps.offsets();
  std::vector<char> written(y_irreps.size(), 0);
  for (const Ins& ins : ins_) {
    const int y_blk = transpose ? ins.i_in : ins.i_out;
    GemmArgs g =
        ins.gemm(transpose, n, X, ldx, Y, ldy, weights_.data(), per_species_ ? species : nullptr);
    g.beta = (accumulate || written[y_blk]) ? 1.0 : 0.0;
    written[y_blk] = 1;
    gk.gemm(dtype_of<T>(), g, s);
  }
  if (accumulate) return;
  for (std::size_t b = 0; b < y_irreps.size(); ++b) {
    if (written[b] || y_irreps[b].dim() == 0) continue;
    // k = 0: the GEMM writes alpha * 0, zeroing the block without reading anything.
    GemmArgs g{};
    g.m = n, g.n = y_irreps[b].dim(), g.k = 0, g.batch = 1;
    g.a = X, g.b = weights_.data(), g.c = Y + y_off[b];
    g.ldc = ldy, g.c_col = 1, g.alpha = 1.0, g.beta = 0.0;
    gk.gemm(dtype_of<T>(), g, s);
  }
}

template <class T>
void DeviceLinear<T>::forward(const GenericKernels& gk, long long n, const T* X, long long ldx,
                              T* Y, long long ldy, bool accumulate, const int* species,
                              Stream s) const {
  run(gk, false, n, X, ldx, Y, ldy, accumulate, species, s);
}

template <class T>
void DeviceLinear<T>::backward(const GenericKernels& gk, long long n, const T* gY, long long ldy,
                               T* gX, long long ldx, bool accumulate, const int* species,
                               Stream s) const {
  run(gk, true, n, gY, ldy, gX, ldx, accumulate, species, s);
}

template class DeviceLinear<float>;
template class DeviceLinear<double>;

}  // namespace clebsch::cuda
