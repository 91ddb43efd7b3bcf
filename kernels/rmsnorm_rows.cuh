// The register-resident kernels of the fast paths (rmsnorm_rows.cu instantiates them without
// clusters, rmsnorm_cluster.cu with). A group of threads owns a row: each thread loads all of
// its 16-byte vectors before the first use (enough bytes in flight to cover memory latency),
// the row's sum comes from dev::group_sum, and the outputs are computed from the registers, so
// x and grad_out are read from memory once. Preconditions (checked by the launcher): T is
// float, __half or __nv_bfloat16; n is a multiple of the vector width; x, y, grad_out, grad_x
// and the weight start on 16-byte boundaries and every row stride keeps them there.
#pragma once

#include <type_traits>

#include "rmsnorm_cuda.h"
#include "rmsnorm_device.cuh"
#include "rmsnorm_paths.cuh"
#include "rmsnorm_plan.h"

namespace rmsnorm {
namespace rows {

using dev::vec_of;

// y = x * inv_rms * w. Row unit u (a CTA, or a cluster) handles rows u * R + group_index for
// R = blockDim.x / group, then strides by the number of units. kGroup: the row group as a
// compile-time constant (plan::FixedGroup), or 0 to take run_group.
template <typename T, typename W, int kVpt, bool kCluster, int kGroup>
__global__ void __launch_bounds__(plan::kMaxCtaThreads)
    fwd_kernel(const T* __restrict__ x,  // [rows, x_row_stride]
               int64_t x_row_stride,
               const W* __restrict__ weight,  // [n]
               T* __restrict__ y,             // [rows, n]
               float* __restrict__ inv_rms,   // [rows]
               int64_t rows, int64_t n, float eps, int run_group) {
  constexpr int kVec = vec_of<T>();
  const int group = kGroup > 0 ? kGroup : run_group;
  using V = dev::Vec16<T, kVec>;
  using VW = dev::Vec16<W, kVec>;
  // The weight is loaded with x (before the row's reduction, so its latency hides behind x's)
  // when that costs at most 16 more registers a thread; otherwise it is prefetched into L1
  // then and loaded after the reduction.
  constexpr bool kPrefetchW = kVpt * sizeof(VW) <= 64;
  // x under an L2 evict-last policy (plan's RMSNORM_FWD_X_EVICT_LAST); not in a cluster, whose kernels (reached
  // only with RMSNORM_FWD_STAGED_FROM=0) would spill the policy's registers at 4 vectors a thread.
  constexpr bool kEvictLast = RMSNORM_FWD_X_EVICT_LAST != 0 && !kCluster;
  __shared__ dev::ReduceSlots slots;
  unsigned int rank = 0, cluster_size = 1;
  if constexpr (kCluster) {
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    rank = cluster.block_rank();
    cluster_size = cluster.num_blocks();
  }
  dev::ClusterEntry<kCluster> entry(slots);  // arrive: this CTA has entered (group_sum waits before a remote write)
  const int per_unit = blockDim.x / group;
  const int lane = threadIdx.x % group;
  const int n_vec = static_cast<int>(n / kVec);  // a planned row has at most 2^17 vectors
  const int first_vec = static_cast<int>(rank) * kVpt * group + lane;
  const int64_t unit = blockIdx.x / cluster_size;
  const int64_t units = gridDim.x / cluster_size;
  dev::wait_for_previous_grid();
  dev::let_next_grid_start();
  const uint64_t policy = kEvictLast ? dev::evict_last_policy() : 0;
  int parity = 0;
  for (int64_t base = unit * per_unit; base < rows; base += units * per_unit, parity ^= 1) {
    const int64_t row = base + threadIdx.x / group;
    const bool active = row < rows;
    const T* xr = x + row * x_row_stride;
    V xv[kVpt];
    VW wv[kPrefetchW ? kVpt : 1];
#pragma unroll
    for (int v = 0; v < kVpt; ++v) {
      const int j = first_vec + v * group;
      if (active && j < n_vec) {
        if constexpr (kEvictLast) {
          dev::load16_evict_last(xv[v], xr + j * kVec, policy);
        } else {
          dev::load16(xv[v], xr + j * kVec);
        }
        if constexpr (kPrefetchW) {
          dev::load16(wv[v], weight + j * kVec);
        } else {
          dev::prefetch_l1<W, kVec>(weight + j * kVec);
        }
      } else {
        dev::zero16(xv[v]);
      }
    }
    float ss = 0.f;
#pragma unroll
    for (int v = 0; v < kVpt; ++v) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float a = dev::to_acc(xv[v].v[k]);
        ss += a * a;
      }
    }
    ss = dev::group_sum<kCluster>(ss, group, parity, slots, entry);
    const float inv = dev::rsqrt_acc(ss / static_cast<float>(n) + eps);
    if (!active) continue;
    if (lane == 0 && rank == 0) inv_rms[row] = inv;
    T* yr = y + row * n;
#pragma unroll
    for (int v = 0; v < kVpt; ++v) {
      const int j = first_vec + v * group;
      if (j < n_vec) {
        VW w;
        if constexpr (kPrefetchW) {
          w = wv[v];
        } else {
          dev::load16(w, weight + j * kVec);
        }
        dev::store16(yr + j * kVec, dev::scaled16(xv[v], inv, w));
      }
    }
  }
}

