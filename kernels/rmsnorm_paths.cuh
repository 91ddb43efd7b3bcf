// The CUDA paths behind the launchers of rmsnorm_cuda.h, one translation unit each:
//   rmsnorm_rows.cu      a row held in registers by a group of threads of one CTA
//   rmsnorm_cluster.cu   a row held in registers by the CTAs of a thread-block cluster
//   rmsnorm_split.cu     long rows split: a kernel of slice sums, then one that scales slices
//                        (forward) or walks column strips down the rows (backward)
//   rmsnorm_dw.cu        grad_weight from the backward's per-unit partial sums
//   rmsnorm_fallback.cu  one CTA per row, any length, layout and dtype (float64 included); the
//                        copy that stages misaligned rows for the fast paths
// rmsnorm_launch.cu is the only place a path is chosen (thresholds: rmsnorm_plan.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "rmsnorm_cuda.h"
#include "rmsnorm_plan.h"

namespace rmsnorm {
namespace paths {

// Fast paths: T is float, __half or __nv_bfloat16 and W is T or float (16-byte vectors); every
// row of every tensor and the weight start on 16-byte boundaries (the launcher stages them so);
// kCluster false is rmsnorm_rows.cu's path, true rmsnorm_cluster.cu's. They return the error of
// their launch (cudaLaunchKernelEx returns it; the <<<>>> launches of the fallback and the copies
// leave theirs for cudaGetLastError). rows > 0.
template <typename T, typename W, bool kCluster>
cudaError_t fast_forward(const plan::Plan& p, const T* x, int64_t x_row_stride, const W* weight, T* y,
                         float* inv_rms, int64_t rows, int64_t n, float eps, cudaStream_t stream);
// Writes grad_x and partial[plan::backward_units(p, rows), n].
template <typename T, typename W, bool kCluster>
cudaError_t fast_backward(const plan::Plan& p, const T* dy, int64_t dy_row_stride, const T* x,
                          int64_t x_row_stride, const W* weight, const float* inv_rms, T* dx,
                          float* partial, int64_t rows, int64_t n, cudaStream_t stream);
// The split paths (p.split), their slice sums in sums[rows, plan::split_slices(n_vec)] on the way:
// the forward's y and inv_rms; the backward's grad_x and partial[plan::backward_units(p, rows), n].
// They return the first launch error.
template <typename T, typename W>
cudaError_t split_forward(const T* x, int64_t x_row_stride, const W* weight, T* y, float* inv_rms, float* sums,
                          int64_t rows, int64_t n, float eps, cudaStream_t stream);
template <typename T, typename W>
cudaError_t split_backward(const T* dy, int64_t dy_row_stride, const T* x, int64_t x_row_stride,
                           const W* weight, const float* inv_rms, T* dx, float* partial, float* sums,
                           int64_t rows, int64_t n, cudaStream_t stream);
// dw[i] = sum over u < units of partial[u, i], in a fixed order; zeros when units is 0. Returns
// the launch's error.
template <typename W>
cudaError_t dw_from_partials(const float* partial, int64_t units, int64_t n, W* dw, cudaStream_t stream);

// dst = the rows of src, contiguous (any row stride, 0 and overlapping rows included).
template <typename T>
void copy_rows(const T* src, int64_t src_row_stride, int64_t rows, int64_t n, T* dst, cudaStream_t stream);

// The fallback: the same contract as the launchers of rmsnorm_cuda.h.
template <typename T, typename W>
void fallback_forward(const T* x, int64_t x_row_stride, const W* weight, T* y, AccT<T>* inv_rms,
                      int64_t rows, int64_t n, AccT<T> eps, cudaStream_t stream);
template <typename T>
size_t fallback_workspace_bytes(int64_t rows, int64_t n);
template <typename T, typename W>
void fallback_backward(const T* dy, int64_t dy_row_stride, const T* x, int64_t x_row_stride,
                       const W* weight, const AccT<T>* inv_rms, T* dx, W* dw,
                       AccT<T>* workspace, int64_t rows, int64_t n, cudaStream_t stream);

}  // namespace paths
}  // namespace rmsnorm
