// CPU RMSNorm kernels: plain C++ templates over the element type T and the weight type W,
// declared in rmsnorm_cpu_api.h. No torch headers: binding/rmsnorm_cpu.cpp instantiates them
// with c10's half types (any T with conversions to and from AccT<T> works), and the binding
// runs them over row ranges in parallel.
#pragma once

#include <cmath>
#include <cstdint>

#include "rmsnorm_common.h"

namespace rmsnorm {
namespace cpu {

// Sum of squares of one row with eight independent partial sums (fixed order: the result
// depends on n only), which also lets the compiler keep several multiplies in flight.
template <typename T>
inline AccT<T> row_sum_squares(const T* xr,  // [n], unit stride
                               int64_t n) {
  using A = AccT<T>;
  A part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) {
      const A a = static_cast<A>(xr[i + k]);
      part[k] += a * a;
    }
  }
  for (; i < n; ++i) {  // partial tile: n not a multiple of 8
    const A a = static_cast<A>(xr[i]);
    part[i % 8] += a * a;
  }
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// Rows [row_begin, row_end): y = x * inv_rms * w; inv_rms[r] = 1/sqrt(mean(x^2) + eps).
template <typename T, typename W>
void rmsnorm_fwd_rows(const T* x,          // [rows, x_row_stride], unit column stride
                      int64_t x_row_stride,
                      const W* weight,     // [n]
                      T* y,                // [rows, n], contiguous
                      AccT<T>* inv_rms,    // [rows]
                      int64_t row_begin, int64_t row_end, int64_t n, AccT<T> eps) {
  using A = AccT<T>;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* xr = x + r * x_row_stride;
    T* yr = y + r * n;
    const A ss = row_sum_squares(xr, n);
    const A inv = A(1) / std::sqrt(ss / static_cast<A>(n) + eps);
    inv_rms[r] = inv;
    for (int64_t i = 0; i < n; ++i) {
      yr[i] = static_cast<T>(static_cast<A>(xr[i]) * inv * static_cast<A>(weight[i]));
    }
  }
}

// Rows [row_begin, row_end) of grad_x:
//   g = dy * w;  grad_x = inv * (g - x * inv^2 * sum(g * x) / n)
template <typename T, typename W>
void rmsnorm_bwd_dx_rows(const T* dy,            // [rows, dy_row_stride], unit column stride
                         int64_t dy_row_stride,
                         const T* x,             // [rows, x_row_stride], unit column stride
                         int64_t x_row_stride,
                         const W* weight,        // [n]
                         const AccT<T>* inv_rms, // [rows]
                         T* dx,                  // [rows, n], contiguous
                         int64_t row_begin, int64_t row_end, int64_t n) {
  using A = AccT<T>;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* dyr = dy + r * dy_row_stride;
    const T* xr = x + r * x_row_stride;
    T* dxr = dx + r * n;
    const A inv = inv_rms[r];
    A part[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n; ++i) {
      part[i % 4] += static_cast<A>(dyr[i]) * static_cast<A>(weight[i]) * static_cast<A>(xr[i]);
    }
    const A dot = (part[0] + part[1]) + (part[2] + part[3]);
    const A c = inv * inv * dot / static_cast<A>(n);
    for (int64_t i = 0; i < n; ++i) {
      const A g = static_cast<A>(dyr[i]) * static_cast<A>(weight[i]);
      dxr[i] = static_cast<T>(inv * (g - static_cast<A>(xr[i]) * c));
    }
  }
}

// grad_weight, stage 1: partial[k, :] = sum over the rows of chunk k of dy * x * inv_rms,
// for chunks [chunk_begin, chunk_end); chunk k covers rows [k * per, min((k + 1) * per, rows)).
template <typename T>
void rmsnorm_bwd_dw_partial(const T* dy,            // [rows, dy_row_stride]
                            int64_t dy_row_stride,
                            const T* x,             // [rows, x_row_stride]
                            int64_t x_row_stride,
                            const AccT<T>* inv_rms, // [rows]
                            AccT<T>* partial,       // [chunks, n]
                            int64_t rows, int64_t n, int64_t chunk_begin, int64_t chunk_end) {
  using A = AccT<T>;
  const int64_t per = gw_rows_per_chunk(rows, n);
  for (int64_t k = chunk_begin; k < chunk_end; ++k) {
    A* pk = partial + k * n;
    for (int64_t i = 0; i < n; ++i) pk[i] = A(0);
    const int64_t r_end = (k + 1) * per < rows ? (k + 1) * per : rows;
    for (int64_t r = k * per; r < r_end; ++r) {
      const T* dyr = dy + r * dy_row_stride;
      const T* xr = x + r * x_row_stride;
      const A inv = inv_rms[r];
      for (int64_t i = 0; i < n; ++i) {
        pk[i] += static_cast<A>(dyr[i]) * (static_cast<A>(xr[i]) * inv);
      }
    }
  }
}

// grad_weight, stage 2: columns [col_begin, col_end) of dw = sum over k of partial[k, :], in
// increasing k. With zero chunks (zero rows) this writes zeros.
template <typename T, typename W>
void rmsnorm_bwd_dw_reduce(const AccT<T>* partial,  // [chunks, n]
                           W* dw,                   // [n]
                           int64_t chunks, int64_t n, int64_t col_begin, int64_t col_end) {
  using A = AccT<T>;
  for (int64_t i = col_begin; i < col_end; ++i) {
    A acc = 0;
    for (int64_t k = 0; k < chunks; ++k) acc += partial[k * n + i];
    dw[i] = static_cast<W>(acc);
  }
}

}  // namespace cpu
}  // namespace rmsnorm