// y = x * inv_rms * w for long rows, a row (or, with kCluster, a slab of a cluster's row) a CTA of kCta
// threads (plan::kFwdStagedCta; plan::kFwdLongCta past a 16-CTA cluster of those): thread 0 copies the
// CTA's slab of the row, contiguous in x, into shared memory with the bulk-copy engine (TMA), its bytes
// counted on an mbarrier; thread t reads back its vectors j = (rank * kVpt + v) * kGroup + t for the
// squares, then again for y. dev::group_sum gives every thread the row's sum. Why the CTA size is a
// constant and each pass has a version without bounds checks: plan::kFwdStagedCta; why the bulk copy:
// plan::kFwdStagedFrom.
template <typename T, typename W, int kVpt, bool kCluster, int kCta>
__global__ void __launch_bounds__(kCta, plan::FwdStagedCtasPerSm<sizeof(T), kVpt, kCta>::value)
    fwd_staged_kernel(const T* __restrict__ x,  // [rows, x_row_stride]
                      int64_t x_row_stride,
                      const W* __restrict__ weight,  // [n]
                      T* __restrict__ y,             // [rows, n]
                      float* __restrict__ inv_rms,   // [rows]
                      int64_t rows, int64_t n, float eps) {
  constexpr int kVec = vec_of<T>();
  constexpr int kGroup = kCta;          // blockDim.x
  constexpr int kStep = kGroup * kVec;  // elements from a thread's vector v to its v + 1
  constexpr int kTile = kVpt * kGroup;  // vectors of a CTA's slab
  using V = dev::Vec16<T, kVec>;
  using VW = dev::Vec16<W, kVec>;
  static_assert(sizeof(V) == sizeof(uint4), "a staged vector is one 16-byte word");
  extern __shared__ uint4 tile[];  // [kVpt][kGroup]: vector v of thread t at v * kGroup + t, the slab in order
  __shared__ dev::ReduceSlots slots;
  __shared__ unsigned long long landed;  // mbarrier: the bytes of the slab that have landed
  unsigned int rank = 0, cluster_size = 1;
  if constexpr (kCluster) {
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    rank = cluster.block_rank();
    cluster_size = cluster.num_blocks();
  }
  dev::ClusterEntry<kCluster> entry(slots);  // arrive: this CTA has entered (group_sum waits before a remote write)
  const int lane = threadIdx.x;
  const int n_vec = static_cast<int>(n / kVec);  // a planned row has at most 2^17 vectors
  const int first_vec = static_cast<int>(rank) * kVpt * kGroup + lane;
  // This thread's vectors inside the row: the first `count`; all kVpt of them (full) but in the CTA
  // that holds the row's end.
  const int count = first_vec < n_vec ? (n_vec - first_vec + kGroup - 1) / kGroup : 0;
  const bool full = count >= kVpt;
  const unsigned int slab_bytes = dev::slab_bytes(n_vec, rank, kTile);  // 0: past the row's end
  const int64_t unit = blockIdx.x / cluster_size;
  const int64_t units = gridDim.x / cluster_size;
  const int64_t first = int64_t(first_vec) * kVec;  // its first element's column
  // (not in the long rows' kernel: 3 CTAs of 512 threads a multiprocessor leave a thread 40 registers)
  constexpr bool kLong = plan::FwdStagedCtasPerSm<sizeof(T), kVpt, kCta>::long_rows;
  constexpr bool kHoldW = plan::FwdStagedHoldW<sizeof(T)>::value && !kLong;
  // Otherwise the weight of kAhead vectors (plan::kFwdStagedWAhead 16-byte words) is on its way ahead of
  // its use: the first kAhead issued with the row's copy, each next one as a vector of y is written.
  constexpr int kAheadWords = plan::kFwdStagedWAhead * 16 / static_cast<int>(sizeof(VW));
  constexpr int kAhead = kHoldW ? kVpt : kAheadWords < kVpt ? kAheadWords : kVpt;
  dev::setup_cta_mbarriers(&landed, 1);
  dev::wait_for_previous_grid();
  dev::let_next_grid_start();
  VW wv[kAhead > 0 ? kAhead : 1];  // the weight of this thread's columns: all of them when held, else a ring
  auto load_w = [&]() {  // the first kAhead vectors' weight
#pragma unroll
    for (int v = 0; v < kAhead; ++v) {
      if (v < count) dev::load16(wv[v], weight + first + v * kStep);
    }
  };
  if constexpr (kHoldW) load_w();
  // The two passes over this thread's vectors; kFull: no bounds checks (every vector is inside).
  auto squares = [&](auto full_tag) {
    constexpr bool kFull = decltype(full_tag)::value;
    float ss = 0.f;
#pragma unroll
    for (int v = 0; v < kVpt; ++v) {
      if (kFull || v < count) {
        const V xv = *reinterpret_cast<const V*>(&tile[v * kGroup + lane]);
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const float a = dev::to_acc(xv.v[k]);
          ss += a * a;
        }
      }
    }
    return ss;
  };
  auto write = [&](auto full_tag, T* yr, float inv) {
    constexpr bool kFull = decltype(full_tag)::value;
#pragma unroll
    for (int v = 0; v < kVpt; ++v) {
      if (kFull || v < count) {
        const V xv = *reinterpret_cast<const V*>(&tile[v * kGroup + lane]);
        VW w;
        if constexpr (kHoldW) {
          w = wv[v];
        } else if constexpr (kAhead > 0) {
          w = wv[v % kAhead];
          if (v + kAhead < kVpt && (kFull || v + kAhead < count)) {
            dev::load16(wv[v % kAhead], weight + first + (v + kAhead) * kStep);
          }
        } else {
          dev::load16(w, weight + first + v * kStep);
        }
        dev::store16(yr + v * kStep, dev::scaled16(xv, inv, w));
      }
    }
  };
  int parity = 0;
  for (int64_t row = unit; row < rows; row += units, parity ^= 1) {
    // A CTA takes a second row only past plan::kMaxFwdCtas: its threads are done with the tile first.
    if (row != unit) __syncthreads();
    const T* xr = x + row * x_row_stride + first;  // thread 0's: the slab's start
    if (threadIdx.x == 0 && slab_bytes > 0) {
      dev::copy_slabs<RMSNORM_FWD_X_EVICT_LAST != 0>(dev::smem_address(&landed), slab_bytes, tile, xr);
    }
    if constexpr (!kHoldW) load_w();  // each row: the ring ends holding its last vectors' weight
    if (slab_bytes > 0) dev::wait_phase(dev::smem_address(&landed), static_cast<unsigned int>(parity));
    float ss = dev::with_extent(full, squares);
    ss = dev::group_sum<kCluster>(ss, kGroup, parity, slots, entry);
    const float inv = dev::rsqrt_acc(ss / static_cast<float>(n) + eps);
    if (lane == 0 && rank == 0) inv_rms[row] = inv;
    T* yr = y + row * n + first;
    dev::with_extent(full, write, yr, inv);
  }
}

