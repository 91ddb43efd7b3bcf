// Fallback CUDA path: one block per row (grid-stride over rows), a warp-shuffle plus
// shared-memory block reduction, 16-byte vector loads and stores when every row is aligned,
// and a scalar partial-tile path for the columns left over. It takes what the fast paths do
// not: float64, rows too long for a cluster, lengths that are not a whole number of 16-byte
// vectors, misaligned or oddly strided rows. grad_weight is reduced in two stages with a fixed
// order, so it is bitwise reproducible.
#include "rmsnorm_device.cuh"
#include "rmsnorm_paths.cuh"

namespace rmsnorm {
namespace paths {
namespace {

using dev::from_acc;
using dev::kWarpSize;
using dev::rsqrt_acc;
using dev::to_acc;

constexpr int kMaxThreads = 1024;
constexpr int64_t kMaxBlocks = int64_t(1) << 20;  // grid-stride beyond this many rows
constexpr int kDwThreads = 256;

template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Vec {
  T v[kVec];
};

// Sum of v over the block. Every thread returns the total; shared (kWarpSize entries) may be
// reused as soon as this returns (the trailing barrier guards it).
template <typename A>
__device__ A block_reduce_sum(A v, A* shared) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int num_warps = (blockDim.x + kWarpSize - 1) / kWarpSize;
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < num_warps ? shared[lane] : A(0);
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      v += __shfl_down_sync(0xffffffffu, v, offset);
    }
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const A total = shared[0];
  __syncthreads();
  return total;
}

// y = x * inv_rms * w, one block per row. Threads stride over the row's kVec-wide vectors,
// then over the scalar tail (n % kVec columns); the block reduction leaves the sum of
// squares in every thread; thread 0 writes inv_rms.
template <typename T, typename W, int kVec>
__global__ void rmsnorm_fwd_kernel(const T* __restrict__ x,   // [rows, x_row_stride]
                                   int64_t x_row_stride,
                                   const W* __restrict__ weight,  // [n]
                                   T* __restrict__ y,             // [rows, n]
                                   AccT<T>* __restrict__ inv_rms, // [rows]
                                   int64_t rows, int64_t n, AccT<T> eps) {
  using A = AccT<T>;
  using V = Vec<T, kVec>;
  __shared__ A shared[kWarpSize];
  const int64_t n_vec = n / kVec;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * x_row_stride;
    T* yr = y + row * n;
    A ss = 0;
    for (int64_t j = threadIdx.x; j < n_vec; j += blockDim.x) {
      const V v = reinterpret_cast<const V*>(xr)[j];
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const A a = to_acc(v.v[k]);
        ss += a * a;
      }
    }
    for (int64_t i = n_vec * kVec + threadIdx.x; i < n; i += blockDim.x) {
      const A a = to_acc(xr[i]);
      ss += a * a;
    }
    ss = block_reduce_sum(ss, shared);
    const A inv = rsqrt_acc(ss / static_cast<A>(n) + eps);
    if (threadIdx.x == 0) inv_rms[row] = inv;
    for (int64_t j = threadIdx.x; j < n_vec; j += blockDim.x) {
      const V v = reinterpret_cast<const V*>(xr)[j];
      V out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        out.v[k] = from_acc<T>(to_acc(v.v[k]) * inv * static_cast<A>(to_acc(weight[j * kVec + k])));
      }
      reinterpret_cast<V*>(yr)[j] = out;
    }
    for (int64_t i = n_vec * kVec + threadIdx.x; i < n; i += blockDim.x) {
      yr[i] = from_acc<T>(to_acc(xr[i]) * inv * static_cast<A>(to_acc(weight[i])));
    }
  }
}

