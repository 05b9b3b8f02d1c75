// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// Kernel timing (kernel_timing.h, DeviceBackend::set_kernel_timing): which records a backend
// makes, in which order, with which names, geometry and labels, and how they aggregate. On the
// emulated backend always (wall-clock times) and on the CUDA backend when a GPU is present
// (event times), so the profile bench_mace_model writes on a GPU is the interface CI checks.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "clebsch/cuda/device/cuda_driver.h"
#include "clebsch/cuda/device/device_array.h"
#include "clebsch/cuda/device/generic_kernels.h"
#include "clebsch/cuda/device/kernel_timing.h"

namespace clebsch::cuda {
namespace {

// Two kernels of a module of the test's own: a = fill, b = add, on a grid-stride loop.
const char* const kSource = R"(
struct TimingArgs { double* x; long long n; double v; };
extern "C" __global__ void timing_a(TimingArgs a) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < a.n;
       i += (long long)gridDim.x * blockDim.x)
    a.x[i] = a.v;
}
extern "C" __global__ void timing_b(TimingArgs a) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < a.n;
       i += (long long)gridDim.x * blockDim.x)
    a.x[i] += a.v;
}
)";
struct TimingArgs {
  double* x;
  long long n;
  double v;
};

class Timing : public ::testing::TestWithParam<std::string> {
 public:
  void SetUp() override {
    if (GetParam() == "cuda" && !device_available()) GTEST_SKIP() << "no CUDA device";
    backend_ = GetParam() == "emulated" ? make_emulated_backend() : make_cuda_backend(0);
    module_ = backend_->load(
        {"timing_test.cu",
         kSource,
         {{"timing_a", "TimingArgs", false, 0}, {"timing_b", "TimingArgs", false, 0}}});
    x_ = std::make_unique<DeviceArray<double>>(*backend_, kN);
  }
  // timing_a(v) with 2 blocks of 64 threads, timing_b(v) with 1 block of 32.
  void a(double v) {
    LaunchDims d;
    d.grid_x = 2, d.threads = 64;
    backend_->launch(module_->kernel("timing_a"), d, nullptr, TimingArgs{x_->data(), kN, v});
  }
  void b(double v) {
    LaunchDims d;
    d.grid_x = 1, d.threads = 32;
    backend_->launch(module_->kernel("timing_b"), d, nullptr, TimingArgs{x_->data(), kN, v});
  }
  static std::vector<std::string> names(const std::vector<KernelTiming>& r) {
    std::vector<std::string> n;
    for (const KernelTiming& t : r) n.push_back(t.name);
    return n;
  }
  static constexpr long long kN = 300;
  std::unique_ptr<DeviceBackend> backend_;
  std::unique_ptr<DeviceModule> module_;
  std::unique_ptr<DeviceArray<double>> x_;
};

