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

}  // namespace cpu
}  // namespace rmsnorm