// grad_x = inv * (g - x * inv^2 * sum(g * x) / n) with g = grad_out * w, and grad_weight's
// partial sums of grad_out * x * inv over the rows of this unit, kept in registers per column,
// added over the CTA's row groups in group order and written as partial[unit, :]. kGroup: the row
// group as a compile-time constant (plan::FixedGroup), or 0 to take run_group.
template <typename T, typename W, int kVpt, bool kCluster, int kGroup>
__global__ void __launch_bounds__(plan::kMaxCtaThreads)
    bwd_kernel(const T* __restrict__ dy,  // [rows, dy_row_stride]
               int64_t dy_row_stride,
               const T* __restrict__ x,  // [rows, x_row_stride]
               int64_t x_row_stride,
               const W* __restrict__ weight,        // [n]
               const float* __restrict__ inv_rms,   // [rows]
               T* __restrict__ dx,                  // [rows, n]
               float* __restrict__ partial,         // [units, n]
               int64_t rows, int64_t n, int run_group) {
  constexpr int kVec = vec_of<T>();
  const int group = kGroup > 0 ? kGroup : run_group;
  using V = dev::Vec16<T, kVec>;
  using VW = dev::Vec16<W, kVec>;
  extern __shared__ float dw_scratch[];  // [per_unit - 1][kVpt * kVec][group]
  __shared__ dev::ReduceSlots slots;
  unsigned int rank = 0, cluster_size = 1;
  if constexpr (kCluster) {
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    rank = cluster.block_rank();
    cluster_size = cluster.num_blocks();
  }
  dev::ClusterEntry<kCluster> entry(slots);  // arrive: this CTA has entered (group_sum waits before a remote write)
  const int per_unit = blockDim.x / group;
  const int group_index = threadIdx.x / group;
  const int lane = threadIdx.x % group;
  const int n_vec = static_cast<int>(n / kVec);  // a planned row has at most 2^17 vectors
  const int first_vec = static_cast<int>(rank) * kVpt * group + lane;
  const int64_t unit = blockIdx.x / cluster_size;
  const int64_t units = gridDim.x / cluster_size;
  float acc[kVpt][kVec];
#pragma unroll
  for (int v = 0; v < kVpt; ++v) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc[v][k] = 0.f;
  }
  // This thread's vectors of grad_out and x in row r: zeros past the row's end, or when r is past
  // the last row.
  auto load_row = [&](int64_t r, V (&dv)[kVpt], V (&xv)[kVpt]) {
#pragma unroll
    for (int v = 0; v < kVpt; ++v) {
      const int j = first_vec + v * group;
      if (r < rows && j < n_vec) {
        dev::load16(dv[v], dy + r * dy_row_stride + j * kVec);
        dev::load16(xv[v], x + r * x_row_stride + j * kVec);
      } else {
        dev::zero16(dv[v]);
        dev::zero16(xv[v]);
      }
    }
  };
  // Registers held across the row's reduction: x, grad_out and acc, and with kPipeline the next
  // row's x and grad_out, loaded while this row is reduced and written.
  constexpr bool kPipeline = plan::BwdPipeline<sizeof(T), kCluster>::value;
  V dv[kVpt], xv[kVpt];
  V next_dv[kVpt], next_xv[kVpt];
  if constexpr (kPipeline) load_row(unit * per_unit + group_index, dv, xv);
  int parity = 0;
  for (int64_t base = unit * per_unit; base < rows; base += units * per_unit, parity ^= 1) {
    const int64_t row = base + group_index;
    const bool active = row < rows;
    const int64_t next = row + units * per_unit;  // the next row of this group
    if constexpr (kPipeline) {
      load_row(next, next_dv, next_xv);
    } else {
      load_row(row, dv, xv);
      // The next row this thread handles goes into L2 while this one is reduced and written.
      if (next < rows) {
#pragma unroll
        for (int v = 0; v < kVpt; ++v) {
          const int j = first_vec + v * group;
          if (j < n_vec) {
            dev::prefetch_l2(dy + next * dy_row_stride + j * kVec);
            dev::prefetch_l2(x + next * x_row_stride + j * kVec);
          }
        }
      }
    }
    // The weight is loaded for the dot product and loaded again (an L1 hit) for grad_x.
    VW wv[kVpt];
#pragma unroll
    for (int v = 0; v < kVpt; ++v) {
      const int j = first_vec + v * group;
      if (active && j < n_vec) {
        dev::load16(wv[v], weight + j * kVec);
      } else {
        dev::zero16(wv[v]);
      }
    }
    const float inv = active ? inv_rms[row] : 0.f;
    float dot = 0.f;
#pragma unroll
    for (int v = 0; v < kVpt; ++v) dot = dev::add_gwx16(dot, dv[v], wv[v], xv[v]);
#pragma unroll
    for (int v = 0; v < kVpt; ++v) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        acc[v][k] += dev::to_acc(dv[v].v[k]) * (dev::to_acc(xv[v].v[k]) * inv);
      }
    }
    dot = dev::group_sum<kCluster>(dot, group, parity, slots, entry);
    const float c = inv * inv * dot / static_cast<float>(n);
    if (active) {
      T* dxr = dx + row * n;
#pragma unroll
      for (int v = 0; v < kVpt; ++v) {
        const int j = first_vec + v * group;
        if (j < n_vec) {
          VW w;
          dev::load16(w, weight + j * kVec);
          V out;
#pragma unroll
          for (int k = 0; k < kVec; ++k) {
            const float g = dev::to_acc(dv[v].v[k]) * static_cast<float>(dev::to_acc(w.v[k]));
            out.v[k] = dev::from_acc<T>(inv * (g - dev::to_acc(xv[v].v[k]) * c));
          }
          dev::store16(dxr + j * kVec, out);
        }
      }
    }
    if constexpr (kPipeline) {
#pragma unroll
      for (int v = 0; v < kVpt; ++v) {
        dv[v] = next_dv[v];
        xv[v] = next_xv[v];
      }
    }
  }
  if (RMSNORM_DW_PDL) dev::let_next_grid_start();
  // The CTA's row groups 1.. hand their sums to group 0, which adds them in group order.
  if (per_unit > 1) {
    if (group_index > 0) {
      float* mine = dw_scratch + int64_t(group_index - 1) * kVpt * kVec * group;
#pragma unroll
      for (int v = 0; v < kVpt; ++v) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) mine[(v * kVec + k) * group + lane] = acc[v][k];
      }
    }
    __syncthreads();
    if (group_index == 0) {
      for (int g = 1; g < per_unit; ++g) {
        const float* theirs = dw_scratch + int64_t(g - 1) * kVpt * kVec * group;
#pragma unroll
        for (int v = 0; v < kVpt; ++v) {
#pragma unroll
          for (int k = 0; k < kVec; ++k) acc[v][k] += theirs[(v * kVec + k) * group + lane];
        }
      }
    }
  }
  if (group_index == 0) {
    float* pr = partial + unit * n;  // unit < 2^20, n < 2^20
#pragma unroll
    for (int v = 0; v < kVpt; ++v) {
      const int j = first_vec + v * group;
      if (j < n_vec) {
        dev::Vec16<float, kVec> out;
#pragma unroll
        for (int k = 0; k < kVec; ++k) out.v[k] = acc[v][k];
        dev::store16(pr + j * kVec, out);
      }
    }
  }
}

