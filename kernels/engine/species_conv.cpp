// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The species-factored convolution's source (templates/species_conv.cuh.in plus the per-path
// functions emitted here from the product's TpProblem), its launches and its W4 GEMMs (see
// species_conv.h).
#include "clebsch/cuda/engine/species_conv.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/engine/device_source_tables.h"
#include "clebsch/cuda/generator/tp_problem.h"
#include "clebsch/cuda/templates/species_conv_args.h"
#include "clebsch/support/error.h"
#include "kernel_templates.h"

namespace clebsch::cuda {
namespace {

// Warps (one a receiver) per block of the slot, Z and edge kernels; threads of the scan.
constexpr int kWarps = 4, kScanThreads = 1024;
// Per-thread register arrays: the output values of one channel (contraction kernels), the Z or
// dZ values of one lane (kKPer x kDim2) and its dE/dY segment (kKSeg).
constexpr int kMaxAccValues = 64, kMaxZValues = 64, kMaxSegValues = 64;

// What the kernels and the launches need to know about the product.
struct Layout {
  int mul = 0, acc_len = 0, threads = 0, k_per = 0, j_pad = 1, parts = 32, k_seg = 0;
  std::vector<int> acc_offset;  // per output block: its values' first index in acc
};

Layout layout_of(const TpProblem& p, int hidden, const std::string& what) {
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
    if (p.in1()[std::size_t(path.in1)].mul != p.out()[std::size_t(path.out)].mul)
      throw CapacityError(what + ": path " + path.description + " is not uvu");
  }
  if (L.acc_len > kMaxAccValues)
    throw CapacityError(what + ": " + std::to_string(L.acc_len) +
                        " output values per channel, above the species-factored form's " +
                        std::to_string(kMaxAccValues));
  L.threads = 32;
  while (L.threads < L.mul) L.threads *= 2;
  if (L.threads > 1024) throw CapacityError(what + ": multiplicity above 1024");
  if (p.dim_in2() > 32)
    throw CapacityError(what + ": " + std::to_string(p.dim_in2()) +
                        " edge-attribute values, above the species-factored form's 32");
  L.k_per = (hidden + 31) / 32;
  while (L.j_pad < p.dim_in2()) L.j_pad *= 2;
  L.parts = 32 / L.j_pad;
  L.k_seg = (hidden + L.parts - 1) / L.parts;
  if (L.k_per * p.dim_in2() > kMaxZValues || L.k_seg > kMaxSegValues)
    throw CapacityError(what + ": " + std::to_string(hidden) + " hidden x " +
                        std::to_string(p.dim_in2()) +
                        " attribute values per slot, above what a warp keeps in registers");
  return L;
}

// The per-path device functions the template declares; t_offset: each path's T values per slot
// before it.
std::string path_functions(const TpProblem& p, const Layout& L,
                           const std::vector<long long>& t_offset) {
  std::ostringstream o;
  auto lit = [](double c) { return "real(" + double_literal(c) + ")"; };
  o << "SC_INLINE long long sc_z_row(int j, long long s, long long S) {\n";
  for (const TpBlock& b : p.in2())
    o << "  if (j < " << b.offset + b.dim() << ") return S * " << b.offset << "LL * kHidden + (s * "
      << b.dim() << " + (j - " << b.offset << ")) * kHidden;\n";
  o << "  return 0;\n}\n\n";
  auto t_row = [&](std::size_t n) {
    const TpPath& path = p.paths()[n];
    const int mul = p.in1()[std::size_t(path.in1)].mul, db = p.in2()[std::size_t(path.in2)].dim();
    std::ostringstream r;
    r << "t + S * " << t_offset[n] << "LL + s * " << db * mul << " + u";
    return r.str();
  };
  o << "__device__ void sc_out_paths(int u, const real* x, const real* t, long long s, long long "
       "S,\n                             real (&acc)[kAccLen]) {\n";
  for (std::size_t n = 0; n < p.paths().size(); ++n) {
    const TpPath& path = p.paths()[n];
    const TpBlock &b1 = p.in1()[std::size_t(path.in1)], &b2 = p.in2()[std::size_t(path.in2)];
    const int a0 = L.acc_offset[std::size_t(path.out)];
    o << "  // " << path.description << "\n  if (u < " << b1.mul << ") {\n"
      << "    const real* tp = " << t_row(n) << ";\n    real g[" << b2.dim() << "];\n"
      << "#pragma unroll\n    for (int j = 0; j < " << b2.dim() << "; ++j) g[j] = tp[j * " << b1.mul
      << "];\n    const real* xu = x + " << b1.offset << " + u * " << b1.dim() << ";\n";
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
  o << "}\n\n__device__ void sc_dt_paths(int u, const real* x, const real* g, real* t, long long "
       "s,\n                            long long S) {\n";
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
    o << "    real* tp = " << t_row(n) << ";\n#pragma unroll\n    for (int j = 0; j < " << b2.dim()
      << "; ++j) tp[j * " << b1.mul << "] = d[j];\n  }\n";
  }
  o << "}\n";
  return o.str();
}

std::string module_source(const TpProblem& p, const Layout& L, int hidden,
                          const std::vector<long long>& t_offset) {
  std::ostringstream o;
  o << "// Clebsch species-factored convolution of " << p.str() << ", hidden " << hidden << "\n"
    << templates::k_species_conv_args << "\ntypedef "
    << (p.dtype() == DType::kFloat64 ? "double" : "float") << " real;\n"
    << "constexpr int kHidden = " << hidden << ", kDim1 = " << p.dim_in1()
    << ", kDim2 = " << p.dim_in2() << ", kDimOut = " << p.dim_out() << ";\n"
    << "constexpr int kThreads = " << L.threads << ", kMaxMul = " << L.mul
    << ", kAccLen = " << L.acc_len << ", kKPer = " << L.k_per << ", kJPad = " << L.j_pad
    << ", kParts = " << L.parts << ", kKSeg = " << L.k_seg << ", kWarps = " << kWarps
    << ", kScanThreads = " << kScanThreads << ";\n"
    << templates::k_species_conv << "\n"
    << path_functions(p, L, t_offset);
  return o.str();
}

}  // namespace

