// Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
//
// The ceilings the 3xTF32 GEMMs and the MMA chains are measured against (bench/NOTES.md, run
// 30): the throughput of mma.sync m16n8k8 TF32 and of float64 m8n8k4 (sm_80's shape, which every
// DMMA kernel here uses) and m16n8k4 / k8 / k16 (sm_90's) from registers alone (no memory; 8
// independent accumulators a warp), at 1 to 8 warps a scheduler, and the write
// bandwidth of two store patterns over 4 GB: each lane an 8-byte pair of 8 rows per warp store
// (the tf32x3 kernels' direct epilogue) against 16-byte chunks of one row (a staged epilogue).
//   nvcc -O3 -std=c++17 -arch=sm_90 -o mma_peak bench/probes/mma_peak.cu && ./mma_peak
#include <cuda_runtime.h>
#include <cstdio>

constexpr int kIters = 4096, kAcc = 8;

__global__ void tf32_peak(float* out) {
  float d[kAcc][4] = {};
  unsigned a[4] = {threadIdx.x, 1u, 2u, 3u}, b[2] = {5u, threadIdx.x};
  for (int it = 0; it < kIters; ++it)
#pragma unroll
    for (int i = 0; i < kAcc; ++i)
      asm volatile(
          "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  float s = 0;
  for (int i = 0; i < kAcc; ++i) s += d[i][0] + d[i][1] + d[i][2] + d[i][3];
  if (s == 12345.f) out[0] = s;
}

__global__ void f64_peak(double* out) {
  double d[kAcc][2] = {};
  double a = threadIdx.x * 1e-3, b = 1.0 + threadIdx.x;
  for (int it = 0; it < kIters; ++it)
#pragma unroll
    for (int i = 0; i < kAcc; ++i)
      asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
                   : "+d"(d[i][0]), "+d"(d[i][1])
                   : "d"(a), "d"(b));
  double s = 0;
  for (int i = 0; i < kAcc; ++i) s += d[i][0] + d[i][1];
  if (s == 12345.0) out[0] = s;
}

// sm_90's float64 shapes: A 16 x K (K / 2 values a lane), B K x 8 (K / 4), C 16 x 8 (4).
template <int K>
__global__ void f64_peak_m16(double* out) {
  double d[kAcc][4] = {};
  double a[K / 2], b[K / 4];
  for (int i = 0; i < K / 2; ++i) a[i] = threadIdx.x * 1e-3 + i;
  for (int i = 0; i < K / 4; ++i) b[i] = 1.0 + threadIdx.x + i;
  for (int it = 0; it < kIters; ++it)
#pragma unroll
    for (int i = 0; i < kAcc; ++i) {
      if constexpr (K == 4)
        asm volatile(
            "mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
            "{%0,%1,%2,%3};\n"
            : "+d"(d[i][0]), "+d"(d[i][1]), "+d"(d[i][2]), "+d"(d[i][3])
            : "d"(a[0]), "d"(a[1]), "d"(b[0]));
      else if constexpr (K == 8)
        asm volatile(
            "mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+d"(d[i][0]), "+d"(d[i][1]), "+d"(d[i][2]), "+d"(d[i][3])
            : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
      else
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7,%8,%9,%10,%11}, {%12,%13,%14,%15}, {%0,%1,%2,%3};\n"
            : "+d"(d[i][0]), "+d"(d[i][1]), "+d"(d[i][2]), "+d"(d[i][3])
            : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]),
              "d"(a[7]), "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
    }
  double s = 0;
  for (int i = 0; i < kAcc; ++i) s += d[i][0] + d[i][1] + d[i][2] + d[i][3];
  if (s == 12345.0) out[0] = s;
}

// One m16n8kK float64 MMA on a known A (16 x K) and B (K x 8) with the fragment layout the
// PTX ISA gives for the m16n8k8 TF32 shape, extended along K (g = lane / 4, q = lane % 4):
// a[i] = A(g + 8 (i % 2), q + 4 (i / 2)), b[i] = B(q + 4 i, g), c = C(g, 2q), C(g, 2q + 1),
// C(g + 8, 2q), C(g + 8, 2q + 1). main() compares C with the host product: the layout a float64
// GEMM on these shapes would read its fragments in.
template <int K>
__global__ void f64_layout(const double* A, const double* B, double* C) {
  const int lane = threadIdx.x, g = lane / 4, q = lane % 4;
  double a[K / 2], b[K / 4], d[4] = {};
  for (int i = 0; i < K / 2; ++i) a[i] = A[(g + 8 * (i % 2)) * K + q + 4 * (i / 2)];
  for (int i = 0; i < K / 4; ++i) b[i] = B[(q + 4 * i) * 8 + g];
  if constexpr (K == 4)
    asm volatile(
        "mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
        "{%0,%1,%2,%3};\n"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(b[0]));
  else if constexpr (K == 8)
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, "
        "{%4,%5,%6,%7,%8,%9,%10,%11}, {%12,%13,%14,%15}, {%0,%1,%2,%3};\n"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]),
          "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
  C[g * 8 + 2 * q] = d[0];
  C[g * 8 + 2 * q + 1] = d[1];
  C[(g + 8) * 8 + 2 * q] = d[2];
  C[(g + 8) * 8 + 2 * q + 1] = d[3];
}