// grad_x = inv * (g - x * inv^2 * sum(g * x) / n) with g = dy * w, one block per row; the
// block reduction of sum(g * x) leaves it in every thread.
template <typename T, typename W, int kVec>
__global__ void rmsnorm_bwd_dx_kernel(const T* __restrict__ dy,  // [rows, dy_row_stride]
                                      int64_t dy_row_stride,
                                      const T* __restrict__ x,   // [rows, x_row_stride]
                                      int64_t x_row_stride,
                                      const W* __restrict__ weight,         // [n]
                                      const AccT<T>* __restrict__ inv_rms,  // [rows]
                                      T* __restrict__ dx,                   // [rows, n]
                                      int64_t rows, int64_t n) {
  using A = AccT<T>;
  using V = Vec<T, kVec>;
  __shared__ A shared[kWarpSize];
  const int64_t n_vec = n / kVec;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* dyr = dy + row * dy_row_stride;
    const T* xr = x + row * x_row_stride;
    T* dxr = dx + row * n;
    A dot = 0;
    for (int64_t j = threadIdx.x; j < n_vec; j += blockDim.x) {
      const V vd = reinterpret_cast<const V*>(dyr)[j];
      const V vx = reinterpret_cast<const V*>(xr)[j];
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        dot += to_acc(vd.v[k]) * static_cast<A>(to_acc(weight[j * kVec + k])) * to_acc(vx.v[k]);
      }
    }
    for (int64_t i = n_vec * kVec + threadIdx.x; i < n; i += blockDim.x) {
      dot += to_acc(dyr[i]) * static_cast<A>(to_acc(weight[i])) * to_acc(xr[i]);
    }
    dot = block_reduce_sum(dot, shared);
    const A inv = inv_rms[row];
    const A c = inv * inv * dot / static_cast<A>(n);
    for (int64_t j = threadIdx.x; j < n_vec; j += blockDim.x) {
      const V vd = reinterpret_cast<const V*>(dyr)[j];
      const V vx = reinterpret_cast<const V*>(xr)[j];
      V out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const A g = to_acc(vd.v[k]) * static_cast<A>(to_acc(weight[j * kVec + k]));
        out.v[k] = from_acc<T>(inv * (g - to_acc(vx.v[k]) * c));
      }
      reinterpret_cast<V*>(dxr)[j] = out;
    }
    for (int64_t i = n_vec * kVec + threadIdx.x; i < n; i += blockDim.x) {
      const A g = to_acc(dyr[i]) * static_cast<A>(to_acc(weight[i]));
      dxr[i] = from_acc<T>(inv * (g - to_acc(xr[i]) * c));
    }
  }
}

// grad_weight stage 1: block (blockIdx.x, blockIdx.y) owns columns [blockIdx.x * 256, +256)
// of chunk blockIdx.y; each thread sums its column over the chunk's rows in row order.
template <typename T>
__global__ void rmsnorm_bwd_dw_partial_kernel(const T* __restrict__ dy,  // [rows, dy_row_stride]
                                              int64_t dy_row_stride,
                                              const T* __restrict__ x,   // [rows, x_row_stride]
                                              int64_t x_row_stride,
                                              const AccT<T>* __restrict__ inv_rms,  // [rows]
                                              AccT<T>* __restrict__ partial,  // [chunks, n]
                                              int64_t rows, int64_t n, int64_t rows_per_chunk) {
  using A = AccT<T>;
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= n) return;
  const int64_t chunk = blockIdx.y;
  const int64_t r_begin = chunk * rows_per_chunk;
  const int64_t r_end = r_begin + rows_per_chunk < rows ? r_begin + rows_per_chunk : rows;
  A acc = 0;
  for (int64_t r = r_begin; r < r_end; ++r) {
    acc += to_acc(dy[r * dy_row_stride + col]) * (to_acc(x[r * x_row_stride + col]) * inv_rms[r]);
  }
  partial[chunk * n + col] = acc;
}

// grad_weight stage 2: dw[col] = sum over chunks of partial[chunk, col], in chunk order;
// zero chunks (zero rows) gives zeros.
template <typename T, typename W>
__global__ void rmsnorm_bwd_dw_reduce_kernel(const AccT<T>* __restrict__ partial,  // [chunks, n]
                                             W* __restrict__ dw,                    // [n]
                                             int64_t chunks, int64_t n) {
  using A = AccT<T>;
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= n) return;
  A acc = 0;
  for (int64_t k = 0; k < chunks; ++k) acc += partial[k * n + col];
  dw[col] = from_acc<W>(acc);
}

