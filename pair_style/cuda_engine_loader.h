// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Loads the CUDA engine on demand for `pair_style clebsch device gpu`: libclebsch_cuda.so is
// opened with dlopen and its extern "C" factory clebsch_cuda_create_engine_v3 resolved, so the
// plugin never links the CUDA engine (or, through it, the CUDA toolkit's libraries) and
// `plugin load` works on machines without a GPU. Where the library is looked for, in order:
// $CLEBSCH_CUDA_LIBRARY (a full path), the plugin's own directory, the build tree's kernels/
// directory beside it, then the dynamic loader's search path. No LAMMPS headers: errors are
// thrown as std::runtime_error with a message a user can act on; the pair style reports them.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "clebsch/engine/engine.h"
#include "clebsch/model/model.h"

namespace clebsch {

/// The CUDA engine of @p model. @throws std::runtime_error naming every path tried and the
/// loader's reason when the library cannot be loaded, or the engine's own reason (no driver, no
/// device, unsupported model). @p edge_batch: CudaEngineOptions::edge_batch (0: automatic).
/// @p structure_inputs: CudaEngineOptions::structure_inputs (the pair style's charge and spin).
std::unique_ptr<Engine>
load_cuda_engine(const model::Model &model, Precision precision, bool deterministic, int device,
                 long long edge_batch,
                 const std::vector<std::pair<std::string, double>> &structure_inputs = {});

}    // namespace clebsch
