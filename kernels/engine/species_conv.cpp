// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The species-factored convolution's source (templates/species_conv.cuh.in plus the per-path
// functions emitted here from the product's TpProblem) and launches (see species_conv.h).
#include "clebsch/cuda/engine/species_conv.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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
// W4 values a thread loads before it uses them (their latencies overlap).
constexpr int kWChunk = 16;
// Per-thread register arrays of the kernels, over the block's receivers: the output values of
// one channel, the Z values.
constexpr int kMaxAccValues = 64, kMaxZValues = 32;

// Receivers a block takes at most, forward and backward (run 32 on an H200, MACE-MP-0-medium's
// first layer: the backward 1.47 ms with two in float32, 1.89 with one, 1.75 with four; float64
// 2.32 with two, 2.68 with one; the forward fastest with one, 0.88 against 1.19 with two in
// float32, its occupancy bound by the accumulators' registers). CLEBSCH_SPECIES_RECV=F,B sets
// them (1, 2 or 4; A/B runs).
struct Receivers {
  int forward = 1, backward = 2;
};

Receivers receivers_per_block() {
  Receivers r;
  if (const char* env = std::getenv("CLEBSCH_SPECIES_RECV")) {
    int f = 0, b = 0;
    if (std::sscanf(env, "%d,%d", &f, &b) == 2 && (f == 1 || f == 2 || f == 4) &&
        (b == 1 || b == 2 || b == 4))
      r.forward = f, r.backward = b;
  }
  return r;
}

// What the kernels and the launches need to know about the product.
struct Layout {
  int mul = 0, acc_len = 0, q = 0, threads = 0, z_per = 0;
  Receivers recv;
  std::vector<int> acc_offset;  // per output block: its values' first index in acc
  std::vector<int> q_offset;    // per path: its dG values' first index
  std::size_t forward_bytes = 0, backward_bytes = 0;  // shared memory per block
};

Layout layout_of(const TpProblem& p, int hidden, DType dtype, const std::string& what) {
  Layout L;
  L.recv = receivers_per_block();
  for (const TpBlock& b : p.out()) {
    L.acc_offset.push_back(L.acc_len);
    L.acc_len += b.dim();
    L.mul = std::max(L.mul, b.mul);
  }
  for (const TpBlock& b : p.in1()) L.mul = std::max(L.mul, b.mul);
  check_species_paths(p, what);
  for (const TpPath& path : p.paths()) {
    L.q_offset.push_back(L.q);
    L.q += p.in2()[std::size_t(path.in2)].dim();
  }
  if (L.acc_len > kMaxAccValues)
    throw CapacityError(what + ": " + std::to_string(L.acc_len) +
                        " output values per channel, above the species-factored form's " +
                        std::to_string(kMaxAccValues));
  // At least 128 threads: they share the Z values a block keeps in registers.
  L.threads = 128;
  while (L.threads < std::max(L.mul, hidden)) L.threads *= 2;
  if (L.threads > 1024) throw CapacityError(what + ": multiplicity or hidden width above 1024");
  L.z_per = (hidden * p.dim_in2() + L.threads - 1) / L.threads;
  if (L.z_per > kMaxZValues)
    throw CapacityError(what + ": " + std::to_string(hidden) + " hidden x " +
                        std::to_string(p.dim_in2()) + " attribute values per receiver exceed " +
                        std::to_string(kMaxZValues) + " per thread");
  // Fewer receivers a block where one channel's outputs or a thread's Z values are many (the
  // forward keeps both in registers per receiver, the backward neither).
  while (L.recv.forward > 1 &&
         (L.acc_len * L.recv.forward > kMaxAccValues || L.z_per * L.recv.forward > kMaxZValues))
    L.recv.forward /= 2;
  const std::size_t elem = std::size_t(size_of(dtype));
  const std::size_t z = std::size_t(hidden) * p.dim_in2();
  const std::size_t rows = std::size_t(kTileEdges) * (hidden + p.dim_in2());
  const std::size_t dg = std::size_t(L.recv.backward) * L.mul * L.q;
  auto ints = [&](int recv) { return (2 * kTileEdges + recv + 1 + L.threads) * sizeof(int); };
  L.forward_bytes = (L.recv.forward * z + rows) * elem + ints(L.recv.forward);
  L.backward_bytes = (2 * L.recv.backward * z + std::max(rows, dg)) * elem + ints(L.recv.backward);
  return L;
}