// grad_x and grad_weight's partials as bwd_kernel, long rows: a persistent CTA of plan::kBwdStagedCta threads
// (a slab of a cluster's row) walks rows unit, unit + units, ...; thread 0 bulk-copies (TMA) each part of its
// slabs of grad_out and x into a ring of part buffers (plan::BwdStagedRing), counted on the buffer's mbarrier;
// a buffer takes the part a ring on once the CTA has written its grad_x (or, kRegRow, has its vectors in
// registers). Thread t owns vectors j = (rank * kVpt + v) * kGroup + t; dev::group_sum gives the row's dot.
template <typename T, typename W, int kVpt, bool kCluster>
__global__ void __launch_bounds__(plan::kBwdStagedCta, 1)  // one CTA a multiprocessor: every register to it
    bwd_staged_kernel(const T* __restrict__ dy,  // [rows, dy_row_stride]
                      int64_t dy_row_stride,
                      const T* __restrict__ x,  // [rows, x_row_stride]
                      int64_t x_row_stride,
                      const W* __restrict__ weight,       // [n]
                      const float* __restrict__ inv_rms,  // [rows]
                      T* __restrict__ dx,                 // [rows, n]
                      float* __restrict__ partial,        // [units, n]
                      int64_t rows, int64_t n) {
  constexpr int kVec = vec_of<T>();
  constexpr int kGroup = plan::kBwdStagedCta;  // blockDim.x
  constexpr int kStep = kGroup * kVec;         // elements from a thread's vector v to its v + 1
  using Ring = plan::BwdStagedRing<kVpt, sizeof(T)>;
  constexpr int kPartVpt = Ring::part_vpt;      // a thread's vectors in one part
  constexpr int kParts = Ring::parts;           // parts a row
  constexpr int kPartTile = kPartVpt * kGroup;  // vectors of one tensor's slab in a part
  constexpr int kRing = Ring::value;            // part buffers
  constexpr bool kRegRow = Ring::reg_row;       // the row's vectors in registers, its buffers refilled at once
  static_assert(kParts * kPartVpt == kVpt && kRing >= kParts && kRing <= 32, "a row's parts fit the ring");
  using V = dev::Vec16<T, kVec>;
  using VW = dev::Vec16<W, kVec>;
  static_assert(sizeof(V) == sizeof(uint4), "a staged vector is one 16-byte word");
  // [kRing][grad_out, x][kPartVpt][kGroup] vectors, then [kVpt][kVec][kGroup] float sums unless held
  extern __shared__ uint4 staged[];
  __shared__ dev::ReduceSlots slots;
  unsigned int rank = 0, cluster_size = 1;
  if constexpr (kCluster) {
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    rank = cluster.block_rank();
    cluster_size = cluster.num_blocks();
  }
  dev::ClusterEntry<kCluster> entry(slots);  // arrive: this CTA has entered (group_sum waits before a remote write)
  const int lane = threadIdx.x;
  const int n_vec = static_cast<int>(n / kVec);  // a planned row has at most 2^17 vectors
  const int first_vec = static_cast<int>(rank) * kVpt * kGroup + lane;
  // This thread's vectors inside the row: the first `count`; all kVpt of them (full) but in the CTA
  // that holds the row's end.
  const int count = first_vec < n_vec ? (n_vec - first_vec + kGroup - 1) / kGroup : 0;
  const bool full = count >= kVpt;
  const int64_t first = int64_t(first_vec) * kVec;  // the first element's column
  const int64_t unit = blockIdx.x / cluster_size;
  const int64_t units = gridDim.x / cluster_size;
  constexpr bool kHold = plan::BwdStagedHold<sizeof(T)>::value;          // the weight in registers
  constexpr bool kHoldSums = plan::BwdStagedHoldSums<sizeof(T)>::value;  // grad_weight's sums in registers
  // Buffer b: grad_out's vector u of a part at staged[2 b kPartTile + u kGroup + lane], x's kPartTile on.
  __shared__ unsigned long long landed[kRing];  // buffer b's bytes counted on landed[b]
  dev::Phases phases;
  dev::setup_cta_mbarriers(landed, kRing);
  // Bytes of each of the CTA's part slabs inside the row (0: past its end, nothing copied or awaited).
  unsigned int part_bytes[kParts];
#pragma unroll
  for (int p = 0; p < kParts; ++p) part_bytes[p] = dev::slab_bytes(n_vec, rank * kParts + p, kPartTile);
  auto inside = [&](int v) { return v < count; };
  // grad_weight's sums of this thread's columns, and their weight: registers when held, else the
  // sums in shared memory after the ring and the weight loaded with each row.
  float held[kHoldSums ? kVpt * kVec : 1];
  VW wv[kHold ? kVpt : 1] = {};  // loaded before the first row for the vectors inside it; only those are read
  float* const shared_acc = reinterpret_cast<float*>(staged + 2 * kRing * kPartTile) + lane;
  auto acc = [&](int i) -> float& {
    if constexpr (kHoldSums) {
      return held[i];
    } else {
      return shared_acc[i * kGroup];
    }
  };
#pragma unroll
  for (int i = 0; i < kVpt * kVec; ++i) acc(i) = 0.f;
  auto weight_of = [&](int v) {
    if constexpr (kHold) {
      return wv[v];
    } else {
      VW w;
      dev::load16(w, weight + first + v * kStep);
      return w;
    }
  };
  // Vector v of grad_out (dv) and x (xv): its term of the dot product, after `dot`; its grad_x (stored
  // at dxr) and grad_weight's terms.
  auto dot_vec = [&](float dot, int v, const V& dv, const V& xv) { return dev::add_gwx16(dot, dv, weight_of(v), xv); };
  auto write_vec = [&](int v, const V& dv, const V& xv, T* dxr, float inv, float c) {
    const VW w = weight_of(v);
    V out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float g = dev::to_acc(dv.v[k]) * static_cast<float>(dev::to_acc(w.v[k]));
      out.v[k] = dev::from_acc<T>(inv * (g - dev::to_acc(xv.v[k]) * c));
      acc(v * kVec + k) += dev::to_acc(dv.v[k]) * (dev::to_acc(xv.v[k]) * inv);
    }
    dev::store16(dxr + v * kStep, out);
  };
  // A pass over this thread's vectors kFrom to kFrom + kN - 1 that lie inside the row (kFull: all of them,
  // no bounds checks): f(v, dv, xv) for each vector v, its grad_out (dv) and x (xv) taken by get(v - kFrom).
  auto pass = [&](auto full_tag, auto from, auto n_tag, auto&& get, auto&& f) {
    constexpr bool kFull = decltype(full_tag)::value;
    constexpr int kFrom = decltype(from)::value;
#pragma unroll
    for (int u = 0; u < decltype(n_tag)::value; ++u) {
      if (kFull || inside(kFrom + u)) {
        V dv, xv;
        get(u, dv, xv);
        f(kFrom + u, dv, xv);
      }
    }
  };
  // Vector u of a part in the buffer whose first vector of this thread is buf.
  auto from_buffer = [](const uint4* buf) {
    return [buf](int u, V& dv, V& xv) {
      dv = *reinterpret_cast<const V*>(&buf[u * kGroup]);
      xv = *reinterpret_cast<const V*>(&buf[kPartTile + u * kGroup]);
    };
  };
  using std::integral_constant;
  using PartVpt = integral_constant<int, kPartVpt>;
  // Thread 0: part kP's slabs of the row into buffer b, after a CTA barrier that follows every thread's
  // last read of that buffer.
  auto fetch = [&](auto part, int64_t row, int b) {
    constexpr int kP = decltype(part)::value;
    if (threadIdx.x == 0 && row < rows && part_bytes[kP] > 0) {
      const int64_t col = (int64_t(rank) * kVpt + kP * kPartVpt) * kGroup * kVec;  // the part slab's first column
      dev::copy_slabs(dev::smem_address(&landed[b]), part_bytes[kP], staged + (b * 2) * kPartTile,
                      dy + row * dy_row_stride + col, staged + (b * 2 + 1) * kPartTile, x + row * x_row_stride + col);
    }
  };
  // The ring's first parts: part q of the CTA's walk (part q % kParts of its row q / kParts) into buffer q.
  dev::unrolled<kRing>([&](auto q) {
    fetch(std::integral_constant<int, decltype(q)::value % kParts>{}, unit + (decltype(q)::value / kParts) * units,
          decltype(q)::value);
  });
  if constexpr (kHold) {
#pragma unroll
    for (int v = 0; v < kVpt; ++v) {
      if (inside(v)) dev::load16(wv[v], weight + first + v * kStep);
    }
  }
  int b0 = 0;  // this row's part p is in buffer (b0 + p) % kRing
  int parity = 0;
  for (int64_t row = unit; row < rows;
       row += units, b0 = b0 + kParts < kRing ? b0 + kParts : b0 + kParts - kRing, parity ^= 1) {
    const float inv = inv_rms[row];  // on its way while this row's copies land
    auto buffer = [&](int p) { return staged + ((b0 + p) % kRing) * 2 * kPartTile + lane; };
    // Every thread waits for part kP's copies to land in its buffer.
    auto await_part = [&](auto part) {
      constexpr int kP = decltype(part)::value;
      const int b = (b0 + kP) % kRing;
      if (part_bytes[kP] > 0) phases.wait(dev::smem_address(&landed[b]), b);
    };
    // Part kP's buffer takes the part a ring on (every thread is done with it).
    auto refill = [&](auto part) {
      constexpr int kP = decltype(part)::value;
      fetch(std::integral_constant<int, (kP + kRing) % kParts>{}, row + ((kP + kRing) / kParts) * units,
            (b0 + kP) % kRing);
    };
    T* const dxr = dx + row * n + first;
    V dvs[kRegRow ? kVpt : 1], xvs[kRegRow ? kVpt : 1];  // kRegRow: the row's vectors, taken as each part lands
    auto from_registers = [&](auto v, V& dv, V& xv) {  // generic: instantiated only with kRegRow
      dv = dvs[v];
      xv = xvs[v];
    };
    float dot = 0.f;
    auto add_dot = [&](int v, const V& dv, const V& xv) { dot = dot_vec(dot, v, dv, xv); };
    if constexpr (kRegRow) {
      dev::unrolled<kParts>([&](auto part) {
        await_part(part);
        auto take = [&](int v, const V& dv, const V& xv) {
          dvs[v] = dv;
          xvs[v] = xv;
        };
        pass(std::false_type{}, integral_constant<int, decltype(part)::value * kPartVpt>{}, PartVpt{},
             from_buffer(buffer(decltype(part)::value)), take);
      });
      __syncthreads();  // every thread has taken its vectors: the buffers take the next parts at once
      dev::unrolled<kParts>(refill);
      dev::with_extent(full, pass, integral_constant<int, 0>{}, integral_constant<int, kVpt>{}, from_registers,
                       add_dot);
    } else {
      dev::unrolled<kParts>([&](auto part) {
        await_part(part);
        dev::with_extent(full, pass, integral_constant<int, decltype(part)::value * kPartVpt>{}, PartVpt{},
                         from_buffer(buffer(decltype(part)::value)), add_dot);
      });
    }
    dot = dev::group_sum<kCluster>(dot, kGroup, parity, slots, entry);
    const float c = inv * inv * dot / static_cast<float>(n);
    auto write = [&](int v, const V& dv, const V& xv) { write_vec(v, dv, xv, dxr, inv, c); };
    if constexpr (kRegRow) {
      dev::with_extent(full, pass, integral_constant<int, 0>{}, integral_constant<int, kVpt>{}, from_registers,
                       write);
    } else {
      dev::unrolled<kParts>([&](auto part) {
        dev::with_extent(full, pass, integral_constant<int, decltype(part)::value * kPartVpt>{}, PartVpt{},
                         from_buffer(buffer(decltype(part)::value)), write);
        __syncthreads();  // every thread is done with the part's buffer
        refill(part);
      });
    }
  }
  if (RMSNORM_DW_PDL) dev::let_next_grid_start();
  float* const pr = partial + unit * n + first;  // unit < 2^20, n < 2^20
