// Fast path: a row held in registers by a group of threads of one CTA (several rows a CTA when the row is short).
#include "rmsnorm_paths.cuh"
#include "rmsnorm_rows.cuh"

namespace rmsnorm {
namespace paths {

template <typename T, typename W>
void rows_forward(const plan::Plan& p, const T* x, int64_t x_row_stride, const W* weight, T* y,
                  float* inv_rms, int64_t rows, int64_t n, float eps, cudaStream_t stream) {
  rows::forward<T, W, false>(p, x, x_row_stride, weight, y, inv_rms, rows, n, eps, stream);
}

template <typename T, typename W>
void rows_backward(const plan::Plan& p, const T* dy, int64_t dy_row_stride, const T* x,
                   int64_t x_row_stride, const W* weight, const float* inv_rms, T* dx,
                   float* partial, int64_t rows, int64_t n, cudaStream_t stream) {
  rows::backward<T, W, false>(p, dy, dy_row_stride, x, x_row_stride, weight, inv_rms, dx, partial,
                         rows, n, stream);
}

#define RMSNORM_INSTANTIATE(T, W)                                                              \
  template void rows_forward<T, W>(const plan::Plan&, const T*, int64_t, const W*, T*, float*, \
                                    int64_t, int64_t, float, cudaStream_t);                   \
  template void rows_backward<T, W>(const plan::Plan&, const T*, int64_t, const T*, int64_t,  \
                                     const W*, const float*, T*, float*, int64_t, int64_t,     \
                                     cudaStream_t);

RMSNORM_INSTANTIATE(float, float)
RMSNORM_INSTANTIATE(__half, __half)
RMSNORM_INSTANTIATE(__half, float)
RMSNORM_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
RMSNORM_INSTANTIATE(__nv_bfloat16, float)
#undef RMSNORM_INSTANTIATE

}  // namespace paths
}  // namespace rmsnorm
