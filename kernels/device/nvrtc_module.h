// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Stage 4 of the kernel generator: the compiled module. compile_cubin() turns generated source
// into a CUBIN for one GPU architecture with NVRTC (no GPU or driver needed, so CI compiles
// every generated kernel); binaries are cached on disk under a key hashed from the source, the
// options, the architecture and the NVRTC version, so a second start pays nothing. NvrtcModule
// is the RAII owner of the loaded CUmodule and its function handles. Every failure throws
// CudaError; a compilation failure carries the full NVRTC log.
#pragma once

#include <cuda.h>

#include <map>
#include <string>
#include <vector>

namespace clebsch::cuda {

/// How to compile.
struct CompileOptions {
  /// Target architecture, "sm_90" on an H200.
  std::string arch = "sm_90";
  /// Extra NVRTC options (part of the cache key).
  std::vector<std::string> extra;
  /// Ask ptxas for its resource report (registers, spills); it lands in Cubin::log.
  bool verbose = false;
  /// Threads NVRTC may use for one module (--split-compile: the optimiser and ptxas work on
  /// the module's kernels in parallel); 0: every hardware thread. Not part of the cache key:
  /// it changes how long a compilation takes, not what the kernels compute.
  int threads = 0;
  /// Cache directory; empty: default_cache_dir(). "off" disables the cache.
  std::string cache_dir;
};

/// A compiled binary.
struct Cubin {
  std::vector<char> image;
  /// The NVRTC log of the compilation (empty when loaded from the cache).
  std::string log;
  bool from_cache = false;
  /// 32 hex digits: hash(source, options, arch, NVRTC version).
  std::string key;
  /// Wall time of the compilation or cache read.
  double seconds = 0;
};

/// $CLEBSCH_KERNEL_CACHE if set, else $XDG_CACHE_HOME/clebsch/kernels, else
/// ~/.cache/clebsch/kernels.
std::string default_cache_dir();
/// NVRTC's version, "13.0".
std::string nvrtc_version();
/// The architectures this NVRTC can emit CUBIN for ("sm_75", ..., "sm_90", ...).
std::vector<std::string> nvrtc_architectures();

/// Compiles @p source (named @p name in messages) to a CUBIN, or reads it from the cache.
/// A cache that cannot be written is skipped silently (the compilation still succeeds).
/// @throws CudaError with the full NVRTC log when compilation fails, or naming the
/// architecture when NVRTC cannot target it.
Cubin compile_cubin(const std::string& source, const std::string& name,
                    const CompileOptions& options = {});

/// Whether compile_cubin(@p source, ..., @p options) would be answered from the cache.
bool is_cached(const std::string& source, const CompileOptions& options = {});

/// A CUBIN loaded into the current context with the handles of its kernels. Move-only; unloads
/// the module on destruction.
class NvrtcModule {
 public:
  /// Loads @p cubin and resolves @p kernels (extern "C" names). Needs a current context
  /// (ensure_context()). @throws CudaError.
  NvrtcModule(Cubin cubin, const std::vector<std::string>& kernels);
  ~NvrtcModule();
  NvrtcModule(NvrtcModule&& o) noexcept;
  NvrtcModule& operator=(NvrtcModule&& o) noexcept;
  NvrtcModule(const NvrtcModule&) = delete;
  NvrtcModule& operator=(const NvrtcModule&) = delete;

  /// @throws CudaError naming a kernel that was not resolved.
  CUfunction function(const std::string& name) const;
  const Cubin& cubin() const { return cubin_; }

 private:
  Cubin cubin_;
  CUmodule module_ = nullptr;
  std::map<std::string, CUfunction> functions_;
};

}  // namespace clebsch::cuda