SpeciesConv::SpeciesConv(DeviceBackend& backend, const TensorProduct& tp, DType dtype, int hidden)
    : backend_(backend), dtype_(dtype) {
  const std::string what = "species-factored convolution of " + tp.str();
  if (hidden < 1) throw CapacityError(what + ": no hidden rows");
  const TpProblem p = TpProblem::from_tensor_product(tp, dtype, Accumulation::kDeterministic);
  if (p.paths().empty()) throw CapacityError(what + ": no path");
  const Layout L = layout_of(p, hidden, what);
  std::vector<long long> t_offset;
  for (const TpPath& path : p.paths()) {
    const TpBlock &b1 = p.in1()[std::size_t(path.in1)], &b2 = p.in2()[std::size_t(path.in2)];
    t_offset.push_back(t_per_slot_);
    paths_.push_back({path.weight_offset, b1.mul, b2.offset, b2.dim(), t_per_slot_});
    t_per_slot_ += static_cast<long long>(b1.mul) * b2.dim();
  }
  for (const TpBlock& blk : p.in2()) in2_blocks_.emplace_back(blk.offset, blk.dim());
  threads_ = unsigned(L.threads);
  hidden_ = hidden, dim_in2_ = p.dim_in2(), dim_out_ = p.dim_out(), value_bytes_ = size_of(dtype);
  num_weights_ = p.weight_numel();
  // CLEBSCH_SPECIES_SPLIT=0|1 (A/B runs): the backward's edge stage as one kernel or two.
  if (const char* env = std::getenv("CLEBSCH_SPECIES_SPLIT"))
    split_edges_ = std::strcmp(env, "0") != 0;
  source_ = module_source(p, L, hidden, t_offset);
  const std::string name = "clebsch_species_conv_" + p.hash_hex() + "_h" + std::to_string(hidden);
  std::vector<KernelSpec> kernels;
  // Shuffles or block barriers (the emulator runs these as fibers), then plain kernels.
  for (const char* k : {"count", "scan", "label", "z", "edges", "edges_h", "edges_y"})
    kernels.push_back({std::string("clebsch_species_conv_") + k, "SpeciesConvArgs", true, 0});
  for (const char* k : {"out", "dt"})
    kernels.push_back({std::string("clebsch_species_conv_") + k, "SpeciesConvArgs", false, 0});
  module_ = backend_.load({name + ".cu", source_, kernels});
  status_ = static_cast<unsigned*>(backend_.allocate(sizeof(unsigned)));
  backend_.memset(status_, 0, sizeof(unsigned), nullptr);
  slot_ptr_.bind(backend_), slot_species_.bind(backend_), present_.bind(backend_);
  rows_.bind(backend_);
  slot_ptr_.name("species conv: slot offsets", BufferScale::kAtom);
  slot_species_.name("species conv: slot species", BufferScale::kAtom);
  present_.name("species conv: species present", BufferScale::kFixed);
  rows_.name("species conv: Z and T rows per slot", BufferScale::kAtom);
}

