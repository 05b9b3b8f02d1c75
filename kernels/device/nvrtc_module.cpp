// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// NVRTC compilation with the on-disk cache, and the CUmodule owner (see nvrtc_module.h).
#include "clebsch/cuda/device/nvrtc_module.h"

#include <nvrtc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "clebsch/cuda/device/content_hash.h"
#include "clebsch/cuda/device/cuda_driver.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda {
namespace {

void nvrtc_check(nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS) throw CudaError(std::string(what) + " failed: " + nvrtcGetErrorString(r));
}

// RAII owner of an NVRTC program.
class Program {
 public:
  Program(const std::string& source, const std::string& name) {
    nvrtc_check(nvrtcCreateProgram(&prog_, source.c_str(), name.c_str(), 0, nullptr, nullptr),
                "nvrtcCreateProgram");
  }
  ~Program() { nvrtcDestroyProgram(&prog_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return prog_; }
  std::string log() const {
    std::size_t size = 0;
    if (nvrtcGetProgramLogSize(prog_, &size) != NVRTC_SUCCESS || size == 0) return {};
    std::string log(size, '\0');
    nvrtcGetProgramLog(prog_, log.data());
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    return log;
  }

 private:
  nvrtcProgram prog_ = nullptr;
};

// The options that decide the binary (the cache key); the resource report is added on top.
std::vector<std::string> nvrtc_options(const CompileOptions& o) {
  std::vector<std::string> opts = {"--gpu-architecture=" + o.arch, "-std=c++17", "--fmad=true"};
  opts.insert(opts.end(), o.extra.begin(), o.extra.end());
  return opts;
}

std::string cache_key(const std::string& source, const std::vector<std::string>& opts,
                      const std::string& arch) {
  // Two FNV-1a streams with different bases: a 128-bit key, so that a collision between two
  // generated modules is not a practical concern.
  std::uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x84222325cbf29ce4ull;
  auto add = [&](const std::string& s) {
    h1 = fnv1a(s.data(), s.size(), h1);
    h2 = fnv1a(s.data(), s.size(), h2);
    const char sep = '\0';
    h1 = fnv1a(&sep, 1, h1);
    h2 = fnv1a(&sep, 1, h2 ^ 0x9e3779b97f4a7c15ull);
  };
  add("clebsch-nvrtc-cache-1");
  add(source);
  for (const std::string& o : opts) add(o);
  add(arch);
  add(nvrtc_version());
  return hex64(h1) + hex64(h2);
}

bool read_file(const std::filesystem::path& path, std::vector<char>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  // A CUBIN is an ELF image: anything else is a truncated or foreign file.
  return out.size() > 4 && out[0] == 0x7f && out[1] == 'E' && out[2] == 'L' && out[3] == 'F';
}

void write_file_atomically(const std::filesystem::path& path, const std::vector<char>& data) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return;
  std::random_device rd;
  const std::filesystem::path tmp =
      path.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rd());
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) return;
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  // rename() is atomic: concurrent processes see either no file or a whole one.
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace

