// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The CUDA backend of device_backend.h: driver API through cuda_driver.h (resolved at run time),
// NVRTC modules through nvrtc_module.h (compiled for the device's architecture, cached on disk).
// Kernel timing: record i of the log is bracketed by events 2i and 2i+1 of a pool that grows to
// the largest number of records between two takes and is then reused, so a warm profiled step
// creates no events; the elapsed times are read when the records are taken.
#include <algorithm>
#include <cstdlib>
#include <map>

#include "clebsch/cuda/device/cuda_driver.h"
#include "clebsch/cuda/device/device_backend.h"
#include "clebsch/cuda/device/nvrtc_module.h"
#include "clebsch/support/error.h"

namespace clebsch::cuda {
namespace {

class CudaModule final : public DeviceModule {
 public:
  CudaModule(Cubin cubin, const std::vector<KernelSpec>& specs)
      : module_(std::move(cubin), names(specs)) {
    for (const KernelSpec& s : specs) {
      DeviceKernel k;
      k.handle = module_.function(s.name);
      k.warp_synchronous = s.warp_synchronous;
      k.name = s.name;
      if (s.max_shared_bytes > 48 * 1024)
        CLEBSCH_CU_CHECK(FuncSetAttribute(static_cast<CUfunction>(k.handle),
                                          CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          int(s.max_shared_bytes)));
      kernels_[s.name] = k;
    }
  }
  const DeviceKernel& kernel(const std::string& name) const override {
    auto it = kernels_.find(name);
    if (it == kernels_.end()) throw CudaError("kernel " + name + " is not in this module");
    return it->second;
  }

