// Fast paths: the split forward and backward of long rows (rmsnorm_plan.h, "Split"). No thread
// holds a row. split_sums_kernel sums x * x (forward) or grad_out * w * x (backward) over one slice
// of a row a CTA. split_fwd_kernel then scales one slice of a row a CTA by the row's inv_rms, taken
// from its slice sums; split_dx_kernel walks one strip of columns down a unit's consecutive rows,
// takes each row's coefficient from its slice sums, writes grad_x and keeps grad_weight's sums of
// its columns in registers, one partial row a unit. A row's slice sums are added in slice order by
// one thread, and which thread adds which element in which order depends on N only, so a row has
// the same bits alone and in any batch; grad_weight's order depends on the number of rows only.
// Preconditions (the launcher's): T is float, __half or __nv_bfloat16; n is a multiple of the
// vector width; every row and the weight start on 16-byte boundaries; rows > 0.
#include "rmsnorm_device.cuh"
#include "rmsnorm_paths.cuh"
#include "rmsnorm_plan.h"

namespace rmsnorm {
namespace paths {
namespace {

constexpr int kCta = plan::kSplitCta;
constexpr int kWarps = kCta / dev::kWarpSize;
constexpr int kSliceVpt = plan::kSplitVpt;
constexpr int kRowsInFlight = 4;  // rows of a strip whose loads are issued before the first is used
constexpr int64_t kMaxCtas = int64_t(1) << 20;  // both grids stride over their tiles beyond this

using dev::vec_of;

// sums[row * slices + s] = the sum over slice s of the row of x * x (kForward) or of
// grad_out * w * x: thread t's vectors s * kCta * kSliceVpt + v * kCta + t for v < kSliceVpt, each in
// element order, then a butterfly in the warp and the warps in order.
template <typename T, typename W, bool kForward>
__global__ void __launch_bounds__(kCta)
    split_sums_kernel(const T* __restrict__ dy,  // [rows, dy_row_stride]; unused when kForward
                      int64_t dy_row_stride,
                      const T* __restrict__ x,  // [rows, x_row_stride]
                      int64_t x_row_stride,
                      const W* __restrict__ weight,  // [n]; unused when kForward
                      float* __restrict__ sums,      // [rows, slices]
                      int64_t rows, int64_t n_vec, int64_t slices) {
  constexpr int kVec = vec_of<T>();
  using V = dev::Vec16<T, kVec>;
  using VW = dev::Vec16<W, kVec>;
  __shared__ float warp_sums[kWarps];
  const int64_t tiles = rows * slices;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t row = tile / slices;
    const int64_t first = (tile - row * slices) * (kCta * kSliceVpt) + threadIdx.x;
    V dv[kSliceVpt], xv[kSliceVpt];
#pragma unroll
    for (int v = 0; v < kSliceVpt; ++v) {
      const int64_t j = first + v * kCta;
      if (j < n_vec) {
        if constexpr (!kForward) dev::load16(dv[v], dy + row * dy_row_stride + j * kVec);
        dev::load16(xv[v], x + row * x_row_stride + j * kVec);
      } else {
        if constexpr (!kForward) dev::zero16(dv[v]);
        dev::zero16(xv[v]);
      }
    }
    float sum = 0.f;
#pragma unroll
    for (int v = 0; v < kSliceVpt; ++v) {
      if constexpr (kForward) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const float a = dev::to_acc(xv[v].v[k]);
          sum += a * a;
        }
      } else {
        const int64_t j = first + v * kCta;
        VW wv;
        if (j < n_vec) {
          dev::load16(wv, weight + j * kVec);
        } else {
          dev::zero16(wv);
        }
        sum = dev::add_gwx16(sum, dv[v], wv, xv[v]);
      }
    }
#pragma unroll
    for (int offset = dev::kWarpSize / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (threadIdx.x % dev::kWarpSize == 0) warp_sums[threadIdx.x / dev::kWarpSize] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
      float total = warp_sums[0];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) total += warp_sums[w];
      sums[tile] = total;
    }
    __syncthreads();  // warp_sums is written again by the next tile
  }
}

