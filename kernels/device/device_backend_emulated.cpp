// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The emulated backend of device_backend.h: a module's source, prefixed with the emulation shim
// and followed by one launch trampoline per kernel, is compiled by the host compiler into a
// shared object (kept in a cache directory under a hash of everything that went into it, so a
// test process compiles each module once per source) and loaded with dlopen. Memory is host
// memory (malloc), filled with 0xff bytes when allocated (a NaN in float and double, -1 in the
// integer types), so that a kernel or an engine that reads what nothing wrote gives NaNs in the
// tests instead of the zeros a fresh page happens to hold (device memory is not cleared either);
// copies are memcpy; launches run to completion before returning. Kernel timing is wall-clock
// time around each call, which is its whole run here.
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "clebsch/cuda/device/content_hash.h"
#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/cuda/device/nvrtc_module.h"
#include "clebsch/support/error.h"
#include "kernel_templates.h"

namespace clebsch::cuda {
namespace {

namespace fs = std::filesystem;

// Must match struct ClebschLaunch of the shim.
struct EmuLaunch {
  unsigned grid_x, grid_y, grid_z, threads, shared_bytes;
};
using Trampoline = void (*)(const void*, const EmuLaunch*);

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The device declaration of dynamic shared memory becomes the shim's thread-local pointer.
std::string strip_shared_declaration(std::string src) {
  const std::string decl = "extern __shared__ __align__(16) unsigned char clebsch_smem[];";
  for (auto at = src.find(decl); at != std::string::npos; at = src.find(decl))
    src.replace(at, decl.size(), "");
  return src;
}

class EmulatedModule final : public DeviceModule {
 public:
  EmulatedModule(void* handle, const std::vector<KernelSpec>& specs) : handle_(handle) {
    for (const KernelSpec& s : specs) {
      void* f = dlsym(handle_, ("clebsch_emu_" + s.name).c_str());
      if (!f) {
        dlclose(handle_);
        throw CudaError("emulated module lacks kernel " + s.name);
      }
      kernels_[s.name] = DeviceKernel{f, s.warp_synchronous, s.name};
    }
  }
  ~EmulatedModule() override {
    if (handle_) dlclose(handle_);
  }
  const DeviceKernel& kernel(const std::string& name) const override {
    auto it = kernels_.find(name);
    if (it == kernels_.end()) throw CudaError("kernel " + name + " is not in this module");
    return it->second;
  }

 private:
  void* handle_;
  std::map<std::string, DeviceKernel> kernels_;
};

class EmulatedBackend final : public DeviceBackend {
 public:
  explicit EmulatedBackend(EmulationOptions o) : o_(std::move(o)) {
    if (o_.cxx.empty()) {
      const char* env = std::getenv("CLEBSCH_EMULATION_CXX");
      o_.cxx = env && *env ? env : "c++";
    }
    if (o_.cache_dir.empty()) {
      const char* env = std::getenv("CLEBSCH_EMULATION_CACHE");
      o_.cache_dir =
          env && *env
              ? std::string(env)
              : (fs::temp_directory_path() / ("clebsch-emulated-" + std::to_string(::getuid())))
                    .string();
    }
  }
  std::string name() const override { return "emulated"; }
  // `<cxx> --version` (once per backend): the compiler behind the command name.
  const std::string& compiler_identity() {
    if (compiler_identity_.empty()) {
      compiler_identity_ = "?";
      if (FILE* p = ::popen((o_.cxx + " --version 2>/dev/null").c_str(), "r")) {
        char buf[256];
        std::string out;
        while (std::fgets(buf, sizeof buf, p)) out += buf;
        ::pclose(p);
        if (!out.empty()) compiler_identity_ = out;
      }
    }
    return compiler_identity_;
  }
  bool emulated() const override { return true; }
  // The emulated backend reports an H100/H200's limits (BackendLimits' defaults), so the modules
  // it builds have the sources a CUDA backend on one of those builds.
  BackendLimits limits() const override { return {}; }
  // CLEBSCH_PRECOMPILE_ARCH=sm_90: every module loaded here is also compiled with NVRTC for that
  // architecture into the kernel cache (compile_cubin, the CUDA backend's options), so that an
  // emulated run on a machine without a GPU (an engine on a small structure, a test suite)
  // leaves a cache that a later run on the GPU reads instead of compiling there.
  static void precompile(const ModuleSource& m) {
    const char* arch = std::getenv("CLEBSCH_PRECOMPILE_ARCH");
    if (!arch || !*arch) return;
    CompileOptions o;
    o.arch = arch;
    compile_cubin(m.source, m.name, o);
  }

  void* allocate(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) throw CudaError("emulated allocation of " + std::to_string(bytes) + " bytes failed");
    std::memset(p, 0xff, bytes);
    sizes_.track(p, bytes);
    return p;
  }
  void free(void* ptr) noexcept override {
    if (!ptr) return;
    sizes_.untrack(ptr);
    std::free(ptr);
  }
  std::size_t allocated_bytes() const override { return sizes_.bytes(); }
  AllocationLedger& ledger() override { return sizes_; }
  const AllocationLedger& ledger() const override { return sizes_; }
  void upload(void* dst, const void* src, std::size_t n, Stream) override {
    if (!n) return;
    if (timing_) return timed("copy H2D", {}, n, [&] { std::memcpy(dst, src, n); });
    std::memcpy(dst, src, n);
  }
  void download(void* dst, const void* src, std::size_t n, Stream) override {
    if (!n) return;
    if (timing_) return timed("copy D2H", {}, n, [&] { std::memcpy(dst, src, n); });
    std::memcpy(dst, src, n);
  }
  void copy(void* dst, const void* src, std::size_t n, Stream) override {
    if (!n) return;
    if (timing_) return timed("copy D2D", {}, n, [&] { std::memmove(dst, src, n); });
    std::memmove(dst, src, n);
  }
  void memset(void* dst, int byte, std::size_t n, Stream) override {
    if (!n) return;
    if (timing_) return timed("memset", {}, n, [&] { std::memset(dst, byte, n); });
    std::memset(dst, byte, n);
  }
  void synchronize(Stream) override {}