std::string default_cache_dir() {
  if (const char* env = std::getenv("CLEBSCH_KERNEL_CACHE")) return env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/clebsch/kernels";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/clebsch/kernels";
  return "off";
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtc_check(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<std::string> nvrtc_architectures() {
  int n = 0;
  nvrtc_check(nvrtcGetNumSupportedArchs(&n), "nvrtcGetNumSupportedArchs");
  std::vector<int> archs(n);
  nvrtc_check(nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs");
  std::vector<std::string> out;
  for (int a : archs) out.push_back("sm_" + std::to_string(a));
  return out;
}

bool is_cached(const std::string& source, const CompileOptions& options) {
  const std::string dir = options.cache_dir.empty() ? default_cache_dir() : options.cache_dir;
  if (dir == "off" || dir.empty()) return false;
  std::vector<char> image;
  return read_file(std::filesystem::path(dir) /
                       (cache_key(source, nvrtc_options(options), options.arch) + ".cubin"),
                   image);
}

Cubin compile_cubin(const std::string& source, const std::string& name,
                    const CompileOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::string> archs = nvrtc_architectures();
  if (std::find(archs.begin(), archs.end(), options.arch) == archs.end()) {
    std::string list;
    for (const std::string& a : archs) list += (list.empty() ? "" : ", ") + a;
    throw CudaError("NVRTC " + nvrtc_version() + " cannot compile for " + options.arch +
                    "; it supports " + list);
  }
  const std::vector<std::string> opts = nvrtc_options(options);
  Cubin out;
  out.key = cache_key(source, opts, options.arch);
  const std::string dir = options.cache_dir.empty() ? default_cache_dir() : options.cache_dir;
  const bool cached = dir != "off" && !dir.empty();
  const std::filesystem::path path = std::filesystem::path(dir) / (out.key + ".cubin");
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  if (cached && read_file(path, out.image)) {
    out.from_cache = true;
    out.seconds = seconds();
    return out;
  }

  Program prog(source, name);
  std::vector<const char*> argv;
  for (const std::string& o : opts) argv.push_back(o.c_str());
  if (options.verbose) argv.push_back("--ptxas-options=-v");
  // A high-l module is hundreds of kernels (one per output block and pass): split compilation
  // spreads them over the threads (high-l-5 on two cores: 86 -> 58 s).
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const std::string split =
      "--split-compile=" + std::to_string(options.threads > 0 ? unsigned(options.threads) : hw);
  argv.push_back(split.c_str());
  const nvrtcResult r = nvrtcCompileProgram(prog.get(), int(argv.size()), argv.data());
  out.log = prog.log();
  if (r != NVRTC_SUCCESS) {
    std::string all;
    for (const std::string& o : opts) all += " " + o;
    throw CudaError("NVRTC failed to compile " + name + " for " + options.arch + " (" +
                    nvrtcGetErrorString(r) + ", options:" + all + "):\n" + out.log);
  }
  std::size_t size = 0;
  nvrtc_check(nvrtcGetCUBINSize(prog.get(), &size), "nvrtcGetCUBINSize");
  out.image.resize(size);
  nvrtc_check(nvrtcGetCUBIN(prog.get(), out.image.data()), "nvrtcGetCUBIN");
  if (cached) write_file_atomically(path, out.image);
  out.seconds = seconds();
  return out;
}

NvrtcModule::NvrtcModule(Cubin cubin, const std::vector<std::string>& kernels)
    : cubin_(std::move(cubin)) {
  CLEBSCH_CU_CHECK(ModuleLoadData(&module_, cubin_.image.data()));
  try {
    for (const std::string& k : kernels) {
      CUfunction f = nullptr;
      check(driver().ModuleGetFunction(&f, module_, k.c_str()),
            ("cuModuleGetFunction(" + k + ")").c_str());
      functions_[k] = f;
    }
  } catch (...) {
    driver().ModuleUnload(module_);
    throw;
  }
}

NvrtcModule::~NvrtcModule() {
  // Unloading can fail only when the context is already gone (process teardown): nothing to do.
  if (module_) driver().ModuleUnload(module_);
}

NvrtcModule::NvrtcModule(NvrtcModule&& o) noexcept
    : cubin_(std::move(o.cubin_)), module_(o.module_), functions_(std::move(o.functions_)) {
  o.module_ = nullptr;
}

NvrtcModule& NvrtcModule::operator=(NvrtcModule&& o) noexcept {
  if (this != &o) {
    if (module_) driver().ModuleUnload(module_);
    cubin_ = std::move(o.cubin_);
    module_ = o.module_;
    functions_ = std::move(o.functions_);
    o.module_ = nullptr;
  }
  return *this;
}

CUfunction NvrtcModule::function(const std::string& name) const {
  auto it = functions_.find(name);
  if (it == functions_.end()) throw CudaError("kernel " + name + " is not in this module");
  return it->second;
}

}  // namespace clebsch::cuda
