// grad_weight from the backward's partial sums: dw[i] = sum over units u of partial[u, i].
// A CTA owns 32 columns; its 32 warps take the units u = warp, warp + 32, ... in order (a warp
// reads 128 contiguous bytes a unit), then warp 0 adds the 32 warp sums in warp order. The
// order depends on the number of units only, so grad_weight is reproducible bitwise.
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

}  // namespace

template <typename W>
void dw_from_partials(const float* partial, int64_t units, int64_t n, W* dw, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned int blocks = static_cast<unsigned int>((n + kColumns - 1) / kColumns);
  dw_reduce_kernel<W><<<blocks, dim3(kColumns, kSlices), 0, stream>>>(partial, units, n, dw);
}

template void dw_from_partials<float>(const float*, int64_t, int64_t, float*, cudaStream_t);
template void dw_from_partials<__half>(const float*, int64_t, int64_t, __half*, cudaStream_t);
template void dw_from_partials<__nv_bfloat16>(const float*, int64_t, int64_t, __nv_bfloat16*,
                                              cudaStream_t);

}  // namespace paths
}  // namespace rmsnorm
