// Launchers for the CUDA RMSNorm kernels. Torch-free: raw pointers, sizes, strides, a stream.
// T is float, double, __half or __nv_bfloat16; W is T or float. Explicit instantiations live
// in rmsnorm_kernel.cu. Every launcher is a no-op for zero rows except where noted, and leaves
// error checking to the caller (cudaGetLastError after it returns).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "rmsnorm_common.h"

// The (T, W) pairs the launchers are built for: RMSNORM_FOR_EACH_PAIR(M) expands M(T, W) for
// each; RMSNORM_FOR_EACH_FAST_PAIR leaves out float64, which has no fast path.
#define RMSNORM_FOR_EACH_FAST_PAIR(M) \
  M(float, float) M(__half, __half) M(__half, float) M(__nv_bfloat16, __nv_bfloat16) M(__nv_bfloat16, float)
#define RMSNORM_FOR_EACH_PAIR(M) RMSNORM_FOR_EACH_FAST_PAIR(M) M(double, double) M(double, float)
#define RMSNORM_FOR_EACH_TYPE(M) M(float) M(double) M(__half) M(__nv_bfloat16)

namespace rmsnorm {

template <typename T, typename W>
void launch_rmsnorm_fwd(const T* x,        // [rows, x_row_stride], unit column stride
                        int64_t x_row_stride,
                        const W* weight,   // [n]
                        T* y,              // [rows, n], contiguous
                        AccT<T>* inv_rms,  // [rows]
                        int64_t rows, int64_t n, AccT<T> eps, cudaStream_t stream);

// Bytes of scratch that launch_rmsnorm_bwd needs for grad_weight partial sums.
template <typename T>
size_t rmsnorm_bwd_workspace_bytes(int64_t rows, int64_t n);

// grad_x for every row, then grad_weight in two deterministic stages (no atomics). With zero
// rows it still writes grad_weight (zeros).
template <typename T, typename W>
void launch_rmsnorm_bwd(const T* dy,             // [rows, dy_row_stride], unit column stride
                        int64_t dy_row_stride,
                        const T* x,              // [rows, x_row_stride], unit column stride
                        int64_t x_row_stride,
                        const W* weight,         // [n]
                        const AccT<T>* inv_rms,  // [rows]
                        T* dx,                   // [rows, n], contiguous
                        W* dw,                   // [n]
                        AccT<T>* workspace,      // rmsnorm_bwd_workspace_bytes<T>(rows, n)
                        int64_t rows, int64_t n, cudaStream_t stream);

}  // namespace rmsnorm