TEST_P(Timing, RecordsLaunchesAndCopiesInIssueOrder) {
  DeviceBackend& be = *backend_;
  EXPECT_FALSE(be.kernel_timing());
  be.set_kernel_timing(true);
  EXPECT_TRUE(be.kernel_timing());
  const std::vector<double> host(kN, 0.5);
  DeviceArray<double> y(be, kN);
  a(1.0);
  b(2.0);
  a(3.0);
  b(0.25);
  be.upload(y.data(), host.data(), kN * sizeof(double), nullptr);
  be.copy(x_->data() + 1, y.data(), 8 * sizeof(double), nullptr);
  be.memset(y.data(), 0, 16, nullptr);
  std::vector<double> out(kN);
  be.download(out.data(), x_->data(), kN * sizeof(double), nullptr);
  const std::vector<KernelTiming> r = be.take_kernel_timings();
  // The work ran as it does untimed: x = 3 + 0.25, then 8 values copied from y.
  EXPECT_EQ(out[0], 3.25);
  EXPECT_EQ(out[1], 0.5);
  EXPECT_EQ(out[kN - 1], 3.25);
  const std::vector<std::string> want = {"timing_a", "timing_b", "timing_a", "timing_b",
                                         "copy H2D", "copy D2D", "memset",   "copy D2H"};
  EXPECT_EQ(names(r), want);
  ASSERT_EQ(r.size(), want.size());
  EXPECT_EQ(r[0].grid_x, 2u);
  EXPECT_EQ(r[0].grid_y, 1u);
  EXPECT_EQ(r[0].threads, 64u);
  EXPECT_EQ(r[1].grid_x, 1u);
  EXPECT_EQ(r[1].threads, 32u);
  EXPECT_EQ(r[0].bytes, 0u);
  EXPECT_EQ(r[4].bytes, kN * sizeof(double));
  EXPECT_EQ(r[5].bytes, 8 * sizeof(double));
  EXPECT_EQ(r[6].bytes, 16u);
  EXPECT_EQ(r[4].threads, 0u);
  for (const KernelTiming& t : r) {
    EXPECT_GE(t.seconds, 0.0) << t.name;
    EXPECT_LT(t.seconds, 10.0) << t.name;
    EXPECT_EQ(t.label, "") << t.name;
  }
  // Taking empties the list; timing stays on.
  EXPECT_TRUE(be.take_kernel_timings().empty());
  a(1.0);
  EXPECT_EQ(names(be.take_kernel_timings()), std::vector<std::string>{"timing_a"});
  be.set_kernel_timing(false);
}

TEST_P(Timing, OffRecordsNothingAndOnDiscardsWhatWasNotTaken) {
  DeviceBackend& be = *backend_;
  a(1.0);
  b(1.0);
  be.memset(x_->data(), 0, 8, nullptr);
  EXPECT_TRUE(be.take_kernel_timings().empty());
  be.set_kernel_timing(true);
  a(1.0);
  be.set_kernel_timing(false);  // stops recording, keeps the record
  b(1.0);
  EXPECT_EQ(names(be.take_kernel_timings()), std::vector<std::string>{"timing_a"});
  be.set_kernel_timing(true);
  a(1.0);
  be.set_kernel_timing(true);  // already on: nothing discarded
  b(1.0);
  be.set_kernel_timing(false);
  be.set_kernel_timing(true);  // switched on again: the two untaken records go
  a(2.0);
  EXPECT_EQ(names(be.take_kernel_timings()), std::vector<std::string>{"timing_a"});
  be.set_kernel_timing(false);
}

TEST_P(Timing, PhaseLabelsGoToTheRecordsBeforeThem) {
  DeviceBackend& be = *backend_;
  be.end_timing_phase("while off");  // no-op
  be.set_kernel_timing(true);
  a(1.0);
  b(1.0);
  be.end_timing_phase("first");
  be.end_timing_phase("empty");  // no records: labels nothing
  a(1.0);
  be.end_timing_phase("second");
  b(1.0);
  const std::vector<KernelTiming> r = be.take_kernel_timings();
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].label, "first");
  EXPECT_EQ(r[1].label, "first");
  EXPECT_EQ(r[2].label, "second");
  EXPECT_EQ(r[3].label, "");
  // After a take, the next phase starts at the next record.
  a(1.0);
  be.end_timing_phase("third");
  const std::vector<KernelTiming> r2 = be.take_kernel_timings();
  ASSERT_EQ(r2.size(), 1u);
  EXPECT_EQ(r2[0].label, "third");
  be.set_kernel_timing(false);
}