template <int K>
void check_layout() {
  double hA[16 * K], hB[K * 8], hC[128], want[128] = {};
  for (int i = 0; i < 16 * K; ++i) hA[i] = 1 + i % 7 + 0.125 * (i % 5);  // small integers
  for (int i = 0; i < K * 8; ++i) hB[i] = 2 - i % 3 + 0.25 * (i % 4);    // and quarters: exact
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c)
      for (int k = 0; k < K; ++k) want[r * 8 + c] += hA[r * K + k] * hB[k * 8 + c];
  double *A, *B, *C;
  cudaMalloc(&A, sizeof hA), cudaMalloc(&B, sizeof hB), cudaMalloc(&C, sizeof hC);
  cudaMemcpy(A, hA, sizeof hA, cudaMemcpyHostToDevice);
  cudaMemcpy(B, hB, sizeof hB, cudaMemcpyHostToDevice);
  f64_layout<K><<<1, 32>>>(A, B, C);
  cudaMemcpy(hC, C, sizeof hC, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < 128; ++i) bad += hC[i] != want[i];
  printf("f64 m16n8k%d fragment layout: %s (%d of 128 values differ)\n", K,
         bad ? "WRONG" : "as assumed", bad);
  cudaFree(A), cudaFree(B), cudaFree(C);
}

// 8-byte pairs: lane (g = lane / 4, q = lane % 4) writes row g, columns 2q, 2q + 1 of an 8-row
// slab of a 128-wide row-major tile (the direct epilogue's pattern); 16-byte chunks: a warp writes
// 512 contiguous bytes of one row.
__global__ void store_pairs(float2* c, long long rows) {
  const long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31, g = lane / 4, q = lane % 4;
  const long long slab = warp / 16, col8 = warp % 16;  // 16 groups of 8 columns a row
  const long long row = slab * 8 + g;
  if (row < rows) c[(row * 128 + col8 * 8 + 2 * q) / 2] = make_float2(1.f, 2.f);
}
__global__ void store_rows(float4* c, long long n4) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n4) c[i] = make_float4(1.f, 2.f, 3.f, 4.f);
}

// The mean of 5 launches after one warm-up; NaN when a launch fails (a kernel whose
// registers do not fit that many warps an SM): its rate then reads nan, not a huge number.
template <typename F>
float time_ms(F launch) {
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  launch();
  cudaEventRecord(a);
  for (int r = 0; r < 5; ++r) launch();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  if (cudaGetLastError() != cudaSuccess) return 0.0f / 0.0f;
  return ms / 5;
}

int main() {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  const int sms = prop.multiProcessorCount;
  float* f;
  double* dd;
  cudaMalloc(&f, 16), cudaMalloc(&dd, 16);
  printf("%s, %d SMs\n", prop.name, sms);
  for (int warps : {4, 8, 16, 32}) {  // warps an SM: 1, 2, 4, 8 a scheduler
    const double mmas = double(sms) * warps * kIters * kAcc;
    float ms = time_ms([&] { tf32_peak<<<sms, 32 * warps>>>(f); });
    printf("tf32 m16n8k8: %2d warps/SM %7.1f TFLOP/s (3xTF32: %6.1f)\n", warps,
           mmas * 2 * 16 * 8 * 8 / ms / 1e9, mmas * 2 * 16 * 8 * 8 / ms / 1e9 / 3);
    ms = time_ms([&] { f64_peak<<<sms, 32 * warps>>>(dd); });
    printf("f64 m8n8k4:   %2d warps/SM %7.1f TFLOP/s\n", warps, mmas * 2 * 8 * 8 * 4 / ms / 1e9);
    ms = time_ms([&] { f64_peak_m16<4><<<sms, 32 * warps>>>(dd); });
    printf("f64 m16n8k4:  %2d warps/SM %7.1f TFLOP/s\n", warps, mmas * 2 * 16 * 8 * 4 / ms / 1e9);
    ms = time_ms([&] { f64_peak_m16<8><<<sms, 32 * warps>>>(dd); });
    printf("f64 m16n8k8:  %2d warps/SM %7.1f TFLOP/s\n", warps, mmas * 2 * 16 * 8 * 8 / ms / 1e9);
    ms = time_ms([&] { f64_peak_m16<16><<<sms, 32 * warps>>>(dd); });
    printf("f64 m16n8k16: %2d warps/SM %7.1f TFLOP/s\n", warps, mmas * 2 * 16 * 8 * 16 / ms / 1e9);
  }
  check_layout<4>();
  check_layout<8>();
  check_layout<16>();
  const long long rows = 8388608, bytes = rows * 128 * 4;  // 4.3 GB
  float* c;
  if (cudaMalloc(&c, bytes) != cudaSuccess) return 1;
  float ms = time_ms([&] {
    store_pairs<<<(unsigned)(rows / 8 * 16 * 32 / 256), 256>>>(reinterpret_cast<float2*>(c), rows);
  });
  printf("store 8-byte pairs of 8 rows: %.3f ms, %.2f TB/s\n", ms, bytes / ms / 1e9);
  ms = time_ms([&] {
    store_rows<<<(unsigned)(bytes / 16 / 256), 256>>>(reinterpret_cast<float4*>(c), bytes / 16);
  });
  printf("store 16-byte row chunks:     %.3f ms, %.2f TB/s\n", ms, bytes / ms / 1e9);
  return 0;
}