#pragma unroll
  for (int v = 0; v < kVpt; ++v) {
    if (inside(v)) {
      dev::Vec16<float, kVec> out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) out.v[k] = acc(v * kVec + k);
      dev::store16(pr + v * kStep, out);
    }
  }
}

// Shared memory the backward kernel needs beyond its static slots.
inline size_t bwd_scratch_bytes(const plan::Plan& p, int vec) {
  return static_cast<size_t>(p.cta / p.group - 1) * p.vpt * vec * p.group * sizeof(float);
}

// The row groups a launcher has kernels for with the group fixed at compile time.
template <int... kGroups>
struct Groups {};

// go(vpt, group) for the group fixed at compile time that is the plan's group (when it is one of kGroups
// and plan::FixedGroup allows it), else for group 0 (the kernel that reads the group at run time); go
// launches the kernel of that vpt and group.
template <typename Vpt, typename Go, int... kGroups>
cudaError_t with_group(int group, Vpt vpt, Go go, Groups<kGroups...>) {
  cudaError_t result = cudaErrorInvalidValue;
  auto one = [&](auto group_tag) {  // true where it launched
    constexpr int kGroup = decltype(group_tag)::value;
    if constexpr (plan::FixedGroup<kGroup>::value) {
      if (group == kGroup) {
        result = go(vpt, group_tag);
        return true;
      }
    }
    return false;
  };
  if ((one(std::integral_constant<int, kGroups>{}) || ...)) return result;
  return go(vpt, std::integral_constant<int, 0>{});
}

