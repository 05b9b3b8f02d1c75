// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The CUDA engine factory (cuda_engine.h): dispatch on the model's architecture, and the C entry
// point the LAMMPS plugin resolves with dlsym.
#include "clebsch/cuda/engine/cuda_engine.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "clebsch/cuda/engine/mace_cuda_engine.h"
#include "clebsch/cuda/engine/nequip_cuda_engine.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda {

std::unique_ptr<CudaEngine> make_cuda_engine(const model::Model& model, Precision precision,
                                             const CudaEngineOptions& options) {
  switch (model.arch) {
    case model::Arch::kMace:
      return make_mace_cuda_engine(model, precision, options);
    case model::Arch::kNequip:
      return make_nequip_cuda_engine(model, precision, options);
  }
  throw Error("make_cuda_engine: unknown model architecture");
}

void HostGraphIndices::download(DeviceBackend& backend, const DeviceAtomGraph& g, Stream s) {
  species.resize(g.num_nodes), center.resize(g.num_edges), neighbor.resize(g.num_edges);
  backend.download(species.data(), g.species, species.size() * sizeof(int), s);
  backend.download(center.data(), g.center, center.size() * sizeof(int), s);
  backend.download(neighbor.data(), g.neighbor, neighbor.size() * sizeof(int), s);
}

}  // namespace clebsch::cuda

extern "C" void* clebsch_cuda_create_engine_v3(const void* model, int precision, int deterministic,
                                               int device, long long edge_batch,
                                               const char* const* input_names,
                                               const double* input_values, int num_inputs,
                                               char* error, std::size_t error_size) {
  try {
    if (edge_batch < 0) throw clebsch::Error("edge_batch must not be negative");
    if (num_inputs < 0 || (num_inputs > 0 && (!input_names || !input_values)))
      throw clebsch::Error("structure inputs: " + std::to_string(num_inputs) +
                           " given with a null array");
    clebsch::cuda::CudaEngineOptions o;
    for (int k = 0; k < num_inputs; ++k)
      o.structure_inputs.emplace_back(input_names[k], input_values[k]);
    o.deterministic = deterministic != 0;
    o.device = device;
    o.edge_batch = static_cast<std::size_t>(edge_batch);
    // Test hook: CLEBSCH_CUDA_BACKEND=emulated runs the engine on the emulated backend, so that
    // the LAMMPS integration of device gpu is exercised on machines without a GPU.
    if (const char* b = std::getenv("CLEBSCH_CUDA_BACKEND"); b && std::string(b) == "emulated")
      o.backend = clebsch::cuda::make_emulated_backend();
    auto e = clebsch::cuda::make_cuda_engine(*static_cast<const clebsch::model::Model*>(model),
                                             static_cast<clebsch::Precision>(precision), o);
    return static_cast<clebsch::Engine*>(e.release());
  } catch (const std::exception& ex) {
    if (error && error_size) {
      std::strncpy(error, ex.what(), error_size - 1);
      error[error_size - 1] = '\0';
    }
    return nullptr;
  }
}