// Tile (row, slice): y = x * inv_rms * w over the slice's vectors (the threads' vectors of
// split_sums_kernel), inv_rms = rsqrt(the row's slice sums, in slice order, / n + eps), written by
// the CTA of slice 0. The slice's loads are issued before inv_rms is formed.
template <typename T, typename W>
__global__ void __launch_bounds__(kCta)
    split_fwd_kernel(const T* __restrict__ x,  // [rows, x_row_stride]
                     int64_t x_row_stride,
                     const W* __restrict__ weight,   // [n]
                     const float* __restrict__ sums,  // [rows, slices]
                     T* __restrict__ y,               // [rows, n]
                     float* __restrict__ inv_rms,     // [rows]
                     int64_t rows, int64_t n, int64_t slices, float eps) {
  constexpr int kVec = vec_of<T>();
  using V = dev::Vec16<T, kVec>;
  using VW = dev::Vec16<W, kVec>;
  __shared__ float row_inv;
  const int64_t n_vec = n / kVec;
  const int64_t tiles = rows * slices;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t row = tile / slices;
    const int64_t slice = tile - row * slices;
    const int64_t first = slice * (kCta * kSliceVpt) + threadIdx.x;
    V xv[kSliceVpt];
#pragma unroll
    for (int v = 0; v < kSliceVpt; ++v) {
      const int64_t j = first + v * kCta;
      if (j < n_vec) dev::load16(xv[v], x + row * x_row_stride + j * kVec);
    }
    if (threadIdx.x == 0) {
      float ss = 0.f;
      for (int64_t q = 0; q < slices; ++q) ss += sums[row * slices + q];
      const float inv = dev::rsqrt_acc(ss / static_cast<float>(n) + eps);
      row_inv = inv;
      if (slice == 0) inv_rms[row] = inv;
    }
    __syncthreads();
    const float inv = row_inv;
#pragma unroll
    for (int v = 0; v < kSliceVpt; ++v) {
      const int64_t j = first + v * kCta;
      if (j < n_vec) {
        VW w;
        dev::load16(w, weight + j * kVec);
        dev::store16(y + row * n + j * kVec, dev::scaled16(xv[v], inv, w));
      }
    }
    __syncthreads();  // row_inv is written again by the next tile
  }
}

// Tile (unit, strip): thread t owns vector column j = strip * kCta + t of the unit's rows
// [unit * rows_per_unit, +rows_per_unit). Per row: grad_x = inv * (g - x * c) with g = grad_out * w
// and c = inv^2 * (the row's slice sums, in slice order) / n; grad_weight's sum of the column adds
// grad_out * x * inv row by row, in row order, and is written to partial[unit, columns of j].
template <typename T, typename W>
__global__ void __launch_bounds__(kCta)
    split_dx_kernel(const T* __restrict__ dy,  // [rows, dy_row_stride]
                    int64_t dy_row_stride,
                    const T* __restrict__ x,  // [rows, x_row_stride]
                    int64_t x_row_stride,
                    const W* __restrict__ weight,       // [n]
                    const float* __restrict__ inv_rms,  // [rows]
                    const float* __restrict__ sums,     // [rows, slices]
                    T* __restrict__ dx,                 // [rows, n]
                    float* __restrict__ partial,        // [units, n]
                    int64_t rows, int64_t n, int64_t slices, int64_t rows_per_unit, int64_t units,
                    int64_t strips) {
  constexpr int kVec = vec_of<T>();
  using V = dev::Vec16<T, kVec>;
  using VW = dev::Vec16<W, kVec>;
  __shared__ float coef[kCta];  // c and inv of up to kCta rows of the unit at a time
  __shared__ float invs[kCta];
  const int64_t n_vec = n / kVec;
  for (int64_t tile = blockIdx.x; tile < units * strips; tile += gridDim.x) {
    const int64_t unit = tile / strips;
    const int64_t j = (tile - unit * strips) * kCta + threadIdx.x;
    const bool mine = j < n_vec;
    VW wv;
    if (mine) {
      dev::load16(wv, weight + j * kVec);
    } else {
      dev::zero16(wv);
    }
    float w[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) w[k] = static_cast<float>(dev::to_acc(wv.v[k]));
    float acc[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc[k] = 0.f;
    const int64_t first_row = unit * rows_per_unit;
    const int64_t end_row = first_row + rows_per_unit < rows ? first_row + rows_per_unit : rows;
    for (int64_t batch = first_row; batch < end_row; batch += kCta) {
      const int count = static_cast<int>(end_row - batch < kCta ? end_row - batch : kCta);
      __syncthreads();  // every thread is done with the last batch's coefficients
      if (threadIdx.x < count) {
        const int64_t r = batch + threadIdx.x;
        float s = 0.f;
        for (int64_t q = 0; q < slices; ++q) s += sums[r * slices + q];
        const float inv = inv_rms[r];
        invs[threadIdx.x] = inv;
        coef[threadIdx.x] = inv * inv * s / static_cast<float>(n);
      }
      __syncthreads();
      if (!mine) continue;
      for (int i0 = 0; i0 < count; i0 += kRowsInFlight) {
        V dv[kRowsInFlight], xv[kRowsInFlight];
#pragma unroll
        for (int i = 0; i < kRowsInFlight; ++i) {
          if (i0 + i < count) {
            const int64_t r = batch + i0 + i;
            dev::load16(dv[i], dy + r * dy_row_stride + j * kVec);
            dev::load16(xv[i], x + r * x_row_stride + j * kVec);
          }
        }
#pragma unroll
        for (int i = 0; i < kRowsInFlight; ++i) {
          if (i0 + i < count) {
            const float inv = invs[i0 + i];
            const float c = coef[i0 + i];
            V out;
#pragma unroll
            for (int k = 0; k < kVec; ++k) {
              const float d = dev::to_acc(dv[i].v[k]);
              const float xk = dev::to_acc(xv[i].v[k]);
              out.v[k] = dev::from_acc<T>(inv * (d * w[k] - xk * c));
              acc[k] += d * (xk * inv);
            }
            dev::store16(dx + (batch + i0 + i) * n + j * kVec, out);
          }
        }
      }
    }
    if (mine) {
      dev::Vec16<float, kVec> out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) out.v[k] = acc[k];
      dev::store16(partial + unit * n + j * kVec, out);
    }
  }
}

