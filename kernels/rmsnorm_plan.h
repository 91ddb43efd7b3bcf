// How the fast CUDA paths lay a row over threads: every threshold in one place. A plan depends
// on the row's length in 16-byte vectors and on the direction only (the backward's split
// threshold also on the element's width), never on the number of rows or on the device, so a
// row's bits are the same alone or in a batch of any size, and grad_weight is the same on any
// GPU. Torch-free and CUDA-free (the launcher and the tests of the plan read it alike). Each
// setting says why it has its value; the measurements behind them are in docs/tuning.md.
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
// 16-CTA cluster of such CTAs holds take twice the slab a CTA (kFwdLongCta). Staged past 2,048 vectors,
// where it reads faster than the register forward's clusters and not slower than its single CTAs; CTAs of
// 256 threads, since 128 (a shorter last wave) read slower. The build can override these
// (-DRMSNORM_FWD_STAGED_FROM=...; 0 turns the staged path off) to compare settings.
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
// row, which takes instructions out of every row and lets the register clusters keep up with the staged
// kernels. RMSNORM_FIXED_GROUPS=0 reads the group at run time for every plan.
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
// every thread whose vectors are all inside the row (all but those of the row's last CTA): the staged
// backward issues instructions as fast as its warps can, so fewer of them a row is time.
constexpr int kFwdStagedCta = RMSNORM_FWD_STAGED_CTA;
constexpr int kFwdStagedVpt = RMSNORM_FWD_STAGED_VPT;
// Rows past a 16-CTA cluster of those CTAs (past 32,768 vectors: float32 N = 256K) need twice the slab a CTA
// (64 KB, so 3 CTAs a multiprocessor): as CTAs of RMSNORM_FWD_STAGED_LONG_CTA threads at kFwdStagedVpt
// vectors each, or (0) as kFwdStagedCta threads at twice the vectors. 512 threads: twice the warps, half
// the registers a thread and no spills, which reads faster than 256 threads at twice the vectors.
#ifndef RMSNORM_FWD_STAGED_LONG_CTA
#define RMSNORM_FWD_STAGED_LONG_CTA 512
#endif
constexpr int kFwdLongCta = RMSNORM_FWD_STAGED_LONG_CTA > 0 ? RMSNORM_FWD_STAGED_LONG_CTA : kFwdStagedCta;
constexpr int kFwdLongVpt = 2 * kFwdStagedVpt * kFwdStagedCta / kFwdLongCta;
// The staged forward's weight: held in registers from the kernel's start, each CTA loading its
// columns once (their latency off every row's path), for elements of at least
// RMSNORM_FWD_STAGED_HOLD_W bytes (0: none). That is 32 more registers a thread, so 3 CTAs a
// multiprocessor, not 6. None held: with the bulk copy, the weight loaded ahead (kFwdStagedWAhead) at 5
// CTAs a multiprocessor reads faster at every length.
#ifndef RMSNORM_FWD_STAGED_HOLD_W
#define RMSNORM_FWD_STAGED_HOLD_W 0
#endif
template <int kElementBytes>
struct FwdStagedHoldW {  // a constant, not a function: the kernels read it (plan.h is CUDA-free)
  static constexpr bool value = RMSNORM_FWD_STAGED_HOLD_W > 0 && kElementBytes >= RMSNORM_FWD_STAGED_HOLD_W;
};
// The staged forward's weight where it is not held (any element, by default): RMSNORM_FWD_STAGED_W_AHEAD 16-byte
// words of it loaded ahead of their use, a thread's first ones with the row's copies and each next one
// as a vector of y is written (0: each loaded where it is used). Loaded where used, a thread's weight
// loads are L2 round trips one after another on every CTA's way out. 4 words ahead need 48 registers, so 5
// CTAs a multiprocessor (at 6 they spill), and read faster than 0 or 2 words at 6 CTAs or 8 at 4.
#ifndef RMSNORM_FWD_STAGED_W_AHEAD
#define RMSNORM_FWD_STAGED_W_AHEAD 4
#endif
constexpr int kFwdStagedWAhead = RMSNORM_FWD_STAGED_W_AHEAD;
// The forward reads x under an L2 evict-last policy (createpolicy.fractional.L2::evict_last): the register
// forward's loads of x (ld.global.L1::evict_last.L2::cache_hint) and the staged forward's bulk copies
// (.L2::cache_hint), so that L2 evicts the lines of y (written back to DRAM) before those of x, as torch.compile's
// forward loads x in its first pass. It reads faster at most lengths and slower at none, though each call still
// reads all of x from DRAM. RMSNORM_FWD_X_EVICT_LAST=0 loads x without a policy.
#ifndef RMSNORM_FWD_X_EVICT_LAST
#define RMSNORM_FWD_X_EVICT_LAST 1
#endif
// CTAs a multiprocessor the forward kernels may hold at most (0: as many as their registers and
// shared memory allow): RMSNORM_FWD_STAGED_PER_SM for the staged forward, RMSNORM_FWD_PER_SM for the
// register forward; a cap asks for more shared memory than the kernel uses (forward_smem_bytes). No cap:
// the bytes in flight, not the last wave, bound these rows, and every cap read slower.
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
// or would not pipeline): a persistent CTA of kBwdStagedCta threads (one slab of a cluster's row) keeps
// kBwdStages rows of x and grad_out in shared memory, copying the next rows in by bulk copies while it
// reduces and writes this one, and its grad_weight sums in registers or there too (BwdStagedHold): one CTA
// a multiprocessor. The thresholds, a pair for each element width, are where it reads faster than the
// register clusters below them and the split above them: bfloat16 past 1,024 vectors to a 16-CTA cluster's
// 32,768; float32 past 16,384 vectors (the register clusters are as fast below) to 65,536, the last half
// with registers as its second stage (RMSNORM_BWD_STAGED_REG_ROW). The build can override each (0: off, or
// no limit).
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
// waits; otherwise they are prefetched into L2 and loaded after this row is written. Only 4-byte
// elements without a cluster are pipelined: 2-byte elements spill with it, and in a cluster it read
// slower (with a cluster barrier that drained every load in flight on each row: to measure again).
// RMSNORM_BWD_PIPELINE=0 pipelines none, 2 every kernel, 3 the 4-byte ones in clusters too.
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
// (their product sets the shared memory a CTA holds: backward_staged_bytes). 512 threads of 4 vectors
// read faster than 256 of 8 and 1024 of 2: 16 warps a multiprocessor, without spills. The build can
// override both (RMSNORM_BWD_STAGED_CTA, RMSNORM_BWD_STAGED_VPT).
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
// sums live in shared memory and the weight is loaded with each row. Held for 2-byte elements, where it
// reads faster. RMSNORM_BWD_STAGES rows of grad_out and x a CTA has in shared memory: the one it reduces
// and writes, and the next ones on their way; two, which read faster than three with the bulk copies.
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
// while this one is reduced and written. Parts read slower wherever they were measured, so a row is one
// part (0). RMSNORM_BWD_STAGED_HOLD_SUMS: grad_weight's sums in registers for elements of at most that many
// bytes too (the weight stays loaded with each row): faster for float32, without spills.
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
// there). With it those rows read faster staged than split; with one stage, slower.
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
// flight a multiprocessor and the fallback reads x and grad_out three times. So only rows past what the
// staged kernels hold are split: the forward's past any cluster (65,536 vectors: 16 staged CTAs of 4,096
// vectors), the backward's past 32,768 vectors of 2-byte elements and 65,536 of 4-byte ones. The build can
// override each (0: off).
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
// groups of 64 or 128 threads, where layout() gives 4 vectors a thread (0: off): faster at float32 N = 1K,
// level at bfloat16, slower past 256 vectors.
#ifndef RMSNORM_FWD_SHORT_TO
#define RMSNORM_FWD_SHORT_TO 256
#endif
static_assert(RMSNORM_FWD_SHORT_TO <= 256, "RMSNORM_FWD_SHORT_TO: the launcher has groups of up to 128 at 2 vectors");
// The forward's other shapes and settings measured and not kept (a reread forward, as torch.compile makes
// LlamaRMSNorm, other weight-load orders, launch bounds, cache hints): docs/tuning.md.
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
// twice the time, however few are over. The defaults are what cudaOccupancyMaxActiveClusters gives on
// the H200 for the staged backward (one CTA a multiprocessor) and the register backward's 512-thread
// CTAs (two). Constants, like kPersistentSms, so that grad_weight's order is the same on every GPU; one
// that fits fewer runs the rest after. The build can override each (RMSNORM_AT_ONCE_<per_sm>_<cluster>).
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