// The per-path device functions the template declares.
std::string path_functions(const TpProblem& p, const Layout& L) {
  std::ostringstream o;
  auto lit = [](double c) { return "real(" + double_literal(c) + ")"; };
  // W4[k][w + u] for u0 <= u < u0 + kWChunk (or k0 <= k < k0 + kWChunk) into w[]: kWChunk loads
  // in flight before the multiply-adds that use them.
  o << "__device__ void sc_forward_paths(int u, const real* x, const real* zs, const real* w4,\n"
       "                                 real (&acc)[kRecvF][kAccLen]) {\n";
  for (const TpPath& path : p.paths()) {
    const TpBlock &b1 = p.in1()[std::size_t(path.in1)], &b2 = p.in2()[std::size_t(path.in2)];
    const int a0 = L.acc_offset[std::size_t(path.out)];
    o << "  // " << path.description << "\n  if (u < " << b1.mul << ") {\n"
      << "    real g[kRecvF][" << b2.dim() << "];\n#pragma unroll\n"
      << "    for (int r = 0; r < kRecvF; ++r)\n#pragma unroll\n      for (int j = 0; j < "
      << b2.dim() << "; ++j) g[r][j] = real(0);\n"
      << "    const real* wc = w4 + " << path.weight_offset << " + u;\n"
      << "    for (int k0 = 0; k0 < kHidden; k0 += kWChunk) {\n      real w[kWChunk];\n#pragma "
         "unroll\n"
      << "      for (int c = 0; c < kWChunk; ++c)\n"
      << "        w[c] = k0 + c < kHidden ? sc_ldg(wc + (long long)(k0 + c) * kNumWeights) : "
         "real(0);\n"
      << "#pragma unroll\n      for (int c = 0; c < kWChunk; ++c) {\n"
      << "        if (k0 + c >= kHidden) break;\n#pragma unroll\n"
      << "        for (int r = 0; r < kRecvF; ++r) {\n"
      << "          const real* z = zs + (r * kHidden + k0 + c) * kDim2 + " << b2.offset << ";\n"
      << "#pragma unroll\n          for (int j = 0; j < " << b2.dim()
      << "; ++j) g[r][j] = sc_madd(w[c], z[j], g[r][j]);\n        }\n      }\n    }\n"
      << "    const real* xu = x + " << b1.offset << " + u * " << b1.dim() << ";\n"
      << "#pragma unroll\n    for (int r = 0; r < kRecvF; ++r) {\n";
    for (const CgEntry& c : path.cg)
      o << "      acc[r][" << a0 + c.k << "] = sc_madd(" << lit(c.c) << " * sc_ldg(xu + " << c.i
        << "), g[r][" << c.j << "], acc[r][" << a0 + c.k << "]);\n";
    o << "    }\n  }\n";
  }
  o << "}\n\n" << species_store_out_function(p, L.acc_offset, "sc_store_out");
  o << "\n__device__ void sc_backward_dg(int u, const real* x, const real* g, real* dgs) {\n";
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
  // dZ of row k, edge-attribute block b2, for every receiver of the block: the paths reading b2.
  o << "}\n\n__device__ void sc_backward_dz(int k, int b2, const real* w4, const real* dgs, "
       "real* zs,\n                               real* zt) {\n  switch (b2) {\n";
  for (std::size_t b = 0; b < p.in2().size(); ++b) {
    const TpBlock& blk = p.in2()[b];
    o << "    case " << b << ": {\n      real d[kRecvB][" << blk.dim() << "];\n#pragma unroll\n"
      << "      for (int r = 0; r < kRecvB; ++r)\n#pragma unroll\n        for (int j = 0; j < "
      << blk.dim() << "; ++j) d[r][j] = real(0);\n";
    for (std::size_t n = 0; n < p.paths().size(); ++n) {
      const TpPath& path = p.paths()[n];
      if (path.in2 != int(b)) continue;
      const int mul = p.in1()[std::size_t(path.in1)].mul;
      o << "      {  // " << path.description << "\n"
        << "        const real* wr = w4 + (long long)k * kNumWeights + " << path.weight_offset
        << ";\n        for (int u0 = 0; u0 < " << mul << "; u0 += kWChunk) {\n"
        << "          real w[kWChunk];\n#pragma unroll\n"
        << "          for (int c = 0; c < kWChunk; ++c) w[c] = u0 + c < " << mul
        << " ? sc_ldg(wr + u0 + c) : real(0);\n#pragma unroll\n"
        << "          for (int c = 0; c < kWChunk; ++c) {\n            if (u0 + c >= " << mul
        << ") break;\n#pragma unroll\n            for (int r = 0; r < kRecvB; ++r) {\n"
        << "              const real* dg = dgs + (r * kMaxMul + u0 + c) * kQ + " << L.q_offset[n]
        << ";\n#pragma unroll\n              for (int j = 0; j < " << blk.dim()
        << "; ++j) d[r][j] = sc_madd(w[c], dg[j], d[r][j]);\n            }\n          }\n"
        << "        }\n      }\n";
    }
    o << "#pragma unroll\n      for (int r = 0; r < kRecvB; ++r)\n#pragma unroll\n"
      << "        for (int j = 0; j < " << blk.dim() << "; ++j) {\n"
      << "          zs[(r * kHidden + k) * kDim2 + " << blk.offset << " + j] = d[r][j];\n"
      << "          zt[(r * kDim2 + " << blk.offset << " + j) * kHidden + k] = d[r][j];\n"
      << "        }\n      break;\n    }\n";
  }
  o << "  }\n}\n";
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
    << ", kRecvF = " << L.recv.forward << ", kRecvB = " << L.recv.backward
    << ", kTileEdges = " << kTileEdges << ", kAccLen = " << L.acc_len << ", kQ = " << L.q
    << ", kZPer = " << L.z_per << ", kNumIn2 = " << p.in2().size() << ", kWChunk = " << kWChunk
    << ";\n"
    << templates::k_species_conv << "\n"
    << path_functions(p, L);
  return o.str();
}

}  // namespace

