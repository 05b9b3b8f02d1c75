// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Tests of kernels/nvrtc_module and kernels/cuda_driver that need no GPU: every generated
// module of MACE-like and NequIP-like shapes compiles to an sm_90 CUBIN (this is what catches a
// broken generator in CI), the on-disk cache is keyed and reused, failures carry the NVRTC log,
// and a machine without a driver gets a clear CudaError instead of a load failure.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "clebsch/cuda/device/cuda_driver.h"
#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/cuda/device/nvrtc_module.h"
#include "clebsch/cuda/generator/conv_shapes.h"
#include "clebsch/cuda/generator/emit_conv.h"
#include "clebsch/support/error.h"
#include "kernels/kernel_test_util.h"

namespace clebsch::cuda {
namespace {

namespace fs = std::filesystem;

// A fresh cache directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("clebsch-kernel-cache-test-" + std::to_string(::getpid()) +
                                         "-" + std::to_string(counter_++));
    fs::remove_all(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
  static inline int counter_ = 0;
};

bool is_elf(const std::vector<char>& image) {
  return image.size() > 4 && image[0] == 0x7f && image[1] == 'E' && image[2] == 'L' &&
         image[3] == 'F';
}

CompileOptions no_cache() {
  CompileOptions o;
  o.arch = "sm_90";
  o.cache_dir = "off";
  return o;
}

struct Case {
  std::string shape;
  DType dtype;
  Accumulation acc;
  /// Every instruction in the matrix form with every float64 group on the tensor cores (the
  /// forward's and the sender passes' MMAs), which the default schedules of these small shapes
  /// never choose.
  bool tensor_cores = false;
};

ScheduleOptions options_of(const Case& c) {
  ScheduleOptions o;
  if (c.tensor_cores) {
    o.loop_cg_above = 0;
    o.mma_float64 = TensorCoreUse::kAlways;
    o.mma_backward = TensorCoreUse::kAlways;
    o.mma_double_backward = o.mma_double_forward = TensorCoreUse::kAlways;
  }
  return o;
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.shape << " " << to_string(c.dtype) << " " << to_string(c.acc);
}

class CompilesToSm90 : public ::testing::TestWithParam<Case> {};

TEST_P(CompilesToSm90, GeneratedModule) {
  const Case c = GetParam();
  TensorProduct tp = test::test_shapes()[0].tp;
  bool found = false;
  for (const auto& s : test::test_shapes())
    if (s.name == c.shape) tp = s.tp, found = true;
  if (!found) {
    const ConvShape s = benchmark_shape(c.shape);
    tp = conv_tensor_product(s.node_irreps, s.edge_irreps, s.target);
  }
  const TpProblem p = TpProblem::from_tensor_product(tp, c.dtype, c.acc);
  const Schedule sch = schedule(p, DeviceLimits::h200(), options_of(c));
  const std::string src = emit_conv_module(p, sch);
  if (c.tensor_cores) {
    EXPECT_NE(src.find("mma_f64(acc["), std::string::npos);
    EXPECT_NE(src.find("mma_pairs<"), std::string::npos);
    EXPECT_NE(src.find("mma_pairs_double<"), std::string::npos);
    EXPECT_NE(src.find("mma_f64(acc[", src.find("// ==== double_forward")), std::string::npos);
  }
  CompileOptions o = no_cache();
  o.verbose = true;
  const Cubin cubin = compile_cubin(src, c.shape + ".cu", o);
  EXPECT_TRUE(is_elf(cubin.image));
  EXPECT_FALSE(cubin.from_cache);
  for (const PassSchedule& ps : sch.passes)
    for (std::size_t g = 0; g < ps.groups.size(); ++g)
      EXPECT_NE(cubin.log.find("Compiling entry function '" + kernel_name(ps.pass, int(g)) + "'"),
                std::string::npos)
          << kernel_name(ps.pass, int(g));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CompilesToSm90,
    ::testing::Values(Case{"mace-medium", DType::kFloat32, Accumulation::kAtomic},
                      Case{"mace-medium", DType::kFloat64, Accumulation::kDeterministic},
                      Case{"nequip-water", DType::kFloat32, Accumulation::kDeterministic},
                      Case{"nequip-water", DType::kFloat64, Accumulation::kAtomic},
                      Case{"MaceLarge", DType::kFloat64, Accumulation::kAtomic},
                      Case{"NequipLike", DType::kFloat32, Accumulation::kAtomic},
                      Case{"NonUniform", DType::kFloat64, Accumulation::kDeterministic},
                      Case{"HighL8", DType::kFloat32, Accumulation::kDeterministic},
                      Case{"WeightlessMul2", DType::kFloat64, Accumulation::kAtomic},
                      Case{"WeightlessMul2", DType::kFloat32, Accumulation::kDeterministic},
                      Case{"NonUniform", DType::kFloat64, Accumulation::kDeterministic, true}),
    [](const auto& info) {
      std::string n = info.param.shape + (info.param.dtype == DType::kFloat32 ? "_f32" : "_f64") +
                      (info.param.acc == Accumulation::kAtomic ? "_atomic" : "_det") +
                      (info.param.tensor_cores ? "_tensor_cores" : "");
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

const char* kTinyKernel =
    "extern \"C\" __global__ void tiny(float* p) { p[threadIdx.x] = 1.0f; }\n";

TEST(NvrtcModule, CachesByKeyAndReusesTheBinary) {
  TempDir dir;
  CompileOptions o;
  o.cache_dir = dir.str();
  const Cubin first = compile_cubin(kTinyKernel, "tiny.cu", o);
  EXPECT_FALSE(first.from_cache);
  EXPECT_EQ(first.key.size(), 32u);
  EXPECT_TRUE(fs::exists(fs::path(dir.str()) / (first.key + ".cubin")));
  const Cubin second = compile_cubin(kTinyKernel, "tiny.cu", o);
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(second.image, first.image);
  // Another option or source is another key.
  CompileOptions o2 = o;
  o2.extra = {"-DSOMETHING=1"};
  const Cubin third = compile_cubin(kTinyKernel, "tiny.cu", o2);
  EXPECT_FALSE(third.from_cache);
  EXPECT_NE(third.key, first.key);
  const Cubin fourth = compile_cubin(std::string(kTinyKernel) + "\n", "tiny.cu", o);
  EXPECT_NE(fourth.key, first.key);
  // The resource report does not change the binary, so it does not change the key.
  CompileOptions ov = o;
  ov.verbose = true;
  EXPECT_EQ(compile_cubin(kTinyKernel, "tiny.cu", ov).key, first.key);
}

TEST(NvrtcModule, RecompilesOverACorruptCacheEntry) {
  TempDir dir;
  CompileOptions o;
  o.cache_dir = dir.str();
  const Cubin first = compile_cubin(kTinyKernel, "tiny.cu", o);
  std::ofstream(fs::path(dir.str()) / (first.key + ".cubin"), std::ios::binary) << "garbage";
  const Cubin again = compile_cubin(kTinyKernel, "tiny.cu", o);
  EXPECT_FALSE(again.from_cache);
  EXPECT_EQ(again.image, first.image);
}

TEST(NvrtcModule, DefaultCacheDirFollowsTheEnvironment) {
  const char* old = std::getenv("CLEBSCH_KERNEL_CACHE");
  const std::string saved = old ? old : "";
  setenv("CLEBSCH_KERNEL_CACHE", "/tmp/some-cache", 1);
  EXPECT_EQ(default_cache_dir(), "/tmp/some-cache");
  unsetenv("CLEBSCH_KERNEL_CACHE");
  if (std::getenv("XDG_CACHE_HOME") == nullptr && std::getenv("HOME"))
    EXPECT_EQ(default_cache_dir(), std::string(std::getenv("HOME")) + "/.cache/clebsch/kernels");
  if (old) setenv("CLEBSCH_KERNEL_CACHE", saved.c_str(), 1);
}

// CLEBSCH_PRECOMPILE_ARCH: a module the emulated backend loads is also in the kernel cache, under
// the key the CUDA backend (options: the architecture alone) will look for; without it, not.
TEST(NvrtcModule, EmulatedBackendPrecompilesForTheNamedArchitecture) {
  TempDir dir;
  const char* old = std::getenv("CLEBSCH_KERNEL_CACHE");
  const std::string saved = old ? old : "";
  setenv("CLEBSCH_KERNEL_CACHE", dir.str().c_str(), 1);
  const std::string source =
      "struct TinyArgs { float* p; };\n"
      "extern \"C\" __global__ void tiny_pre(TinyArgs a) { a.p[threadIdx.x] = 2.0f; }\n";
  CompileOptions o;
  o.arch = "sm_90";
  {
    auto be = make_emulated_backend();
    be->load({"tiny_pre.cu", source, {{"tiny_pre", "TinyArgs", false, 0}}});
    EXPECT_FALSE(is_cached(source, o));
    setenv("CLEBSCH_PRECOMPILE_ARCH", "sm_90", 1);
    be->load({"tiny_pre.cu", source, {{"tiny_pre", "TinyArgs", false, 0}}});
    unsetenv("CLEBSCH_PRECOMPILE_ARCH");
    EXPECT_TRUE(is_cached(source, o));
  }
  if (old)
    setenv("CLEBSCH_KERNEL_CACHE", saved.c_str(), 1);
  else
    unsetenv("CLEBSCH_KERNEL_CACHE");
}

TEST(NvrtcModule, CompilationFailureCarriesTheFullLog) {
  try {
    compile_cubin("extern \"C\" __global__ void broken() { undeclared_identifier = 1; }\n",
                  "broken.cu", no_cache());
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("broken.cu"), std::string::npos) << what;
    EXPECT_NE(what.find("undeclared_identifier"), std::string::npos) << what;
    EXPECT_NE(what.find("sm_90"), std::string::npos) << what;
  }
}

TEST(NvrtcModule, UnsupportedArchitectureIsNamed) {
  CompileOptions o = no_cache();
  o.arch = "sm_1";
  try {
    compile_cubin(kTinyKernel, "tiny.cu", o);
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("sm_1;"), std::string::npos) << e.what();
  }
  const auto archs = nvrtc_architectures();
  EXPECT_NE(std::find(archs.begin(), archs.end(), "sm_90"), archs.end());
}

TEST(CudaDriver, MissingDriverIsAClearCudaError) {
  if (device_available()) GTEST_SKIP() << "a CUDA device is present";
  try {
    driver();
    // A driver without a device (cuInit fails) is the other clean outcome.
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("no CUDA driver found") != std::string::npos ||
                what.find("cuInit failed") != std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace clebsch::cuda
