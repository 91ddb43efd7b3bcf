// CPU RMSNorm kernels: plain C++ templates over the element type T, the weight type W and (the
// fused add) the residual type R, declared in rmsnorm_cpu_api.h. No torch headers:
// binding/rmsnorm_cpu.cpp instantiates them with c10's half types (any T with conversions to and
// from AccT<T> works), and the binding runs them over row ranges in parallel.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

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

// ---- The users' forms: a fused residual add, a weight offset (Gemma), no weight ------------
//
//   s = x + residual, summed in AccT<T> (s = x without a residual)   residual_out = R(s)
//   inv_rms = 1 / sqrt(mean(s^2) + eps)                              y = T(s * inv_rms * (AccT<T>(w) + weight_offset))
//
// The AccT sum is what is normalised, not residual_out's rounding of it (as vLLM's native path,
// FlashInfer, flash-attn and quack do); the offset is added after w is promoted to AccT<T>, never
// in w's own dtype, where 1 + w would round. Without a weight (kWeight false) y = T(s * inv_rms).

// Rows [row_begin, row_end) of the fused forward. A row's s is kept in scratch (AccT), so that x
// and residual are read once and y and residual_out written once. In place (y == x and
// residual_out == residual, with the same strides) is allowed: each row is read before it is written.
template <typename T, typename R, typename W, bool kAdd, bool kWeight>
void rmsnorm_fused_fwd_rows(const T* x,                      // [rows, x_row_stride], unit column stride
                            int64_t x_row_stride,
                            const R* residual,               // [rows, residual_row_stride] (kAdd), unit column stride
                            int64_t residual_row_stride,
                            const W* weight,                 // [n] (kWeight)
                            AccT<T> weight_offset,
                            T* y,                            // [rows, y_row_stride], unit column stride
                            int64_t y_row_stride,
                            R* residual_out,                 // [rows, residual_out_row_stride] (kAdd)
                            int64_t residual_out_row_stride,
                            AccT<T>* inv_rms,                // [rows]
                            int64_t row_begin, int64_t row_end, int64_t n, AccT<T> eps) {
  using A = AccT<T>;
  std::vector<A> scratch(static_cast<size_t>(n));
  A* s = scratch.data();  // [n]: the row's sum, in AccT
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* xr = x + r * x_row_stride;
    if constexpr (kAdd) {
      const R* rr = residual + r * residual_row_stride;
      R* ro = residual_out + r * residual_out_row_stride;
      for (int64_t i = 0; i < n; ++i) {
        s[i] = static_cast<A>(xr[i]) + static_cast<A>(rr[i]);
        ro[i] = static_cast<R>(s[i]);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) s[i] = static_cast<A>(xr[i]);
    }
    // row_sum_squares over the AccT values: the same order, so the same inv_rms, as the plain forward.
    const A inv = A(1) / std::sqrt(row_sum_squares(s, n) / static_cast<A>(n) + eps);
    inv_rms[r] = inv;
    T* yr = y + r * y_row_stride;
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (kWeight) {
        yr[i] = static_cast<T>(s[i] * inv * (static_cast<A>(weight[i]) + weight_offset));
      } else {
        yr[i] = static_cast<T>(s[i] * inv);
      }
    }
  }
}

