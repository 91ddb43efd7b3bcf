// grad_weight from the backward's partial sums: dw[i] = sum over units u of partial[u, i].
// Many units (more than kFewUnits): a CTA owns 32 columns; its 32 warps take the units u = warp,
// warp + 32, ... in order (a warp reads 128 contiguous bytes a unit), then warp 0 adds the 32 warp
// sums in warp order (with 8 units, 24 of the 32 warps of such a CTA had nothing to do: 34.7 us for
// 8.4 MB at N = 262,144 on the H200, 5% of DRAM throughput). Few units: the units split into runs of
// at most two, a warp a run (dw_runs_kernel). The order depends on the number of units only, so
// grad_weight is reproducible bitwise.
#include "rmsnorm_device.cuh"
#include "rmsnorm_paths.cuh"

namespace rmsnorm {
namespace paths {
namespace {

constexpr int kColumns = 32;
constexpr int kSlices = 32;

// a += b, each of the four columns on its own (the order of a column's adds is the caller's).
__device__ __forceinline__ void add4(float4& a, const float4& b) {
  a.x += b.x;
  a.y += b.y;
  a.z += b.z;
  a.w += b.w;
}

// The four columns' sums from `first` on, in grad_weight's dtype.
template <typename W>
__device__ __forceinline__ void store4(W* dw, int64_t first, const float4& total) {
  dw[first] = dev::from_acc<W>(total.x);
  dw[first + 1] = dev::from_acc<W>(total.y);
  dw[first + 2] = dev::from_acc<W>(total.z);
  dw[first + 3] = dev::from_acc<W>(total.w);
}

template <typename W>
__global__ void __launch_bounds__(kColumns * kSlices)
    dw_reduce_kernel(const float* __restrict__ partial,  // [units, n]
                     int64_t units, int64_t n,
                     W* __restrict__ dw) {  // [n]
  __shared__ float sums[kSlices][kColumns + 1];
  dev::wait_for_previous_grid();
  const int64_t col = int64_t(blockIdx.x) * kColumns + threadIdx.x;
  float acc = 0.f;
  if (col < n) {
#pragma unroll 4
    for (int64_t u = threadIdx.y; u < units; u += kSlices) acc += partial[u * n + col];
  }
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < n) {
    float total = sums[0][threadIdx.x];
#pragma unroll
    for (int s = 1; s < kSlices; ++s) total += sums[s][threadIdx.x];
    dw[col] = dev::from_acc<W>(total);
  }
}

constexpr int64_t kFewUnits = 64;
constexpr int kColumnsPerThread = 4;
// Few units, dw_runs_kernel: a CTA owns kRunColumns * 4 columns; its warps split the units into
// runs of at most kRunUnits = 2, one run a warp (so ceil(units / 2) warps, up to 32), and each thread
// issues its run's loads before adding them; then warp 0 adds the runs in order. It had one thread a
// column add every unit in turn, in CTAs of 256 threads, where ptxas reused a load's registers for
// the next one, so 2-3 loads of a thread were in flight and each unit's adds waited on its load:
// 10.0 us at bfloat16 N = 65,536 (30 units, 7.9 MB, 64 CTAs) on the H200, 16.5% of DRAM throughput
// (benchmarks/profile-h200.md). 32 runs of every unit count took that to 6.4 us but N = 262,144 (7
// or 8 units: 25 of each CTA's 32 warps idle) from 141.0 to 145.8 us (0d05ef8, reverted;
// benchmarks/variants-h200.md): hence as many runs as the units fill. RMSNORM_DW_RUNS=0 keeps the
// one thread a column, 256 columns a CTA.
#ifndef RMSNORM_DW_RUNS
#define RMSNORM_DW_RUNS 1
#endif
constexpr int kRunColumns = 32;  // threads a run (a warp), 4 columns each
constexpr int kRunUnits = 2;
constexpr int kColumnThreads = 256;  // RMSNORM_DW_RUNS=0: threads a CTA, one column quad each

// Runs of the units of a column: ceil(units / kRunUnits), at most kFewUnits / kRunUnits.
inline int unit_runs(int64_t units) { return static_cast<int>((units + kRunUnits - 1) / kRunUnits); }

// Thread (t, r) of CTA b owns columns [4 * (b * 32 + t), +4) and units [2 r, 2 r + 2) (those below
// units); warp r = 0 adds the blockDim.y runs' sums in run order. n is a multiple of 4 (the
// launcher's condition), so each row of partial is 16-byte aligned.
template <typename W>
__global__ void __launch_bounds__(kRunColumns * (kFewUnits / kRunUnits))
    dw_runs_kernel(const float* __restrict__ partial,  // [units, n]
                   int64_t units, int64_t n,
                   W* __restrict__ dw) {  // [n]
  __shared__ float4 run_sums[kFewUnits / kRunUnits][kRunColumns];
  dev::wait_for_previous_grid();
  const int64_t first = (int64_t(blockIdx.x) * kRunColumns + threadIdx.x) * kColumnsPerThread;
  const int64_t begin = int64_t(threadIdx.y) * kRunUnits;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (first < n) {
    // Both loads first (a unit past the last reads the run's first again and adds nothing), then
    // the adds in unit order.
    float4 v[kRunUnits];
#pragma unroll
    for (int i = 0; i < kRunUnits; ++i) {
      const int64_t u = begin + i < units ? begin + i : begin;
      v[i] = *reinterpret_cast<const float4*>(partial + u * n + first);
    }
#pragma unroll
    for (int i = 0; i < kRunUnits; ++i) {
      if (begin + i < units) add4(acc, v[i]);
    }
  }
  run_sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && first < n) {
    float4 total = run_sums[0][threadIdx.x];
    for (unsigned int r = 1; r < blockDim.y; ++r) add4(total, run_sums[r][threadIdx.x]);
    store4(dw, first, total);
  }
}

// RMSNORM_DW_RUNS=0: thread t of CTA b owns columns [4 * (b * 256 + t), +4) and adds
// partial[u, column] for u = 0, 1, ... in order.
template <typename W>
__global__ void __launch_bounds__(kColumnThreads)
    dw_columns_kernel(const float* __restrict__ partial,  // [units, n]
                      int64_t units, int64_t n,
                      W* __restrict__ dw) {  // [n]
  dev::wait_for_previous_grid();
  const int64_t first = (int64_t(blockIdx.x) * kColumnThreads + threadIdx.x) * kColumnsPerThread;
  if (first >= n) return;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
  for (int64_t u = 0; u < units; ++u) add4(acc, *reinterpret_cast<const float4*>(partial + u * n + first));
  store4(dw, first, acc);
}

// CTAs of per_cta columns each that cover n columns.
inline unsigned int ctas_for(int64_t n, int64_t per_cta) {
  return static_cast<unsigned int>((n + per_cta - 1) / per_cta);
}

}  // namespace

