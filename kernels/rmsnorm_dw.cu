// grad_weight from the backward's partial sums: dw[i] = sum over units u of partial[u, i].
// Many units (more than kFewUnits): a CTA owns 32 columns; its 32 warps take the units u = warp,
// warp + 32, ... in order (a warp reads 128 contiguous bytes a unit), then warp 0 adds the 32 warp
// sums in warp order. Few units: a thread owns 4 consecutive columns of one of 32 consecutive runs of
// the units, 16 bytes a load, the loads of its run in flight at once; the runs' sums are then added in
// run order. The order depends on the number of units only, so grad_weight is reproducible bitwise.
#include "rmsnorm_device.cuh"
#include "rmsnorm_paths.cuh"

namespace rmsnorm {
namespace paths {
namespace {

constexpr int kColumns = 32;
constexpr int kSlices = 32;

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
constexpr int kColumnThreads = 32;
constexpr int kColumnsPerThread = 4;
constexpr int kUnitRuns = 32;                         // runs of units a column's threads split
constexpr int kRunUnits = int(kFewUnits) / kUnitRuns;  // the most units a run holds

// Few units: thread (t, r) of CTA b (warp r) owns columns [4 * (b * 32 + t), +4) and the r-th of 32
// runs of ceil(units / 32) consecutive units (at most 2), whose loads it issues together and adds in
// unit order; thread (t, 0) adds the 32 runs' sums in run order. A thread a column adding every unit
// in turn took 10.0 us at bfloat16 N = 65,536 (30 units, 7.9 MB) on the H200, 16.5% of DRAM throughput
// (benchmarks/profile-h200.md): ptxas put each unit's adds between its loads, so they waited. n is a
// multiple of 4 (the launcher's condition), so each row of partial is 16-byte aligned.
template <typename W>
__global__ void __launch_bounds__(kColumnThreads * kUnitRuns)
    dw_columns_kernel(const float* __restrict__ partial,  // [units, n]
                      int64_t units, int64_t n,
                      W* __restrict__ dw) {  // [n]
  __shared__ float4 run_sums[kUnitRuns][kColumnThreads];
  dev::wait_for_previous_grid();
  const int64_t first = (int64_t(blockIdx.x) * kColumnThreads + threadIdx.x) * kColumnsPerThread;
  const int64_t per_run = (units + kUnitRuns - 1) / kUnitRuns;  // at most kRunUnits
  const int64_t begin = threadIdx.y * per_run;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (first < n && begin < units) {  // (a warp is one run: runs past the units skip whole warps)
    // The run's loads first, then the adds in unit order; a unit past the run reads the run's first
    // again and adds nothing, so no load waits on a branch.
    float4 v[kRunUnits];
#pragma unroll
    for (int i = 0; i < kRunUnits; ++i) {
      const int64_t u = i < per_run && begin + i < units ? begin + i : begin;
      v[i] = *reinterpret_cast<const float4*>(partial + u * n + first);
    }
#pragma unroll
    for (int i = 0; i < kRunUnits; ++i) {
      if (i < per_run && begin + i < units) {
        acc.x += v[i].x;
        acc.y += v[i].y;
        acc.z += v[i].z;
        acc.w += v[i].w;
      }
    }
  }
  run_sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && first < n) {
    float4 total = run_sums[0][threadIdx.x];
#pragma unroll
    for (int r = 1; r < kUnitRuns; ++r) {
      const float4 s = run_sums[r][threadIdx.x];
      total.x += s.x;
      total.y += s.y;
      total.z += s.z;
      total.w += s.w;
    }
    dw[first] = dev::from_acc<W>(total.x);
    dw[first + 1] = dev::from_acc<W>(total.y);
    dw[first + 2] = dev::from_acc<W>(total.z);
    dw[first + 3] = dev::from_acc<W>(total.w);
  }
}

}  // namespace

template <typename W>
cudaError_t dw_from_partials(const float* partial, int64_t units, int64_t n, W* dw, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (units <= kFewUnits && n % kColumnsPerThread == 0) {
    const int64_t per_cta = int64_t(kColumnThreads) * kColumnsPerThread;
    const unsigned int blocks = static_cast<unsigned int>((n + per_cta - 1) / per_cta);
    return dev::launch_kernel(dw_columns_kernel<W>, dim3(blocks), dim3(kColumnThreads, kUnitRuns), 0, 0, RMSNORM_DW_PDL,
                              stream, partial, units, n, dw);
  }
  const unsigned int blocks = static_cast<unsigned int>((n + kColumns - 1) / kColumns);
  return dev::launch_kernel(dw_reduce_kernel<W>, dim3(blocks), dim3(kColumns, kSlices), 0, 0, RMSNORM_DW_PDL, stream,
                            partial, units, n, dw);
}

template cudaError_t dw_from_partials<float>(const float*, int64_t, int64_t, float*, cudaStream_t);
template cudaError_t dw_from_partials<__half>(const float*, int64_t, int64_t, __half*, cudaStream_t);
template cudaError_t dw_from_partials<__nv_bfloat16>(const float*, int64_t, int64_t, __nv_bfloat16*,
                                              cudaStream_t);

}  // namespace paths
}  // namespace rmsnorm