TEST_P(Timing, RegionsAndGemmsAreRecorded) {
  DeviceBackend& be = *backend_;
  GenericKernels gk(be);
  DeviceArray<double> A(be, 5 * 3), B(be, 3 * 4), C(be, 5 * 4);
  gk.fill(DType::kFloat64, A.data(), 15, 1.0, nullptr);
  gk.fill(DType::kFloat64, B.data(), 12, 2.0, nullptr);
  be.set_kernel_timing(true);
  const std::size_t mark = be.begin_timed_region("my region", nullptr);
  a(1.0);
  be.end_timed_region(mark, nullptr);
  be.begin_timed_region("never ended", nullptr);
  gk.gemm(DType::kFloat64, GenericKernels::dense(A.data(), B.data(), C.data(), 5, 4, 3), nullptr);
  const std::vector<KernelTiming> r = be.take_kernel_timings();
  be.set_kernel_timing(false);
  // The GEMM goes to cuBLAS (a region of its own) where the backend has it, else to the generic
  // kernel (a launch); the region that was never ended is not taken.
  const std::string gemm = gk.uses_cublas() ? "cublas dgemm 5x4x3" : "clebsch_gemm_f64 5x4x3";
  EXPECT_EQ(names(r), (std::vector<std::string>{"my region", "timing_a", gemm}));
  for (const KernelTiming& t : r) EXPECT_GE(t.seconds, 0.0) << t.name;
  ASSERT_EQ(r.size(), 3u);
  // A region spans the work inside it.
  EXPECT_GE(r[0].seconds, r[1].seconds);
  EXPECT_EQ(C.download(), std::vector<double>(20, 6.0));
}

TEST_P(Timing, DetailNamesTheNextRecordOnly) {
  DeviceBackend& be = *backend_;
  be.set_timing_detail("while off");  // ignored
  be.set_kernel_timing(true);
  a(1.0);
  be.set_timing_detail("layer 3");
  b(1.0);
  a(1.0);
  be.set_timing_detail("fill");
  be.memset(x_->data(), 0, 8, nullptr);
  // A batched GEMM with row gathers never goes to cuBLAS: the generic kernel, with its shape.
  GenericKernels gk(be);
  DeviceArray<double> A(be, 4 * 6), B(be, 6 * 2), C(be, 4 * 2);
  DeviceArray<int> rows(be, 4);
  gk.fill(DType::kFloat64, A.data(), 24, 1.0, nullptr);
  gk.fill(DType::kFloat64, B.data(), 12, 1.0, nullptr);
  be.memset(rows.data(), 0, 4 * sizeof(int), nullptr);
  GemmArgs g = GenericKernels::dense(A.data(), B.data(), C.data(), 2, 2, 3);
  g.batch = 2, g.a_batch = 3, g.b_batch = 0, g.c_batch = 4;
  g.a_rows = rows.data();
  gk.gemm(DType::kFloat64, g, nullptr);
  gk.gemm(DType::kFloat64, GenericKernels::dense(A.data(), B.data(), C.data(), 0, 2, 3), nullptr);
  a(1.0);
  const std::vector<KernelTiming> r = be.take_kernel_timings();
  be.set_kernel_timing(false);
  // The empty GEMM (m = 0) launches nothing and leaves no detail behind for the next record.
  EXPECT_EQ(names(r),
            (std::vector<std::string>{"timing_a", "timing_b layer 3", "timing_a", "memset fill",
                                      "clebsch_fill_f64", "clebsch_fill_f64", "memset",
                                      "clebsch_gemm_f64 2x2x3 x2 gather", "timing_a"}));
}

