// How the fast CUDA paths lay a row over threads: every threshold in one place. A plan depends
// on the row's length in 16-byte vectors and on the direction only (the backward's split
// threshold also on the element's width), never on the number of rows or on the device, so a
// row's bits are the same alone or in a batch of any size, and grad_weight is the same on any
// GPU. Torch-free and CUDA-free (the launcher and the tests of the plan read it alike).
//
//   group    threads that share one row (a power of two); the row's vector j = (rank * vpt + v)
//            * group + lane, for v < vpt, lane < group and rank < cluster, so each pass of a
//            group over v reads one contiguous, coalesced span
//   vpt      16-byte vectors per thread and tensor, held in registers from load to store
//   cta      threads per CTA: cta / group rows are handled side by side
//   cluster  CTAs that share one row through distributed shared memory (1: no cluster)
//   staged   the vectors go through shared memory (bulk copies) instead of registers: long rows, where
//            registers would limit the CTAs a multiprocessor holds, and with them the bytes in
//            flight (forward), or the next row's loads could not start before this row is done
//            (backward)
//   split    (backward) no thread holds a row: one kernel sums each slice of a row, a second walks
//            column strips down the rows (group: the CTA, vpt: a slice's vectors a thread)
#pragma once

#include <cstdint>

namespace rmsnorm {
namespace plan {

struct Plan {
  int group = 0;
  int vpt = 0;  // 0: no fast plan for this length (the fallback kernels run)
  int cta = 0;
  int cluster = 1;
  bool staged = false;
  bool split = false;
  bool ok() const { return vpt > 0; }
  int64_t capacity() const { return int64_t(group) * vpt * cluster; }  // vectors a row may hold
  // Shared memory a staged forward CTA holds its slab of the row in.
  int64_t forward_staged_bytes() const { return staged ? int64_t(group) * vpt * 16 : 0; }
};

// Forward: x alone lives in registers, so a thread holds up to 8 vectors (32 registers).
constexpr int kFwdSmallCta = 128;     // CTA size while a row needs fewer threads than this
constexpr int kFwdMaxGroup = 512;     // largest row group before the row spreads over a cluster
constexpr int kFwdPrefVpt = 4;      // more threads with fewer vectors each, while the group fits
constexpr int kFwdMaxVpt = 8;
constexpr int kFwdClusterVpt = 4;     // in a cluster: 8 vectors spilled with the cluster's bookkeeping
// Staged forward (rows past kFwdStagedFrom vectors): a CTA of kFwdStagedCta threads (one slab of a
// cluster's row) has its slab, kFwdStagedVpt vectors a thread, 32 KB, copied into shared memory by one
// bulk copy (TMA, issued by one thread), so no register holds x while it is in flight. Rows longer than a
// 16-CTA cluster of such CTAs holds take twice the slab a CTA (kFwdLongCta). On the H200 (da76b2d) the staged
// forward, then copying with a cp.async a vector in every thread, moved bfloat16 N = 65,536 and 262,144
// from 0.55 and 0.48 of the copy to 0.78 and 0.74. The bulk copy in place of those cp.async copies (one run
// of benchmarks/variants.py, users' path, forward as a fraction of the copy, cp.async / bulk copy):
// bfloat16 N = 64K 0.81 / 0.88, 128K 0.81 / 0.88, 256K 0.76 / 0.85; float32 32K 0.88 / 0.94, 64K 0.86 /
// 0.93, 128K 0.84 / 0.88, 256K 0.71 / 0.79. Staged from 1,024 vectors in the same run: bfloat16 16K (2,048
// vectors, one CTA) 0.88 against the register forward's 0.90, but 32K (4,096 vectors, a staged cluster of
// two against a register cluster of two) 0.89 against 0.86 and float32 16K (4,096) 0.94 against 0.89:
// hence staged past 2,048 vectors. Lost, not kept: a persistent grid (as many CTAs as the GPU runs at
// once, each with two or three rows in shared memory, the next copying in while it writes this one),
// bfloat16 64K 0.82 -> 0.77-0.78 with cp.async and 0.88 -> 0.82 with the bulk copy; cp.async asking L2
// for 128 or 256 bytes (.L2::128B, .L2::256B), 0.81 -> 0.81-0.82; CTAs of 128 threads (twice as many a
// multiprocessor, each half as long, for a shorter last wave), bfloat16 64K / 128K / 256K 0.89 / 0.88 /
// 0.85 -> 0.86 / 0.83 / 0.79 and float32 64K 0.93 -> 0.89 (one run, users' path; float32 256K then has no
// staged plan). The build can override these (-DRMSNORM_FWD_STAGED_FROM=...; 0 turns the staged path off)
// to compare settings.
#ifndef RMSNORM_FWD_STAGED_FROM
#define RMSNORM_FWD_STAGED_FROM 2048
#endif
#ifndef RMSNORM_FWD_STAGED_CTA
#define RMSNORM_FWD_STAGED_CTA 256
#endif
#ifndef RMSNORM_FWD_STAGED_VPT
#define RMSNORM_FWD_STAGED_VPT 8
#endif
constexpr int64_t kFwdStagedFrom = RMSNORM_FWD_STAGED_FROM;
// The register kernels' row group (fwd_kernel, bwd_kernel) as a compile-time constant, for the groups
// of 32 to 1024 threads with 2 or more vectors a thread that their plans make (the launchers list them;
// one vector a thread, a row of at most 32 vectors, still reads its group at run time): the reduction's
// loops over the group's warps and each vector's offset are then worked out by the compiler, not on every
// row. The register backward's row loop at bfloat16, group 256 (SASS, sm_90a): 644 instructions with the
// group read at run time, 444 fixed. On the H200 (one run of benchmarks/variants.py, users' path, fraction
// of the copy, group read at run time / fixed, both built with a bfloat16 pair conversion that moved no
// figure by more than 0.01 and was not kept): backward bf16 N = 1K 0.85 / 0.85, 4K 0.84 / 0.84, fp32 64K
// (512-thread CTAs in a cluster of 16) 0.78 / 0.90; forward bf16 16K 0.86 / 0.89. RMSNORM_FIXED_GROUPS=0
// reads the group at run time for every plan.
#ifndef RMSNORM_FIXED_GROUPS
#define RMSNORM_FIXED_GROUPS 1
#endif
template <int kGroup>
struct FixedGroup {  // a constant, not a function: the launchers read it (plan.h is CUDA-free)
  static constexpr bool value = RMSNORM_FIXED_GROUPS != 0 && kGroup >= 32 && kGroup <= 1024;
};
// The staged kernels' CTA size is a compile-time constant (every staged plan's, staged_layout and
// backward_staged_layout), so a thread's vectors sit at fixed offsets from one address in shared
// memory and one in each tensor, and each pass over them has a version without bounds checks, taken by
// every thread whose vectors are all inside the row (all but those of the row's last CTA). That took
// about a third of the instructions out of a row (SASS, sm_90a, bfloat16: the staged backward's loop
// 1,088 to about 735 a thread, the forward's y pass 65 to 43 a vector), and on the H200 (one run of
// benchmarks/variants.py, users' path, fraction of the copy, against the CTA size read at run time
// before) bfloat16 N = 64K / 128K / 256K from 0.76 / 0.75 / 0.71 to 0.80 / 0.79 / 0.73 forward and from
// 0.74 / 0.72 / 0.64 to 0.75 / 0.76 / 0.68 backward, float32 backward at 16K from 0.76 to 0.81. The
// staged backward had been issuing instructions as fast as its 16 warps a multiprocessor could (top
// stall "not selected").
constexpr int kFwdStagedCta = RMSNORM_FWD_STAGED_CTA;
constexpr int kFwdStagedVpt = RMSNORM_FWD_STAGED_VPT;
// Rows past a 16-CTA cluster of those CTAs (past 32,768 vectors: float32 N = 256K) need twice the slab a CTA
// (64 KB, so 3 CTAs a multiprocessor): as CTAs of RMSNORM_FWD_STAGED_LONG_CTA threads at kFwdStagedVpt
// vectors each, or (0) as kFwdStagedCta threads at twice the vectors. On the H200 (one run of
// benchmarks/variants.py, users' path, forward as a fraction of the copy) float32 N = 256K read 0.80 at 256
// threads of 16 vectors (80 registers) and 0.85 at 512 threads of 8 (40 registers, no spills; 0.84 with 2
// words of weight ahead in place of 4), the other lengths unchanged; under Nsight Compute its forward went
// from 153.1 us at 69.6% of DRAM throughput to 146.0 us at 73.1%. Lost in the same two calls, and not kept
// as settings: the 256-thread kernel's weight 8 or 16 words ahead (0.74 with spills / 0.80); 16 vectors a
// thread in a cluster of 8 before 8 in a cluster of 16 (float32 128K 0.93 -> 0.86, bfloat16 256K 0.85 ->
// 0.81: 64 KB slabs, 3 CTAs a multiprocessor); the slab's weight copied into shared memory beside x by the
// same bulk copies (3 CTAs a multiprocessor: bfloat16 32K-256K 0.88 / 0.88 / 0.88 / 0.85 -> 0.85 / 0.85 /
// 0.80 / 0.77, float32 32K-128K 0.93 / 0.94 / 0.93 -> 0.90 / 0.89 / 0.84); 6 CTAs a multiprocessor (2 or 0
// words of weight ahead, 40 registers) lost 0.01-0.06 (kFwdStagedWAhead, below).
#ifndef RMSNORM_FWD_STAGED_LONG_CTA
#define RMSNORM_FWD_STAGED_LONG_CTA 512
#endif
constexpr int kFwdLongCta = RMSNORM_FWD_STAGED_LONG_CTA > 0 ? RMSNORM_FWD_STAGED_LONG_CTA : kFwdStagedCta;
constexpr int kFwdLongVpt = 2 * kFwdStagedVpt * kFwdStagedCta / kFwdLongCta;
// The staged forward's weight: held in registers from the kernel's start, each CTA loading its
// columns once (their latency off every row's path), for elements of at least
// RMSNORM_FWD_STAGED_HOLD_W bytes (0: none). That is 32 more registers a thread, so 3 CTAs a
// multiprocessor, not 6. On the H200 (one run of benchmarks/variants.py, users' path, forward as a
// fraction of the copy, the weight held and 3 CTAs against the defaults before): float32 N = 65536
// 0.83 -> 0.87; bfloat16 N = 65536 / 262144 0.77 / 0.71 -> 0.68 / 0.56 (its float weight is 64
// registers); the lengths other paths take unchanged. Making the staged CTAs persistent as well (3 or
// 6 a multiprocessor, rows grid-strided) lost everywhere (float32 65536 0.66-0.68, bfloat16 65536 0.55-0.65).
// Those figures were of the cp.async forward. With the bulk copy, which holds no register for x in flight,
// float32's weight 4 words ahead at 5 CTAs a multiprocessor (48 registers, no spills) beat it held at 3
// (one run of benchmarks/variants.py, users' path, held / ahead): float32 N = 16K 0.93 / 0.94, 64K 0.90 /
// 0.94, 128K 0.84 / 0.92, 256K (16 vectors a thread, never held) 0.79 / 0.80. Hence none held.
#ifndef RMSNORM_FWD_STAGED_HOLD_W
#define RMSNORM_FWD_STAGED_HOLD_W 0
#endif
template <int kElementBytes>
struct FwdStagedHoldW {  // a constant, not a function: the kernels read it (plan.h is CUDA-free)
  static constexpr bool value = RMSNORM_FWD_STAGED_HOLD_W > 0 && kElementBytes >= RMSNORM_FWD_STAGED_HOLD_W;
};
// The staged forward's weight where it is not held (any element, by default): RMSNORM_FWD_STAGED_W_AHEAD 16-byte
// words of it loaded ahead of their use, a thread's first ones with the row's copies and each next one
// as a vector of y is written (0: each loaded where it is used). Loaded where used, the 8 loads of a
// thread's weight were 8 L2 round trips one after another (SASS, sm_90a: the compiler, held to 40
// registers by 6 CTAs a multiprocessor, issued each after the vector before it was stored). On the H200
// (one run of benchmarks/variants.py, users' path, forward as a fraction of the copy, none ahead at 6
// CTAs a multiprocessor / 2 words at 6 / 4 words at 5 / 8 words at 4): bfloat16 N = 64K 0.80 / 0.81 /
// 0.83 / 0.81, 128K 0.79 / 0.81 / 0.82 / 0.77, 256K 0.72 / 0.75 / 0.76 / 0.70; none ahead at 5 CTAs
// 0.80 / 0.78 / 0.71. Under Nsight Compute the bfloat16 256K forward went from 82.8 us at 61.5% of DRAM
// throughput to 77.9 us at 65.5%. 4 words at 6 CTAs spilled 28 bytes (ptxas), so 5 (48 registers). Those
// figures were of the cp.async forward; with the bulk copy, 2 and 0 words at 6 CTAs (40 registers) against
// 4 at 5 (one run, users' path): bfloat16 N = 32K-256K 0.87 / 0.88 / 0.87 / 0.83 and 0.87 / 0.87 / 0.85 /
// 0.80 against 0.88 / 0.88 / 0.88 / 0.85.
#ifndef RMSNORM_FWD_STAGED_W_AHEAD
#define RMSNORM_FWD_STAGED_W_AHEAD 4
#endif
constexpr int kFwdStagedWAhead = RMSNORM_FWD_STAGED_W_AHEAD;
// The forward reads x under an L2 evict-last policy (createpolicy.fractional.L2::evict_last): the register
// forward's loads of x (ld.global.L1::evict_last.L2::cache_hint) and the staged forward's bulk copies
// (.L2::cache_hint), so that L2 evicts the lines of y (written back to DRAM) before those of x, as torch.compile's
// forward loads x in its first pass. On the H200 (benchmarks/variants.py, users' path, forward as a fraction of the
// copy, three calls) it was torch.compile's lead: its kernel rebuilt in Triton read float32 16384 x 4096 at 0.98
// with the hint and 0.94 without, in either of its passes' shapes; in ours, each x load in the other flavours
// (ld.global, L1::no_allocate, L2::256B, an L2 evict-first policy) read 0.87-0.95 against the defaults' 0.95. In the
// last call, defaults / evict-last: bfloat16 N = 1K-256K 0.90 / 0.93, 0.89 / 0.93, 0.90 / 0.92, 0.88 / 0.92, 0.85 /
// 0.87; float32 0.96 / 0.98, 0.95 / 0.98, 0.93 / 0.97, 0.93 / 0.96, 0.85 / 0.85. Under Nsight Compute (float32 16384
// x 4096, three calls each after a 256 MB flush, no cache control) each call still read all 268.5 MB of x from DRAM:
// the gain is not x left in L2 by the call before. Setting the lines back to the normal priority after the row
// (applypriority) lost most of it. RMSNORM_FWD_X_EVICT_LAST=0 loads x without a policy.
#ifndef RMSNORM_FWD_X_EVICT_LAST
#define RMSNORM_FWD_X_EVICT_LAST 1
#endif
// CTAs a multiprocessor the forward kernels may hold at most (0: as many as their registers and
// shared memory allow): RMSNORM_FWD_STAGED_PER_SM for the staged forward, RMSNORM_FWD_PER_SM for the
// register forward; a cap asks for more shared memory than the kernel uses (forward_smem_bytes). Fewer
// CTAs, a shorter last wave: on the H200 (one run of benchmarks/variants.py, users' path, forward as a
// fraction of the copy, caps against none) the staged forward lost at every cap, bfloat16 N = 64K 0.80
// uncapped, 0.79 / 0.77 / 0.71 at 4 / 3 / 2 CTAs (256K 0.72, 0.71 / 0.67 / 0.58; float32 128K 0.85,
// 0.85 / 0.81 / 0.72), and one register-forward CTA a multiprocessor (Liger-Kernel's one program a
// row of 16 warps) took N = 16K from 0.87 to 0.53 (bfloat16) and 0.91 to 0.62 (float32): the bytes
// in flight, not the last wave, bound these rows.
#ifndef RMSNORM_FWD_STAGED_PER_SM
#define RMSNORM_FWD_STAGED_PER_SM 0
#endif
#ifndef RMSNORM_FWD_PER_SM
#define RMSNORM_FWD_PER_SM 0
#endif
constexpr int64_t kSmemPerSm = 228 * 1024;     // an sm_90 multiprocessor's shared memory
constexpr int64_t kSmemPerCtaSpare = 2 * 1024;  // a CTA's reserved 1 KB and its static slots
// CTAs a multiprocessor that the staged forward's registers must allow: its shared memory allows 6 (3 with
// the long rows' 64 KB slabs, kFwdLongCta); with the weight held, 3; with more than 2 words of weight ahead
// (kFwdStagedWAhead), 5.
template <int kElementBytes, int kVpt, int kCta>
struct FwdStagedCtasPerSm {
  static constexpr bool long_rows = kVpt * kCta > kFwdStagedVpt * kFwdStagedCta;
  static constexpr int fit = long_rows || FwdStagedHoldW<kElementBytes>::value ? 3
                             : kFwdStagedWAhead > 2                            ? 5
                                                                               : 6;
  static constexpr int value = RMSNORM_FWD_STAGED_PER_SM > 0 && RMSNORM_FWD_STAGED_PER_SM < fit
                                   ? RMSNORM_FWD_STAGED_PER_SM : fit;
};
constexpr int kSmThreads = 2048;  // an sm_90 multiprocessor's resident threads
// The long rows' CTAs hold twice the first shape's slab, and as many share a multiprocessor as their 64 KB
// slabs allow (3): 256 or 512 threads build (1024 would ask for 3,072 threads a multiprocessor).
static_assert(kFwdLongCta >= kFwdStagedCta && kFwdLongVpt * kFwdLongCta == 2 * kFwdStagedVpt * kFwdStagedCta &&
                  FwdStagedCtasPerSm<2, kFwdLongVpt, kFwdLongCta>::fit * kFwdLongCta <= kSmThreads,
              "RMSNORM_FWD_STAGED_LONG_CTA: 0, 256 or 512 threads (3 CTAs a multiprocessor, twice the slab)");
// Backward: x, grad_out, the weight and the float grad_weight sums of a thread's columns
// live in registers, so a thread holds at most 2 vectors of each.
constexpr int kBwdCta = 512;          // several rows per CTA: fewer grad_weight partial rows
constexpr int kBwdMaxGroup = 512;
constexpr int kBwdMaxVpt = 2;
constexpr int kBwdClusterVpt = 2;
// Staged backward (rows of kBwdStagedFrom + 1 to kBwdStagedTo vectors of 2-byte elements, or
// kBwdStagedFrom4 + 1 to kBwdStagedTo4 of 4-byte ones, where the register backward needs clusters
// or would not pipeline): a
// persistent CTA of kBwdStagedCta threads (one slab of a cluster's row) keeps kBwdStages rows of x
// and grad_out in shared memory, copying the next rows in while it reduces and writes this one (by bulk
// copies since the change at the end of this comment; a cp.async a vector in every thread in the figures
// before it), and its grad_weight sums in registers or there too (BwdStagedHold): one CTA a multiprocessor.
// On the H200 (973f852, -DRMSNORM_BWD_STAGED_FROM=1024 with no upper limit, the sums in shared memory
// at every width, one run of benchmarks/variants.py, backward GB/s as a fraction of the copy) it was
// slower at most long rows, bf16 N = 16K / 64K / 256K 0.52 / 0.25 / 0.22 against the register
// backward's 0.65 / 0.39 / 0.27, fp32 64K 0.34 against 0.46, and faster at fp32 16K (0.68 against
// 0.53). Taken alone for rows of 2049 to 4096 vectors (a cluster of two staged CTAs in place of four
// register CTAs), two runs each on the H200 (benchmarks/variants.py, users' path): fp32 N = 16K 0.54
// / 0.53 -> 0.68 / 0.68 and bf16 N = 32K 0.41 / 0.41 -> 0.45 / 0.45. With bfloat16's sums and weight
// in registers (one run, users' path): bf16 N = 16K (2048 vectors, one CTA) 0.69 in a register
// cluster of two -> 0.75 staged, 32K (a staged cluster of two) 0.48 split -> 0.70-0.71, but 64K 0.50
// split against 0.38-0.39 staged (a cluster of four), 8K 0.76 either way; fp32 8K 0.89 in registers
// (pipelined) against 0.71 staged, 32K 0.60 in a register cluster of 8 against 0.38 staged. Hence a
// threshold a width. Every clustered figure so far had a persistent grid of more clusters than the
// H200 runs at once (clusters_at_once, below: 33 clusters of 4 where 30 fit), so part of it ran
// after the rest. With the grid capped to what fits (one run of benchmarks/variants.py, users' path,
// backward as a fraction of the copy, staged / register clusters / split): bf16 N = 64K 0.73-0.74 /
// 0.61 / 0.50, 128K 0.72-0.73 / 0.56 / 0.51, 256K 0.64 / 0.48 / 0.51; fp32 32K 0.70-0.71 / 0.81 /
// -, 64K 0.68 / 0.76 / 0.56, 128K 0.56 / 0.51 / 0.57. Hence staged bfloat16 to the 16-CTA cluster's
// 32768 vectors, and float32 staged only at 4096 (N = 16K). With the register backward's group fixed
// at compile time (FixedGroup) its clusters caught up: one run of benchmarks/variants.py (users' path,
// backward, staged as above / no staged backward) read bf16 N = 16K 0.78 / 0.84, 32K 0.75 / 0.80,
// 64K 0.77 / 0.78, 256K 0.70 / 0.52; fp32 16K 0.77 / 0.90. Hence bfloat16 staged past 4096 vectors
// (N = 16K and 32K in register clusters of two and four) and float32 never: the staged backward's
// grad_weight sums in shared memory (BwdStagedHold, 4-byte elements) then ran only under these
// settings. With the bulk copies in place of cp.async (one run of benchmarks/variants.py, users' path,
// backward as a fraction of the copy, before / after): bf16 N = 64K 0.77 / 0.85, 128K 0.77 / 0.85, 256K
// 0.69 / 0.82; staged past 1024 vectors, bf16 16K 0.83 / 0.84 and 32K 0.78 / 0.83 (register clusters
// before); float32 staged past 2048 vectors to 32768 (no split to 32768), 16K 0.90 / 0.88, 32K 0.90 /
// 0.91, 64K 0.90 / 0.89 (register clusters before), but 128K 0.58 split / 0.83 staged in a cluster of
// 16. Hence bfloat16 staged past 1024 vectors and float32 past 16384 to 32768 (N = 128K), the split
// from there; float32 to 65,536 vectors (N = 256K) since the register row (RMSNORM_BWD_STAGED_REG_ROW,
// below). The build can override each (0: off, or no limit).
#ifndef RMSNORM_BWD_STAGED_FROM
#define RMSNORM_BWD_STAGED_FROM 1024
#endif
#ifndef RMSNORM_BWD_STAGED_FROM4
#define RMSNORM_BWD_STAGED_FROM4 16384
#endif
#ifndef RMSNORM_BWD_STAGED_TO
#define RMSNORM_BWD_STAGED_TO 32768
#endif
#ifndef RMSNORM_BWD_STAGED_TO4
#define RMSNORM_BWD_STAGED_TO4 65536
#endif
constexpr int64_t kBwdStagedFrom = RMSNORM_BWD_STAGED_FROM;
constexpr int64_t kBwdStagedFrom4 = RMSNORM_BWD_STAGED_FROM4;
constexpr int64_t kBwdStagedTo = RMSNORM_BWD_STAGED_TO;
constexpr int64_t kBwdStagedTo4 = RMSNORM_BWD_STAGED_TO4;
// The register backward's next row: pipelined, each thread loads its vectors of the next row's
// grad_out and x into registers before this row's reduction, so they are on their way while it
// waits; otherwise they are prefetched into L2 and loaded after this row is written. On the H200
// (6bbce7e, two runs of benchmarks/variants.py each, backward through the users' path, fraction of
// the copy) pipelining every kernel took float32 at N = 1K / 4K (one CTA a row) from 0.89 / 0.88
// to 0.95 / 0.93, but float32 in a cluster (16K / 64K) from 0.54 / 0.47 to 0.47 / 0.43, and
// bfloat16, which spills 58-88 bytes with it, from 0.82 / 0.79 / 0.66 / 0.39 / 0.27 to 0.47 / 0.47
// / 0.46 / 0.31 / 0.23 at 1K-256K. So only 4-byte elements without a cluster are pipelined;
// RMSNORM_BWD_PIPELINE=0 pipelines none, 2 every kernel, 3 the 4-byte ones in clusters too (to
// measure again: the cluster barrier those runs had drained every load in flight on each row).
#ifndef RMSNORM_BWD_PIPELINE
#define RMSNORM_BWD_PIPELINE 1
#endif
template <int kElementBytes, bool kCluster>
struct BwdPipeline {  // a constant, not a function: the kernels read it (plan.h is CUDA-free)
  static constexpr bool value = RMSNORM_BWD_PIPELINE == 2 ||
                                (RMSNORM_BWD_PIPELINE == 1 && kElementBytes == 4 && !kCluster) ||
                                (RMSNORM_BWD_PIPELINE == 3 && kElementBytes == 4);
};
// Its CTA: kBwdStagedCta threads of kBwdStagedVpt vectors each, a slab of 2048 vectors of the row
// (their product sets the shared memory a CTA holds: backward_staged_bytes). On the H200 (one run
// of benchmarks/variants.py, backward, the operator's time in us, 256 threads of 8 vectors / 512 of
// 4 / 1024 of 2): bf16 N = 16K 126 / 124 / 139, 32K 135 / 127 / 145; fp32 16K 273 / 258 / 265. So
// 16 warps a multiprocessor, with 127-128 registers a thread (ptxas, sm_90a; float32 72-80, 88 since
// grad_weight's sums are in registers, 128 at 8 vectors a thread), no spills. The build can override both
// (RMSNORM_BWD_STAGED_CTA, RMSNORM_BWD_STAGED_VPT).
#ifndef RMSNORM_BWD_STAGED_CTA
#define RMSNORM_BWD_STAGED_CTA 512
#endif
#ifndef RMSNORM_BWD_STAGED_VPT
#define RMSNORM_BWD_STAGED_VPT 4
#endif
constexpr int kBwdStagedCta = RMSNORM_BWD_STAGED_CTA;
constexpr int kBwdStagedVpt = RMSNORM_BWD_STAGED_VPT;
// The staged backward's weight and grad_weight sums, for elements of at most RMSNORM_BWD_STAGED_HOLD
// bytes (0: none): held in registers for the whole kernel (the weight of a thread's columns loaded
// once, before the first row; one CTA a multiprocessor leaves it every register); otherwise the
// sums live in shared memory and the weight is loaded with each row. RMSNORM_BWD_STAGES rows of
// grad_out and x a CTA has in shared memory: the one it reduces and writes, and the next ones on
// their way. On the H200 (one run of benchmarks/variants.py, users' path, backward as a
// fraction of the copy): float32 N = 16K 0.69 with the sums in shared memory, 0.66 held (2 or 3
// stages); bfloat16 staged with both held (below) 0.75 / 0.70-0.71 at N = 16K / 32K, 2 or 3 stages alike
// (cp.async copies). With the bulk copies, two stages against three (one run, users' path): bfloat16
// N = 64K / 128K / 256K 0.85 / 0.85 / 0.82 against 0.72 / 0.73 / 0.70.
#ifndef RMSNORM_BWD_STAGED_HOLD
#define RMSNORM_BWD_STAGED_HOLD 2
#endif
#ifndef RMSNORM_BWD_STAGES
#define RMSNORM_BWD_STAGES 2
#endif
// Whether the staged backward holds the weight and grad_weight's sums of elements of
// element_bytes bytes in registers: the one rule, for the kernel (BwdStagedHold) and for the shared
// memory the launcher gives it (backward_staged_bytes).
constexpr bool bwd_staged_holds(int element_bytes) { return element_bytes <= RMSNORM_BWD_STAGED_HOLD; }
template <int kElementBytes>
struct BwdStagedHold {  // a constant, not a function: the kernels read it (plan.h is CUDA-free)
  static constexpr bool value = bwd_staged_holds(kElementBytes);
};
constexpr int kBwdStages = RMSNORM_BWD_STAGES;
static_assert(kBwdStages >= 2 && kBwdStages <= 4, "the staged backward keeps 2 to 4 rows in flight");
// The staged backward's parts: a thread's vectors of a row go through shared memory in parts of
// RMSNORM_BWD_STAGED_PART vectors (0: all of them, one part a row), each part's slabs of grad_out and x
// (contiguous in both) copied by their own bulk copies and counted on their own mbarrier, into a ring of
// RMSNORM_BWD_STAGED_RING part buffers (0: kBwdStages rows' parts), as many as fit where fewer do. A row's
// parts are awaited one by one for its dot product; each buffer is refilled, with the part kRing parts on
// in the CTA's walk, as soon as the CTA has written its part of grad_x. So where two whole rows do not fit
// (float32 at 8 vectors a thread: 128 KB of grad_out and x a row), the next row's first parts are copied in
// while this one is reduced and written. Parts lost wherever they were measured (one run each of
// benchmarks/variants.py on the H200, users' path, backward as a fraction of the copy, whole rows / parts of
// 2 vectors a thread in a ring of two rows' parts): bfloat16 N = 16K / 64K / 128K / 256K 0.84 / 0.84 /
// 0.84 / 0.80 -> 0.71 / 0.72 / 0.72 / 0.70, float32 128K 0.80 -> 0.69 (grad_weight's sums in registers);
// float32 256K at 8 vectors a thread, the split's 0.57 -> 0.55-0.64 with parts of 1, 2 or 4 vectors in rings
// of 3 to 14 parts, where the register row below reads 0.89. So a row is one part (0).
// RMSNORM_BWD_STAGED_HOLD_SUMS: grad_weight's sums in registers for elements of at most that many bytes too
// (the weight stays loaded with each row): float32 N = 128K 0.83 with the sums in shared memory -> 0.86,
// 256K (register row) 0.78 -> 0.89 (one run, users' path; ptxas, sm_90a: 88 and 128 registers, no spills).
#ifndef RMSNORM_BWD_STAGED_PART
#define RMSNORM_BWD_STAGED_PART 0
#endif
#ifndef RMSNORM_BWD_STAGED_RING
#define RMSNORM_BWD_STAGED_RING 0
#endif
#ifndef RMSNORM_BWD_STAGED_HOLD_SUMS
#define RMSNORM_BWD_STAGED_HOLD_SUMS 4
#endif
constexpr bool bwd_staged_holds_sums(int element_bytes) {
  return bwd_staged_holds(element_bytes) || element_bytes <= RMSNORM_BWD_STAGED_HOLD_SUMS;
}
template <int kElementBytes>
struct BwdStagedHoldSums {  // a constant, not a function: the kernels read it (plan.h is CUDA-free)
  static constexpr bool value = bwd_staged_holds_sums(kElementBytes);
};
// A part's vectors a thread, of a staged backward CTA of vpt vectors a thread (a power of two that divides vpt).
constexpr int bwd_part_vpt(int vpt) {
  return RMSNORM_BWD_STAGED_PART > 0 && RMSNORM_BWD_STAGED_PART < vpt ? RMSNORM_BWD_STAGED_PART : vpt;
}
// Bytes of one part buffer of a staged backward CTA of vpt vectors a thread: grad_out's and x's slabs of a part.
constexpr int64_t bwd_part_bytes(int vpt) { return int64_t(kBwdStagedCta) * bwd_part_vpt(vpt) * 2 * 16; }
// Bytes of a staged backward CTA's grad_weight sums in shared memory (none where registers hold them).
constexpr int64_t bwd_staged_sums_bytes(int vpt, int element_bytes) {
  return bwd_staged_holds_sums(element_bytes) ? 0 : int64_t(kBwdStagedCta) * vpt * (16 / element_bytes) * 4;
}
// Part buffers of a staged backward CTA (each grad_out's and x's slabs of one part): fewer than a row's
// parts where not even one row fits (then there is no staged plan).
constexpr int bwd_staged_ring(int vpt, int element_bytes) {
  const int parts = vpt / bwd_part_vpt(vpt);
  const int64_t want = RMSNORM_BWD_STAGED_RING > 0 ? RMSNORM_BWD_STAGED_RING : int64_t(kBwdStages) * parts;
  // a staged backward CTA has a multiprocessor to itself: its shared memory, less the reserved and static
  const int64_t smem = kSmemPerSm - kSmemPerCtaSpare - bwd_staged_sums_bytes(vpt, element_bytes);
  const int64_t fit = smem / bwd_part_bytes(vpt);
  return static_cast<int>(want < fit ? want : fit);
}
// RMSNORM_BWD_STAGED_REG_ROW 1: where the ring holds fewer than two rows' parts (float32 at 8 vectors a
// thread: 128 KB of grad_out and x a row), each thread takes its vectors of a row from shared memory into
// registers as they land and the row's buffers take the next row at once, so the next row is copied in while
// this one is reduced and written: registers are the second stage (2: at every length; 0: never, one stage
// there). On the H200 (one run of benchmarks/variants.py, users' path, backward as a fraction of the copy)
// float32 N = 256K read 0.56 split, 0.78 staged with the register row and grad_weight's sums in shared
// memory, 0.89 with them in registers too (RMSNORM_BWD_STAGED_HOLD_SUMS).
#ifndef RMSNORM_BWD_STAGED_REG_ROW
#define RMSNORM_BWD_STAGED_REG_ROW 1
#endif
template <int kVpt, int kElementBytes>
struct BwdStagedRing {  // constants, not functions: the kernels read them (plan.h is CUDA-free)
  static constexpr int part_vpt = bwd_part_vpt(kVpt);
  static constexpr int parts = kVpt / part_vpt;
  static constexpr int value = bwd_staged_ring(kVpt, kElementBytes);
  static constexpr bool reg_row =
      RMSNORM_BWD_STAGED_REG_ROW == 2 || (RMSNORM_BWD_STAGED_REG_ROW == 1 && value < 2 * parts);
};
// Split (rows of more than kFwdSplitFrom vectors forward; backward, kBwdSplitFrom vectors of 2-byte
// elements and kBwdSplitFrom4 of 4-byte ones): no row held anywhere, two kernels. The first sums
// x * x (forward) or grad_out * w * x (backward) over each slice of kSplitCta * kSplitVpt vectors of a
// row (a CTA a slice, a float a slice). The forward's second scales each slice by the row's
// inv_rms, formed from its slice sums in slice order; the backward's walks a strip of kSplitCta
// vector columns down a unit's rows (at least kBwdSplitRows of them), adds each row's slice sums in
// slice order for its coefficient, writes grad_x and keeps grad_weight's sums of its strip in
// registers: one partial row a unit. x (and grad_out) are read twice, three passes over a tensor
// where two are the least forward (a bound of 0.67 of the copy), five where three are backward
// (0.6), but each pass streams at full occupancy, where a row spread over a cluster has one row in
// flight a multiprocessor and the fallback reads x and grad_out three times. On the H200 (one run of
// benchmarks/variants.py, users' path, backward as a fraction of the copy, split against the paths
// before it): bfloat16 N = 32K / 64K / 128K / 256K 0.46 / 0.44 / 0.39 / 0.29 to 0.50 / 0.49 / 0.47 /
// 0.44; float32 128K / 256K 0.37 / 0.40 to 0.54 / 0.51, 64K 0.54 to 0.55; but float32 16K (4096
// vectors, the staged backward) 0.71 to 0.56 and 32K (8192, a cluster of 8) 0.60 to 0.55: hence a
// threshold a width. bfloat16 32K (4096 vectors) went back to the staged backward when its sums were
// held in registers (0.48 split against 0.70-0.71, above), and 64K to 256K, and float32 32K and 64K,
// to clusters once their grids were capped to the clusters that fit (above). The forward splits only
// rows longer than any cluster holds (65,536 vectors: 16 staged CTAs of 4,096 vectors): with the
// staged forward's weight loaded ahead (kFwdStagedWAhead), float32 N = 262,144 (65,536 vectors) read
// 0.62 split and 0.73 staged in a cluster of 16 (one run of benchmarks/variants.py, users' path). float32
// rows of 32,769 to 65,536 vectors (N = 256K) staged backward in a cluster of 16 at 8 vectors a thread, which
// reads each byte once: with ONE stage (128 KB of grad_out and x and 64 KB of grad_weight sums a CTA) 0.56
// split -> 0.52 (one run, users' path: a row's copy started only once the row before it was written); with
// the register row (RMSNORM_BWD_STAGED_REG_ROW) 0.89, hence staged. The build can override each (0: off).
#ifndef RMSNORM_FWD_SPLIT_FROM
#define RMSNORM_FWD_SPLIT_FROM 65536
#endif
constexpr int64_t kFwdSplitFrom = RMSNORM_FWD_SPLIT_FROM;
#ifndef RMSNORM_BWD_SPLIT_FROM
#define RMSNORM_BWD_SPLIT_FROM 32768
#endif
#ifndef RMSNORM_BWD_SPLIT_FROM4
#define RMSNORM_BWD_SPLIT_FROM4 65536
#endif
constexpr int64_t kBwdSplitFrom = RMSNORM_BWD_SPLIT_FROM;
constexpr int64_t kBwdSplitFrom4 = RMSNORM_BWD_SPLIT_FROM4;
constexpr int kSplitCta = 256;
constexpr int kSplitVpt = 8;
constexpr int64_t kBwdSplitRows = 32;
constexpr int64_t kBwdSplitMaxUnits = 512;
// Clusters: 8 CTAs is the portable limit; 16 needs the non-portable opt-in (Hopper has it).
constexpr int kMaxPortableCluster = 8;
constexpr int kMaxCluster = 16;
constexpr int kMaxCtaThreads = 1024;
// The backward kernel is persistent: as many row units as about 1024 threads on each of 132
// SMs (an H200) can hold at once. A constant, not the device's SM count, so that grad_weight's
// summation order, which follows the units, is the same on every GPU.
constexpr int kPersistentSms = 132;
constexpr int kPersistentThreadsPerSm = 1024;
// Forward grid: rows beyond this many CTAs are grid-strided.
constexpr int64_t kMaxFwdCtas = int64_t(1) << 20;

constexpr int pow2_at_least(int64_t v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One row of n_vec vectors held by `group` threads with up to pref_vpt vectors each, the group
// growing to max_group; then up to max_vpt vectors each; then a cluster of CTAs holding
// cluster_vpt vectors a thread (see below). No plan beyond a 16-CTA cluster of 1024-thread CTAs.
constexpr Plan layout(int64_t n_vec, int small_cta, int max_group, int pref_vpt, int max_vpt,
                      int cluster_vpt) {
  Plan p;
  if (n_vec <= 0) return p;
  if (n_vec <= 32) {
    p.group = pow2_at_least(n_vec);
    p.vpt = 1;
  } else if (n_vec <= int64_t(32) * pref_vpt) {
    p.group = 32;
    p.vpt = pow2_at_least(ceil_div(n_vec, 32));
  } else if (n_vec <= int64_t(max_group) * pref_vpt) {
    p.vpt = pref_vpt;
    p.group = pow2_at_least(ceil_div(n_vec, pref_vpt));
  } else if (n_vec <= int64_t(max_group) * max_vpt) {
    p.vpt = max_vpt;
    p.group = pow2_at_least(ceil_div(n_vec, max_vpt));
  } else {
    // Spread the row over a cluster of CTAs of the usual group size: 8 CTAs (portable), then 16
    // (non-portable); 1024-thread CTAs (one a multiprocessor) only beyond that.
    const int limits[2] = {kMaxPortableCluster, kMaxCluster};
    const int groups[2] = {max_group, kMaxCtaThreads};
    for (int group : groups) {
      for (int limit : limits) {
        const int64_t clusters = ceil_div(n_vec, int64_t(group) * cluster_vpt);
        if (p.cluster == 1 && clusters <= limit) {
          p.vpt = cluster_vpt;
          p.group = group;
          p.cluster = pow2_at_least(clusters);
        }
      }
    }
    if (p.cluster == 1) return Plan{};  // too long for any cluster
  }
  p.cta = p.group > small_cta ? p.group : small_cta;
  return p;
}

// A staged forward: one CTA of kFwdStagedCta threads while it holds the row, then clusters of 2 to 8
// CTAs (portable), then 16; then a cluster of 16 of the long rows' CTAs (kFwdLongCta, kFwdLongVpt), whose
// slabs are twice as long, so that 8 of them would hold no more than 16 of the first.
constexpr Plan staged_layout(int64_t n_vec) {
  Plan p;
  p.staged = true;
  const int steps[3][3] = {{kFwdStagedCta, kFwdStagedVpt, kMaxPortableCluster},  // (threads, vectors, CTAs)
                           {kFwdStagedCta, kFwdStagedVpt, kMaxCluster},
                           {kFwdLongCta, kFwdLongVpt, kMaxCluster}};
  for (const auto& step : steps) {
    const int64_t clusters = ceil_div(n_vec, int64_t(step[0]) * step[1]);
    if (p.vpt == 0 && clusters <= step[2]) {
      p.group = p.cta = step[0];  // the kernel's constant, even where fewer threads would hold the row
      p.vpt = step[1];
      p.cluster = pow2_at_least(clusters);
    }
  }
  if (p.vpt == 0) return Plan{};  // too long for any cluster
  return p;
}

// A split plan, either direction: any length.
constexpr Plan split_layout() {
  Plan p;
  p.split = true;
  p.group = kSplitCta;
  p.vpt = kSplitVpt;
  p.cta = kSplitCta;
  return p;
}

// Short rows (65 to RMSNORM_FWD_SHORT_TO vectors: float32 N = 1K, bfloat16 1K and 2K) at 2 vectors a thread in
// groups of 64 or 128 threads, where layout() gives 4 vectors a thread (0: off). On the H200 (one run of
// benchmarks/variants.py after 1ab2ed7, users' path, forward, 2 vectors a thread at every length): float32 N =
// 1K 0.94 -> 0.96, bfloat16 1K 0.89 -> 0.90; 4K and 8K lost (bfloat16 8K 0.90 -> 0.72, groups of 512). This
// rule alone, in a second run (256 / 128 / 0): float32 1K 0.96 / 0.94 / 0.94; bfloat16 1K 0.90 in all three,
// 2K 0.89 in all three; the lengths past 256 vectors unchanged.
#ifndef RMSNORM_FWD_SHORT_TO
#define RMSNORM_FWD_SHORT_TO 256
#endif
static_assert(RMSNORM_FWD_SHORT_TO <= 256, "RMSNORM_FWD_SHORT_TO: the launcher has groups of up to 128 at 2 vectors");
// Lost, not kept: a reread forward, what torch.compile makes of LlamaRMSNorm at float32 N = 4K and 16K (a row a
// program of 512 threads, 24 registers, two loops over the row: x loaded under an L2 evict-last policy for the
// squares, then again under evict-first for y; its kernel 123.3 us at 86.1% of DRAM throughput at float32 16384
// x 4096 against the register forward's 128.3 us at 83.0%, Nsight Compute on the H200 at 6d2347d). Built as a
// CTA a row holding none of it (32 registers, no spills; rows of 257 to 4,096 vectors), it lost at every shape
// and setting in two runs of benchmarks/variants.py (users' path, forward as a fraction of the copy, bfloat16 N
// = 4K / 8K / 16K and float32 2K / 4K / 8K / 16K): the defaults 0.89 / 0.90 / 0.90 and 0.94 / 0.95 / 0.96 /
// 0.93; 512-thread CTAs with 4 vectors in flight a thread 0.68 / 0.64 / 0.67 and 0.73 / 0.73 / 0.87 / 0.75;
// at each shape the best of the other settings (2 or 1 vectors in flight, CTAs of 256, loads without cache
// policies) 0.83 / 0.89 / 0.88 and 0.91 / 0.91 / 0.92 / 0.77.
// Under Nsight Compute (512 threads, 4 in flight) it moved no more bytes than the register forward (515 MB
// against 513: the second read came from L2) but took 173.5 us at 61.7%: with one short row a CTA, fewer
// bytes are in flight a multiprocessor than the register forward keeps.
// Level or lost, not kept, after 54e0499 (three runs of benchmarks/variants.py on the H200, users' path, forward
// as a fraction of the copy; the defaults read float32 N = 4K 0.94 in all three). torch.compile's kernel there has
// 512 threads of 2 vectors of x (Triton's PTX, 16 warps, the loop unrolled), the weight loaded with y. Built here:
// - the register forward at 2 vectors a thread in fixed groups of 256 and 512 (32 registers at float32, every
//   thread slot of a multiprocessor), alone or with the weight loaded after the reduction: float32 4K 0.94;
//   bfloat16 8K 0.90 -> 0.72 (44 registers, 2 CTAs a multiprocessor), 0.90 with the weight late;
// - the weight loaded after the reduction at every length (32 registers at float32 4 vectors a thread, 8 CTAs a
//   multiprocessor), with or without programmatic dependent launch: 0.94 / 0.95; without the launch alone 0.94;
// - the weight prefetched into L1 and loaded after the reduction: 0.81 (bfloat16 1K 0.44, the defaults 0.82 in that
//   run); with launch bounds for 1,536 or 2,048 threads a multiprocessor too, 0.81 / 0.79 (bfloat16 4K 0.90 ->
//   0.82 / 0.30, spilling);
// - the cache-streaming hint (st.global.cs) on y: 0.94 (float32 16K 0.93 -> 0.90); on x and y: 0.88;
// - the staged forward in the long rows' CTAs from the first staged length (a float32 16K row in one CTA of
//   512 threads): float32 16K / 64K 0.94 / 0.93 -> 0.92 / 0.91, bfloat16 64K / 256K 0.88 / 0.85 -> 0.88 / 0.84.
// The settings that read float32 4K level (the first two and the hint on y) moved bfloat16 1K to 4K by 0.02 at most.
constexpr Plan forward_plan(int64_t n_vec) {
  if (kFwdSplitFrom > 0 && n_vec > kFwdSplitFrom) return split_layout();
  if (kFwdStagedFrom > 0 && n_vec > kFwdStagedFrom) return staged_layout(n_vec);
  const int pref_vpt = n_vec <= RMSNORM_FWD_SHORT_TO ? 2 : kFwdPrefVpt;  // short rows: 2 vectors a thread
  return layout(n_vec, kFwdSmallCta, kFwdMaxGroup, pref_vpt, kFwdMaxVpt, kFwdClusterVpt);
}

// A staged backward: one CTA of kBwdStagedCta threads while it holds the row, then a cluster of up to
// 16; then, for 4-byte elements, a cluster of 16 at twice the vectors a thread; none past that, nor where
// not one row's parts fit a CTA's shared memory (bwd_staged_ring).
constexpr Plan backward_staged_layout(int64_t n_vec, int element_bytes) {
  Plan p;
  int vpt = kBwdStagedVpt;
  int64_t clusters = ceil_div(n_vec, int64_t(kBwdStagedCta) * vpt);
  if (clusters > kMaxCluster && element_bytes >= 4) {
    vpt *= 2;
    clusters = ceil_div(n_vec, int64_t(kBwdStagedCta) * vpt);
  }
  if (clusters > kMaxCluster || bwd_staged_ring(vpt, element_bytes) < vpt / bwd_part_vpt(vpt)) return p;
  p.staged = true;
  p.vpt = vpt;
  p.cluster = pow2_at_least(clusters);
  p.group = p.cta = kBwdStagedCta;  // the kernel's constant, even where fewer threads would hold the row
  return p;
}

// Slices of a split row (one float of the first kernel's sums each).
constexpr int64_t split_slices(int64_t n_vec) { return ceil_div(n_vec, int64_t(kSplitCta) * kSplitVpt); }

// The backward plan of a row of n_vec vectors of element_bytes-byte elements (2 or 4: the split and
// staged thresholds are the only things that depend on it).
constexpr Plan backward_plan(int64_t n_vec, int element_bytes) {
  const int64_t split_from = element_bytes >= 4 ? kBwdSplitFrom4 : kBwdSplitFrom;
  if (split_from > 0 && n_vec > split_from) return split_layout();
  const int64_t staged_from = element_bytes >= 4 ? kBwdStagedFrom4 : kBwdStagedFrom;
  const int64_t staged_to = element_bytes >= 4 ? kBwdStagedTo4 : kBwdStagedTo;
  if (staged_from > 0 && n_vec > staged_from && (staged_to == 0 || n_vec <= staged_to)) {
    const Plan p = backward_staged_layout(n_vec, element_bytes);
    if (p.ok()) return p;
  }
  return layout(n_vec, kBwdCta, kBwdMaxGroup, kBwdMaxVpt, kBwdMaxVpt, kBwdClusterVpt);
}

// Shared memory of a staged backward CTA: its ring of parts of grad_out and x (16-byte vectors), and,
// unless registers hold them, the float grad_weight sums of its columns (vec elements of 16 / vec bytes a
// vector).
constexpr int64_t backward_staged_bytes(const Plan& p, int vec) {
  if (!p.staged) return 0;
  const int element_bytes = 16 / vec;
  return bwd_part_bytes(p.vpt) * bwd_staged_ring(p.vpt, element_bytes) +
         bwd_staged_sums_bytes(p.vpt, element_bytes);
}

// Dynamic shared memory a forward CTA of plan p asks for: its staged slab, or, where the build caps
// the CTAs a multiprocessor holds, enough that no more fit.
inline int64_t forward_smem_bytes(const Plan& p) {
  const int64_t used = p.forward_staged_bytes();
  const int per_sm = p.split ? 0 : p.staged ? RMSNORM_FWD_STAGED_PER_SM : RMSNORM_FWD_PER_SM;
  const int64_t cap = per_sm > 0 ? kSmemPerSm / per_sm - kSmemPerCtaSpare : 0;
  return used > cap ? used : cap;
}

// Row units of the forward grid (a unit is one CTA, or one cluster; it handles cta / group rows).
inline int64_t forward_units(const Plan& p, int64_t rows) {
  const int64_t units = ceil_div(rows, p.cta / p.group);
  const int64_t cap = kMaxFwdCtas / p.cluster;
  return units < cap ? units : cap;
}

// Consecutive rows of a split backward's unit (the last unit may have fewer): kBwdSplitRows, or
// more where that would make more than kBwdSplitMaxUnits units.
inline int64_t split_rows_per_unit(int64_t rows) {
  const int64_t per = ceil_div(rows, kBwdSplitMaxUnits);
  return per > kBwdSplitRows ? per : kBwdSplitRows;
}

// Clusters of `cluster` CTAs, per_sm CTAs a multiprocessor (1 or 2), that the GPU runs at once. A
// cluster's CTAs run in one GPC (a group of multiprocessors), so fewer clusters than
// kPersistentSms * per_sm / cluster fit where a GPC's CTA slots are not a multiple of the cluster.
// A persistent grid of more clusters than fit runs the rest only after the first ones finish:
// twice the time, however few are over. On the H200, cudaOccupancyMaxActiveClusters for the
// staged backward (one CTA a multiprocessor) and the register backward's 512-thread CTAs (two)
// gave 66 / 30 / 15 / 7 and 132 / 62 / 30 / 14 clusters of 2 / 4 / 8 / 16, where the grid had 66 /
// 33 / 16 / 8 and 132 / 66 / 33 / 16. Capping the grid to them took float32 N = 32K (a register
// cluster of 8: 30 units, not 33) from 0.59 to 0.81 of the copy, and the staged bfloat16 64K (a
// cluster of 4) from 0.43 to 0.73 (one run of benchmarks/variants.py, users' path). Constants, like
// kPersistentSms, so that grad_weight's order is the same on every GPU; one that fits fewer runs
// the rest after, as before. The build can override each (RMSNORM_AT_ONCE_<per_sm>_<cluster>).
#ifndef RMSNORM_AT_ONCE_1_2
#define RMSNORM_AT_ONCE_1_2 66
#endif
#ifndef RMSNORM_AT_ONCE_1_4
#define RMSNORM_AT_ONCE_1_4 30
#endif
#ifndef RMSNORM_AT_ONCE_1_8
#define RMSNORM_AT_ONCE_1_8 15
#endif
#ifndef RMSNORM_AT_ONCE_1_16
#define RMSNORM_AT_ONCE_1_16 7
#endif
#ifndef RMSNORM_AT_ONCE_2_2
#define RMSNORM_AT_ONCE_2_2 132
#endif
#ifndef RMSNORM_AT_ONCE_2_4
#define RMSNORM_AT_ONCE_2_4 62
#endif
#ifndef RMSNORM_AT_ONCE_2_8
#define RMSNORM_AT_ONCE_2_8 30
#endif
#ifndef RMSNORM_AT_ONCE_2_16
#define RMSNORM_AT_ONCE_2_16 14
#endif
constexpr int64_t clusters_at_once(int cluster, int64_t per_sm) {
  // [one or two CTAs a multiprocessor][clusters of 1, 2, 4, 8, 16 CTAs]
  const int64_t fit[2][5] = {
      {kPersistentSms, RMSNORM_AT_ONCE_1_2, RMSNORM_AT_ONCE_1_4, RMSNORM_AT_ONCE_1_8, RMSNORM_AT_ONCE_1_16},
      {2 * kPersistentSms, RMSNORM_AT_ONCE_2_2, RMSNORM_AT_ONCE_2_4, RMSNORM_AT_ONCE_2_8, RMSNORM_AT_ONCE_2_16}};
  int log2 = 0;
  while (log2 < 4 && (1 << log2) < cluster) ++log2;
  return fit[per_sm >= 2 ? 1 : 0][log2];
}

// Row units of the persistent backward grid; each writes one float row of grad_weight partial
// sums, which the final kernel adds in unit order.
inline int64_t backward_units(const Plan& p, int64_t rows) {
  if (p.split) return rows > 0 ? ceil_div(rows, split_rows_per_unit(rows)) : 0;
  const int64_t units = ceil_div(rows, p.cta / p.group);
  // A staged unit's shared memory fills a multiprocessor: one CTA on each.
  const int64_t per_sm = p.staged ? 1 : kPersistentThreadsPerSm / p.cta;
  int64_t cap = int64_t(kPersistentSms) * per_sm / p.cluster;
  const int64_t fit = clusters_at_once(p.cluster, per_sm);
  if (fit < cap) cap = fit;
  if (cap < 1) cap = 1;
  return units < cap ? units : cap;
}

}  // namespace plan
}  // namespace rmsnorm