// Launch one kernel of this family with the plan's CTA size and, when kCluster, its cluster;
// pdl: allow it to start while the kernel before it finishes (dev::wait_for_previous_grid).
template <bool kCluster, typename Kernel, typename... Args>
cudaError_t launch(Kernel kernel, const plan::Plan& p, int64_t units, size_t smem, bool pdl, cudaStream_t stream,
                   Args... args) {
  return dev::launch_kernel(kernel, dim3(static_cast<unsigned int>(units * p.cluster)),
                            dim3(static_cast<unsigned int>(p.cta)), smem, kCluster ? p.cluster : 0, pdl, stream,
                            args...);
}

template <typename T, typename W, bool kCluster>
cudaError_t forward(const plan::Plan& p, const T* x, int64_t x_row_stride, const W* weight, T* y,
             float* inv_rms, int64_t rows, int64_t n, float eps, cudaStream_t stream) {
  const int64_t units = plan::forward_units(p, rows);
  if (p.staged) {
    auto go = [&](auto k) {
      return launch<kCluster>(k, p, units, plan::forward_smem_bytes(p), true, stream, x, x_row_stride, weight, y,
                              inv_rms, rows, n, eps);
    };
    using plan::kFwdLongCta, plan::kFwdLongVpt, plan::kFwdStagedCta, plan::kFwdStagedVpt;
    if (p.vpt == kFwdStagedVpt && p.cta == kFwdStagedCta) {
      return go(fwd_staged_kernel<T, W, kFwdStagedVpt, kCluster, kFwdStagedCta>);
    }
    if constexpr (kCluster) {  // only rows longer than a 16-CTA cluster of those
      if (p.vpt == kFwdLongVpt && p.cta == kFwdLongCta) {
        return go(fwd_staged_kernel<T, W, kFwdLongVpt, kCluster, kFwdLongCta>);
      }
    }
    return cudaErrorInvalidValue;  // no kernel for this plan
  }
  auto go = [&](auto vpt, auto group) {
    return launch<kCluster>(fwd_kernel<T, W, decltype(vpt)::value, kCluster, decltype(group)::value>, p, units,
                            plan::forward_smem_bytes(p), true, stream, x, x_row_stride, weight, y, inv_rms, rows, n,
                            eps, p.group);
  };
  using std::integral_constant;
  // The groups forward_plan makes for each vpt (2 for short rows, RMSNORM_FWD_SHORT_TO; plan::kFwdPrefVpt = 4,
  // plan::kFwdMaxVpt = 8).
  if constexpr (kCluster) {
    if (p.vpt == plan::kFwdClusterVpt) {
      return with_group(p.group, integral_constant<int, plan::kFwdClusterVpt>{}, go, Groups<512, 1024>{});
    }
  } else {
    switch (p.vpt) {
      case 1:
        return with_group(p.group, integral_constant<int, 1>{}, go, Groups<>{});
      case 2:
        return with_group(p.group, integral_constant<int, 2>{}, go, Groups<32, 64, 128>{});
      case 4:
        return with_group(p.group, integral_constant<int, 4>{}, go, Groups<32, 64, 128, 256, 512>{});
      case 8:
        return with_group(p.group, integral_constant<int, 8>{}, go, Groups<512>{});
      default:
        break;
    }
  }
  return cudaErrorInvalidValue;  // no kernel for this plan
}