template <typename W>
cudaError_t dw_from_partials(const float* partial, int64_t units, int64_t n, W* dw, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (RMSNORM_DW_RUNS && units <= kFewUnits && n % kColumnsPerThread == 0) {
    return dev::launch_kernel(dw_runs_kernel<W>, dim3(ctas_for(n, kRunColumns * kColumnsPerThread)),
                              dim3(kRunColumns, unit_runs(units)), 0, 0, RMSNORM_DW_PDL, stream, partial, units, n, dw);
  }
  if (units <= kFewUnits && n % kColumnsPerThread == 0) {
    return dev::launch_kernel(dw_columns_kernel<W>, dim3(ctas_for(n, kColumnThreads * kColumnsPerThread)),
                              dim3(kColumnThreads), 0, 0, RMSNORM_DW_PDL, stream, partial, units, n, dw);
  }
  return dev::launch_kernel(dw_reduce_kernel<W>, dim3(ctas_for(n, kColumns)), dim3(kColumns, kSlices), 0, 0,
                            RMSNORM_DW_PDL, stream, partial, units, n, dw);
}

template cudaError_t dw_from_partials<float>(const float*, int64_t, int64_t, float*, cudaStream_t);
template cudaError_t dw_from_partials<__half>(const float*, int64_t, int64_t, __half*, cudaStream_t);
template cudaError_t dw_from_partials<__nv_bfloat16>(const float*, int64_t, int64_t, __nv_bfloat16*,
                                              cudaStream_t);

}  // namespace paths
}  // namespace rmsnorm
