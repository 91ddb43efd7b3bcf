// Does compute-sanitizer's synccheck fail on grids of many 16-CTA clusters whatever the kernel does?
// The README's open problem: synccheck ends with "an illegal memory access" on every case tried whose
// grid holds many clusters of 16 CTAs, and is clean where a grid holds one or two. This program has
// none of the project's code: each CTA of a cluster enters (barrier.cluster arrive, then wait), copies
// a slab of x into shared memory by bulk copy counted on an mbarrier (kind 1 and 2), sums it, stores its
// total into every peer's slot with st.async counted on the peer's mbarrier (kind 0 and 1), or into the
// peers' slots with plain stores and a cluster barrier (kind 2), and writes the cluster's sum. The
// pattern of the project's staged forward, without its rows, weight or output.
//
//   nvcc -std=c++17 -arch=sm_90a -o /tmp/synccheck_clusters benchmarks/synccheck_clusters.cu
//   /tmp/synccheck_clusters CLUSTER GRID_CLUSTERS KIND          # checks its sums, exit 0 when right
//   compute-sanitizer --tool synccheck /tmp/synccheck_clusters 16 40 1
#include <cooperative_groups.h>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;
constexpr int kThreads = 256;
constexpr int kSlab = 8192;  // floats a CTA copies: 32 KB

__device__ unsigned int saddr(const void* p) { return static_cast<unsigned int>(__cvta_generic_to_shared(p)); }

__device__ void wait_parity(unsigned int bar, unsigned int parity) {
  asm volatile("{\n\t.reg .pred p;\nW_%=:\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t@!p bra W_%=;\n}"
               ::"r"(bar), "r"(parity) : "memory");
}

__global__ void cluster_sum(const float* x, float* out, int kind) {
  extern __shared__ __align__(128) float slab[];
  __shared__ float warp_sums[kThreads / 32];
  __shared__ float totals[16];
  __shared__ __align__(8) unsigned long long bars[2];  // 0: the slab's bytes, 1: the peers' totals
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned int ctas = cluster.num_blocks(), rank = cluster.block_rank();
  if (threadIdx.x == 0) {
    for (int i = 0; i < 2; ++i) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(&bars[i])) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  const float* src = x + static_cast<size_t>(blockIdx.x) * kSlab;
  float v = 0.f;
  if (kind >= 1) {
    if (threadIdx.x == 0) {
      const unsigned int bytes = kSlab * sizeof(float);
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(saddr(&bars[0])), "r"(bytes)
                   : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   ::"r"(saddr(slab)), "l"(src), "r"(bytes), "r"(saddr(&bars[0])) : "memory");
    }
    wait_parity(saddr(&bars[0]), 0);
    for (int i = threadIdx.x; i < kSlab; i += kThreads) v += slab[i];
  } else {
    for (int i = threadIdx.x; i < kSlab; i += kThreads) v += src[i];
  }
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  v = 0.f;
  for (int w = 0; w < kThreads / 32; ++w) v += warp_sums[w];
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // every peer has entered
  if (kind <= 1) {
    if (threadIdx.x == 0)
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(saddr(&bars[1])),
                   "r"(ctas * static_cast<unsigned int>(sizeof(float))) : "memory");
    if (threadIdx.x < ctas) {
      unsigned int slot, bar;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(slot) : "r"(saddr(&totals[rank])), "r"(threadIdx.x));
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(bar) : "r"(saddr(&bars[1])), "r"(threadIdx.x));
      asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
                   ::"r"(slot), "r"(__float_as_uint(v)), "r"(bar) : "memory");
    }
    wait_parity(saddr(&bars[1]), 0);
  } else {
    if (threadIdx.x < ctas) *cluster.map_shared_rank(&totals[rank], threadIdx.x) = v;
    cluster.sync();
  }
  float s = 0.f;
  for (unsigned int r = 0; r < ctas; ++r) s += totals[r];
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s CLUSTER GRID_CLUSTERS KIND (KIND 0: loads, st.async; 1: bulk copy, st.async; "
                 "2: bulk copy, cluster barrier)\n", argv[0]);
    return 2;
  }
  const int cluster = std::atoi(argv[1]), clusters = std::atoi(argv[2]), kind = std::atoi(argv[3]);
  const int ctas = cluster * clusters;
  std::vector<float> hx(static_cast<size_t>(ctas) * kSlab);
  for (size_t i = 0; i < hx.size(); ++i) hx[i] = static_cast<float>((i * 7919) % 17) - 8.f;  // whole numbers
  float *x, *out;
  cudaMalloc(&x, hx.size() * sizeof(float));
  cudaMalloc(&out, ctas * sizeof(float));
  cudaMemcpy(x, hx.data(), hx.size() * sizeof(float), cudaMemcpyHostToDevice);
  const size_t smem = kSlab * sizeof(float);
  cudaFuncSetAttribute(cluster_sum, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (cluster > 8) cudaFuncSetAttribute(cluster_sum, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(ctas);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = cluster;
  attribute.val.clusterDim.y = attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  cudaError_t err = cudaLaunchKernelEx(&config, cluster_sum, static_cast<const float*>(x), out, kind);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("cluster %d, %d clusters, kind %d: %s\n", cluster, clusters, kind, cudaGetErrorString(err));
    return 1;
  }
  std::vector<float> hout(ctas);
  cudaMemcpy(hout.data(), out, ctas * sizeof(float), cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (int c = 0; c < clusters; ++c) {
    double want = 0;
    for (size_t i = static_cast<size_t>(c) * cluster * kSlab; i < static_cast<size_t>(c + 1) * cluster * kSlab; ++i)
      want += hx[i];
    for (int r = 0; r < cluster; ++r) wrong += hout[c * cluster + r] != static_cast<float>(want);
  }
  std::printf("cluster %d, %d clusters, kind %d: %s (%d of %d CTAs wrong)\n", cluster, clusters, kind,
              wrong ? "WRONG" : "right", wrong, ctas);
  return wrong ? 1 : 0;
}
