"""Mutants: broken variants of this project's own kernels and binding, each one bug of a class
that has shipped in real RMSNorm/LayerNorm kernels. ``python -m harness mutate`` builds each one
as a target and runs the suite on it; a mutant the suite does not catch is a hole in the suite.

A mutant is a list of exact text edits to the project's sources. Every edit's text must occur
in the current sources exactly as many times as it says (``tests/test_mutants.py`` checks
that), so the catalogue cannot silently drift from the code it mutates. Building them:
harness.mutants.builder.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from rmsnorm import _buildenv as buildenv

LANES = ("cpu", "cuda", "both")


@dataclass(frozen=True)
class Edit:
    file: str  # relative to the project root
    old: str
    new: str
    count: int = 1  # how many times `old` occurs; all of them are replaced


@dataclass(frozen=True)
class Mutant:
    name: str
    lane: str  # the device whose code it breaks: cpu, cuda, or both (shared binding code)
    bug: str  # the class of bug, in a few words
    edits: tuple[Edit, ...]
    echoes: str = ""  # a real report of this class: owner/repo#number
    killed_by: tuple[str, ...] = field(default=(), compare=False)  # laws expected to catch it (documentation)
    # A compute-sanitizer tool that must report it (the GPU lane's sanitize step runs it on the mutant).
    sanitizer: str = ""
    # False: a race or hazard that outputs need not show (the bits come out right on most runs), so the
    # suite does not judge it and mutate leaves it to the sanitizer; its kill is the sanitizer's report.
    by_suite: bool = True
    # The path cases of harness/tools/sanitize.py (indices into its PATHS) that reach the mutated code, where
    # the sanitizer is run on those alone (empty: all of them): racecheck on every case of a racy
    # mutant took minutes on the H200.
    sanitize_paths: tuple[int, ...] = ()
    # Why no tool judges it now (neither the suite nor a sanitizer), where none does: it stays in the
    # catalogue so that its edits are still checked against the sources, and the mutation score and
    # the sanitize step name it as not judged rather than leave it out unsaid.
    unjudged: str = ""
    # The module target that judges it, where its edits are in code the card's form never calls (the fused
    # forms): a module of examples/project_variants/ whose forward calls rmsnorm.rms_norm, which a mutant
    # target serves from the mutant's build (harness.running.loading); its RMSNORM_CONTRACT says the variant.
    # Empty: the extension itself, in the card's form.
    form: str = ""

    def key(self) -> str:
        h = hashlib.sha256(self.name.encode())
        for e in self.edits:
            h.update(repr((e.file, e.old, e.new, e.count)).encode())
        return h.hexdigest()[:12]


CU = "kernels/rmsnorm_fallback.cu"  # the fallback path: float64, odd lengths, misaligned rows
ROWS = "kernels/rmsnorm_rows.cuh"  # the fast paths' kernels (rows and cluster)
DEV = "kernels/rmsnorm_device.cuh"
PLAN = "kernels/rmsnorm_plan.h"
LAUNCH = "kernels/rmsnorm_launch.cu"
DW = "kernels/rmsnorm_dw.cu"
CUDA_BIND = "binding/rmsnorm_cuda.cpp"
CPU = "kernels/rmsnorm_cpu.h"
BIND = "binding/rmsnorm.cpp"

_FWD_ROW = "const T* xr = x + row * x_row_stride;\n    T* yr = y + row * n;"
_FWD_OUT_LOOP = "for (int64_t j = threadIdx.x; j < n_vec; j += blockDim.x) {\n      V v, out;"
_STORE_TAIL = "if (j * kVec + k < n) row[j * kVec + k] = in.v[k];"
_FWD_SS_VEC = "for (int64_t j = threadIdx.x; j < n_vec; j += blockDim.x) {\n      V v;\n      load_vec"
_FWD_LOOP = "for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {\n    const T* xr = x + row * x_row_stride;\n    T* yr"

_FWD_IO = ("ForwardIO forward_io(const at::Tensor& x, const at::Tensor& weight) {\n"
           "  return ForwardIO{as_rows(x), weight.contiguous(), x.new_empty(x.sizes(), x.options()),\n"
           "                   x.new_empty(stat_shape(x), x.options().dtype(acc_dtype(x.scalar_type())))};")


def _kept_buffer(name: str, t: str) -> str:
    """C++ of a function name(t) handing out a buffer like t kept per shape, dtype and device: each call of
    that shape gets the same memory (the outputs-kept-by-shape mutants)."""
    return (f"at::Tensor {name}(const at::Tensor& {t}) {{\n"
            "  static std::vector<at::Tensor>* kept = new std::vector<at::Tensor>();\n"
            "  for (const at::Tensor& t : *kept) {\n"
            f"    if (t.sizes() == {t}.sizes() && t.dtype() == {t}.dtype() && t.device() == {t}.device()) return t;\n"
            "  }\n"
            f"  kept->push_back({t}.new_empty({t}.sizes(), {t}.options()));\n"
            "  return kept->back();\n"
            "}\n\n")


_FWD_IO_KEPT = _kept_buffer("kept_y", "x") + _FWD_IO.replace("x.new_empty(x.sizes(), x.options()),", "kept_y(x),")
_BWD_IO_DW = "x.new_empty(x.sizes(), x.options()), w.new_empty(w.sizes(), w.options())};"
_KEPT_DW = _kept_buffer("kept_dw", "w") + "BackwardIO backward_io("

CATALOGUE: tuple[Mutant, ...] = (
    # ---- CUDA kernels and the CUDA side of the binding -----------------------------------------
    Mutant("cuda_vec_tail_unwritten", "cuda", "vector tail skipped when N is not a multiple of the vector width",
           (Edit(CU, _FWD_OUT_LOOP, _FWD_OUT_LOOP.replace("j < n_vec;", "j < n / kVec;")),),
           echoes="ROCm/aiter#5044"),
    Mutant("cuda_misaligned_pointer", "cuda", "a misaligned data pointer assumed 16-byte aligned",
           (Edit(CU, "return aligned16(p) && (rows <= 1 || row_stride % vec_width<T>() == 0);",
                 "return rows <= 1 || row_stride % vec_width<T>() == 0;"),),
           echoes="NVIDIA/TransformerEngine#886"),
    Mutant("cuda_misaligned_row_stride", "cuda", "rows of a padded layout assumed aligned (only the base pointer checked)",
           (Edit(CU, "return aligned16(p) && (rows <= 1 || row_stride % vec_width<T>() == 0);",
                 "return aligned16(p);"),),
           echoes="vllm-project/vllm#45466"),
    Mutant("cuda_strides_ignored", "cuda", "the input's row stride ignored (a sliced or padded input read as contiguous)",
           (Edit(CU, _FWD_ROW, _FWD_ROW.replace("row * x_row_stride", "row * n")),)),
    Mutant("cuda_int32_offsets", "cuda", "32-bit row offsets that overflow past 2^31 elements",
           (Edit(CU, _FWD_ROW, "const T* xr = x + static_cast<int>(row) * static_cast<int>(x_row_stride);\n"
                               "    T* yr = y + static_cast<int>(row) * static_cast<int>(n);"),),
           echoes="pytorch/pytorch#181555"),
    Mutant("cuda_grid_limit_rows", "cuda", "rows beyond a 65,535-block grid left unwritten (no grid-stride loop)",
           (Edit(CU, "constexpr int64_t kMaxBlocks = int64_t(1) << 20;", "constexpr int64_t kMaxBlocks = 65535;"),
            Edit(CU, _FWD_LOOP, _FWD_LOOP.replace("row += gridDim.x", "row += rows"))),
           echoes="NVIDIA/apex#411"),
    Mutant("cuda_eps_outside_sqrt", "cuda", "eps added outside the square root",
           (Edit(CU, "const A inv = rsqrt_acc(ss / static_cast<A>(n) + eps);",
                 "const A inv = A(1) / (sqrt(ss / static_cast<A>(n)) + eps);"),)),
    Mutant("cuda_eps_dropped", "cuda", "eps left out of the statistics",
           (Edit(CU, "const A inv = rsqrt_acc(ss / static_cast<A>(n) + eps);",
                 "const A inv = rsqrt_acc(ss / static_cast<A>(n));"),)),
    Mutant("cuda_accumulate_in_half", "cuda", "sum of squares accumulated in fp16/bf16",
           (Edit(CU, "ss += a * a;", "ss = to_acc(from_acc<T>(ss + a * a));"),),
           echoes="nntrainer/nntrainer#3935"),
    Mutant("cuda_square_in_half", "cuda", "x*x computed in fp16/bf16 (overflows past 256 in fp16)",
           (Edit(CU, "ss += a * a;", "ss += to_acc(from_acc<T>(a * a));"),),
           echoes="pytorch/pytorch#133085"),
    Mutant("cuda_weight_index", "cuda", "the weight indexed by the vector, not the element (invisible with unit weights)",
           (Edit(CU, "out.v[k] = from_acc<T>(to_acc(v.v[k]) * inv * static_cast<A>(to_acc(weight[j * kVec + k])));",
                 "out.v[k] = from_acc<T>(to_acc(v.v[k]) * inv * static_cast<A>(to_acc(weight[j + k])));"),)),
    Mutant("cuda_large_n_one_pass", "cuda", "a bug on the large-N path: one pass over the row assumed (N > threads x vector)",
           (Edit(CU, _FWD_SS_VEC, _FWD_SS_VEC.replace("j += blockDim.x", "j += n_vec")),)),
    Mutant("cuda_reduce_barrier_missing", "cuda", "a missing __syncthreads() before the block total is read",
           (Edit(CU, "  }\n  __syncthreads();\n  const A total = shared[0];", "  }\n  const A total = shared[0];"),),
           echoes="NVIDIA/apex#1184", sanitizer="racecheck", sanitize_paths=(0, 1)),  # the fallback
    Mutant("cuda_fwd_tail_past_row", "cuda", "an off-by-one write past the end of each row (out of bounds on the last)",
           (Edit(CU, _STORE_TAIL, _STORE_TAIL.replace("< n)", "<= n)")),),
           echoes="ROCm/aiter#5290", sanitizer="memcheck"),
    Mutant("cuda_bwd_missing_term", "cuda", "backward missing the -x * inv^2 * mean(g * x) term",
           (Edit(CU, "out.v[k] = from_acc<T>(inv * (g - to_acc(vx.v[k]) * c));", "out.v[k] = from_acc<T>(inv * g);"),)),
    Mutant("cuda_bwd_inv_of_block", "cuda", "backward reads the inv_rms of the block, not of the row (wrong past the grid)",
           (Edit(CU, "const A inv = inv_rms[row];", "const A inv = inv_rms[blockIdx.x];"),)),
    Mutant("cuda_dw_chunk_local_row", "cuda", "grad_weight reads inv_rms with a chunk-local row index",
           (Edit(CU, "(to_acc(x[r * x_row_stride + col]) * inv_rms[r]);",
                 "(to_acc(x[r * x_row_stride + col]) * inv_rms[r - r_begin]);"),)),
    Mutant("cuda_dw_partials_not_zeroed", "cuda", "grad_weight partial sums added to uninitialised scratch",
           (Edit(CU, "partial[chunk * n + col] = acc;", "partial[chunk * n + col] += acc;"),)),
    Mutant("cuda_dw_float_atomics", "cuda", "grad_weight summed with float atomics (not deterministic)",
           (Edit(CU, "partial[chunk * n + col] = acc;", "atomicAdd(&partial[col], acc);"),
            Edit(CU, "  if (chunks > 0) {\n    rmsnorm_bwd_dw_partial_kernel",
                 "  if (chunks > 0) cudaMemsetAsync(workspace, 0, n * sizeof(AccT<T>), stream);\n"
                 "  if (chunks > 0) {\n    rmsnorm_bwd_dw_partial_kernel"),
            Edit(CU, "(workspace, dw,\n                                                                            chunks, n);",
                 "(workspace, dw,\n                                                                            chunks > 0 ? 1 : 0, n);")),
           echoes="karpathy/llm.c#445"),
    Mutant("cuda_dw_rows_unclamped", "cuda", "the last grad_weight chunk reads rows past the end (out of bounds)",
           (Edit(CU, "const int64_t r_end = r_begin + rows_per_chunk < rows ? r_begin + rows_per_chunk : rows;",
                 "const int64_t r_end = r_begin + rows_per_chunk;"),), sanitizer="memcheck"),
    Mutant("cuda_dw_accumulate_in_weight_dtype", "cuda", "grad_weight partials summed in the weight's fp16/bf16",
           (Edit(CU, "  A acc = 0;\n  for (int64_t k = 0; k < chunks; ++k) acc += partial[k * n + col];",
                 "  W acc = from_acc<W>(A(0));\n"
                 "  for (int64_t k = 0; k < chunks; ++k) acc = from_acc<W>(static_cast<A>(to_acc(acc)) + partial[k * n + col]);"),)),
    Mutant("cuda_default_stream", "cuda", "kernels launched on the default stream instead of the current one",
           (Edit(CUDA_BIND, "const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();",
                 "const cudaStream_t stream = nullptr;", count=2),),
           echoes="pytorch/pytorch#22470"),
    Mutant("cuda_grad_x_into_grad_out", "cuda", "backward writes grad_x into grad_out",
           (Edit(CUDA_BIND, "cuda_ptr<W>(w), inv.data_ptr<A>(), cuda_ptr<T>(dx), cuda_ptr<W>(dw),",
                 "cuda_ptr<W>(w), inv.data_ptr<A>(), cuda_ptr<T>(dyr.owner), cuda_ptr<W>(dw),"),)),
    Mutant("cuda_zero_rows_empty_grid", "cuda", "zero rows launched as an empty grid",
           (Edit(CUDA_BIND, "  if (xr.rows == 0) return {y, inv};\n", ""),
            Edit(LAUNCH, "if (rows == 0 || n == 0) return cudaSuccess;", "if (n == 0) return cudaSuccess;"))),
    # ---- the fast paths (register-resident rows, clusters, grad_weight partials) ---------------
    Mutant("fast_path_by_rows", "cuda", "small batches sent down another path (a row's bits depend on the batch)",
           (Edit(LAUNCH, "    if (p.ok()) {\n      float* sums = static_cast<float*>(workspace);\n",
                 "    if (p.ok() && rows >= 64) {\n      float* sums = static_cast<float*>(workspace);\n"),),
           echoes="vllm-project/vllm#48271"),
    Mutant("fast_eps_dropped", "cuda", "eps left out of the statistics (fast path)",
           (Edit(ROWS, "dev::rsqrt_acc(ss / static_cast<float>(n) + eps);", "dev::rsqrt_acc(ss / static_cast<float>(n));",
                 count=2),)),
    Mutant("fast_accumulate_in_half", "cuda", "sum of squares accumulated in fp16/bf16 (fast path)",
           (Edit(ROWS, "          ss += a * a;", "          ss = dev::to_acc(dev::from_acc<T>(ss + a * a));"),
            Edit(ROWS, "        ss += a * a;\n      }\n    }\n    ss = dev::group_sum<kCluster>(ss, group, parity, slots, entry);\n    const float inv = dev::rsqrt_acc(ss / static_cast<float>(n) + eps);\n    if (!active)",
                 "        ss = dev::to_acc(dev::from_acc<T>(ss + a * a));\n      }\n    }\n    ss = dev::group_sum<kCluster>(ss, group, parity, slots, entry);\n    const float inv = dev::rsqrt_acc(ss / static_cast<float>(n) + eps);\n    if (!active)")),
           echoes="nntrainer/nntrainer#3935"),
    Mutant("fast_weight_index", "cuda", "the weight's first element of each vector used for the whole vector (fast path)",
           (Edit(DEV, "inv * static_cast<float>(to_acc(w.v[k])));", "inv * static_cast<float>(to_acc(w.v[0])));"),)),
    Mutant("fast_tail_unpredicated", "cuda", "the loads of a row's last, partly filled pass not predicated (reads the next row)",
           (Edit(ROWS, "      if (active && j < n_vec) {\n        if constexpr (kEvictLast) {",
                 "      if (active) {\n        if constexpr (kEvictLast) {"),)),
    Mutant("fast_plan_capacity_short", "cuda", "the plan rounds the threads a row needs down, not up (the row's end left unwritten)",
           (Edit(PLAN, "p.group = pow2_at_least(ceil_div(n_vec, pref_vpt));", "p.group = pow2_at_least(n_vec / pref_vpt);"),)),
    Mutant("fast_butterfly_crosses_rows", "cuda", "a warp-wide butterfly where several rows share a warp (sums mixed across rows)",
           (Edit(DEV, "const int width = group < kWarpSize ? group : kWarpSize;", "const int width = kWarpSize;"),)),
    Mutant("fast_reduce_barrier_missing", "cuda", "a missing barrier before the warps' partial sums are read (fast path)",
           (Edit(DEV, "    if (threadIdx.x % kWarpSize == 0) slots.warp[parity][warp] = v;\n    __syncthreads();\n",
                 "    if (threadIdx.x % kWarpSize == 0) slots.warp[parity][warp] = v;\n"),),
           echoes="NVIDIA/apex#1184", sanitizer="racecheck", sanitize_paths=(4, 5, 6)),  # rows of several warps
    # A race between consecutive rows of a persistent backward unit: the bits came out right in every
    # search on the H200 (it survived two), so racecheck judges it, on the path case whose backward
    # units take rows of two warps twice.
    Mutant("fast_slots_single_buffered", "cuda", "one reduction slot reused by consecutive rows without a second barrier",
           (Edit(ROWS, "base += units * per_unit, parity ^= 1) {", "base += units * per_unit) {", count=2),),
           sanitizer="racecheck", by_suite=False, sanitize_paths=(12,)),
    Mutant("cluster_rank_ignored", "cuda", "every CTA of a cluster reads the first slab of the row",
           (Edit(ROWS, "const int first_vec = static_cast<int>(rank) * kVpt * group + lane;",
                 "const int first_vec = lane;", count=2),
            Edit(ROWS, "const int first_vec = static_cast<int>(rank) * kVpt * kGroup + lane;",
                 "const int first_vec = lane;", count=2))),
    Mutant("cluster_sum_local", "cuda", "the row's sum taken over the CTA's own slab only, not the cluster's",
           (Edit(DEV, "for (unsigned int r = 1; r < ctas; ++r)", "for (unsigned int r = 1; r < 1; ++r)"),)),
    Mutant("cluster_push_before_barrier_missing", "cuda", "the cluster's partial sums read before they have all landed "
           "(no wait on the mbarrier that counts them)",
           (Edit(DEV, "    entry.wait_arrived(slots, parity);\n", ""),)),
    Mutant("cluster_entry_wait_missing", "cuda", "partial sums written into the shared memory of cluster peers that "
           "may not have started (no wait on the entry barrier)",
           (Edit(DEV, "    entry.wait_once();  // every peer has entered: its shared memory may be written\n", ""),),
           by_suite=False,
           unjudged="racecheck saw it while the totals went by plain stores into the peers' shared memory "
                    "(caught then); they now go by st.async, which racecheck does not check: it "
                    "came out clean on the H200 on the cluster path cases (6, 7), and the outputs need not show it"),
    Mutant("fast_int32_row_offsets", "cuda", "32-bit row offsets that overflow past 2^31 elements (fast path)",
           (Edit(ROWS, "const T* xr = x + row * x_row_stride;\n    V xv[kVpt];",
                 "const T* xr = x + static_cast<int>(row) * static_cast<int>(x_row_stride);\n    V xv[kVpt];"),
            Edit(ROWS, "const T* xr = x + row * x_row_stride + first;",
                 "const T* xr = x + static_cast<int>(row) * static_cast<int>(x_row_stride) + first;"),
            Edit(ROWS, "T* yr = y + row * n;", "T* yr = y + static_cast<int>(row) * static_cast<int>(n);"),
            Edit(ROWS, "T* yr = y + row * n + first;", "T* yr = y + static_cast<int>(row) * static_cast<int>(n) + first;")),
           echoes="pytorch/pytorch#181555"),
    Mutant("fast_misaligned_row_stride", "cuda", "rows of a padded layout assumed aligned when the base is (fast path)",
           (Edit(LAUNCH, "return aligned16(p) && (row_stride * int64_t(sizeof(T))) % 16 == 0;",
                 "return aligned16(p);"),),
           echoes="vllm-project/vllm#45466"),
    Mutant("fast_misaligned_pointer", "cuda", "a misaligned base pointer assumed 16-byte aligned (fast path)",
           (Edit(LAUNCH, "return aligned16(p) && (row_stride * int64_t(sizeof(T))) % 16 == 0;",
                 "return (row_stride * int64_t(sizeof(T))) % 16 == 0;"),),
           echoes="NVIDIA/TransformerEngine#886"),
    Mutant("fast_misaligned_weight", "cuda",
           "the weight assumed 16-byte aligned (only x and grad_out checked; fast path)",
           (Edit(LAUNCH, "      weight = staged(weight, w_stride, 1, n, ws, stream);\n", "", count=2),)),
    Mutant("fast_bwd_missing_term", "cuda", "backward missing the -x * inv^2 * mean(g * x) term (fast path)",
           (Edit(ROWS, "out.v[k] = dev::from_acc<T>(inv * (g - dev::to_acc(xv[v].v[k]) * c));",
                 "out.v[k] = dev::from_acc<T>(inv * g);"),)),
    # The staged forward's threads read its slab before the bulk copy has landed: what shared memory held
    # before, or bytes still arriving. racecheck judges it.
    Mutant("fast_staged_copy_not_awaited", "cuda", "a staged row read from shared memory before its async copy lands",
           (Edit(ROWS, "    if (slab_bytes > 0) dev::wait_phase(dev::smem_address(&landed), static_cast<unsigned int>(parity));\n",
                 ""),),
           sanitizer="racecheck", by_suite=False, sanitize_paths=(7, 8)),  # staged forwards, clusters of 4 and 8
    # The staged backward's rows take turns in shared-memory stages; reading one before its bulk copies have
    # landed reads the row a stage held before, or bytes still arriving: a matter of timing, as above.
    Mutant("fast_staged_bwd_copy_not_awaited", "cuda", "the staged backward reads a row from shared memory before "
           "its async copies land",
           (Edit(ROWS, "      if (part_bytes[kP] > 0) phases.wait(dev::smem_address(&landed[b]), b);\n", ""),),
           sanitizer="racecheck", by_suite=False, sanitize_paths=(7, 17)),  # staged backwards, clusters of 4
    Mutant("fast_staged_slots_overlap", "cuda", "every vector of a thread read from the same shared-memory slot",
           (Edit(ROWS, "*reinterpret_cast<const V*>(&tile[v * kGroup + lane]);", "*reinterpret_cast<const V*>(&tile[lane]);",
                 count=2),)),
    Mutant("fast_bwd_dot_in_half", "cuda", "the backward's row reduction sum(grad_out * w * x) accumulated per thread "
           "in fp16/bf16 (fast path)",
           (Edit(DEV, "acc += to_acc(d.v[k]) * static_cast<float>(to_acc(w.v[k])) * to_acc(x.v[k]);",
                 "acc = to_acc(from_acc<T>(acc + to_acc(d.v[k]) * static_cast<float>(to_acc(w.v[k])) * to_acc(x.v[k])));"),)),
    Mutant("cuda_bwd_dot_in_half", "cuda", "the backward's row reduction sum(grad_out * w * x) accumulated per thread "
           "in fp16/bf16",
           (Edit(CU, "dot += to_acc(vd.v[k]) * static_cast<A>(to_acc(weight[j * kVec + k])) * to_acc(vx.v[k]);",
                 "dot = to_acc(from_acc<T>(dot + to_acc(vd.v[k]) * static_cast<A>(to_acc(weight[j * kVec + k])) * "
                 "to_acc(vx.v[k])));"),)),
    Mutant("fast_persistent_stride", "cuda", "persistent backward units stride by one unit (rows added to grad_weight several times)",
           (Edit(ROWS, "  int parity = 0;\n  for (int64_t base = unit * per_unit; base < rows; base += units * per_unit, parity ^= 1) {\n    const int64_t row = base + group_index;",
                 "  int parity = 0;\n  for (int64_t base = unit * per_unit; base < rows; base += per_unit, parity ^= 1) {\n    const int64_t row = base + group_index;"),)),
    Mutant("fast_dw_groups_dropped", "cuda", "grad_weight leaves out the other row groups of a CTA",
           (Edit(ROWS, "for (int g = 1; g < per_unit; ++g) {", "for (int g = 1; g < 1; ++g) {"),)),
    Mutant("fast_dw_partial_index", "cuda", "grad_weight partial rows indexed without the row length",
           (Edit(DW, "acc += partial[u * n + col];", "acc += partial[u + col];"),)),
    # A race between the warps of one CTA that sum equal shares of the units: its kept case (64 rows)
    # reaches the reduce of few units, which has no barrier, and on the H200 one fresh search killed it
    # but a later one did not (the bits came out right), so racecheck judges it, on the path case whose
    # backward writes 264 partial rows.
    Mutant("fast_dw_reduce_barrier_missing", "cuda", "the final grad_weight sum reads the other warps' sums before a barrier",
           (Edit(DW, "  sums[threadIdx.y][threadIdx.x] = acc;\n  __syncthreads();\n", "  sums[threadIdx.y][threadIdx.x] = acc;\n"),),
           sanitizer="racecheck", by_suite=False, sanitize_paths=(12,)),
    # The reduce of few partial rows (dw_runs_kernel: a warp a run of two units, warp 0 adding the runs): its
    # barrier missing, warp 0 reads runs the other warps may not have written yet; on the path case whose
    # backward writes 30 partial rows (15 runs).
    Mutant("fast_dw_runs_barrier_missing", "cuda", "grad_weight's sum of few partial rows reads the other warps' "
           "runs before a barrier",
           (Edit(DW, "  run_sums[threadIdx.y][threadIdx.x] = acc;\n  __syncthreads();\n",
                 "  run_sums[threadIdx.y][threadIdx.x] = acc;\n"),),
           sanitizer="racecheck", by_suite=False, sanitize_paths=(17,)),
    # ---- CPU kernels and the CPU side of the binding -------------------------------------------
    Mutant("cpu_tail_skipped", "cpu", "the partial tile skipped when N is not a multiple of 8",
           (Edit(CPU, "  for (; i < n; ++i) {  // partial tile: n not a multiple of 8\n"
                      "    const A a = static_cast<A>(xr[i]);\n    part[i % 8] += a * a;\n  }\n", ""),)),
    Mutant("cpu_eps_outside_sqrt", "cpu", "eps added outside the square root",
           (Edit(CPU, "const A inv = A(1) / std::sqrt(ss / static_cast<A>(n) + eps);",
                 "const A inv = A(1) / (std::sqrt(ss / static_cast<A>(n)) + eps);"),)),
    Mutant("cpu_square_in_half", "cpu", "x*x computed in fp16/bf16 (overflows past 256 in fp16)",
           (Edit(CPU, "part[k] += a * a;", "part[k] += static_cast<A>(static_cast<T>(a * a));"),
            Edit(CPU, "part[i % 8] += a * a;", "part[i % 8] += static_cast<A>(static_cast<T>(a * a));")),
           echoes="pytorch/pytorch#133085"),
    Mutant("cpu_accumulate_in_half", "cpu", "sum of squares accumulated in fp16/bf16",
           (Edit(CPU, "part[k] += a * a;", "part[k] = static_cast<A>(static_cast<T>(part[k] + a * a));"),
            Edit(CPU, "part[i % 8] += a * a;", "part[i % 8] = static_cast<A>(static_cast<T>(part[i % 8] + a * a));")),
           echoes="pytorch/pytorch#189581"),
    Mutant("cpu_weight_index", "cpu", "the weight indexed within the tile (invisible with unit weights)",
           (Edit(CPU, "yr[i] = static_cast<T>(static_cast<A>(xr[i]) * inv * static_cast<A>(weight[i]));",
                 "yr[i] = static_cast<T>(static_cast<A>(xr[i]) * inv * static_cast<A>(weight[i % 8]));"),)),
    Mutant("cpu_bwd_missing_term", "cpu", "backward missing the -x * inv^2 * mean(g * x) term",
           (Edit(CPU, "dxr[i] = static_cast<T>(inv * (g - static_cast<A>(xr[i]) * c));",
                 "dxr[i] = static_cast<T>(inv * g);"),)),
    Mutant("cpu_bwd_dot_in_half", "cpu", "the backward's row reduction sum(grad_out * w * x) accumulated in fp16/bf16",
           (Edit(CPU, "part[i % 4] += static_cast<A>(dyr[i]) * static_cast<A>(weight[i]) * static_cast<A>(xr[i]);",
                 "part[i % 4] = static_cast<A>(static_cast<T>(part[i % 4] + static_cast<A>(dyr[i]) * "
                 "static_cast<A>(weight[i]) * static_cast<A>(xr[i])));"),)),
    Mutant("cpu_dw_chunk_local_row", "cpu", "grad_weight reads inv_rms with a chunk-local row index",
           (Edit(CPU, "const A inv = inv_rms[r];\n      for (int64_t i = 0; i < n; ++i) {\n        pk[i] +=",
                 "const A inv = inv_rms[r - k * per];\n      for (int64_t i = 0; i < n; ++i) {\n        pk[i] +="),)),
    Mutant("cpu_dw_partials_not_zeroed", "cpu", "grad_weight partial sums added to uninitialised scratch",
           (Edit(CPU, "    for (int64_t i = 0; i < n; ++i) pk[i] = A(0);\n", ""),)),
    Mutant("cpu_strides_ignored", "cpu", "the input's row stride ignored (a sliced or padded input read as contiguous)",
           (Edit(BIND, "cpu::rmsnorm_fwd_rows<T, W>(xp, xr.row_stride, wp,", "cpu::rmsnorm_fwd_rows<T, W>(xp, xr.n, wp,"),)),
    Mutant("cpu_grad_x_into_x", "cpu", "backward writes grad_x into x",
           (Edit(BIND, "dx.data_ptr<T>(), b, e, n);", "const_cast<T*>(xp), b, e, n);"),)),
    Mutant("cpu_batch_variant_order", "cpu", "the sum of squares taken in another order when a thread gets 16 rows or more",
           (Edit(CPU, "    const A ss = row_sum_squares(xr, n);\n",
                 "    const A ss = row_end - row_begin < 16 ? row_sum_squares(xr, n) : [&] {\n"
                 "      A s = 0;\n      for (int64_t i = n - 1; i >= 0; --i) s += static_cast<A>(xr[i]) * static_cast<A>(xr[i]);\n"
                 "      return s;\n    }();\n"),),
           echoes="vllm-project/vllm#48271"),
    Mutant("cpu_zero_rows_dw_unwritten", "cpu", "zero rows: grad_weight left unwritten",
           (Edit(BIND, "  const int64_t chunks = gw_num_chunks(rows, n);\n  at::Tensor partial",
                 "  if (rows == 0) return {dx, dw};\n  const int64_t chunks = gw_num_chunks(rows, n);\n  at::Tensor partial"),)),
    # ---- shared binding code: argument checks and layouts (both devices) -----------------------
    Mutant("weight_shape_unchecked", "both", "the weight's length not checked against N",
           (Edit(BIND, "TORCH_CHECK_VALUE(weight.dim() == 1 && weight.size(0) == x.size(-1),",
                 "TORCH_CHECK_VALUE(weight.dim() == 1,"),)),
    Mutant("weight_stride_ignored", "both", "the weight read as contiguous (a strided weight's stride ignored)",
           (Edit(BIND, "weight.contiguous()", "weight", count=2),),
           echoes="flashinfer-ai/flashinfer#4060"),
    Mutant("y_kept_by_shape", "both", "y handed out from a buffer kept per shape (the next call of that shape overwrites it)",
           (Edit(BIND, _FWD_IO, _FWD_IO_KEPT),)),
    Mutant("grad_weight_kept_by_shape", "both",
           "grad_weight handed out from a buffer kept per shape (the next backward of that shape overwrites it)",
           (Edit(BIND, "BackwardIO backward_io(", _KEPT_DW),
            Edit(BIND, _BWD_IO_DW, _BWD_IO_DW.replace("w.new_empty(w.sizes(), w.options())", "kept_dw(w)")))),
    Mutant("eps_unchecked", "both", "negative and infinite eps accepted",
           (Edit(BIND, "TORCH_CHECK_VALUE(std::isfinite(eps) && eps >= 0.0,", "TORCH_CHECK_VALUE(!std::isnan(eps),"),)),
    Mutant("grad_out_shape_unchecked", "both", "grad_out's shape checked by rank only",
           (Edit(BIND, "TORCH_CHECK_VALUE(grad_out.sizes() == x.sizes(),", "TORCH_CHECK_VALUE(grad_out.dim() == x.dim(),"),)),
    Mutant("last_dim_stride_ignored", "both", "a transposed input read as if its last dimension had unit stride",
           (Edit(BIND, "if (t.size(-1) == 1 || t.stride(-1) == 1) {", "if (true) {"),)),
    Mutant("leading_dims_collapse_unchecked", "both", "leading dimensions assumed to collapse into one row stride",
           (Edit(BIND, "      } else if (t.stride(i) != inner_stride * inner_size) {\n        collapses = false;\n",
                 "      } else if (t.stride(i) != inner_stride * inner_size) {\n"),),
           echoes="pytorch/pytorch#149301"),
)

# The unmutated sources, built exactly as the mutants are (the same scratch tree, flags and module
# name): `mutate` judges it first, and replays each killing case on it.
ORIGINAL = Mutant("original", "both", "none: the unmutated sources", ())

# The unmutated sources judged through each form a mutant names (Mutant.form): where mutate replays the cases
# that killed those mutants, since the card's form would not call the code they edit.
FORM_ORIGINALS = {f: Mutant(f"original-{f.rsplit('.', 1)[-1]}", "both", f"none: the unmutated sources, through {f}",
                            (), form=f) for f in sorted({m.form for m in CATALOGUE if m.form})}

BY_NAME = {m.name: m for m in CATALOGUE} | {ORIGINAL.name: ORIGINAL} | {o.name: o for o in FORM_ORIGINALS.values()}


def original_for(m: Mutant) -> Mutant:
    """The unmutated sources as m is judged: the extension in the card's form, or through m's form."""
    return FORM_ORIGINALS[m.form] if m.form else ORIGINAL


def select(names: list[str] | None = None, lanes: tuple[str, ...] = LANES) -> list[Mutant]:
    """Mutants by name (all when None), restricted to the given lanes."""
    if names:
        catalogue = {m.name: m for m in CATALOGUE}
        unknown = [n for n in names if n not in catalogue]
        if unknown:
            raise ValueError(f"unknown mutant(s) {unknown}; expected names from: {', '.join(catalogue)}")
        chosen = [catalogue[n] for n in names]
    else:
        chosen = list(CATALOGUE)
    return [m for m in chosen if m.lane in lanes]


def sanitizer_checks() -> list[tuple[Mutant, str]]:
    """(mutant, tool) for every mutant a compute-sanitizer tool must report: the GPU lane's sanitize step
    (on the mutant's sanitize_paths, where it names some)."""
    return [(m, m.sanitizer) for m in CATALOGUE if m.sanitizer]


def unjudged() -> list[Mutant]:
    """The mutants that no tool judges now (each says why)."""
    return [m for m in CATALOGUE if m.unjudged]


def lanes_for(device: str) -> tuple[str, ...]:
    """The mutants a device can kill: its own kernels and the shared binding code."""
    return ("cuda", "both") if device == "cuda" else ("cpu", "both")


def check_catalogue(root: Path | None = None) -> list[str]:
    """Problems with the catalogue against the current sources (empty when it is sound)."""
    root = root or buildenv.source_root()
    problems = []
    originals = {ORIGINAL.name} | {o.name for o in FORM_ORIGINALS.values()}
    if len(BY_NAME) != len(CATALOGUE) + len(originals) or originals & {m.name for m in CATALOGUE}:
        problems.append("mutant names are not unique")
    for m in CATALOGUE:
        if m.lane not in LANES:
            problems.append(f"{m.name}: lane {m.lane!r} is not one of {LANES}")
        if not m.edits:
            problems.append(f"{m.name}: no edits (it would be the original)")
        if not (m.by_suite or m.sanitizer or m.unjudged):
            problems.append(f"{m.name}: judged by nothing (by_suite is False and it names no sanitizer) and says "
                            "nowhere why (unjudged)")
        if m.unjudged and (m.by_suite or m.sanitizer):
            problems.append(f"{m.name}: unjudged, yet judged by {'the suite' if m.by_suite else m.sanitizer}")
        if m.form and not (root / (m.form.replace(".", "/") + ".py")).is_file():
            problems.append(f"{m.name}: its form {m.form} is no module of this tree")
        for e in m.edits:
            text = (root / e.file).read_text()
            found = text.count(e.old)
            if found != e.count:
                problems.append(f"{m.name}: expected {e.count} occurrence(s) of its edit in {e.file}, found {found}: "
                                f"{e.old[:70]!r}")
            if e.old == e.new:
                problems.append(f"{m.name}: an edit in {e.file} changes nothing")
    return problems


# -- building ------------------------------------------------------------------------------------


