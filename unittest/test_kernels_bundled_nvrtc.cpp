// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Every device module the bundled models (potentials/bundled/cuau-{mace,nequip}.safetensors)
// need, generated and compiled by NVRTC for sm_90, without a GPU: the MACE engine's own module in
// each precision, and every interaction's convolution in float32 and float64, atomic and
// deterministic (NequIP's too, whichever engine runs them). A generator or template change that
// NVRTC rejects fails here, in CI. Compiled binaries go to the usual on-disk cache (keyed by the
// source), so only changed sources are recompiled.
#include <gtest/gtest.h>

#include <algorithm>

#include "clebsch/cuda/device/nvrtc_module.h"
#include "clebsch/cuda/engine/mace_cuda_source.h"
#include "clebsch/cuda/generator/emit_conv.h"
#include "clebsch/cuda/generator/tp_schedule.h"
#include "clebsch/model/model_reader.h"

namespace clebsch::cuda {
namespace {

CompileOptions sm90() {
  CompileOptions o;
  o.arch = "sm_90";
  return o;
}

void compile_convs(const TensorProduct& tp, const std::string& where) {
  for (DType dt : {DType::kFloat32, DType::kFloat64})
    for (Accumulation acc : {Accumulation::kAtomic, Accumulation::kDeterministic}) {
      SCOPED_TRACE(where + " " + to_string(dt) + " " + to_string(acc));
      const TpProblem problem = TpProblem::from_tensor_product(tp, dt, acc);
      const Schedule s = schedule(problem, DeviceLimits::h200());
      const Cubin c = compile_cubin(emit_conv_module(problem, s), "conv.cu", sm90());
      EXPECT_GT(c.image.size(), 1000u);
    }
}

TEST(BundledModels, MaceModulesCompileForSm90) {
  const model::Model m = read_model(std::string(CLEBSCH_BUNDLED_DIR) + "/cuau-mace.safetensors");
  ASSERT_TRUE(m.mace);
  for (Precision p : {Precision::kFloat64, Precision::kFloat32, Precision::kMixed}) {
    SCOPED_TRACE(to_string(p));
    const Cubin c = compile_cubin(mace_kernels_source(m, p), "clebsch_mace.cu", sm90());
    EXPECT_GT(c.image.size(), 1000u);
  }
  for (std::size_t t = 0; t < m.mace->interactions.size(); ++t)
    compile_convs(m.mace->interactions[t].conv_tp.descriptor, "mace layer " + std::to_string(t));
}

TEST(BundledModels, NequipConvolutionsCompileForSm90) {
  const model::Model m = read_model(std::string(CLEBSCH_BUNDLED_DIR) + "/cuau-nequip.safetensors");
  ASSERT_TRUE(m.nequip);
  for (std::size_t t = 0; t < m.nequip->layers.size(); ++t)
    compile_convs(m.nequip->layers[t].tp.descriptor, "nequip layer " + std::to_string(t));
}

}  // namespace
}  // namespace clebsch::cuda