// A floor goes to the next record only, and the generic kernels give theirs: a GEMM's A, B and C
// moved once (C read too with beta != 0) and 2 m n k flops; an axpby's x read, y read and
// written.
TEST_P(Timing, FloorsGoToTheNextRecordAndTheGenericKernelsGiveTheirs) {
  DeviceBackend& be = *backend_;
  GenericKernels gk(be);
  DeviceArray<double> A(be, 5 * 3), B(be, 3 * 4), C(be, 5 * 4);
  be.set_timing_floor(1e9, 1e9);  // while off: ignored
  be.set_kernel_timing(true);
  a(1.0);
  be.set_timing_floor(800, 100);
  b(1.0);
  a(1.0);
  gk.gemm(DType::kFloat64, GenericKernels::dense(A.data(), B.data(), C.data(), 5, 4, 3, 1, 1),
          nullptr);
  gk.axpby(DType::kFloat64, DType::kFloat64,
           GenericKernels::vector(A.data(), C.data(), 15, 2.0, 1.0), nullptr);
  const std::vector<KernelTiming> r = be.take_kernel_timings();
  be.set_kernel_timing(false);
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0].floor.bytes, 0.0);
  EXPECT_EQ(r[1].floor.bytes, 800.0);
  EXPECT_EQ(r[1].floor.flops, 100.0);
  EXPECT_EQ(r[2].floor.bytes, 0.0);
  EXPECT_EQ(r[3].floor.bytes, 8.0 * (5 * 3 + 3 * 4 + 2 * 5 * 4));
  EXPECT_EQ(r[3].floor.flops, 2.0 * 5 * 4 * 3);
  EXPECT_EQ(r[4].floor.bytes, 8.0 * 15 * 3);
  const std::vector<KernelTimingTotal> t = aggregate_kernel_timings(r);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].name, "timing_a");
  EXPECT_EQ(t[0].floor.bytes, 0.0);
  EXPECT_EQ(t[1].floor.flops, 100.0);
}

INSTANTIATE_TEST_SUITE_P(All, Timing, ::testing::Values("emulated", "cuda"),
                         [](const auto& info) { return info.param; });

TEST(KernelTimingAggregation, SumsCallsTimesAndBytesByKeyInOrderOfFirstAppearance) {
  auto rec = [](std::string label, std::string name, double s, std::size_t bytes = 0) {
    KernelTiming t;
    t.label = std::move(label), t.name = std::move(name), t.seconds = s, t.bytes = bytes;
    return t;
  };
  const std::vector<KernelTiming> r = {rec("l0", "b", 1.0),
                                       rec("l0", "a", 2.0),
                                       rec("l1", "b", 4.0),
                                       rec("l0", "b", 8.0),
                                       rec("l1", "copy H2D", 0.5, 100),
                                       rec("", "copy H2D", 0.25, 28)};
  const std::vector<KernelTimingTotal> by_name = aggregate_kernel_timings(r);
  ASSERT_EQ(by_name.size(), 3u);
  EXPECT_EQ(by_name[0].name, "b");
  EXPECT_EQ(by_name[0].label, "");
  EXPECT_EQ(by_name[0].calls, 3);
  EXPECT_DOUBLE_EQ(by_name[0].seconds, 13.0);
  EXPECT_DOUBLE_EQ(by_name[0].mean_seconds(), 13.0 / 3);
  EXPECT_EQ(by_name[1].name, "a");
  EXPECT_EQ(by_name[1].calls, 1);
  EXPECT_DOUBLE_EQ(by_name[1].seconds, 2.0);
  EXPECT_EQ(by_name[2].name, "copy H2D");
  EXPECT_EQ(by_name[2].calls, 2);
  EXPECT_EQ(by_name[2].bytes, 128u);
  EXPECT_DOUBLE_EQ(by_name[2].seconds, 0.75);

  const std::vector<KernelTimingTotal> by_label =
      aggregate_kernel_timings(r, TimingKey::kLabelAndName);
  ASSERT_EQ(by_label.size(), 5u);
  const std::pair<std::string, std::string> keys[] = {
      {"l0", "b"}, {"l0", "a"}, {"l1", "b"}, {"l1", "copy H2D"}, {"", "copy H2D"}};
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(by_label[i].label, keys[i].first) << i;
    EXPECT_EQ(by_label[i].name, keys[i].second) << i;
  }
  EXPECT_EQ(by_label[0].calls, 2);
  EXPECT_DOUBLE_EQ(by_label[0].seconds, 9.0);
  EXPECT_EQ(by_label[2].calls, 1);
  EXPECT_DOUBLE_EQ(by_label[2].seconds, 4.0);
  EXPECT_TRUE(aggregate_kernel_timings({}).empty());
  EXPECT_EQ(KernelTimingTotal{}.mean_seconds(), 0.0);
}

}  // namespace
}  // namespace clebsch::cuda