template <typename T, typename W, bool kCluster>
cudaError_t backward(const plan::Plan& p, const T* dy, int64_t dy_row_stride, const T* x,
                     int64_t x_row_stride, const W* weight, const float* inv_rms, T* dx, float* partial,
                     int64_t rows, int64_t n, cudaStream_t stream) {
  const int64_t units = plan::backward_units(p, rows);
  if (p.staged) {
    constexpr int kVpt = plan::kBwdStagedVpt;
    auto go = [&](auto k) {
      return launch<kCluster>(k, p, units, static_cast<size_t>(plan::backward_staged_bytes(p, vec_of<T>())), false,
                              stream, dy, dy_row_stride, x, x_row_stride, weight, inv_rms, dx, partial, rows, n);
    };
    if (p.vpt == kVpt) return go(bwd_staged_kernel<T, W, kVpt, kCluster>);
    if constexpr (kCluster && sizeof(T) == 4) {  // twice the vectors a thread: 4-byte rows past a 16-CTA cluster
      if (p.vpt == 2 * kVpt) return go(bwd_staged_kernel<T, W, 2 * kVpt, kCluster>);
    }
    return cudaErrorInvalidValue;  // no kernel for this plan
  }
  const size_t smem = bwd_scratch_bytes(p, vec_of<T>());
  auto go = [&](auto vpt, auto group) {
    return launch<kCluster>(bwd_kernel<T, W, decltype(vpt)::value, kCluster, decltype(group)::value>, p, units, smem,
                            false, stream, dy, dy_row_stride, x, x_row_stride, weight, inv_rms, dx, partial, rows, n,
                            p.group);
  };
  using std::integral_constant;
  if constexpr (kCluster) {
    if (p.vpt == plan::kBwdClusterVpt) {
      return with_group(p.group, integral_constant<int, plan::kBwdClusterVpt>{}, go, Groups<512, 1024>{});
    }
  } else {
    if (p.vpt == 1) return with_group(p.group, integral_constant<int, 1>{}, go, Groups<>{});
    if (p.vpt == 2) {
      return with_group(p.group, integral_constant<int, 2>{}, go, Groups<32, 64, 128, 256, 512>{});
    }
  }
  return cudaErrorInvalidValue;  // no kernel for this plan
}

}  // namespace rows

