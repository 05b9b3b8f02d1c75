// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// load_cuda_engine (see cuda_engine_loader.h).
#include "cuda_engine_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace clebsch {
namespace {

  using Factory = void *(*) (const void *, int, int, int, long long, const char *const *,
                             const double *, int, char *, std::size_t);

  std::string plugin_directory()
  {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void *>(&plugin_directory), &info) && info.dli_fname) {
      const std::string path = info.dli_fname;
      const auto slash = path.find_last_of('/');
      if (slash != std::string::npos) return path.substr(0, slash);
    }
    return ".";
  }

  // Opened once per process and never closed: engines made by it live until the plugin unloads.
  Factory factory()
  {
    static Factory f = nullptr;
    if (f) return f;
    std::vector<std::string> candidates;
    if (const char *env = std::getenv("CLEBSCH_CUDA_LIBRARY"); env && *env) {
      candidates.push_back(env);
    } else {
      const std::string dir = plugin_directory();
      candidates.push_back(dir + "/libclebsch_cuda.so");
      candidates.push_back(dir + "/../kernels/libclebsch_cuda.so");
      candidates.push_back("libclebsch_cuda.so");
    }
    std::string tried;
    for (const std::string &c : candidates) {
      void *h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        const char *why = dlerror();
        tried += "\n  " + c + ": " + (why ? why : "not found");
        continue;
      }
      f = reinterpret_cast<Factory>(dlsym(h, "clebsch_cuda_create_engine_v3"));
      if (!f)
        throw std::runtime_error("device gpu: " + c +
                                 " has no clebsch_cuda_create_engine_v3 (a "
                                 "library of another version? rebuild it with the plugin)");
      return f;
    }
    throw std::runtime_error(
        "device gpu: cannot load the CUDA engine library libclebsch_cuda.so (it needs the CUDA "
        "toolkit's NVRTC library); tried:" +
        tried + "\nSet CLEBSCH_CUDA_LIBRARY to its full path, or use device cpu");
  }

}    // namespace

std::unique_ptr<Engine>
load_cuda_engine(const model::Model &model, Precision precision, bool deterministic, int device,
                 long long edge_batch,
                 const std::vector<std::pair<std::string, double>> &structure_inputs)
{
  char error[2048] = {0};
  std::vector<const char *> names;
  std::vector<double> values;
  for (const auto &[name, value] : structure_inputs) {
    names.push_back(name.c_str());
    values.push_back(value);
  }
  void *e =
      factory()(&model, static_cast<int>(precision), deterministic ? 1 : 0, device, edge_batch,
                names.data(), values.data(), static_cast<int>(names.size()), error, sizeof error);
  if (!e) throw std::runtime_error(std::string("device gpu: ") + error);
  return std::unique_ptr<Engine>(static_cast<Engine *>(e));
}

}    // namespace clebsch
