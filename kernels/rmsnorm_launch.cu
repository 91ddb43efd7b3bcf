// The launchers of rmsnorm_cuda.h: the one place a CUDA path is chosen. A fast path runs when
// the dtype has one (not float64), the row is a whole number of 16-byte vectors, every tensor
// keeps each row on a 16-byte boundary, and rmsnorm_plan.h has a plan for the length (a
// cluster when one CTA's registers cannot hold the row); everything else runs the fallback.
// The choice depends on N, the dtypes and the alignment, never on the number of rows.
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
bool rows_aligned(const T* p, int64_t row_stride, int64_t rows) {
  return aligned16(p) && (rows <= 1 || (row_stride * int64_t(sizeof(T))) % 16 == 0);
}

template <typename T>
int64_t vectors_in(int64_t n) {
  return n % (16 / int64_t(sizeof(T))) == 0 ? n / (16 / int64_t(sizeof(T))) : 0;
}

// The fast-path plan, or an empty one (fallback), for these tensors.
template <typename T, typename W>
plan::Plan fast_plan_forward(const T* x, int64_t x_row_stride, const W* weight, const T* y,
                             int64_t rows, int64_t n) {
  if constexpr (!has_fast_path<T>()) {
    return plan::Plan{};
  } else {
    const int64_t n_vec = vectors_in<T>(n);
    if (n_vec == 0 || !aligned16(weight) || !rows_aligned(x, x_row_stride, rows) ||
        !rows_aligned(y, n, rows)) {
      return plan::Plan{};
    }
    return plan::forward_plan(n_vec);
  }
}

template <typename T, typename W>
plan::Plan fast_plan_backward(const T* dy, int64_t dy_row_stride, const T* x, int64_t x_row_stride,
                              const W* weight, const T* dx, int64_t rows, int64_t n) {
  if constexpr (!has_fast_path<T>()) {
    return plan::Plan{};
  } else {
    const int64_t n_vec = vectors_in<T>(n);
    if (n_vec == 0 || !aligned16(weight) || !rows_aligned(dy, dy_row_stride, rows) ||
        !rows_aligned(x, x_row_stride, rows) || !rows_aligned(dx, n, rows)) {
      return plan::Plan{};
    }
    return plan::backward_plan(n_vec);
  }
}

// Bytes of grad_weight partial sums the fast backward writes (before the fallback's share).
template <typename T>
size_t fast_workspace_bytes(int64_t rows, int64_t n) {
  if (!has_fast_path<T>() || rows == 0) return 0;
  const int64_t n_vec = vectors_in<T>(n);
  if (n_vec == 0) return 0;
  const plan::Plan p = plan::backward_plan(n_vec);
  if (!p.ok()) return 0;
  return static_cast<size_t>(plan::backward_units(p, rows)) * static_cast<size_t>(n) * sizeof(float);
}

}  // namespace

template <typename T, typename W>
void launch_rmsnorm_fwd(const T* x, int64_t x_row_stride, const W* weight, T* y,
                        AccT<T>* inv_rms, int64_t rows, int64_t n, AccT<T> eps,
                        cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  const plan::Plan p = fast_plan_forward(x, x_row_stride, weight, y, rows, n);
  if constexpr (has_fast_path<T>()) {
    if (p.ok() && p.cluster == 1) {
      return paths::fast_forward<T, W, false>(p, x, x_row_stride, weight, y, inv_rms, rows, n, eps, stream);
    }
    if (p.ok()) {
      return paths::fast_forward<T, W, true>(p, x, x_row_stride, weight, y, inv_rms, rows, n, eps, stream);
    }
  }
  paths::fallback_forward<T, W>(x, x_row_stride, weight, y, inv_rms, rows, n, eps, stream);
}

template <typename T>
size_t rmsnorm_bwd_workspace_bytes(int64_t rows, int64_t n) {
  const size_t fast = fast_workspace_bytes<T>(rows, n);
  const size_t fallback = paths::fallback_workspace_bytes<T>(rows, n);
  return fast > fallback ? fast : fallback;
}

template <typename T, typename W>
void launch_rmsnorm_bwd(const T* dy, int64_t dy_row_stride, const T* x, int64_t x_row_stride,
                        const W* weight, const AccT<T>* inv_rms, T* dx, W* dw,
                        AccT<T>* workspace, int64_t rows, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const plan::Plan p = rows == 0 ? plan::Plan{}
                                 : fast_plan_backward(dy, dy_row_stride, x, x_row_stride, weight,
                                                      dx, rows, n);
  if constexpr (has_fast_path<T>()) {
    if (p.ok()) {
      if (p.cluster == 1) {
        paths::fast_backward<T, W, false>(p, dy, dy_row_stride, x, x_row_stride, weight, inv_rms, dx,
                                          workspace, rows, n, stream);
      } else {
        paths::fast_backward<T, W, true>(p, dy, dy_row_stride, x, x_row_stride, weight, inv_rms, dx,
                                         workspace, rows, n, stream);
      }
      paths::dw_from_partials<W>(workspace, plan::backward_units(p, rows), n, dw, stream);
      return;
    }
  }
  paths::fallback_backward<T, W>(dy, dy_row_stride, x, x_row_stride, weight, inv_rms, dx, dw,
                                 workspace, rows, n, stream);
}

#define RMSNORM_INSTANTIATE(T, W)                                                          \
  template void launch_rmsnorm_fwd<T, W>(const T*, int64_t, const W*, T*, AccT<T>*,        \
                                         int64_t, int64_t, AccT<T>, cudaStream_t);          \
  template void launch_rmsnorm_bwd<T, W>(const T*, int64_t, const T*, int64_t, const W*,   \
                                         const AccT<T>*, T*, W*, AccT<T>*, int64_t,        \
                                         int64_t, cudaStream_t);

RMSNORM_FOR_EACH_PAIR(RMSNORM_INSTANTIATE)
#undef RMSNORM_INSTANTIATE

#define RMSNORM_INSTANTIATE(T) template size_t rmsnorm_bwd_workspace_bytes<T>(int64_t, int64_t);
RMSNORM_FOR_EACH_TYPE(RMSNORM_INSTANTIATE)
#undef RMSNORM_INSTANTIATE

}  // namespace rmsnorm