namespace paths {

template <typename T, typename W, bool kCluster>
cudaError_t fast_forward(const plan::Plan& p, const T* x, int64_t x_row_stride, const W* weight, T* y,
                         float* inv_rms, int64_t rows, int64_t n, float eps, cudaStream_t stream) {
  return rows::forward<T, W, kCluster>(p, x, x_row_stride, weight, y, inv_rms, rows, n, eps, stream);
}

template <typename T, typename W, bool kCluster>
cudaError_t fast_backward(const plan::Plan& p, const T* dy, int64_t dy_row_stride, const T* x,
                          int64_t x_row_stride, const W* weight, const float* inv_rms, T* dx,
                          float* partial, int64_t rows, int64_t n, cudaStream_t stream) {
  return rows::backward<T, W, kCluster>(p, dy, dy_row_stride, x, x_row_stride, weight, inv_rms, dx, partial,
                                 rows, n, stream);
}

}  // namespace paths
}  // namespace rmsnorm

// Explicit instantiation of a fast path (kCluster = CLUSTER) for one (T, W) pair: each of
// rmsnorm_rows.cu and rmsnorm_cluster.cu expands it for every fast pair, so the two build apart.
#define RMSNORM_INSTANTIATE_FAST_PATH(T, W, CLUSTER)                                             \
  template cudaError_t rmsnorm::paths::fast_forward<T, W, CLUSTER>(                              \
      const rmsnorm::plan::Plan&, const T*, int64_t, const W*, T*, float*, int64_t, int64_t,     \
      float, cudaStream_t);                                                                      \
  template cudaError_t rmsnorm::paths::fast_backward<T, W, CLUSTER>(                             \
      const rmsnorm::plan::Plan&, const T*, int64_t, const T*, int64_t, const W*, const float*,  \
      T*, float*, int64_t, int64_t, cudaStream_t);
