// Shared, torch-free definitions for the RMSNorm kernels (CPU and CUDA).
//
//   y[r, i]     = x[r, i] * inv_rms[r] * w[i]
//   inv_rms[r]  = 1 / sqrt(mean_i(x[r, i]^2) + eps)
//
// Statistics are accumulated in AccT: float for float, half and bfloat16 input, double for
// double input. Both backends agree on that, so their results differ only by summation order.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define RMSNORM_HOST_DEVICE __host__ __device__
#else
#define RMSNORM_HOST_DEVICE
#endif

namespace rmsnorm {

// The accumulation type for an element type T.
template <typename T>
struct AccOf {
  using type = float;
};
template <>
struct AccOf<double> {
  using type = double;
};
template <typename T>
using AccT = typename AccOf<T>::type;

// Rows handled by one grad_weight partial sum. Depends on the problem only (never on the
// thread count or the device), so that grad_weight is bitwise reproducible.
RMSNORM_HOST_DEVICE inline int64_t gw_rows_per_chunk(int64_t rows, int64_t n) {
  // Aim for about 2048 column-blocks x chunks of work, at least 32 rows a chunk.
  const int64_t col_blocks = (n + 255) / 256;
  int64_t chunks = (2048 + col_blocks - 1) / col_blocks;
  if (chunks < 1) chunks = 1;
  int64_t per = (rows + chunks - 1) / chunks;
  return per < 32 ? 32 : per;
}

RMSNORM_HOST_DEVICE inline int64_t gw_num_chunks(int64_t rows, int64_t n) {
  const int64_t per = gw_rows_per_chunk(rows, n);
  return (rows + per - 1) / per;
}

}  // namespace rmsnorm
