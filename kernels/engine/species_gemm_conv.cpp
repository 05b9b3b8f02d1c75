// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The species-factored convolution as GEMMs over slots: its source (templates/species_gemm_conv
// .cuh.in plus the per-product functions emitted here), its launches and its GEMMs (see
// species_gemm_conv.h).
#include "clebsch/cuda/engine/species_gemm_conv.h"

#include <algorithm>
#include <sstream>

#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/engine/device_source_tables.h"
#include "clebsch/cuda/generator/tp_problem.h"
#include "clebsch/cuda/templates/species_conv_args.h"
#include "clebsch/support/error.h"
#include "kernel_templates.h"

namespace clebsch::cuda {
namespace {

// Per-thread register arrays: one channel's output values (out), a lane's Z values (z, edges).
constexpr int kMaxAccValues = 64, kMaxLaneValues = 64;
constexpr unsigned kWarpKernelThreads = 128;

int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// The reduce-scatter of a warp's kP partial sums (see the template): each step halves the values
// a lane holds, exchanging the other half with the lane `mask` away, until one is left; the
// remaining steps add whole values. Also emits where a lane's sums end up.
std::string reduce_scatter_functions(int P) {
  std::ostringstream o, j, own;
  o << "SG_INLINE void sg_reduce_scatter(real (&v)[kP], int lane) {\n";
  j << "SG_INLINE int sg_lane_j(int lane) {\n  return 0";
  own << "SG_INLINE bool sg_lane_owns(int lane) {\n  return true";
  int n = P;
  for (int mask = 16; mask >= 1; mask >>= 1) {
    if (n > 1) {
      const int half = n / 2;
      o << "  {\n    const bool up = (lane & " << mask << ") != 0;\n";
      for (int i = 0; i < half; ++i)
        o << "    { const real s = up ? v[" << i << "] : v[" << i + half
          << "]; const real k = up ? v[" << i + half << "] : v[" << i << "]; v[" << i
          << "] = k + __shfl_xor_sync(0xffffffffu, s, " << mask << "); }\n";
      o << "  }\n";
      j << " + ((lane & " << mask << ") ? " << half << " : 0)";
      n = half;
    } else {
      o << "  v[0] += __shfl_xor_sync(0xffffffffu, v[0], " << mask << ");\n";
      own << " && (lane & " << mask << ") == 0";
    }
  }
  o << "}\n";
  j << ";\n}\n";
  own << ";\n}\n";
  return o.str() + j.str() + own.str();
}

std::string double_lit(double c) { return "real(" + double_literal(c) + ")"; }

}  // namespace

SpeciesGemmConv::SpeciesGemmConv(DeviceBackend& backend, const TensorProduct& tp, DType dtype,
                                 int hidden)
    : SpeciesFactoredConv(backend), dtype_(dtype) {
  const std::string what = "species-factored convolution (GEMM form) of " + tp.str();
  if (hidden < 1) throw CapacityError(what + ": no hidden rows");
  const TpProblem p = TpProblem::from_tensor_product(tp, dtype, Accumulation::kDeterministic);
  if (p.paths().empty()) throw CapacityError(what + ": no path");
  hidden_ = hidden, dim_in2_ = p.dim_in2(), dim_out_ = p.dim_out(), value_bytes_ = size_of(dtype);
  num_weights_ = p.weight_numel();
  int max_mul = 0, acc_len = 0;
  std::vector<int> acc_offset;
  for (const TpBlock& b : p.out()) {
    acc_offset.push_back(acc_len);
    acc_len += b.dim();
    max_mul = std::max(max_mul, b.mul);
  }
  for (const TpBlock& b : p.in1()) max_mul = std::max(max_mul, b.mul);
  for (const TpBlock& b : p.in2()) {
    block_offset_.push_back(b.offset);
    block_dim_.push_back(b.dim());
  }
  check_species_paths(p, what);
  block_first_path_.assign(p.in2().size(), -1);
  for (std::size_t n = 0; n < p.paths().size(); ++n) {
    const TpPath& path = p.paths()[n];
    const int mul = p.in1()[std::size_t(path.in1)].mul;
    paths_.push_back(
        {path.in2, block_dim_[std::size_t(path.in2)], mul, path.weight_offset, t_per_slot_});
    t_per_slot_ += static_cast<long long>(block_dim_[std::size_t(path.in2)]) * mul;
    if (block_first_path_[std::size_t(path.in2)] < 0)
      block_first_path_[std::size_t(path.in2)] = int(n);
  }
  const int kh = (hidden + 31) / 32, P = pow2_at_least(dim_in2_);
  if (acc_len > kMaxAccValues)
    throw CapacityError(what + ": " + std::to_string(acc_len) +
                        " output values per channel, above the GEMM form's " +
                        std::to_string(kMaxAccValues));
  if (kh * dim_in2_ > kMaxLaneValues || P > kMaxLaneValues)
    throw CapacityError(what + ": " + std::to_string(hidden) + " hidden x " +
                        std::to_string(dim_in2_) + " attribute values exceed " +
                        std::to_string(kMaxLaneValues) + " per lane");
  if (max_mul > 1024) throw CapacityError(what + ": multiplicity above 1024");
  mul_threads_ = std::max(32, (max_mul + 31) / 32 * 32);

  std::ostringstream o;
  o << "// Clebsch species-factored convolution (GEMM form) of " << p.str() << ", hidden " << hidden
    << "\n"
    << templates::k_species_conv_args << "\ntypedef "
    << (dtype == DType::kFloat64 ? "double" : "float") << " real;\n"
    << "constexpr int kHidden = " << hidden << ", kKH = " << kh << ", kDim1 = " << p.dim_in1()
    << ", kDim2 = " << dim_in2_ << ", kDimOut = " << dim_out_ << ", kP = " << P
    << ", kMaxMul = " << max_mul << ", kAccLen = " << acc_len << ";\n"
    << templates::k_species_gemm_conv << "\n";
  // Z rows: block b's rows after every slot's rows of the blocks before it.
  o << "SG_INLINE long long sg_z_row(int j, long long slot, long long slots) {\n";
  for (std::size_t b = 0; b < p.in2().size(); ++b)
    o << "  if (j < " << block_offset_[b] + block_dim_[b] << ") return slots * " << block_offset_[b]
      << " + slot * " << block_dim_[b] << " + (j - " << block_offset_[b] << ");\n";
  o << "  return 0;\n}\n";
  o << reduce_scatter_functions(P);
  // out: per path, T_p's values of channel u (one per attribute value of its block), contracted
  // with the table row's block and summed into the output block's accumulators.
  o << "__device__ void sg_out_paths(int u, const real* x, const real* t, long long slot,\n"
       "                             long long slots, real (&acc)[kAccLen]) {\n";
  for (std::size_t n = 0; n < p.paths().size(); ++n) {
    const TpPath& path = p.paths()[n];
    const TpBlock& b1 = p.in1()[std::size_t(path.in1)];
    const PathGemm& g = paths_[n];
    const int a0 = acc_offset[std::size_t(path.out)];
    o << "  // " << path.description << "\n  if (u < " << g.mul << ") {\n"
      << "    const real* tp = t + slots * " << g.t_offset << " + slot * " << g.dim * g.mul
      << " + u;\n    const real* xu = x + " << b1.offset << " + u * " << b1.dim() << ";\n";
    for (const CgEntry& c : path.cg)
      o << "    acc[" << a0 + c.k << "] = sg_madd(" << double_lit(c.c) << " * __ldg(xu + " << c.i
        << "), __ldg(tp + " << c.j * g.mul << "), acc[" << a0 + c.k << "]);\n";
    o << "  }\n";
  }
  o << "}\n\n" << species_store_out_function(p, acc_offset, "sg_store_out");
  o << "\n__device__ void sg_dt_paths(int u, const real* x, const real* g, real* t,\n"
       "                            long long slot, long long slots) {\n";
  for (std::size_t n = 0; n < p.paths().size(); ++n) {
    const TpPath& path = p.paths()[n];
    const TpBlock &b1 = p.in1()[std::size_t(path.in1)], &b3 = p.out()[std::size_t(path.out)];
    const PathGemm& pg = paths_[n];
    o << "  // " << path.description << "\n  if (u < " << pg.mul << ") {\n"
      << "    const real* xu = x + " << b1.offset << " + u * " << b1.dim() << ";\n"
      << "    const real* gu = g + " << b3.offset << " + u * " << b3.dim() << ";\n"
      << "    real d[" << pg.dim << "];\n#pragma unroll\n    for (int j = 0; j < " << pg.dim
      << "; ++j) d[j] = real(0);\n";
    for (const CgEntry& c : path.cg)
      o << "    d[" << c.j << "] = sg_madd(" << double_lit(c.c) << " * __ldg(xu + " << c.i
        << "), __ldg(gu + " << c.k << "), d[" << c.j << "]);\n";
    o << "    real* tp = t + slots * " << pg.t_offset << " + slot * " << pg.dim * pg.mul
      << " + u;\n#pragma unroll\n    for (int j = 0; j < " << pg.dim << "; ++j) tp[j * " << pg.mul
      << "] = d[j];\n  }\n";
  }
  o << "}\n";
  source_ = o.str();
  module_ = backend_.load(
      {"clebsch_species_conv_gemm_" + p.hash_hex() + "_h" + std::to_string(hidden) + ".cu",
       source_,
       {{"clebsch_species_conv_gemm_mark", "SpeciesGemmArgs", false, 0},
        {"clebsch_species_conv_gemm_rank", "SpeciesGemmArgs", false, 0},
        {"clebsch_species_conv_gemm_z", "SpeciesGemmArgs", false, 0},
        {"clebsch_species_conv_gemm_out", "SpeciesGemmArgs", false, 0},
        {"clebsch_species_conv_gemm_dt", "SpeciesGemmArgs", false, 0},
        {"clebsch_species_conv_gemm_edges", "SpeciesGemmArgs", true, 0}}});
  marks_.bind(backend_), rows_.bind(backend_), slot_edges_.bind(backend_);
}

void SpeciesGemmConv::name_scratch(const std::string& prefix) {
  marks_.name(prefix + " species present", BufferScale::kFixed);
  // Sized by the receivers times the species present: they grow with the atoms.
  rows_.name(prefix + " Z and T rows per (receiver, species)", BufferScale::kAtom);
  slot_edges_.name(prefix + " edges per (receiver, species)", BufferScale::kAtom);
}

void SpeciesGemmConv::prepare_species(Stream stream, const int* species, long long num_senders,
                                      int num_species) {
  if (num_species > species_capacity_) {
    marks_.resize(3 * std::size_t(num_species) + 1);
    backend_.memset(marks_.data(), 0, marks_.bytes(), stream);  // the marks start cleared
    species_capacity_ = num_species;
  }
  SpeciesGemmArgs a{};
  a.species = species, a.num_senders = num_senders, a.num_species = num_species;
  // Strided by the capacity, so that the marks outside this call's species stay cleared.
  a.present = marks_.data(), a.rank = a.present + species_capacity_;
  a.slot_species = a.rank + species_capacity_, a.num_present = a.slot_species + species_capacity_;
  LaunchDims d;
  d.threads = 256;
  d.grid_x = unsigned(std::min<long long>((num_senders + 255) / 256, 1024));
  if (num_senders > 0)
    backend_.launch(module_->kernel("clebsch_species_conv_gemm_mark"), d, stream, a);
  d.threads = 1, d.grid_x = 1;
  backend_.launch(module_->kernel("clebsch_species_conv_gemm_rank"), d, stream, a);
  int count = 0;
  backend_.download(&count, a.num_present, sizeof count, stream);
  present_ = count;
}

// T_p = Z_b W4[:, p's columns]: (slots x dim_b) x hidden times hidden x mul_p, per path.
void SpeciesGemmConv::gemm_forward(const GenericKernels& gk, const unsigned char* z,
                                   unsigned char* t, long long slots, const void* w4,
                                   Stream stream) const {
  const std::size_t v = std::size_t(value_bytes_), S = std::size_t(slots);
  for (const PathGemm& p : paths_) {
    GemmArgs g{};
    g.m = slots * p.dim, g.n = p.mul, g.k = hidden_, g.batch = 1;
    g.a = z + S * std::size_t(block_offset_[std::size_t(p.block)]) * std::size_t(hidden_) * v;
    g.lda = hidden_, g.a_col = 1;
    g.b = static_cast<const unsigned char*>(w4) + std::size_t(p.weight_offset) * v;
    g.ldb = num_weights_, g.b_col = 1;
    g.c = t + S * std::size_t(p.t_offset) * v;
    g.ldc = p.mul, g.c_col = 1, g.alpha = 1.0, g.beta = 0.0;
    gk.gemm(dtype_, g, stream);
  }
}

// dZ_b = sum over the paths reading b of dT_p W4[:, p's columns]^T; a block no path reads gets
// zeros (its dE/dY is then zero).
void SpeciesGemmConv::gemm_backward(const GenericKernels& gk, const unsigned char* t,
                                    unsigned char* z, long long slots, const void* w4,
                                    Stream stream) const {
  const std::size_t v = std::size_t(value_bytes_), S = std::size_t(slots);
  auto rows_of = [&](std::size_t b) {
    return z + S * std::size_t(block_offset_[b]) * std::size_t(hidden_) * v;
  };
  for (std::size_t b = 0; b < block_dim_.size(); ++b)
    if (block_first_path_[b] < 0)
      backend_.memset(rows_of(b), 0, S * std::size_t(block_dim_[b]) * std::size_t(hidden_) * v,
                      stream);
  for (std::size_t n = 0; n < paths_.size(); ++n) {
    const PathGemm& p = paths_[n];
    GemmArgs g{};
    g.m = slots * p.dim, g.n = hidden_, g.k = p.mul, g.batch = 1;
    g.a = t + S * std::size_t(p.t_offset) * v;
    g.lda = p.mul, g.a_col = 1;
    // B(u, k) = W4[k][weight_offset + u].
    g.b = static_cast<const unsigned char*>(w4) + std::size_t(p.weight_offset) * v;
    g.ldb = 1, g.b_col = num_weights_;
    g.c = rows_of(std::size_t(p.block));
    g.ldc = hidden_, g.c_col = 1, g.alpha = 1.0;
    g.beta = block_first_path_[std::size_t(p.block)] == int(n) ? 0.0 : 1.0;
    gk.gemm(dtype_, g, stream);
  }
}

void SpeciesGemmConv::run(const GenericKernels& gk, Stream stream, Pass pass, const ConvBuffers& b,
                          const void* table, const int* species, int num_species) {
  if (!check_run(pass, b, table, species)) return;
  const bool forward = pass == Pass::kForward;
  if (forward)
    prepare_species(stream, species, b.num_senders, num_species);
  else if (num_species > species_capacity_)
    throw CapacityError("species-factored convolution: a backward before its forward");
  const long long slots = b.num_receivers * present_;
  const std::size_t v = std::size_t(value_bytes_), S = std::size_t(slots);
  const std::size_t z_bytes =
      (S * std::size_t(dim_in2_) * std::size_t(hidden_) * v + 255) / 256 * 256;
  rows_.resize(z_bytes + S * std::size_t(t_per_slot_) * v);
  slot_edges_.resize(std::max<std::size_t>(S, 1));
  unsigned char* z = rows_.data();
  unsigned char* t = z + z_bytes;

  SpeciesGemmArgs a{};
  a.table = table, a.species = species, a.h = b.h, a.y = b.y, a.g = b.grad_out;
  a.out = b.out, a.grad_h = b.grad_h, a.grad_y = b.grad_y, a.sender = b.sender;
  a.ptr = b.receiver_ptr, a.order = b.receiver_order, a.z = z, a.t = t;
  a.slot_edges = slot_edges_.data(), a.rank = marks_.data() + species_capacity_;
  a.slot_species = a.rank + species_capacity_, a.status = status_;
  a.num_edges = b.num_edges, a.num_senders = b.num_senders, a.num_receivers = b.num_receivers;
  a.num_species = num_species, a.slots_per_receiver = present_;
  a.accumulate_grad_y = b.accumulate_grad_y ? 1 : 0;
  const double E = double(b.num_edges), R = double(b.num_receivers), Sd = double(slots);
  const double row = double(hidden_ + dim_in2_), zrow = double(hidden_) * dim_in2_;
  auto set_floor = [&](double bytes, double flops = 0) {
    if (backend_.kernel_timing()) backend_.set_timing_floor(bytes, flops);
  };
  LaunchDims warps;  // one warp a slot
  warps.threads = kWarpKernelThreads;
  warps.grid_x = unsigned((S * 32 + kWarpKernelThreads - 1) / kWarpKernelThreads);
  LaunchDims blocks;  // one block a receiver, one thread a channel
  blocks.threads = unsigned(mul_threads_);
  blocks.grid_x = unsigned(b.num_receivers);
  if (forward) {
    if (slots > 0) {
      set_floor(v * (E * row + Sd * zrow), 2.0 * E * zrow);
      backend_.launch(module_->kernel("clebsch_species_conv_gemm_z"), warps, stream, a);
      gemm_forward(gk, z, t, slots, b.w4, stream);
    }
    set_floor(v * (Sd * double(t_per_slot_) + R * dim_out_));
    backend_.launch(module_->kernel("clebsch_species_conv_gemm_out"), blocks, stream, a);
    return;
  }
  if (slots == 0) return;
  set_floor(v * (Sd * double(t_per_slot_) + R * dim_out_));
  backend_.launch(module_->kernel("clebsch_species_conv_gemm_dt"), blocks, stream, a);
  gemm_backward(gk, t, z, slots, b.w4, stream);
  set_floor(v * (2.0 * E * row + Sd * zrow), 4.0 * E * zrow);
  backend_.launch(module_->kernel("clebsch_species_conv_gemm_edges"), warps, stream, a);
}

}  // namespace clebsch::cuda
