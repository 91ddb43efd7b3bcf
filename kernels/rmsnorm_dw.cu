// grad_weight from the backward's partial sums: dw[i] = sum over units u of partial[u, i].
// Many units (more than kFewUnits): a CTA owns 32 columns; its 32 warps take the units u = warp,
// warp + 32, ... in order (a warp reads 128 contiguous bytes a unit), then warp 0 adds the 32 warp
// sums in warp order. Few units: a thread owns 4 consecutive columns and adds the units in order,
// 16 bytes a load (with 8 units, 24 of the 32 warps of a CTA of the first kernel had nothing to do:
// 34.7 us for 8.4 MB at N = 262,144 on the H200, 5% of DRAM throughput). The order depends on the
// number of units only, so grad_weight is reproducible bitwise.
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
constexpr int kColumnThreads = 256;
constexpr int kColumnsPerThread = 4;

// Few units: thread t of CTA b owns columns [4 * (b * 256 + t), +4) and adds partial[u, column] for
// u = 0, 1, ... in order. n is a multiple of 4 (the launcher's condition), so each row of partial
// is 16-byte aligned.
template <typename W>
__global__ void __launch_bounds__(kColumnThreads)
    dw_columns_kernel(const float* __restrict__ partial,  // [units, n]
                      int64_t units, int64_t n,
                      W* __restrict__ dw) {  // [n]
  dev::wait_for_previous_grid();
  const int64_t first = (int64_t(blockIdx.x) * kColumnThreads + threadIdx.x) * kColumnsPerThread;
  if (first >= n) return;
  float acc[kColumnsPerThread] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 8
  for (int64_t u = 0; u < units; ++u) {
    const float4 v = *reinterpret_cast<const float4*>(partial + u * n + first);
    acc[0] += v.x;
    acc[1] += v.y;
    acc[2] += v.z;
    acc[3] += v.w;
  }
#pragma unroll
  for (int k = 0; k < kColumnsPerThread; ++k) dw[first + k] = dev::from_acc<W>(acc[k]);
}

}  // namespace

template <typename W>
cudaError_t dw_from_partials(const float* partial, int64_t units, int64_t n, W* dw, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (units <= kFewUnits && n % kColumnsPerThread == 0) {
    const int64_t per_cta = int64_t(kColumnThreads) * kColumnsPerThread;
    const unsigned int blocks = static_cast<unsigned int>((n + per_cta - 1) / per_cta);
    return dev::launch_kernel(dw_columns_kernel<W>, dim3(blocks), dim3(kColumnThreads), 0, 0, RMSNORM_DW_PDL, stream,
                              partial, units, n, dw);
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
