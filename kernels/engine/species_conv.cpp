// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The species-factored convolution's source (templates/species_conv.cuh.in plus the per-path
// functions emitted here from the product's TpProblem) and launches (see species_conv.h).
#include "clebsch/cuda/engine/species_conv.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "clebsch/cuda/engine/device_source_tables.h"
#include "clebsch/cuda/generator/tp_problem.h"
#include "clebsch/cuda/templates/species_conv_args.h"
#include "clebsch/support/error.h"
#include "kernel_templates.h"

namespace clebsch::cuda {
namespace {

constexpr int kTileEdges = 32;
// Per-thread register arrays of the kernels: the output values of one channel, the Z values.
constexpr int kMaxAccLen = 64, kMaxZPer = 16;

// What the kernels and the launches need to know about the product.
struct Layout {
  int mul = 0, acc_len = 0, q = 0, threads = 0, z_per = 0;
  std::vector<int> acc_offset;   // per output block: its values' first index in acc
  std::vector<int> q_offset;     // per path: its dG values' first index
  std::size_t shared_bytes = 0;  // per block
};

Layout layout_of(const TpProblem& p, int hidden, int elem, const std::string& what) {
  Layout L;
  for (const TpBlock& b : p.out()) {
    L.acc_offset.push_back(L.acc_len);
    L.acc_len += b.dim();
    L.mul = std::max(L.mul, b.mul);
  }
  for (const TpBlock& b : p.in1()) L.mul = std::max(L.mul, b.mul);
  for (const TpPath& path : p.paths()) {
    if (!path.has_weight)
      throw CapacityError(what + ": path " + path.description +
                          " has no weights; the species-factored form contracts W4");
    if (p.in2()[std::size_t(path.in2)].mul != 1)
      throw CapacityError(what + ": edge-attribute block of path " + path.description +
                          " has multiplicity above 1");
    L.q_offset.push_back(L.q);
    L.q += p.in2()[std::size_t(path.in2)].dim();
  }
  if (L.acc_len > kMaxAccLen)
    throw CapacityError(what + ": " + std::to_string(L.acc_len) +
                        " output values per channel, above the species-factored form's " +
                        std::to_string(kMaxAccLen));
  L.threads = 32;
  while (L.threads < L.mul) L.threads *= 2;
  if (L.threads > 1024)
    throw CapacityError(what + ": multiplicity " + std::to_string(L.mul) + " above 1024");
  L.z_per = (hidden * p.dim_in2() + L.threads - 1) / L.threads;
  if (L.z_per > kMaxZPer)
    throw CapacityError(what + ": " + std::to_string(hidden) + " hidden x " +
                        std::to_string(p.dim_in2()) + " attribute values per receiver exceed " +
                        std::to_string(kMaxZPer) + " per thread");
  const std::size_t reals = 2 * std::size_t(hidden) * p.dim_in2() +
                            std::size_t(kTileEdges) * (hidden + p.dim_in2()) +
                            std::size_t(L.mul) * L.q;
  L.shared_bytes = reals * elem + (kTileEdges + L.threads) * sizeof(int);
  return L;
}

// The per-path device functions the template declares.
std::string path_functions(const TpProblem& p, const Layout& L) {
  std::ostringstream o;
  auto lit = [](double c) { return "real(" + double_literal(c) + ")"; };
  o << "__device__ void sc_forward_paths(int u, const real* x, const real* zs, const real* w4,\n"
       "                                 real (&acc)[kAccLen]) {\n";
  for (const TpPath& path : p.paths()) {
    const TpBlock &b1 = p.in1()[std::size_t(path.in1)], &b2 = p.in2()[std::size_t(path.in2)];
    const int a0 = L.acc_offset[std::size_t(path.out)];
    o << "  // " << path.description << "\n  if (u < " << b1.mul << ") {\n"
      << "    real g[" << b2.dim() << "];\n#pragma unroll\n    for (int j = 0; j < " << b2.dim()
      << "; ++j) g[j] = real(0);\n"
      << "    const real* wc = w4 + " << path.weight_offset << " + u;\n#pragma unroll 4\n"
      << "    for (int k = 0; k < kHidden; ++k) {\n"
      << "      const real w = sc_ldg(wc + (long long)k * kNumWeights);\n"
      << "      const real* z = zs + k * kDim2 + " << b2.offset << ";\n#pragma unroll\n"
      << "      for (int j = 0; j < " << b2.dim() << "; ++j) g[j] = sc_madd(w, z[j], g[j]);\n"
      << "    }\n    const real* xu = x + " << b1.offset << " + u * " << b1.dim() << ";\n";
    for (const CgEntry& c : path.cg)
      o << "    acc[" << a0 + c.k << "] = sc_madd(" << lit(c.c) << " * sc_ldg(xu + " << c.i
        << "), g[" << c.j << "], acc[" << a0 + c.k << "]);\n";
    o << "  }\n";
  }
  o << "}\n\n__device__ void sc_store_out(real* out, int u, const real (&acc)[kAccLen]) {\n";
  for (std::size_t b = 0; b < p.out().size(); ++b) {
    const TpBlock& bo = p.out()[b];
    o << "  if (u < " << bo.mul << ") {\n";
    for (int k = 0; k < bo.dim(); ++k)
      o << "    out[" << bo.offset << " + u * " << bo.dim() << " + " << k << "] = acc["
        << L.acc_offset[b] + k << "];\n";
    o << "  }\n";
  }
  o << "}\n\n__device__ void sc_backward_dg(int u, const real* x, const real* g, real* dgs) {\n";
  for (std::size_t n = 0; n < p.paths().size(); ++n) {
    const TpPath& path = p.paths()[n];
    const TpBlock &b1 = p.in1()[std::size_t(path.in1)], &b2 = p.in2()[std::size_t(path.in2)],
                  &b3 = p.out()[std::size_t(path.out)];
    o << "  // " << path.description << "\n  if (u < " << b1.mul << ") {\n"
      << "    const real* xu = x + " << b1.offset << " + u * " << b1.dim() << ";\n"
      << "    const real* gu = g + " << b3.offset << " + u * " << b3.dim() << ";\n"
      << "    real d[" << b2.dim() << "];\n#pragma unroll\n    for (int j = 0; j < " << b2.dim()
      << "; ++j) d[j] = real(0);\n";
    for (const CgEntry& c : path.cg)
      o << "    d[" << c.j << "] = sc_madd(" << lit(c.c) << " * sc_ldg(xu + " << c.i
        << "), sc_ldg(gu + " << c.k << "), d[" << c.j << "]);\n";
    o << "#pragma unroll\n    for (int j = 0; j < " << b2.dim() << "; ++j) dgs[u * kQ + "
      << L.q_offset[n] << " + j] = d[j];\n  }\n";
  }
  o << "}\n\n__device__ real sc_backward_dz(int k, int j, const real* w4, const real* dgs) {\n"
       "  real acc = real(0);\n";
  for (std::size_t n = 0; n < p.paths().size(); ++n) {
    const TpPath& path = p.paths()[n];
    const TpBlock &b1 = p.in1()[std::size_t(path.in1)], &b2 = p.in2()[std::size_t(path.in2)];
    o << "  if (j >= " << b2.offset << " && j < " << b2.offset + b2.dim() << ") {  // "
      << path.description << "\n"
      << "    const real* wr = w4 + (long long)k * kNumWeights + " << path.weight_offset << ";\n"
      << "    const real* d = dgs + " << L.q_offset[n] << " + (j - " << b2.offset << ");\n"
      << "    for (int u = 0; u < " << b1.mul << "; ++u) acc = sc_madd(sc_ldg(wr + u), d[u * kQ], "
      << "acc);\n  }\n";
  }
  o << "  return acc;\n}\n";
  return o.str();
}

std::string module_source(const TpProblem& p, const Layout& L, int hidden) {
  std::ostringstream o;
  o << "// Clebsch species-factored convolution of " << p.str() << ", hidden " << hidden << "\n"
    << templates::k_species_conv_args << "\ntypedef "
    << (p.dtype() == DType::kFloat64 ? "double" : "float") << " real;\n"
    << "constexpr int kHidden = " << hidden << ", kDim1 = " << p.dim_in1()
    << ", kDim2 = " << p.dim_in2() << ", kDimOut = " << p.dim_out()
    << ", kNumWeights = " << p.weight_numel() << ";\n"
    << "constexpr int kThreads = " << L.threads << ", kMaxMul = " << L.mul
    << ", kTileEdges = " << kTileEdges << ", kAccLen = " << L.acc_len << ", kQ = " << L.q
    << ", kZPer = " << L.z_per << ";\n"
    << templates::k_species_conv << "\n"
    << path_functions(p, L);
  return o.str();
}

}  // namespace

SpeciesConv::SpeciesConv(DeviceBackend& backend, const TensorProduct& tp, DType dtype, int hidden)
    : backend_(backend) {
  const std::string what = "species-factored convolution of " + tp.str();
  if (hidden < 1) throw CapacityError(what + ": no hidden rows");
  const TpProblem p = TpProblem::from_tensor_product(tp, dtype, Accumulation::kDeterministic);
  if (p.paths().empty()) throw CapacityError(what + ": no path");
  const Layout L = layout_of(p, hidden, size_of(dtype), what);
  if (L.shared_bytes > std::size_t(backend.limits().max_shared_per_block))
    throw CapacityError(what + ": " + std::to_string(L.shared_bytes) +
                        " bytes of shared memory per block, above the device's " +
                        std::to_string(backend.limits().max_shared_per_block));
  threads_ = unsigned(L.threads);
  shared_bytes_ = unsigned(L.shared_bytes);
  hidden_ = hidden, dim_in2_ = p.dim_in2(), dim_out_ = p.dim_out(), value_bytes_ = size_of(dtype);
  source_ = module_source(p, L, hidden);
  const unsigned opt_in = shared_bytes_ > 48 * 1024 ? shared_bytes_ : 0;
  module_ = backend_.load(
      {"clebsch_species_conv_" + p.hash_hex() + "_h" + std::to_string(hidden) + ".cu", source_,
       {{"clebsch_species_conv_forward", "SpeciesConvArgs", true, opt_in},
        {"clebsch_species_conv_backward", "SpeciesConvArgs", true, opt_in}}});
  status_ = static_cast<unsigned*>(backend_.allocate(sizeof(unsigned)));
  backend_.memset(status_, 0, sizeof(unsigned), nullptr);
}

SpeciesConv::~SpeciesConv() { backend_.free(status_); }

void SpeciesConv::run(Stream stream, Pass pass, const ConvBuffers& b, const void* table,
                      const int* species, int num_species) const {
  const bool forward = pass == Pass::kForward;
  if (!forward && pass != Pass::kBackward)
    throw CapacityError("species-factored convolution: forward and backward only");
  if (b.num_receivers == 0) return;
  const bool edges = b.num_edges > 0;
  if (!table || !species || !b.receiver_ptr || (edges && (!b.h || !b.w4 || !b.y || !b.sender)) ||
      (forward ? !b.out : (!b.grad_out || (edges && (!b.grad_h || !b.grad_y)))))
    throw CapacityError("species-factored convolution: a buffer is missing");
  if (b.grad_x) throw CapacityError("species-factored convolution: no dE/dx (x is a table)");
  SpeciesConvArgs a{};
  a.table = table, a.species = species, a.h = b.h, a.w4 = b.w4, a.y = b.y, a.g = b.grad_out;
  a.out = b.out, a.grad_h = b.grad_h, a.grad_y = b.grad_y, a.sender = b.sender;
  a.ptr = b.receiver_ptr, a.order = b.receiver_order, a.status = status_;
  a.num_edges = b.num_edges, a.num_senders = b.num_senders, a.num_receivers = b.num_receivers;
  a.num_species = num_species, a.accumulate_grad_y = b.accumulate_grad_y ? 1 : 0;
  LaunchDims d;
  d.grid_x = unsigned(b.num_receivers);
  d.threads = threads_;
  d.shared_bytes = shared_bytes_;
  if (backend_.kernel_timing()) {
    // Floor: the per-edge rows read (h, Y; the backward also writes dE/dh and dE/dY) and the
    // receivers' rows written (forward) or read (backward) once.
    const double E = double(b.num_edges), R = double(b.num_receivers);
    const double row = double(hidden_ + dim_in2_);
    const double bytes = value_bytes_ * (E * row * (forward ? 1 : 2) + R * dim_out_);
    backend_.set_timing_floor(bytes, 2.0 * E * hidden_ * dim_in2_ * (forward ? 1 : 2));
  }
  backend_.launch(module_->kernel(forward ? "clebsch_species_conv_forward"
                                          : "clebsch_species_conv_backward"),
                  d, stream, a);
}

unsigned SpeciesConv::take_status(Stream stream) {
  unsigned v = 0;
  backend_.download(&v, status_, sizeof v, stream);
  backend_.memset(status_, 0, sizeof v, stream);
  return v;
}

}  // namespace clebsch::cuda
