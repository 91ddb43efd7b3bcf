// The CPU kernels' declarations: what the binding calls. Their definitions are in
// rmsnorm_cpu.h, compiled in a translation unit of their own (binding/rmsnorm_cpu.cpp) that
// instantiates them for every (x, weight) type pair the binding dispatches to, so that an
// edit of the kernels recompiles that file alone, not the files that parse torch's headers.
#pragma once

#include <cstdint>

#include "rmsnorm_common.h"

namespace rmsnorm {
namespace cpu {

// Rows [row_begin, row_end): y = x * inv_rms * w; inv_rms[r] = 1/sqrt(mean(x^2) + eps).
template <typename T, typename W>
void rmsnorm_fwd_rows(const T* x, int64_t x_row_stride, const W* weight, T* y, AccT<T>* inv_rms,
                      int64_t row_begin, int64_t row_end, int64_t n, AccT<T> eps);

// Rows [row_begin, row_end) of grad_x = inv * (g - x * inv^2 * sum(g * x) / n), g = dy * w.
template <typename T, typename W>
void rmsnorm_bwd_dx_rows(const T* dy, int64_t dy_row_stride, const T* x, int64_t x_row_stride,
                         const W* weight, const AccT<T>* inv_rms, T* dx, int64_t row_begin,
                         int64_t row_end, int64_t n);

// grad_weight, stage 1: partial[k, :] = sum over the rows of chunk k of dy * x * inv_rms.
template <typename T>
void rmsnorm_bwd_dw_partial(const T* dy, int64_t dy_row_stride, const T* x, int64_t x_row_stride,
                            const AccT<T>* inv_rms, AccT<T>* partial, int64_t rows, int64_t n,
                            int64_t chunk_begin, int64_t chunk_end);

// grad_weight, stage 2: columns [col_begin, col_end) of dw = sum over k of partial[k, :].
template <typename T, typename W>
void rmsnorm_bwd_dw_reduce(const AccT<T>* partial, W* dw, int64_t chunks, int64_t n,
                           int64_t col_begin, int64_t col_end);

// The fused forms (residual add, weight offset, no weight): s = x + residual in AccT<T> (s = x
// without kAdd), residual_out = R(s), y = T(s * inv_rms * (w + weight_offset)), or T(s * inv_rms)
// without kWeight. Rows [row_begin, row_end); in place (y == x, residual_out == residual) allowed.
template <typename T, typename R, typename W, bool kAdd, bool kWeight>
void rmsnorm_fused_fwd_rows(const T* x, int64_t x_row_stride, const R* residual, int64_t residual_row_stride,
                            const W* weight, AccT<T> weight_offset, T* y, int64_t y_row_stride,
                            R* residual_out, int64_t residual_out_row_stride, AccT<T>* inv_rms,
                            int64_t row_begin, int64_t row_end, int64_t n, AccT<T> eps);

// Rows [row_begin, row_end) of g_s = inv * (g - s * inv^2 * sum(g * s) / n) + dres (kGradRes),
// g = dy * (w + weight_offset) (or dy): dx = T(g_s), dr = R(g_s) (kAdd).
template <typename T, typename R, typename W, bool kAdd, bool kWeight, bool kGradRes>
void rmsnorm_fused_bwd_dx_rows(const T* dy, int64_t dy_row_stride, const R* dres, int64_t dres_row_stride,
                               const T* x, int64_t x_row_stride, const R* residual, int64_t residual_row_stride,
                               const W* weight, AccT<T> weight_offset, const AccT<T>* inv_rms, T* dx, R* dr,
                               int64_t row_begin, int64_t row_end, int64_t n);

// grad_weight, stage 1, of the fused add: partial[k, :] = sum over chunk k of dy * (x + residual) * inv_rms.
template <typename T, typename R>
void rmsnorm_add_bwd_dw_partial(const T* dy, int64_t dy_row_stride, const T* x, int64_t x_row_stride,
                                const R* residual, int64_t residual_row_stride, const AccT<T>* inv_rms,
                                AccT<T>* partial, int64_t rows, int64_t n, int64_t chunk_begin, int64_t chunk_end);

}  // namespace cpu
}  // namespace rmsnorm
