// Device helpers shared by every CUDA path: accumulation-type conversions, 16-byte vectors,
// and the reduction of one row's partial sums over a row group, a CTA and a cluster; and, host
// side, the launcher of the kernels that run in clusters or as programmatic dependents.
#pragma once

#include <cooperative_groups.h>
#include <cstdint>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "rmsnorm_common.h"
#include "rmsnorm_plan.h"

namespace rmsnorm {
namespace dev {

constexpr int kWarpSize = 32;

template <typename T>
__device__ __forceinline__ AccT<T> to_acc(T v) {
  return static_cast<AccT<T>>(v);
}
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T, typename A>
__device__ __forceinline__ T from_acc(A v) {
  return static_cast<T>(v);
}
template <>
__device__ __forceinline__ __half from_acc<__half, float>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16, float>(float v) {
  return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float rsqrt_acc(float v) { return rsqrtf(v); }
__device__ __forceinline__ double rsqrt_acc(double v) { return rsqrt(v); }

// kN elements of T moved as whole 16-byte words (sizeof must be a multiple of 16; the address
// only needs 16-byte alignment, so a float vector of 8 is two 16-byte loads).
template <typename T, int kN>
struct alignas(16) Vec16 {
  static_assert(sizeof(T) * kN % 16 == 0, "a Vec16 is whole 16-byte words");
  static constexpr int kWords = sizeof(T) * kN / 16;
  T v[kN];
};

// Elements of T in one 16-byte vector (the fast paths' unit of a row).
template <typename T>
__host__ __device__ constexpr int vec_of() {
  return 16 / sizeof(T);
}

// y = x * inv * w over one vector, element by element: the forward's output on every fast path (a
// row's bits must not depend on which path its length takes).
template <typename T, typename W, int kN>
__device__ __forceinline__ Vec16<T, kN> scaled16(const Vec16<T, kN>& x, float inv, const Vec16<W, kN>& w) {
  Vec16<T, kN> out;
#pragma unroll
  for (int k = 0; k < kN; ++k) out.v[k] = from_acc<T>(to_acc(x.v[k]) * inv * static_cast<float>(to_acc(w.v[k])));
  return out;
}

// acc + the sum of grad_out * w * x over one vector, element by element in order: the backward's row
// sum on every fast path.
template <typename T, typename W, int kN>
__device__ __forceinline__ float add_gwx16(float acc, const Vec16<T, kN>& d, const Vec16<W, kN>& w,
                                           const Vec16<T, kN>& x) {
#pragma unroll
  for (int k = 0; k < kN; ++k) acc += to_acc(d.v[k]) * static_cast<float>(to_acc(w.v[k])) * to_acc(x.v[k]);
  return acc;
}

template <typename T, int kN>
__device__ __forceinline__ void load16(Vec16<T, kN>& out, const T* p) {
  const uint4* src = reinterpret_cast<const uint4*>(p);
  uint4* dst = reinterpret_cast<uint4*>(out.v);
#pragma unroll
  for (int i = 0; i < Vec16<T, kN>::kWords; ++i) dst[i] = src[i];
}

template <typename T, int kN>
__device__ __forceinline__ void store16(T* p, const Vec16<T, kN>& in) {
  uint4* dst = reinterpret_cast<uint4*>(p);
  const uint4* src = reinterpret_cast<const uint4*>(in.v);
#pragma unroll
  for (int i = 0; i < Vec16<T, kN>::kWords; ++i) dst[i] = src[i];
}

// An L2 policy under which the lines a load or bulk copy brings in are evicted last (plan's
// RMSNORM_FWD_X_EVICT_LAST).
__device__ __forceinline__ uint64_t evict_last_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// load16 with L1 and L2 told to evict the lines last (policy: evict_last_policy()).
template <typename T, int kN>
__device__ __forceinline__ void load16_evict_last(Vec16<T, kN>& out, const T* p, uint64_t policy) {
  uint4* dst = reinterpret_cast<uint4*>(out.v);
#pragma unroll
  for (int i = 0; i < Vec16<T, kN>::kWords; ++i) {
    asm("ld.global.L1::evict_last.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(dst[i].x), "=r"(dst[i].y), "=r"(dst[i].z), "=r"(dst[i].w)
        : "l"(reinterpret_cast<const char*>(p) + 16 * i), "l"(policy));
  }
}

// Ask L1 for the 16-byte words of a vector now, so that a later load of it is a cache hit
// (no registers held meanwhile).
template <typename T, int kN>
__device__ __forceinline__ void prefetch_l1(const T* p) {
#pragma unroll
  for (int i = 0; i < Vec16<T, kN>::kWords; ++i) {
    asm volatile("prefetch.global.L1 [%0];" ::"l"(reinterpret_cast<const char*>(p) + 16 * i));
  }
}

// Ask L2 for the 16 bytes at p now (a later pass's data; no registers held meanwhile).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Programmatic dependent launch (sm_90): a kernel launched with programmatic stream serialization
// may start while the kernel before it in the stream is finishing; it must wait for that kernel's
// completion (and its memory) before it reads anything, and may let the next one start early.
// Without the launch attribute both are no-ops. The forward kernels of the fast paths are launched
// so, and grad_weight's final kernel (RMSNORM_DW_PDL, below); the backward's kernel before it is
// not. On the H200 (973f852) it took decode under CUDA graphs, bf16,
// from 2.09 / 2.36 / 2.49 / 3.69 us to 1.76 / 1.81 / 1.90 / 3.21 us at M = 1 / 8 / 64 / 512,
// N = 4096 (N = 8192: 2.47-4.72 to 2.06-4.39), the forward's GB/s unchanged. RMSNORM_PDL=0
// leaves them out.
#ifndef RMSNORM_PDL
#define RMSNORM_PDL 1
#endif
// 1: grad_weight's final kernel (rmsnorm_dw.cu) is launched as a programmatic dependent of the
// backward kernel before it, which lets it start once that kernel's CTAs have done their last row
// (let_next_grid_start, before they write their partial sums); it waits for that kernel to finish
// (wait_for_previous_grid) before it reads them. On the H200 (one run of benchmarks/variants.py,
// users' path, backward) it was at or above the figure without it at each of 12 shapes, by 0.00-0.02
// of the copy (bf16 N = 16K 0.77 -> 0.78, fp32 8K 0.88 -> 0.90). A CTA of 64 threads (more CTAs)
// with 16 loads in flight a thread made the final kernel slower (11.8 us against 9.6 at bf16 64K).
#ifndef RMSNORM_DW_PDL
#define RMSNORM_DW_PDL 1
#endif
__device__ __forceinline__ void wait_for_previous_grid() {
#if RMSNORM_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void let_next_grid_start() {
#if RMSNORM_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// A pass of the staged kernels over a thread's vectors, f(extent, args...), run in its version
// without bounds checks (extent std::true_type) when full, every vector inside the row, else in its
// checked one (std::false_type). Both versions are compiled; the choice is one branch a call.
template <typename F, typename... Args>
__device__ __forceinline__ auto with_extent(bool full, F& f, Args... args) {
  if (full) return f(std::true_type{}, args...);
  return f(std::false_type{}, args...);
}

// All-zero bits: 0.0 in every floating type used here.
template <typename T, int kN>
__device__ __forceinline__ void zero16(Vec16<T, kN>& out) {
  uint4* dst = reinterpret_cast<uint4*>(out.v);
#pragma unroll
  for (int i = 0; i < Vec16<T, kN>::kWords; ++i) dst[i] = make_uint4(0u, 0u, 0u, 0u);
}

// How the CTAs of a cluster exchange a row's partial sums. 1: each CTA stores its total into every
// peer's slot with st.async, which counts the bytes on the peer's mbarrier, and waits on its own
// mbarrier for the cluster's totals: no cluster-wide barrier a row. 0: plain stores into the peers'
// slots, then cluster.sync(), which compiles to MEMBAR.ALL.GPU (this thread's outstanding stores and
// prefetches drained first), a cluster barrier and CCTL.IVALL (L1, and the weight cached there,
// invalidated) on every row (SASS of 2938340's bwd_kernel<bf16, bf16, 2, true>).
#ifndef RMSNORM_CLUSTER_MBARRIER
#define RMSNORM_CLUSTER_MBARRIER 1
#endif

// Scratch of group_sum: per-warp totals and the cluster's CTA totals, each double-buffered by the
// parity of the row-group iteration, so one CTA barrier per row suffices (a thread can only
// overwrite a slot of parity p after every thread has passed the next barrier, that is, after
// every thread has read the slot), and the mbarriers that count the CTA totals' bytes, one a parity.
struct ReduceSlots {
  float warp[2][kWarpSize];
  float cta[2][16];  // the cluster's CTA totals, by rank, pushed here by each CTA
  unsigned long long arrived[2];  // mbarriers: the bytes of cta[parity] that have landed
};

__device__ __forceinline__ unsigned int smem_address(const void* p) {
  return static_cast<unsigned int>(__cvta_generic_to_shared(p));
}

// One thread, before any thread uses them: set up `count` mbarriers (bars[0] to bars[count - 1]) of one
// arrival a phase, the setup made visible to the cluster and to the bulk-copy engine. The CTA's threads
// (or the cluster's) wait on them only after a barrier that follows this.
__device__ __forceinline__ void init_mbarriers(unsigned long long* bars, int count) {
  for (int i = 0; i < count; ++i) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_address(&bars[i])) : "memory");
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Every thread of the CTA: thread 0 sets up `count` mbarriers (init_mbarriers), and no thread goes on
// before that (each may wait on them next).
__device__ __forceinline__ void setup_cta_mbarriers(unsigned long long* bars, int count) {
  if (threadIdx.x == 0) init_mbarriers(bars, count);
  __syncthreads();
}

// Wait until the phase of parity `phase` of the mbarrier at shared address bar has completed.
__device__ __forceinline__ void wait_phase(unsigned int bar, unsigned int phase) {
  asm volatile(
      "{\n\t.reg .pred done;\n"
      "WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra WAIT_%=;\n}" ::"r"(bar),
      "r"(phase)
      : "memory");
}

// The parity of the phase to wait for next of each of up to 32 mbarriers (bit i: the i-th): wait(bar, i)
// waits for that phase of the mbarrier at shared address bar, then expects the one after. Every phase
// waited for must complete (one wait a completed phase: a phase nothing was counted on is not waited for).
struct Phases {
  unsigned int bits = 0;
  __device__ __forceinline__ void wait(unsigned int bar, int i) {
    wait_phase(bar, (bits >> i) & 1u);
    bits ^= 1u << i;
  }
};

// f(std::integral_constant<int, 0>{}), ..., f(std::integral_constant<int, kN - 1>{}): a loop whose index
// is a compile-time constant in its body (register arrays indexed by it stay registers).
template <typename F, int... kI>
__device__ __forceinline__ void unrolled_over(F& f, std::integer_sequence<int, kI...>) {
  (f(std::integral_constant<int, kI>{}), ...);
}
template <int kN, typename F>
__device__ __forceinline__ void unrolled(F&& f) {
  unrolled_over(f, std::make_integer_sequence<int, kN>{});
}

// One thread: tell the mbarrier at shared address bar to expect `bytes` more bytes of bulk copies this
// phase (its one arrival of the phase), before it issues them (bulk_copy_to_shared).
__device__ __forceinline__ void expect_bytes(unsigned int bar, unsigned int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// One thread, before it refills shared memory by bulk copies: the CTA's earlier reads of it (ordered before
// this by a CTA barrier, or issued by this thread) come before the copies' writes (another proxy's).
__device__ __forceinline__ void reads_before_bulk_copies() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Copy `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory into this CTA's shared
// memory with the bulk-copy engine (TMA), the bytes counted on the mbarrier at shared address bar (which
// expect_bytes has told of them). Then wait_phase(bar, ...) in every thread that reads them.
// kEvictLast: under an L2 evict-last policy (evict_last_policy).
template <bool kEvictLast = false>
__device__ __forceinline__ void bulk_copy_to_shared(void* smem, const void* gmem, unsigned int bytes,
                                                    unsigned int bar) {
  if constexpr (kEvictLast) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::
            "r"(smem_address(smem)),
        "l"(gmem), "r"(bytes), "r"(bar), "l"(evict_last_policy())
        : "memory");
  } else {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_address(smem)),
                 "l"(gmem), "r"(bytes), "r"(bar)
                 : "memory");
  }
}

// The bytes of a row's slab (`tile` 16-byte vectors from vector rank * tile) that lie inside a row of n_vec
// vectors: 0 in a cluster's CTA past the row's end, which copies and awaits nothing.
__device__ __forceinline__ unsigned int slab_bytes(int n_vec, unsigned int rank, int tile) {
  const int left = n_vec - static_cast<int>(rank) * tile;
  return left <= 0 ? 0u : static_cast<unsigned int>(left < tile ? left : tile) * 16u;
}

template <bool kEvictLast>
__device__ __forceinline__ void bulk_copies_to_shared(unsigned int, unsigned int) {}

template <bool kEvictLast, typename... Pairs>
__device__ __forceinline__ void bulk_copies_to_shared(unsigned int bar, unsigned int bytes, void* smem,
                                                      const void* gmem, Pairs... rest) {
  bulk_copy_to_shared<kEvictLast>(smem, gmem, bytes, bar);
  bulk_copies_to_shared<kEvictLast>(bar, bytes, rest...);
}

// Thread 0, after a CTA barrier that follows every thread's last read of the destinations: copy the CTA's
// slabs (shared destination, global source pairs; `bytes` each) by bulk copy, counted on the mbarrier at
// shared address bar. Every thread that reads them waits on bar's phase first (wait_phase). kEvictLast: the
// copies under an L2 evict-last policy.
template <bool kEvictLast = false, typename... Pairs>
__device__ __forceinline__ void copy_slabs(unsigned int bar, unsigned int bytes, Pairs... pairs) {
  static_assert(sizeof...(Pairs) % 2 == 0, "(shared destination, global source) pairs");
  reads_before_bulk_copies();
  expect_bytes(bar, bytes * static_cast<unsigned int>(sizeof...(Pairs) / 2));
  bulk_copies_to_shared<kEvictLast>(bar, bytes, pairs...);
}

// The address of the same shared-memory variable in the CTA of rank `rank` of this cluster.
__device__ __forceinline__ unsigned int peer_address(unsigned int local, unsigned int rank) {
  unsigned int remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}

// A CTA of a cluster may start after its peers: nothing may write into its shared memory before
// it has entered (racecheck: "located in a block that might not have entered yet"). So every
// thread of a cluster kernel arrives at a cluster barrier on entry (ClusterEntry's constructor,
// after thread 0 has set up the CTA's mbarriers), and waits on that barrier once, before its first
// write into a peer (group_sum): the row's first loads are in flight meanwhile. Every thread of the
// CTA must construct it and call group_sum. It also counts the completed phases of the mbarriers.
template <bool kCluster>
struct ClusterEntry {
  bool waited = !kCluster;
  Phases phases;  // of arrived[0] and arrived[1]
  __device__ __forceinline__ explicit ClusterEntry(ReduceSlots& slots) {
    if constexpr (kCluster) {
#if RMSNORM_CLUSTER_MBARRIER
      // Peers count bytes on these mbarriers only after the entry barrier below.
      if (threadIdx.x == 0) init_mbarriers(slots.arrived, 2);
#endif
      asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    }
  }
  __device__ __forceinline__ void wait_once() {
    if constexpr (kCluster) {
      if (!waited) {
        asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
        waited = true;
      }
    }
  }
  // Wait until every CTA's total of this row has landed in slots.cta[parity].
  __device__ __forceinline__ void wait_arrived(ReduceSlots& slots, int parity) {
    phases.wait(smem_address(&slots.arrived[parity]), parity);
  }
};

// The sum of v over the `group` threads that share a row (group is a power of two; groups are
// consecutive thread ranges of the CTA), then over the CTAs of the cluster when kCluster (one
// group per CTA then, of more than one warp). Every thread of the group returns the same bits. The
// order of the sum is fixed by the group size and the cluster size: a butterfly within the warp,
// the warps of the group in order, the CTAs of the cluster in rank order. Every thread of the CTA
// must call it (it holds a barrier when group > 32, and waits on the cluster when kCluster).
template <bool kCluster>
__device__ __forceinline__ float group_sum(float v, int group, int parity, ReduceSlots& slots,
                                           ClusterEntry<kCluster>& entry) {
  const int width = group < kWarpSize ? group : kWarpSize;
  for (int offset = width / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  if (group > kWarpSize) {
    const int warp = threadIdx.x / kWarpSize;
    const int warps_per_group = group / kWarpSize;
    if (threadIdx.x % kWarpSize == 0) slots.warp[parity][warp] = v;
    __syncthreads();
    const float* mine = &slots.warp[parity][(warp / warps_per_group) * warps_per_group];
    v = mine[0];
    for (int i = 1; i < warps_per_group; ++i) v += mine[i];
  }
  if constexpr (kCluster) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    const unsigned int ctas = cluster.num_blocks();
    const unsigned int rank = cluster.block_rank();
    entry.wait_once();  // every peer has entered: its shared memory may be written
#if RMSNORM_CLUSTER_MBARRIER
    // Thread r < ctas stores this CTA's total into slot [parity][rank] of the CTA of rank r; each
    // CTA waits for the ctas totals' bytes on its own mbarrier, then adds its slots in rank order.
    // A peer stores into slot [parity] again only two rows later, after this CTA's total of the
    // row between, which its threads send after the barrier above: after all of them read here.
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                       smem_address(&slots.arrived[parity])),
                   "r"(ctas * static_cast<unsigned int>(sizeof(float)))
                   : "memory");
    }
    if (threadIdx.x < ctas) {
      asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(
                       peer_address(smem_address(&slots.cta[parity][rank]), threadIdx.x)),
                   "r"(__float_as_uint(v)), "r"(peer_address(smem_address(&slots.arrived[parity]), threadIdx.x))
                   : "memory");
    }
    entry.wait_arrived(slots, parity);
#else
    // Each CTA pushes its total into every CTA's slot for its rank, then one cluster barrier,
    // then every CTA adds the slots in rank order from its own shared memory: nothing reads a
    // peer's memory after the barrier, so a CTA may exit as soon as it is done.
    if (threadIdx.x < ctas) *cluster.map_shared_rank(&slots.cta[parity][rank], threadIdx.x) = v;
    cluster.sync();
#endif
    v = slots.cta[parity][0];
    for (unsigned int r = 1; r < ctas; ++r) v += slots.cta[parity][r];
  }
  return v;
}

// Set a kernel's function attribute once per kernel, device and value (cudaFuncSetAttribute on
// every launch costs host time that decode-sized calls notice). Keyed by the kernel's address:
// kernels of one signature are different functions.
inline void set_attribute_once(const void* kernel, cudaFuncAttribute attribute, int value) {
  struct Set {
    const void* kernel;
    int device;
    cudaFuncAttribute attribute;
    int value;
  };
  static std::mutex mutex;
  static std::vector<Set> done;
  int device = 0;
  cudaGetDevice(&device);
  const std::lock_guard<std::mutex> lock(mutex);
  for (const Set& s : done) {
    if (s.kernel == kernel && s.device == device && s.attribute == attribute && s.value == value) return;
  }
  cudaFuncSetAttribute(kernel, attribute, value);
  done.push_back({kernel, device, attribute, value});
}

// Launch kernel on grid x block with smem bytes of dynamic shared memory: in clusters of `cluster`
// CTAs along x when cluster > 0 (past 8, the non-portable sizes Hopper allows); as a programmatic
// dependent of the kernel before it in the stream when pdl (and RMSNORM_PDL): it may start while
// that kernel finishes (wait_for_previous_grid). Returns cudaLaunchKernelEx's error: it is returned,
// not left for cudaGetLastError (an empty grid launched this way raised nothing through the
// binding's launch check on the H200, issue 25).
template <typename Kernel, typename... Args>
cudaError_t launch_kernel(Kernel kernel, dim3 grid, dim3 block, size_t smem, int cluster, bool pdl,
                          cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  unsigned int count = 0;
  if (cluster > 0) {
    if (cluster > plan::kMaxPortableCluster) {
      set_attribute_once(reinterpret_cast<const void*>(kernel), cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    }
    attribute[count].id = cudaLaunchAttributeClusterDimension;
    attribute[count].val.clusterDim.x = static_cast<unsigned int>(cluster);
    attribute[count].val.clusterDim.y = 1;
    attribute[count].val.clusterDim.z = 1;
    ++count;
  }
  if (pdl && RMSNORM_PDL) {
    attribute[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  config.attrs = attribute;
  config.numAttrs = count;
  if (smem > 48 * 1024) {
    set_attribute_once(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(smem));
  }
  return cudaLaunchKernelEx(&config, kernel, args...);
}

}  // namespace dev
}  // namespace rmsnorm