SpeciesConv::SpeciesConv(DeviceBackend& backend, const TensorProduct& tp, DType dtype, int hidden)
    : SpeciesFactoredConv(backend) {
  const std::string what = "species-factored convolution of " + tp.str();
  if (hidden < 1) throw CapacityError(what + ": no hidden rows");
  const TpProblem p = TpProblem::from_tensor_product(tp, dtype, Accumulation::kDeterministic);
  if (p.paths().empty()) throw CapacityError(what + ": no path");
  const Layout L = layout_of(p, hidden, dtype, what);
  const std::size_t most = std::max(L.forward_bytes, L.backward_bytes);
  if (most > std::size_t(backend.limits().max_shared_per_block))
    throw CapacityError(what + ": " + std::to_string(most) +
                        " bytes of shared memory per block, above the device's " +
                        std::to_string(backend.limits().max_shared_per_block));
  threads_ = unsigned(L.threads);
  recv_forward_ = unsigned(L.recv.forward), recv_backward_ = unsigned(L.recv.backward);
  forward_bytes_ = unsigned(L.forward_bytes), backward_bytes_ = unsigned(L.backward_bytes);
  hidden_ = hidden, dim_in2_ = p.dim_in2(), dim_out_ = p.dim_out(), value_bytes_ = size_of(dtype);
  source_ = module_source(p, L, hidden);
  auto opt_in = [](unsigned bytes) { return bytes > 48 * 1024 ? bytes : 0u; };
  module_ = backend_.load(
      {"clebsch_species_conv_" + p.hash_hex() + "_h" + std::to_string(hidden) + ".cu",
       source_,
       {{"clebsch_species_conv_forward", "SpeciesConvArgs", true, opt_in(forward_bytes_)},
        {"clebsch_species_conv_backward", "SpeciesConvArgs", true, opt_in(backward_bytes_)}}});
}

void SpeciesConv::run(const GenericKernels&, Stream stream, Pass pass, const ConvBuffers& b,
                      const void* table, const int* species, int num_species) {
  if (!check_run(pass, b, table, species)) return;
  const bool forward = pass == Pass::kForward;
  SpeciesConvArgs a{};
  a.table = table, a.species = species, a.h = b.h, a.w4 = b.w4, a.y = b.y, a.g = b.grad_out;
  a.out = b.out, a.grad_h = b.grad_h, a.grad_y = b.grad_y, a.sender = b.sender;
  a.ptr = b.receiver_ptr, a.order = b.receiver_order, a.status = status_;
  a.num_edges = b.num_edges, a.num_senders = b.num_senders, a.num_receivers = b.num_receivers;
  a.num_species = num_species, a.accumulate_grad_y = b.accumulate_grad_y ? 1 : 0;
  LaunchDims d;
  const unsigned recv = forward ? recv_forward_ : recv_backward_;
  d.grid_x = unsigned((b.num_receivers + recv - 1) / recv);
  d.threads = threads_;
  d.shared_bytes = forward ? forward_bytes_ : backward_bytes_;
  if (backend_.kernel_timing()) {
    // Floor: the per-edge rows read (h, Y; the backward also writes dE/dh and dE/dY) and the
    // receivers' rows written (forward) or read (backward) once.
    const double E = double(b.num_edges), R = double(b.num_receivers);
    const double row = double(hidden_ + dim_in2_);
    const double bytes = value_bytes_ * (E * row * (forward ? 1 : 2) + R * dim_out_);
    backend_.set_timing_floor(bytes, 2.0 * E * hidden_ * dim_in2_ * (forward ? 1 : 2));
  }
  backend_.launch(
      module_->kernel(forward ? "clebsch_species_conv_forward" : "clebsch_species_conv_backward"),
      d, stream, a);
}

}  // namespace clebsch::cuda
