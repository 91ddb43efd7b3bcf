// Fallback CUDA path: one block per row (grid-stride over rows), a warp-shuffle plus
// shared-memory block reduction. It takes what the fast paths do not: float64, rows too long for
// a cluster, lengths that are not a whole number of 16-byte vectors. A row is read as logical
// vectors of kVec elements (the last one partial when kVec does not divide N); the block's size
// and which thread adds which element in which order depend on N only, and aligned rows merely
// load whole vectors as one 16-byte word, so a row has the same bits alone and in any batch,
// whatever its alignment. grad_weight is reduced in two stages with a fixed order, so it is
// bitwise reproducible.
#include "rmsnorm_device.cuh"
#include "rmsnorm_paths.cuh"

namespace rmsnorm {
namespace paths {
namespace {

using dev::from_acc;
using dev::kWarpSize;
using dev::rsqrt_acc;
using dev::to_acc;

constexpr int kMaxThreads = 1024;  // a row's block may have this many threads: the kernels are bounded to it
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

// Logical vector j of a row: elements [j * kVec, min(n, (j + 1) * kVec)). kWide: the row starts on
// a 16-byte boundary, so a whole vector is one 16-byte load; otherwise (and for the partial last
// vector) its elements are loaded one by one. Elements past n are left as they are.
template <typename T, int kVec, bool kWide>
__device__ __forceinline__ void load_vec(Vec<T, kVec>& out, const T* row, int64_t j, int64_t n) {
  if (kWide && (j + 1) * kVec <= n) {
    out = reinterpret_cast<const Vec<T, kVec>*>(row)[j];
    return;
  }
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    if (j * kVec + k < n) out.v[k] = row[j * kVec + k];
  }
}

template <typename T, int kVec, bool kWide>
__device__ __forceinline__ void store_vec(T* row, int64_t j, int64_t n, const Vec<T, kVec>& in) {
  if (kWide && (j + 1) * kVec <= n) {
    reinterpret_cast<Vec<T, kVec>*>(row)[j] = in;
    return;
  }
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    if (j * kVec + k < n) row[j * kVec + k] = in.v[k];
  }
}

// y = x * inv_rms * w, one block per row. Thread t adds the squares of its logical vectors
// j = t, t + blockDim.x, ... element by element in order; the block reduction leaves the sum in
// every thread; thread 0 writes inv_rms.
template <typename T, typename W, int kVec, bool kWide>
__global__ void __launch_bounds__(kMaxThreads) rmsnorm_fwd_kernel(const T* __restrict__ x,   // [rows, x_row_stride]
                                   int64_t x_row_stride,
                                   const W* __restrict__ weight,  // [n]
                                   T* __restrict__ y,             // [rows, n]
                                   AccT<T>* __restrict__ inv_rms, // [rows]
                                   int64_t rows, int64_t n, AccT<T> eps) {
  using A = AccT<T>;
  using V = Vec<T, kVec>;
  __shared__ A shared[kWarpSize];
  const int64_t n_vec = (n + kVec - 1) / kVec;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * x_row_stride;
    T* yr = y + row * n;
    A ss = 0;
    for (int64_t j = threadIdx.x; j < n_vec; j += blockDim.x) {
      V v;
      load_vec<T, kVec, kWide>(v, xr, j, n);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        if (j * kVec + k < n) {
          const A a = to_acc(v.v[k]);
          ss += a * a;
        }
      }
    }
    ss = block_reduce_sum(ss, shared);
    const A inv = rsqrt_acc(ss / static_cast<A>(n) + eps);
    if (threadIdx.x == 0) inv_rms[row] = inv;
    for (int64_t j = threadIdx.x; j < n_vec; j += blockDim.x) {
      V v, out;
      load_vec<T, kVec, kWide>(v, xr, j, n);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        if (j * kVec + k < n) {
          out.v[k] = from_acc<T>(to_acc(v.v[k]) * inv * static_cast<A>(to_acc(weight[j * kVec + k])));
        }
      }
      store_vec<T, kVec, kWide>(yr, j, n, out);
    }
  }
}

