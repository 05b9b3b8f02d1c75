// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Which species-factored form the engines build (species_factored_conv.h).
#include "clebsch/cuda/engine/species_factored_conv.h"

#include <cstdlib>
#include <sstream>

#include "clebsch/cuda/engine/species_conv.h"
#include "clebsch/cuda/engine/species_gemm_conv.h"
#include "clebsch/cuda/generator/tp_problem.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda {

SpeciesFactoredConv::SpeciesFactoredConv(DeviceBackend& backend) : backend_(backend) {
  status_ = static_cast<unsigned*>(backend_.allocate(sizeof(unsigned)));
  backend_.memset(status_, 0, sizeof(unsigned), nullptr);
}

SpeciesFactoredConv::~SpeciesFactoredConv() { backend_.free(status_); }

unsigned SpeciesFactoredConv::take_status(Stream stream) {
  unsigned v = 0;
  backend_.download(&v, status_, sizeof v, stream);
  backend_.memset(status_, 0, sizeof v, stream);
  return v;
}

bool SpeciesFactoredConv::check_run(Pass pass, const ConvBuffers& b, const void* table,
                                    const int* species) {
  const bool forward = pass == Pass::kForward;
  if (!forward && pass != Pass::kBackward)
    throw CapacityError("species-factored convolution: forward and backward only");
  if (b.num_receivers == 0) return false;
  const bool edges = b.num_edges > 0;
  if (!table || !species || !b.receiver_ptr || (edges && (!b.h || !b.w4 || !b.y || !b.sender)) ||
      (forward ? !b.out : (!b.grad_out || (edges && (!b.grad_h || !b.grad_y)))))
    throw CapacityError("species-factored convolution: a buffer is missing");
  if (b.grad_x) throw CapacityError("species-factored convolution: no dE/dx (x is a table)");
  return true;
}

void check_species_paths(const TpProblem& p, const std::string& what) {
  for (const TpPath& path : p.paths()) {
    if (!path.has_weight)
      throw CapacityError(what + ": path " + path.description +
                          " has no weights; the species-factored form contracts W4");
    if (p.in2()[std::size_t(path.in2)].mul != 1)
      throw CapacityError(what + ": edge-attribute block of path " + path.description +
                          " has multiplicity above 1");
  }
}

std::string species_store_out_function(const TpProblem& p, const std::vector<int>& acc_offset,
                                       const std::string& name) {
  std::ostringstream o;
  o << "__device__ void " << name << "(real* out, int u, const real (&acc)[kAccLen]) {\n";
  for (std::size_t b = 0; b < p.out().size(); ++b) {
    const TpBlock& bo = p.out()[b];
    o << "  if (u < " << bo.mul << ") {\n";
    for (int k = 0; k < bo.dim(); ++k)
      o << "    out[" << bo.offset << " + u * " << bo.dim() << " + " << k << "] = acc["
        << acc_offset[b] + k << "];\n";
    o << "  }\n";
  }
  o << "}\n";
  return o.str();
}

std::unique_ptr<SpeciesFactoredConv> make_species_factored_conv(DeviceBackend& backend,
                                                                const TensorProduct& tp,
                                                                DType dtype, int hidden) {
  const char* env = std::getenv("CLEBSCH_SPECIES_FORM");
  const std::string form = env ? env : "gemm";
  if (form == "gemm") return std::make_unique<SpeciesGemmConv>(backend, tp, dtype, hidden);
  if (form != "block") throw Error("CLEBSCH_SPECIES_FORM=" + form + ": expected block or gemm");
  return std::make_unique<SpeciesConv>(backend, tp, dtype, hidden);
}

}  // namespace clebsch::cuda