SpeciesConv::~SpeciesConv() { backend_.free(status_); }

void SpeciesConv::run(const GenericKernels& gk, Stream stream, Pass pass, const ConvBuffers& b,
                      const void* table, const int* species, int num_species) {
  const bool forward = pass == Pass::kForward;
  if (!forward && pass != Pass::kBackward)
    throw CapacityError("species-factored convolution: forward and backward only");
  if (b.num_receivers == 0) return;
  const bool edges = b.num_edges > 0;
  if (!table || !species || !b.receiver_ptr || (edges && (!b.h || !b.w4 || !b.y || !b.sender)) ||
      (forward ? !b.out : (!b.grad_out || (edges && (!b.grad_h || !b.grad_y)))))
    throw CapacityError("species-factored convolution: a buffer is missing");
  if (b.grad_x) throw CapacityError("species-factored convolution: no dE/dx (x is a table)");
  const long long R = b.num_receivers, E = b.num_edges;
  SpeciesConvArgs a{};
  a.table = table, a.species = species, a.h = b.h, a.y = b.y, a.g = b.grad_out;
  a.out = b.out, a.grad_h = b.grad_h, a.grad_y = b.grad_y, a.sender = b.sender;
  a.ptr = b.receiver_ptr, a.order = b.receiver_order, a.status = status_;
  a.num_edges = E, a.num_senders = b.num_senders, a.num_receivers = R;
  a.num_species = num_species, a.accumulate_grad_y = b.accumulate_grad_y ? 1 : 0;
  slot_ptr_.resize(std::size_t(R) + 1);
  a.slot_ptr = slot_ptr_.data();

  auto launch = [&](const char* kernel, unsigned grid, unsigned threads, double bytes, double flops,
                    unsigned shared = 0) {
    LaunchDims d;
    d.grid_x = grid, d.threads = threads, d.shared_bytes = shared;
    if (backend_.kernel_timing()) backend_.set_timing_floor(bytes, flops);
    backend_.launch(module_->kernel(std::string("clebsch_species_conv_") + kernel), d, stream, a);
  };
  const unsigned warp_grid = unsigned((R + kWarps - 1) / kWarps), warp_threads = 32 * kWarps;
  const double vb = value_bytes_, idx = double(sizeof(int));
  // The slots: per receiver its number of species, then their offsets; the number of slots
  // (which sizes the GEMMs) and the species among all senders come back in one download, the
  // one synchronisation. The rows are sized for every receiver having every species present
  // (at least the slots; it grows with the atoms for a given composition, as the ledger says).
  const std::size_t words = std::size_t(num_species + 31) / 32;
  present_.resize(words + 1);
  a.present = present_.data();
  backend_.memset(present_.data(), 0, words * sizeof(unsigned), stream);
  launch("count", warp_grid, warp_threads, idx * (3.0 * E + R), 0);
  launch("scan", 1, kScanThreads, idx * 2.0 * R, 0, kScanThreads * sizeof(int));
  std::vector<unsigned> mask(words + 1);
  backend_.download(mask.data(), present_.data(), mask.size() * sizeof(unsigned), stream);
  const long long S = mask[words];
  long long in_system = 0;
  for (std::size_t w = 0; w < words; ++w) in_system += __builtin_popcount(mask[w]);
  const long long capacity = std::max<long long>(R * in_system, S);
  const long long z_values = S * dim_in2_ * hidden_, t_values = S * t_per_slot_;
  slot_species_.resize(std::size_t(std::max<long long>(capacity, 1)));
  rows_.resize(std::size_t((capacity * (dim_in2_ * hidden_ + t_per_slot_) * value_bytes_ + 7) / 8));
  a.slot_species = slot_species_.data(), a.num_slots = S;
  unsigned char* base = reinterpret_cast<unsigned char*>(rows_.data());
  a.z = base, a.t = base + z_values * value_bytes_;

  // W4's columns of path n: B(k, u) = W4[k][w_col + u] (forward) or its transpose.
  auto w4_at = [&](const PathGemm& q) {
    return static_cast<const unsigned char*>(b.w4) + std::size_t(q.w_col) * value_bytes_;
  };
  auto z_at = [&](const PathGemm& q) {
    return base + std::size_t(S * q.in2_offset * hidden_) * value_bytes_;
  };
  auto t_at = [&](const PathGemm& q) {
    return base + std::size_t(z_values + S * q.t_offset) * value_bytes_;
  };
  const double row_bytes = vb * E * (hidden_ + dim_in2_);
  if (forward) {
    launch("z", warp_grid, warp_threads, row_bytes + vb * z_values, 2.0 * E * hidden_ * dim_in2_);
    if (S > 0)
      for (const PathGemm& q : paths_) {
        // T_p = Z_b W4[:, cols of p]: (S dim_b) x mul on hidden.
        GemmArgs g{};
        g.a = z_at(q), g.b = w4_at(q), g.c = t_at(q);
        g.m = S * q.in2_dim, g.n = q.mul, g.k = hidden_, g.batch = 1;
        g.lda = hidden_, g.a_col = 1, g.ldb = num_weights_, g.b_col = 1, g.ldc = q.mul, g.c_col = 1;
        g.alpha = 1, g.beta = 0;
        gk.gemm(dtype_, g, stream);
      }
    launch("out", unsigned(R), threads_, vb * (t_values + R * dim_out_), 0);
  } else {
    launch("label", warp_grid, warp_threads, idx * (3.0 * E + R + S), 0);
    launch("dt", unsigned(R), threads_, vb * (t_values + R * dim_out_), 0);
    std::vector<bool> started(std::size_t(dim_in2_), false);
    if (S > 0)
      for (const PathGemm& q : paths_) {
        // dZ_b (+)= dT_p W4[:, cols of p]^T: (S dim_b) x hidden on mul.
        GemmArgs g{};
        g.a = t_at(q), g.b = w4_at(q), g.c = z_at(q);
        g.m = S * q.in2_dim, g.n = hidden_, g.k = q.mul, g.batch = 1;
        g.lda = q.mul, g.a_col = 1, g.ldb = 1, g.b_col = num_weights_, g.ldc = hidden_, g.c_col = 1;
        g.alpha = 1, g.beta = started[std::size_t(q.in2_offset)] ? 1 : 0;
        started[std::size_t(q.in2_offset)] = true;
        gk.gemm(dtype_, g, stream);
      }
    // An attribute block no path reads gets no dZ rows from the GEMMs: zeros.
    for (const auto& [offset, dim] : in2_blocks_)
      if (S > 0 && !started[std::size_t(offset)])
        backend_.memset(base + std::size_t(S * offset * hidden_) * value_bytes_, 0,
                        std::size_t(S * dim * hidden_) * value_bytes_, stream);
    if (split_edges_) {
      // Two passes over the edges, each lane keeping half the dZ values (more warps resident).
      launch("edges_h", warp_grid, warp_threads, vb * E * (hidden_ + dim_in2_) + vb * z_values,
             2.0 * E * hidden_ * dim_in2_);
      launch("edges_y", warp_grid, warp_threads, vb * E * (hidden_ + dim_in2_) + vb * z_values,
             2.0 * E * hidden_ * dim_in2_);
    } else {
      launch("edges", warp_grid, warp_threads, 2 * row_bytes + vb * z_values,
             4.0 * E * hidden_ * dim_in2_);
    }
  }
}

unsigned SpeciesConv::take_status(Stream stream) {
  unsigned v = 0;
  backend_.download(&v, status_, sizeof v, stream);
  backend_.memset(status_, 0, sizeof v, stream);
  return v;
}

}  // namespace clebsch::cuda