 private:
  static std::vector<std::string> names(const std::vector<KernelSpec>& specs) {
    std::vector<std::string> n;
    for (const KernelSpec& s : specs) n.push_back(s.name);
    return n;
  }
  NvrtcModule module_;
  std::map<std::string, DeviceKernel> kernels_;
};

CUstream cu(Stream s) { return static_cast<CUstream>(s); }
CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

class CudaBackend final : public DeviceBackend {
 public:
  explicit CudaBackend(int ordinal) {
    const DriverApi* d = nullptr;
    try {
      d = &driver();
    } catch (const CudaError& e) {
      throw CudaError(std::string(e.what()) +
                      ". The GPU engine needs an NVIDIA driver (libcuda.so.1) and a CUDA device; "
                      "on a machine without one use the host engine (pair_style clebsch device "
                      "cpu)");
    }
    int count = 0;
    check(d->DeviceGetCount(&count), "cuDeviceGetCount");
    if (count <= 0)
      throw CudaError("no CUDA device found (the driver reports 0 devices); use device cpu");
    if (ordinal == -1) ordinal = device_for_local_rank(count);
    if (ordinal < 0 || ordinal >= count)
      throw CudaError("CUDA device " + std::to_string(ordinal) + " requested, the driver reports " +
                      std::to_string(count) + " device(s) (0.." + std::to_string(count - 1) + ")");
    CUdevice dev;
    check(d->DeviceGet(&dev, ordinal), "cuDeviceGet");
    CUcontext ctx = nullptr;
    check(d->DevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(d->CtxSetCurrent(ctx), "cuCtxSetCurrent");
    ctx_ = ctx;
    auto attr = [&](CUdevice_attribute a) {
      int v = 0;
      check(d->DeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute");
      return v;
    };
    limits_.sm_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    limits_.sm_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    limits_.num_sms = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    limits_.max_shared_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    limits_.max_shared_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    limits_.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    {
      std::size_t free_bytes = 0, total_bytes = 0;
      check(d->MemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo");
      limits_.memory_bytes = total_bytes;
    }
    char buf[256] = {0};
    check(d->DeviceGetName(buf, sizeof buf - 1, dev), "cuDeviceGetName");
    name_ = "cuda:" + std::to_string(ordinal) + " " + buf + " (sm_" +
            std::to_string(limits_.sm_major) + std::to_string(limits_.sm_minor) + ")";
  }

  ~CudaBackend() override {
    // The context may already be gone at exit: errors are ignored.
    for (CUevent e : events_) driver().EventDestroy(e);
  }

  std::string name() const override { return name_; }
  bool emulated() const override { return false; }
  BackendLimits limits() const override { return limits_; }

  void* allocate(std::size_t bytes) override {
    current();
    if (bytes == 0) return nullptr;
    CUdeviceptr p = 0;
    const CUresult r = driver().MemAlloc(&p, bytes);
    if (r != CUDA_SUCCESS) check(r, ("cuMemAlloc(" + std::to_string(bytes) + " bytes)").c_str());
    void* out = reinterpret_cast<void*>(p);
    sizes_.track(out, bytes);
    return out;
  }
  void free(void* ptr) noexcept override {
    if (!ptr) return;
    sizes_.untrack(ptr);
    driver().MemFree(dptr(ptr));
  }
  std::size_t allocated_bytes() const override { return sizes_.bytes(); }
  AllocationLedger& ledger() override { return sizes_; }
  const AllocationLedger& ledger() const override { return sizes_; }
  void upload(void* dst, const void* src, std::size_t bytes, Stream s) override {
    if (!bytes) return;
    auto work = [&] { CLEBSCH_CU_CHECK(MemcpyHtoDAsync(dptr(dst), src, bytes, cu(s))); };
    timing_ ? timed("copy H2D", {}, bytes, s, work) : work();
  }
  void download(void* dst, const void* src, std::size_t bytes, Stream s) override {
    if (bytes) {
      auto work = [&] { CLEBSCH_CU_CHECK(MemcpyDtoHAsync(dst, dptr(src), bytes, cu(s))); };
      timing_ ? timed("copy D2H", {}, bytes, s, work) : work();
    }
    CLEBSCH_CU_CHECK(StreamSynchronize(cu(s)));
  }
  void copy(void* dst, const void* src, std::size_t bytes, Stream s) override {
    if (!bytes) return;
    auto work = [&] { CLEBSCH_CU_CHECK(MemcpyDtoDAsync(dptr(dst), dptr(src), bytes, cu(s))); };
    timing_ ? timed("copy D2D", {}, bytes, s, work) : work();
  }
  void memset(void* dst, int byte, std::size_t bytes, Stream s) override {
    if (!bytes) return;
    auto work = [&] {
      CLEBSCH_CU_CHECK(MemsetD8Async(dptr(dst), static_cast<unsigned char>(byte), bytes, cu(s)));
    };
    timing_ ? timed("memset", {}, bytes, s, work) : work();
  }
  void synchronize(Stream s) override { CLEBSCH_CU_CHECK(StreamSynchronize(cu(s))); }

  std::unique_ptr<DeviceModule> load(const ModuleSource& m) override {
    current();
    CompileOptions o;
    o.arch = "sm_" + std::to_string(limits_.sm_major) + std::to_string(limits_.sm_minor);
    return std::make_unique<CudaModule>(compile_cubin(m.source, m.name, o), m.kernels);
  }
  void launch(const DeviceKernel& k, const LaunchDims& d, Stream s, const void* args,
              std::size_t) override {
    if (d.grid_x == 0 || d.grid_y == 0 || d.grid_z == 0) return;
    void* params[] = {const_cast<void*>(args)};
    auto work = [&] {
      CLEBSCH_CU_CHECK(LaunchKernel(static_cast<CUfunction>(k.handle), d.grid_x, d.grid_y, d.grid_z,
                                    d.threads, 1, 1, d.shared_bytes, cu(s), params, nullptr));
    };
    if (!timing_) return work();
    timed(k.name, {d.grid_x, d.grid_y, d.grid_z, d.threads, d.shared_bytes}, 0, s, work);
  }

  void set_kernel_timing(bool on) override {
    if (on && !timing_) log_.clear();
    timing_ = on;
    timing_detail_.clear();
    timing_floor_ = {};
  }
  std::vector<KernelTiming> take_kernel_timings() override {
    current();
    return log_.take([&](std::size_t i) {
      CUevent start = events_[2 * i], end = events_[2 * i + 1];
      CLEBSCH_CU_CHECK(EventSynchronize(end));
      float ms = 0;
      CLEBSCH_CU_CHECK(EventElapsedTime(&ms, start, end));
      return double(ms) * 1e-3;
    });
  }
  void end_timing_phase(const std::string& label) override {
    if (timing_) log_.end_phase(label);
  }
  std::size_t begin_timed_region(std::string_view name, Stream s) override {
    const std::size_t i = open_record(name, {0, 0, 0, 0, 0}, 0);
    CLEBSCH_CU_CHECK(EventRecord(events_[2 * i], cu(s)));
    return i;
  }
  void end_timed_region(std::size_t mark, Stream s) override {
    if (mark >= log_.size() || log_.closed(mark)) return;
    CLEBSCH_CU_CHECK(EventRecord(events_[2 * mark + 1], cu(s)));
    log_.close(mark);
  }

 private:
  // A record (taking set_timing_detail's detail) and its two events (the pool grown when short).
  std::size_t open_record(std::string_view name, const unsigned (&dims)[5], std::size_t bytes) {
    const std::size_t i = log_.add(name, timing_detail_, dims, bytes, timing_floor_);
    timing_detail_.clear();
    timing_floor_ = {};
    if (events_.size() < 2 * (i + 1)) {
      current();
      // Doubling: a first profiled step grows the pool O(log n) times, later ones never.
      const std::size_t want = std::max({std::size_t(64), 2 * events_.size(), 2 * (i + 1)});
      while (events_.size() < want) {
        CUevent e = nullptr;
        CLEBSCH_CU_CHECK(EventCreate(&e, CU_EVENT_DEFAULT));
        events_.push_back(e);
      }
    }
    return i;
  }
  // Runs @p work between the events of a new record; a record whose work throws stays open and
  // is not taken.
  template <class F>
  void timed(std::string_view name, const unsigned (&dims)[5], std::size_t bytes, Stream s,
             F&& work) {
    const std::size_t i = open_record(name, dims, bytes);
    CLEBSCH_CU_CHECK(EventRecord(events_[2 * i], cu(s)));
    work();
    CLEBSCH_CU_CHECK(EventRecord(events_[2 * i + 1], cu(s)));
    log_.close(i);
  }
  KernelTimingLog log_;
  std::vector<CUevent> events_;
  AllocationLedger sizes_;  // allocated_bytes(), ledger()
  // Callers may have switched contexts (another library on this thread): make ours current.
  void current() {
    CUcontext c = nullptr;
    CLEBSCH_CU_CHECK(CtxGetCurrent(&c));
    if (c != ctx_) CLEBSCH_CU_CHECK(CtxSetCurrent(ctx_));
  }
  CUcontext ctx_ = nullptr;
  BackendLimits limits_;
  std::string name_;
};

}  // namespace

int device_for_local_rank(int device_count) {
  if (device_count <= 0) return 0;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                           "MPI_LOCALRANKID", "SLURM_LOCALID", "PMI_LOCAL_RANK"})
    if (const char* v = std::getenv(name); v && *v) {
      char* end = nullptr;
      const long rank = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && rank >= 0) return static_cast<int>(rank % device_count);
    }
  return 0;
}

std::unique_ptr<DeviceBackend> make_cuda_backend(int ordinal) {
  return std::make_unique<CudaBackend>(ordinal);
}

}  // namespace clebsch::cuda