template <typename T>
constexpr int vec_width() {
  return 16 / sizeof(T);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// True when every row of a [rows, row_stride] view starts on a 16-byte boundary.
template <typename T>
bool rows_aligned(const T* p, int64_t row_stride, int64_t rows) {
  return aligned16(p) && (rows <= 1 || row_stride % vec_width<T>() == 0);
}

int threads_for(int64_t units) {
  int64_t t = (units + kWarpSize - 1) / kWarpSize * kWarpSize;
  if (t < kWarpSize) t = kWarpSize;
  if (t > kMaxThreads) t = kMaxThreads;
  return static_cast<int>(t);
}

unsigned int blocks_for(int64_t rows) {
  return static_cast<unsigned int>(rows < kMaxBlocks ? rows : kMaxBlocks);
}

}  // namespace

template <typename T, typename W>
void fallback_forward(const T* x, int64_t x_row_stride, const W* weight, T* y,
                        AccT<T>* inv_rms, int64_t rows, int64_t n, AccT<T> eps,
                        cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  constexpr int kVec = vec_width<T>();
  const dim3 grid(blocks_for(rows));
  if (rows_aligned(x, x_row_stride, rows) && rows_aligned(y, n, rows)) {
    rmsnorm_fwd_kernel<T, W, kVec><<<grid, threads_for(n / kVec), 0, stream>>>(
        x, x_row_stride, weight, y, inv_rms, rows, n, eps);
  } else {
    rmsnorm_fwd_kernel<T, W, 1><<<grid, threads_for(n), 0, stream>>>(
        x, x_row_stride, weight, y, inv_rms, rows, n, eps);
  }
}

template <typename T>
size_t fallback_workspace_bytes(int64_t rows, int64_t n) {
  return static_cast<size_t>(gw_num_chunks(rows, n)) * static_cast<size_t>(n) * sizeof(AccT<T>);
}

template <typename T, typename W>
void fallback_backward(const T* dy, int64_t dy_row_stride, const T* x, int64_t x_row_stride,
                        const W* weight, const AccT<T>* inv_rms, T* dx, W* dw,
                        AccT<T>* workspace, int64_t rows, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kVec = vec_width<T>();
  if (rows > 0) {
    const dim3 grid(blocks_for(rows));
    if (rows_aligned(dy, dy_row_stride, rows) && rows_aligned(x, x_row_stride, rows) &&
        rows_aligned(dx, n, rows)) {
      rmsnorm_bwd_dx_kernel<T, W, kVec><<<grid, threads_for(n / kVec), 0, stream>>>(
          dy, dy_row_stride, x, x_row_stride, weight, inv_rms, dx, rows, n);
    } else {
      rmsnorm_bwd_dx_kernel<T, W, 1><<<grid, threads_for(n), 0, stream>>>(
          dy, dy_row_stride, x, x_row_stride, weight, inv_rms, dx, rows, n);
    }
  }
  const int64_t per = gw_rows_per_chunk(rows, n);
  const int64_t chunks = gw_num_chunks(rows, n);
  const unsigned int col_blocks = static_cast<unsigned int>((n + kDwThreads - 1) / kDwThreads);
  if (chunks > 0) {
    rmsnorm_bwd_dw_partial_kernel<T><<<dim3(col_blocks, static_cast<unsigned int>(chunks)),
                                        kDwThreads, 0, stream>>>(
        dy, dy_row_stride, x, x_row_stride, inv_rms, workspace, rows, n, per);
  }
  rmsnorm_bwd_dw_reduce_kernel<T, W><<<col_blocks, kDwThreads, 0, stream>>>(workspace, dw,
                                                                            chunks, n);
}

#define RMSNORM_INSTANTIATE(T, W)                                                          \
  template void fallback_forward<T, W>(const T*, int64_t, const W*, T*, AccT<T>*, int64_t,  \
                                       int64_t, AccT<T>, cudaStream_t);                     \
  template void fallback_backward<T, W>(const T*, int64_t, const T*, int64_t, const W*,     \
                                        const AccT<T>*, T*, W*, AccT<T>*, int64_t, int64_t, \
                                        cudaStream_t);

RMSNORM_FOR_EACH_PAIR(RMSNORM_INSTANTIATE)
#undef RMSNORM_INSTANTIATE

#define RMSNORM_INSTANTIATE(T) template size_t fallback_workspace_bytes<T>(int64_t, int64_t);
RMSNORM_FOR_EACH_TYPE(RMSNORM_INSTANTIATE)
#undef RMSNORM_INSTANTIATE

}  // namespace paths
}  // namespace rmsnorm
