// Launchers for the CUDA RMSNorm kernels. Torch-free: raw pointers, sizes, strides, a stream.
// T is float, double, __half or __nv_bfloat16; W is T or float. Explicit instantiations live
// in rmsnorm_launch.cu. Every launcher is a no-op for zero rows except where noted, and leaves
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

// Bytes of scratch launch_rmsnorm_fwd needs for these tensors: an aligned copy of x's rows and
// of the weight where N is a whole number of 16-byte vectors but they do not all start on a
// 16-byte boundary (so that the path depends on N and the dtypes only), else none.
template <typename T, typename W>
size_t rmsnorm_fwd_workspace_bytes(const T* x, int64_t x_row_stride, const W* weight, int64_t rows,
                                   int64_t n);

// The launchers return the error of a launch that returns one (cudaLaunchKernelEx); check it, and
// cudaGetLastError for the others' (<<<>>>), after each call.
template <typename T, typename W>
cudaError_t launch_rmsnorm_fwd(const T* x,        // [rows, x_row_stride], unit column stride
                               int64_t x_row_stride,
                               const W* weight,   // [n]
                               T* y,              // [rows, n], contiguous, 16-byte aligned
                               AccT<T>* inv_rms,  // [rows]
                               void* workspace,   // rmsnorm_fwd_workspace_bytes(...), 16-byte aligned
                               int64_t rows, int64_t n, AccT<T> eps, cudaStream_t stream);

// Bytes of scratch launch_rmsnorm_bwd needs: grad_weight's partial sums, and the aligned copies
// the forward's workspace describes (of grad_out and x).
template <typename T, typename W>
size_t rmsnorm_bwd_workspace_bytes(const T* dy, int64_t dy_row_stride, const T* x, int64_t x_row_stride,
                                   const W* weight, int64_t rows, int64_t n);

// grad_x for every row, then grad_weight in two deterministic stages (no atomics). With zero
// rows it still writes grad_weight (zeros).
template <typename T, typename W>
cudaError_t launch_rmsnorm_bwd(const T* dy,             // [rows, dy_row_stride], unit column stride
                               int64_t dy_row_stride,
                               const T* x,              // [rows, x_row_stride], unit column stride
                               int64_t x_row_stride,
                               const W* weight,         // [n]
                               const AccT<T>* inv_rms,  // [rows]
                               T* dx,                   // [rows, n], contiguous, 16-byte aligned
                               W* dw,                   // [n]
                               void* workspace,         // rmsnorm_bwd_workspace_bytes(...), 16-byte aligned
                               int64_t rows, int64_t n, cudaStream_t stream);

}  // namespace rmsnorm