// grad_x = inv * (g - x * inv^2 * sum(g * x) / n) with g = dy * w, one block per row, the
// logical vectors of the forward kernel; the block reduction of sum(g * x) leaves it in every
// thread.
template <typename T, typename W, int kVec, bool kWide>
__global__ void __launch_bounds__(kMaxThreads) rmsnorm_bwd_dx_kernel(const T* __restrict__ dy,  // [rows, dy_row_stride]
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
  const int64_t n_vec = (n + kVec - 1) / kVec;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* dyr = dy + row * dy_row_stride;
    const T* xr = x + row * x_row_stride;
    T* dxr = dx + row * n;
    A dot = 0;
    for (int64_t j = threadIdx.x; j < n_vec; j += blockDim.x) {
      V vd, vx;
      load_vec<T, kVec, kWide>(vd, dyr, j, n);
      load_vec<T, kVec, kWide>(vx, xr, j, n);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        if (j * kVec + k < n) {
          dot += to_acc(vd.v[k]) * static_cast<A>(to_acc(weight[j * kVec + k])) * to_acc(vx.v[k]);
        }
      }
    }
    dot = block_reduce_sum(dot, shared);
    const A inv = inv_rms[row];
    const A c = inv * inv * dot / static_cast<A>(n);
    for (int64_t j = threadIdx.x; j < n_vec; j += blockDim.x) {
      V vd, vx, out;
      load_vec<T, kVec, kWide>(vd, dyr, j, n);
      load_vec<T, kVec, kWide>(vx, xr, j, n);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        if (j * kVec + k < n) {
          const A g = to_acc(vd.v[k]) * static_cast<A>(to_acc(weight[j * kVec + k]));
          out.v[k] = from_acc<T>(inv * (g - to_acc(vx.v[k]) * c));
        }
      }
      store_vec<T, kVec, kWide>(dxr, j, n, out);
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

// True when every row of a [rows, row_stride] view starts on a 16-byte boundary. It only picks
// the width of the loads: the order of every sum is the same either way.
template <typename T>
bool rows_aligned(const T* p, int64_t row_stride, int64_t rows) {
  return aligned16(p) && (rows <= 1 || row_stride % vec_width<T>() == 0);
}

// Threads of a row's block: one per logical vector (threads_for((n + kVec - 1) / kVec)), in whole
// warps, at most kMaxThreads; a function of n only.
int threads_for(int64_t units) {
  int64_t t = (units + kWarpSize - 1) / kWarpSize * kWarpSize;
  if (t < kWarpSize) t = kWarpSize;
  if (t > kMaxThreads) t = kMaxThreads;
  return static_cast<int>(t);
}

unsigned int blocks_for(int64_t rows) {
  return static_cast<unsigned int>(rows < kMaxBlocks ? rows : kMaxBlocks);
}

// dst[r, :] = src[r, :] for a [rows, n] view of src with any row stride (0 and overlapping rows
// included): one block per row (grid-stride), threads over the row's elements.
template <typename T>
__global__ void copy_rows_kernel(const T* __restrict__ src,  // [rows, src_row_stride]
                                 int64_t src_row_stride,
                                 T* __restrict__ dst,  // [rows, n], contiguous
                                 int64_t rows, int64_t n) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dst[row * n + i] = src[row * src_row_stride + i];
  }
}

}  // namespace

template <typename T, typename W>
void fallback_forward(const T* x, int64_t x_row_stride, const W* weight, T* y,
                        AccT<T>* inv_rms, int64_t rows, int64_t n, AccT<T> eps,
                        cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  constexpr int kVec = vec_width<T>();
  const dim3 grid(blocks_for(rows));
  const int threads = threads_for((n + kVec - 1) / kVec);
  if (rows_aligned(x, x_row_stride, rows) && rows_aligned(y, n, rows)) {
    rmsnorm_fwd_kernel<T, W, kVec, true><<<grid, threads, 0, stream>>>(
        x, x_row_stride, weight, y, inv_rms, rows, n, eps);
  } else {
    rmsnorm_fwd_kernel<T, W, kVec, false><<<grid, threads, 0, stream>>>(
        x, x_row_stride, weight, y, inv_rms, rows, n, eps);
  }
}

template <typename T>
void copy_rows(const T* src, int64_t src_row_stride, int64_t rows, int64_t n, T* dst, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  copy_rows_kernel<T><<<blocks_for(rows), threads_for(n), 0, stream>>>(src, src_row_stride, dst, rows, n);
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
    const int threads = threads_for((n + kVec - 1) / kVec);
    if (rows_aligned(dy, dy_row_stride, rows) && rows_aligned(x, x_row_stride, rows) &&
        rows_aligned(dx, n, rows)) {
      rmsnorm_bwd_dx_kernel<T, W, kVec, true><<<grid, threads, 0, stream>>>(
          dy, dy_row_stride, x, x_row_stride, weight, inv_rms, dx, rows, n);
    } else {
      rmsnorm_bwd_dx_kernel<T, W, kVec, false><<<grid, threads, 0, stream>>>(
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

#define RMSNORM_INSTANTIATE(T)                                          \
  template size_t fallback_workspace_bytes<T>(int64_t, int64_t);        \
  template void copy_rows<T>(const T*, int64_t, int64_t, int64_t, T*, cudaStream_t);
RMSNORM_FOR_EACH_TYPE(RMSNORM_INSTANTIATE)
#undef RMSNORM_INSTANTIATE

}  // namespace paths
}  // namespace rmsnorm