unsigned int grid_for(int64_t tiles) { return static_cast<unsigned int>(tiles < kMaxCtas ? tiles : kMaxCtas); }

}  // namespace

template <typename T, typename W>
cudaError_t split_forward(const T* x, int64_t x_row_stride, const W* weight, T* y, float* inv_rms, float* sums,
                          int64_t rows, int64_t n, float eps, cudaStream_t stream) {
  constexpr int kVec = vec_of<T>();
  const int64_t n_vec = n / kVec;
  const int64_t slices = plan::split_slices(n_vec);
  const unsigned int grid = grid_for(rows * slices);
  split_sums_kernel<T, W, true><<<grid, kCta, 0, stream>>>(nullptr, 0, x, x_row_stride, weight, sums, rows, n_vec,
                                                           slices);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  split_fwd_kernel<T, W><<<grid, kCta, 0, stream>>>(x, x_row_stride, weight, sums, y, inv_rms, rows, n, slices, eps);
  return cudaGetLastError();
}

template <typename T, typename W>
cudaError_t split_backward(const T* dy, int64_t dy_row_stride, const T* x, int64_t x_row_stride,
                           const W* weight, const float* inv_rms, T* dx, float* partial, float* sums,
                           int64_t rows, int64_t n, cudaStream_t stream) {
  constexpr int kVec = vec_of<T>();
  const int64_t n_vec = n / kVec;
  const int64_t slices = plan::split_slices(n_vec);
  split_sums_kernel<T, W, false><<<grid_for(rows * slices), kCta, 0, stream>>>(dy, dy_row_stride, x, x_row_stride,
                                                                               weight, sums, rows, n_vec, slices);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const int64_t rows_per_unit = plan::split_rows_per_unit(rows);
  const int64_t units = plan::backward_units(plan::split_layout(), rows);
  const int64_t strips = (n_vec + kCta - 1) / kCta;
  split_dx_kernel<T, W><<<grid_for(units * strips), kCta, 0, stream>>>(
      dy, dy_row_stride, x, x_row_stride, weight, inv_rms, sums, dx, partial, rows, n, slices, rows_per_unit, units,
      strips);
  return cudaGetLastError();
}

#define RMSNORM_INSTANTIATE(T, W)                                                                         \
  template cudaError_t split_forward<T, W>(const T*, int64_t, const W*, T*, float*, float*, int64_t, int64_t, \
                                           float, cudaStream_t);                                            \
  template cudaError_t split_backward<T, W>(const T*, int64_t, const T*, int64_t, const W*, const float*, \
                                            T*, float*, float*, int64_t, int64_t, cudaStream_t);
RMSNORM_FOR_EACH_FAST_PAIR(RMSNORM_INSTANTIATE)
#undef RMSNORM_INSTANTIATE

}  // namespace paths
}  // namespace rmsnorm