  std::unique_ptr<DeviceModule> load(const ModuleSource& m) override {
    precompile(m);
    std::string text = std::string(templates::k_emulation_shim) +
                       strip_shared_declaration(m.source) + "\n// ---- emulation trampolines\n";
    for (const KernelSpec& k : m.kernels)
      text += "extern \"C\" void clebsch_emu_" + k.name +
              "(const void* args, const ClebschLaunch* l) {\n  const " + k.args_type +
              " a = *static_cast<const " + k.args_type + "*>(args);\n  " +
              (k.warp_synchronous ? "clebsch_run_warps" : "clebsch_run_sequential") +
              "(*l, [&] { " + k.name + "(a); });\n}\n";
    const std::string cmd_base = o_.cxx + " -std=c++20 " + o_.optimize +
                                 " -w -shared -fPIC -pthread -fno-fast-math -ffp-contract=off" +
                                 (o_.reverse_thread_order ? " -DCLEBSCH_EMULATION_REVERSE=1" : "");
    // The compiler's identity is part of the key: one cache directory may be shared by
    // processes whose "c++" differ (the Kokkos tests run LAMMPS in a chroot with a newer
    // toolchain), and a module built against a newer libstdc++ does not load under an older one.
    const std::string tool = cmd_base + "\n" + compiler_identity();
    const std::string key = hex64(fnv1a(text.data(), text.size(), 0xcbf29ce484222325ull)) +
                            hex64(fnv1a(tool.data(), tool.size(), 0x84222325cbf29ce4ull));
    const fs::path dir(o_.cache_dir);
    std::error_code ec;
    fs::create_directories(dir, ec);
    const fs::path so = dir / (key + ".so");
    if (!fs::exists(so)) {
      std::random_device rd;
      const std::string tag = std::to_string(::getpid()) + "." + std::to_string(rd());
      const fs::path cpp = dir / (key + "." + tag + ".cpp");
      const fs::path tmp = dir / (key + "." + tag + ".so");
      const fs::path log = dir / (key + "." + tag + ".log");
      std::ofstream(cpp) << text;
      const std::string cmd =
          cmd_base + " -o " + tmp.string() + " " + cpp.string() + " > " + log.string() + " 2>&1";
      const int rc = std::system(cmd.c_str());
      if (rc != 0) {
        const std::string out = read_text(log);
        fs::remove(cpp, ec);
        fs::remove(log, ec);
        throw CudaError("emulated backend: host compilation of " + m.name + " failed (" + cmd +
                        "):\n" + out.substr(0, 8000));
      }
      fs::rename(tmp, so, ec);  // atomic: concurrent builders see a whole file or none
      fs::remove(cpp, ec);
      fs::remove(log, ec);
    }
    void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) throw CudaError(std::string("emulated backend: dlopen: ") + dlerror());
    return std::make_unique<EmulatedModule>(h, m.kernels);
  }

  void launch(const DeviceKernel& k, const LaunchDims& d, Stream, const void* args,
              std::size_t) override {
    if (d.grid_x == 0 || d.grid_y == 0 || d.grid_z == 0) return;
    const EmuLaunch l{d.grid_x, d.grid_y, d.grid_z, d.threads, d.shared_bytes};
    if (timing_)
      return timed(k.name, {d.grid_x, d.grid_y, d.grid_z, d.threads, d.shared_bytes}, 0,
                   [&] { reinterpret_cast<Trampoline>(k.handle)(args, &l); });
    reinterpret_cast<Trampoline>(k.handle)(args, &l);
  }

  void set_kernel_timing(bool on) override {
    if (on && !timing_) log_.clear();
    timing_ = on;
    timing_detail_.clear();
    timing_floor_ = {};
  }
  std::vector<KernelTiming> take_kernel_timings() override { return log_.take(); }
  void end_timing_phase(const std::string& label) override {
    if (timing_) log_.end_phase(label);
  }
  std::size_t begin_timed_region(std::string_view name, Stream) override {
    const std::size_t i = log_.add(name, timing_detail_, {0, 0, 0, 0, 0}, 0, timing_floor_);
    timing_detail_.clear();
    timing_floor_ = {};
    log_.start(i) = now_seconds();
    return i;
  }
  void end_timed_region(std::size_t mark, Stream) override {
    if (mark < log_.size() && !log_.closed(mark))
      log_.close(mark, now_seconds() - log_.start(mark));
  }

 private:
  // Runs @p work as one record (dropped, open, if it throws).
  template <class F>
  void timed(std::string_view name, const unsigned (&dims)[5], std::size_t bytes, F&& work) {
    const std::size_t i = log_.add(name, timing_detail_, dims, bytes, timing_floor_);
    timing_detail_.clear();
    timing_floor_ = {};
    const double t0 = now_seconds();
    work();
    log_.close(i, now_seconds() - t0);
  }
  KernelTimingLog log_;
  EmulationOptions o_;
  AllocationLedger sizes_;  // allocated_bytes(), ledger()
  std::string compiler_identity_;
};

}  // namespace

std::unique_ptr<DeviceBackend> make_emulated_backend(EmulationOptions options) {
  return std::make_unique<EmulatedBackend>(std::move(options));
}

const char* emulation_shim_source() { return templates::k_emulation_shim; }

}  // namespace clebsch::cuda
