// The launchers of rmsnorm_cuda.h: the one place a CUDA path is chosen. A fast path runs when
// the dtype has one (not float64), the row is a whole number of 16-byte vectors and
// rmsnorm_plan.h has a plan for the length (a cluster when one CTA's registers cannot hold the
// row; the split backward for long rows); everything else runs the fallback. The choice depends on N and the dtypes only, never on
// the number of rows or the alignment: the fast kernels load whole 16-byte vectors, so rows (and
// a weight) of a fast-path length that do not all start on 16-byte boundaries are first copied
// into the workspace. A row therefore takes the same path, and its sums the same order, alone
// and in any batch.
#include <type_traits>

#include "rmsnorm_paths.cuh"
#include "rmsnorm_plan.h"

namespace rmsnorm {
namespace {

template <typename T>
constexpr bool has_fast_path() {
  return !std::is_same<T, double>::value;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// True when every row of a [rows, row_stride] view of T starts on a 16-byte boundary.
template <typename T>
bool rows_aligned(const T* p, int64_t row_stride) {
  return aligned16(p) && (row_stride * int64_t(sizeof(T))) % 16 == 0;
}

template <typename T>
int64_t vectors_in(int64_t n) {
  return n % (16 / int64_t(sizeof(T))) == 0 ? n / (16 / int64_t(sizeof(T))) : 0;
}

// The fast-path plan for a row of n elements of T, or an empty one (fallback): N and T only.
template <typename T>
plan::Plan forward_plan_for(int64_t n) {
  if constexpr (!has_fast_path<T>()) {
    return plan::Plan{};
  } else {
    const int64_t n_vec = vectors_in<T>(n);
    return n_vec == 0 ? plan::Plan{} : plan::forward_plan(n_vec);
  }
}

template <typename T>
plan::Plan backward_plan_for(int64_t n) {
  if constexpr (!has_fast_path<T>()) {
    return plan::Plan{};
  } else {
    const int64_t n_vec = vectors_in<T>(n);
    return n_vec == 0 ? plan::Plan{} : plan::backward_plan(n_vec, static_cast<int>(sizeof(T)));
  }
}

size_t round16(size_t bytes) { return (bytes + 15) / 16 * 16; }

// Bytes of the workspace a fast path needs to hold an aligned copy of rows [rows, row_stride]
// of T: none when they are aligned already.
template <typename T>
size_t staging_bytes(const T* p, int64_t row_stride, int64_t rows, int64_t n) {
  return rows_aligned(p, row_stride) ? 0 : round16(static_cast<size_t>(rows) * n * sizeof(T));
}

// p itself when its rows are aligned; else a contiguous copy of them at *ws (which moves past it).
template <typename T>
const T* staged(const T* p, int64_t& row_stride, int64_t rows, int64_t n, char*& ws, cudaStream_t stream) {
  if (rows_aligned(p, row_stride)) return p;
  T* copy = reinterpret_cast<T*>(ws);
  paths::copy_rows<T>(p, row_stride, rows, n, copy, stream);
  ws += round16(static_cast<size_t>(rows) * n * sizeof(T));
  row_stride = n;
  return copy;
}

// Bytes of a split plan's slice sums (a float a slice of each row; 16-byte multiples), else none.
template <typename T>
size_t split_sum_bytes(const plan::Plan& p, int64_t rows, int64_t n) {
  if (!p.split) return 0;
  return round16(static_cast<size_t>(rows) * static_cast<size_t>(plan::split_slices(vectors_in<T>(n))) * sizeof(float));
}

// Bytes of grad_weight partial sums the fast backward writes (16-byte multiples).
template <typename T>
size_t fast_partial_bytes(const plan::Plan& p, int64_t rows, int64_t n) {
  if (!p.ok() || rows == 0) return 0;
  return round16(static_cast<size_t>(plan::backward_units(p, rows)) * static_cast<size_t>(n) * sizeof(float));
}

}  // namespace

template <typename T, typename W>
size_t rmsnorm_fwd_workspace_bytes(const T* x, int64_t x_row_stride, const W* weight, int64_t rows,
                                   int64_t n) {
  const plan::Plan p = forward_plan_for<T>(n);
  if (rows == 0 || !p.ok()) return 0;
  return split_sum_bytes<T>(p, rows, n) + staging_bytes(x, x_row_stride, rows, n) + staging_bytes(weight, n, 1, n);
}

template <typename T, typename W>
cudaError_t launch_rmsnorm_fwd(const T* x, int64_t x_row_stride, const W* weight, T* y,
                               AccT<T>* inv_rms, void* workspace, int64_t rows, int64_t n, AccT<T> eps,
                               cudaStream_t stream) {
  if (rows == 0 || n == 0) return cudaSuccess;
  const plan::Plan p = forward_plan_for<T>(n);
  if constexpr (has_fast_path<T>()) {
    if (p.ok()) {
      float* sums = static_cast<float*>(workspace);
      char* ws = static_cast<char*>(workspace) + split_sum_bytes<T>(p, rows, n);
      x = staged(x, x_row_stride, rows, n, ws, stream);
      int64_t w_stride = n;
      weight = staged(weight, w_stride, 1, n, ws, stream);
      if (p.split) return paths::split_forward<T, W>(x, x_row_stride, weight, y, inv_rms, sums, rows, n, eps, stream);
      if (p.cluster == 1) {
        return paths::fast_forward<T, W, false>(p, x, x_row_stride, weight, y, inv_rms, rows, n, eps, stream);
      }
      return paths::fast_forward<T, W, true>(p, x, x_row_stride, weight, y, inv_rms, rows, n, eps, stream);
    }
  }
  paths::fallback_forward<T, W>(x, x_row_stride, weight, y, inv_rms, rows, n, eps, stream);
  return cudaSuccess;
}

template <typename T, typename W>
size_t rmsnorm_bwd_workspace_bytes(const T* dy, int64_t dy_row_stride, const T* x, int64_t x_row_stride,
                                   const W* weight, int64_t rows, int64_t n) {
  const plan::Plan p = rows == 0 ? plan::Plan{} : backward_plan_for<T>(n);
  if (!p.ok()) return paths::fallback_workspace_bytes<T>(rows, n);
  return fast_partial_bytes<T>(p, rows, n) + split_sum_bytes<T>(p, rows, n) + staging_bytes(dy, dy_row_stride, rows, n) +
         staging_bytes(x, x_row_stride, rows, n) + staging_bytes(weight, n, 1, n);
}

template <typename T, typename W>
cudaError_t launch_rmsnorm_bwd(const T* dy, int64_t dy_row_stride, const T* x, int64_t x_row_stride,
                               const W* weight, const AccT<T>* inv_rms, T* dx, W* dw,
                               void* workspace, int64_t rows, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const plan::Plan p = rows == 0 ? plan::Plan{} : backward_plan_for<T>(n);
  if constexpr (has_fast_path<T>()) {
    if (p.ok()) {
      float* partial = static_cast<float*>(workspace);
      float* sums = reinterpret_cast<float*>(static_cast<char*>(workspace) + fast_partial_bytes<T>(p, rows, n));
      char* ws = reinterpret_cast<char*>(sums) + split_sum_bytes<T>(p, rows, n);
      dy = staged(dy, dy_row_stride, rows, n, ws, stream);
      x = staged(x, x_row_stride, rows, n, ws, stream);
      int64_t w_stride = n;
      weight = staged(weight, w_stride, 1, n, ws, stream);
      const cudaError_t err =
          p.split ? paths::split_backward<T, W>(dy, dy_row_stride, x, x_row_stride, weight, inv_rms, dx, partial, sums,
                                                rows, n, stream)
          : p.cluster == 1 ? paths::fast_backward<T, W, false>(p, dy, dy_row_stride, x, x_row_stride, weight,
                                                               inv_rms, dx, partial, rows, n, stream)
                           : paths::fast_backward<T, W, true>(p, dy, dy_row_stride, x, x_row_stride, weight,
                                                              inv_rms, dx, partial, rows, n, stream);
      if (err != cudaSuccess) return err;
      return paths::dw_from_partials<W>(partial, plan::backward_units(p, rows), n, dw, stream);
    }
  }
  paths::fallback_backward<T, W>(dy, dy_row_stride, x, x_row_stride, weight, inv_rms, dx, dw,
                                 static_cast<AccT<T>*>(workspace), rows, n, stream);
  return cudaSuccess;
}

#define RMSNORM_INSTANTIATE(T, W)                                                              \
  template size_t rmsnorm_fwd_workspace_bytes<T, W>(const T*, int64_t, const W*, int64_t, int64_t); \
  template cudaError_t launch_rmsnorm_fwd<T, W>(const T*, int64_t, const W*, T*, AccT<T>*, void*, \
                                                int64_t, int64_t, AccT<T>, cudaStream_t);       \
  template size_t rmsnorm_bwd_workspace_bytes<T, W>(const T*, int64_t, const T*, int64_t,       \
                                                    const W*, int64_t, int64_t);                \
  template cudaError_t launch_rmsnorm_bwd<T, W>(const T*, int64_t, const T*, int64_t, const W*, \
                                                const AccT<T>*, T*, W*, void*, int64_t, int64_t, \
                                                cudaStream_t);

RMSNORM_FOR_EACH_PAIR(RMSNORM_INSTANTIATE)
#undef RMSNORM_INSTANTIATE

}  // namespace rmsnorm