// Rows [row_begin, row_end) of the fused backward's input gradients, with s as in the forward
// (recomputed from x and residual in AccT) and g = dy * (w + weight_offset), or dy without a weight:
//   g_s = inv * (g - s * inv^2 * sum(g * s) / n) + dres   (dres, the gradient of residual_out: kGradRes)
//   dx = T(g_s);  dr = R(g_s) (kAdd)
// The prenorm grouping: residual_out's gradient is added to the norm's, not passed through it.
template <typename T, typename R, typename W, bool kAdd, bool kWeight, bool kGradRes>
void rmsnorm_fused_bwd_dx_rows(const T* dy,              // [rows, dy_row_stride], unit column stride
                               int64_t dy_row_stride,
                               const R* dres,            // [rows, dres_row_stride] (kGradRes), unit column stride
                               int64_t dres_row_stride,
                               const T* x,               // [rows, x_row_stride], unit column stride
                               int64_t x_row_stride,
                               const R* residual,        // [rows, residual_row_stride] (kAdd), unit column stride
                               int64_t residual_row_stride,
                               const W* weight,          // [n] (kWeight)
                               AccT<T> weight_offset,
                               const AccT<T>* inv_rms,   // [rows]
                               T* dx,                    // [rows, n], contiguous
                               R* dr,                    // [rows, n], contiguous (kAdd)
                               int64_t row_begin, int64_t row_end, int64_t n) {
  using A = AccT<T>;
  std::vector<A> scratch(2 * static_cast<size_t>(n));
  A* s = scratch.data();      // [n]: the row's sum
  A* g = scratch.data() + n;  // [n]: dy times the effective weight
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* dyr = dy + r * dy_row_stride;
    const T* xr = x + r * x_row_stride;
    A part[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (kAdd) {
        s[i] = static_cast<A>(xr[i]) + static_cast<A>(residual[r * residual_row_stride + i]);
      } else {
        s[i] = static_cast<A>(xr[i]);
      }
      if constexpr (kWeight) {
        g[i] = static_cast<A>(dyr[i]) * (static_cast<A>(weight[i]) + weight_offset);
      } else {
        g[i] = static_cast<A>(dyr[i]);
      }
      part[i % 4] += g[i] * s[i];
    }
    const A inv = inv_rms[r];
    const A c = inv * inv * ((part[0] + part[1]) + (part[2] + part[3])) / static_cast<A>(n);
    T* dxr = dx + r * n;
    for (int64_t i = 0; i < n; ++i) {
      A gs = inv * (g[i] - s[i] * c);
      if constexpr (kGradRes) gs += static_cast<A>(dres[r * dres_row_stride + i]);
      dxr[i] = static_cast<T>(gs);
      if constexpr (kAdd) dr[r * n + i] = static_cast<R>(gs);
    }
  }
}

// grad_weight, stage 1, of the fused add: partial[k, :] = sum over the rows of chunk k of
// dy * s * inv_rms, s = x + residual in AccT; chunks as in rmsnorm_bwd_dw_partial (which serves
// the forms without a residual), and stage 2 is rmsnorm_bwd_dw_reduce.
template <typename T, typename R>
void rmsnorm_add_bwd_dw_partial(const T* dy,             // [rows, dy_row_stride], unit column stride
                                int64_t dy_row_stride,
                                const T* x,              // [rows, x_row_stride], unit column stride
                                int64_t x_row_stride,
                                const R* residual,       // [rows, residual_row_stride], unit column stride
                                int64_t residual_row_stride,
                                const AccT<T>* inv_rms,  // [rows]
                                AccT<T>* partial,        // [chunks, n]
                                int64_t rows, int64_t n, int64_t chunk_begin, int64_t chunk_end) {
  using A = AccT<T>;
  const int64_t per = gw_rows_per_chunk(rows, n);
  for (int64_t k = chunk_begin; k < chunk_end; ++k) {
    A* pk = partial + k * n;
    std::fill(pk, pk + n, A(0));
    const int64_t r_end = (k + 1) * per < rows ? (k + 1) * per : rows;
    for (int64_t r = k * per; r < r_end; ++r) {
      const T* dyr = dy + r * dy_row_stride;
      const T* xr = x + r * x_row_stride;
      const R* rr = residual + r * residual_row_stride;
      const A inv_r = inv_rms[r];
      for (int64_t i = 0; i < n; ++i) {
        pk[i] += static_cast<A>(dyr[i]) * ((static_cast<A>(xr[i]) + static_cast<A>(rr[i])) * inv_r);
      }
    }
  }
}

}  // namespace cpu
}  // namespace rmsnorm
