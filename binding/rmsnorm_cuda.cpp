// CUDA implementations of the rmsnorm operators: checks, device guard, current stream,
// dtype dispatch onto the torch-free launchers in kernels/; the fused forms composed of ATen ops
// around those launchers.
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../kernels/rmsnorm_cuda.h"
#include "rmsnorm.h"

namespace rmsnorm {
namespace {

// The CUDA type with the layout of a c10 scalar type.
template <typename T>
struct CudaType {
  using type = T;
};
template <>
struct CudaType<at::Half> {
  using type = __half;
};
template <>
struct CudaType<at::BFloat16> {
  using type = __nv_bfloat16;
};

template <typename T>
using cuda_t = typename CudaType<T>::type;

template <typename T>
cuda_t<T>* cuda_ptr(const at::Tensor& t) {
  return reinterpret_cast<cuda_t<T>*>(t.data_ptr<T>());
}

// The launchers take outputs on 16-byte boundaries (the caching allocator's blocks are).
bool is_aligned16(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

std::tuple<at::Tensor, at::Tensor> forward_cuda(const at::Tensor& x, const at::Tensor& weight,
                                                double eps) {
  check_forward_args(x, weight, eps);
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const ForwardIO io = forward_io(x, weight);  // no structured bindings: lambdas capture these (C++17)
  const Rows& xr = io.x;
  const at::Tensor& w = io.w;
  const at::Tensor& y = io.y;
  const at::Tensor& inv = io.inv;
  if (xr.rows == 0) return {y, inv};
  TORCH_INTERNAL_ASSERT(is_aligned16(y), "rmsnorm: the allocator returned y off a 16-byte boundary");
  dispatch_types(x.scalar_type(), w.scalar_type(), [&](auto t, auto wt) {
    using T = decltype(t);
    using W = decltype(wt);
    using A = AccT<cuda_t<T>>;
    const size_t bytes = rmsnorm_fwd_workspace_bytes<cuda_t<T>, cuda_t<W>>(cuda_ptr<T>(xr.owner), xr.row_stride,
                                                                         cuda_ptr<W>(w), xr.rows, xr.n);
    const at::Tensor workspace = at::empty({static_cast<int64_t>(bytes)}, x.options().dtype(at::kByte));
    // The launcher returns the error of a launch that returns one (cudaLaunchKernelEx), the launch
    // check reads the others'.
    const cudaError_t launched = launch_rmsnorm_fwd<cuda_t<T>, cuda_t<W>>(
        cuda_ptr<T>(xr.owner), xr.row_stride, cuda_ptr<W>(w), cuda_ptr<T>(y), inv.data_ptr<A>(),
        workspace.data_ptr(), xr.rows, xr.n, static_cast<A>(eps), stream);
    C10_CUDA_CHECK(launched);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {y, inv};
}

std::tuple<at::Tensor, at::Tensor> backward_cuda(const at::Tensor& grad_out, const at::Tensor& x,
                                                 const at::Tensor& weight,
                                                 const at::Tensor& inv_rms) {
  check_backward_args(grad_out, x, weight, inv_rms);
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const BackwardIO io = backward_io(grad_out, x, weight, inv_rms);
  const Rows& xr = io.x;
  const Rows& dyr = io.dy;
  const at::Tensor& w = io.w;
  const at::Tensor& inv = io.inv;
  const at::Tensor& dx = io.dx;
  const at::Tensor& dw = io.dw;
  TORCH_INTERNAL_ASSERT(is_aligned16(dx), "rmsnorm: the allocator returned grad_x off a 16-byte boundary");
  dispatch_types(x.scalar_type(), w.scalar_type(), [&](auto t, auto wt) {
    using T = decltype(t);
    using W = decltype(wt);
    using A = AccT<cuda_t<T>>;
    const size_t bytes = rmsnorm_bwd_workspace_bytes<cuda_t<T>, cuda_t<W>>(
        cuda_ptr<T>(dyr.owner), dyr.row_stride, cuda_ptr<T>(xr.owner), xr.row_stride, cuda_ptr<W>(w), xr.rows,
        xr.n);
    const at::Tensor workspace = at::empty({static_cast<int64_t>(bytes)}, x.options().dtype(at::kByte));
    const cudaError_t launched = launch_rmsnorm_bwd<cuda_t<T>, cuda_t<W>>(
        cuda_ptr<T>(dyr.owner), dyr.row_stride, cuda_ptr<T>(xr.owner), xr.row_stride,
        cuda_ptr<W>(w), inv.data_ptr<A>(), cuda_ptr<T>(dx), cuda_ptr<W>(dw),
        workspace.data_ptr(), xr.rows, xr.n, stream);
    C10_CUDA_CHECK(launched);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {dx, dw};
}

// The fused forms on CUDA: ATen ops around the plain launchers above, correct but not fused. The
// sum s = x + residual and the effective weight w + weight_offset are materialised in float32
// (float64 for float64 x), the plain forward and backward run on them, and y, residual_out and the
// gradients are cast afterwards: the CPU kernels' rounding order (the float32 y rounded once to x's
// dtype), at several passes over memory where a fused kernel (later work) would make one.
std::tuple<at::Tensor, std::optional<at::Tensor>, at::Tensor> fused_forward_cuda(
    const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps,
    const std::optional<at::Tensor>& residual, double weight_offset) {
  check_fused_args(x, weight, eps, residual, weight_offset);
  const c10::cuda::CUDAGuard guard(x.device());
  const at::ScalarType acc = acc_dtype(x.scalar_type());
  const at::Tensor s = given(residual) ? x.to(acc).add(residual->to(acc)) : x.to(acc);
  const at::Tensor w = given(weight) ? weight->to(acc).add(weight_offset) : s.new_ones({x.size(-1)});
  auto [y, inv] = forward_cuda(s, w, eps);
  std::optional<at::Tensor> residual_out;
  // A copy even where the dtypes match: s may be x itself (no residual, x of the statistics' dtype).
  if (given(residual)) residual_out = s.to(residual->scalar_type(), /*non_blocking=*/false, /*copy=*/true);
  return {y.to(x.scalar_type()), residual_out, inv};
}

std::tuple<at::Tensor, std::optional<at::Tensor>, std::optional<at::Tensor>> fused_backward_cuda(
    const at::Tensor& grad_y, const std::optional<at::Tensor>& grad_residual_out, const at::Tensor& x,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& residual, const at::Tensor& inv_rms,
    double weight_offset) {
  check_fused_backward_args(grad_y, grad_residual_out, x, weight, residual, inv_rms, weight_offset);
  const c10::cuda::CUDAGuard guard(x.device());
  const at::ScalarType acc = acc_dtype(x.scalar_type());
  const at::Tensor s = given(residual) ? x.to(acc).add(residual->to(acc)) : x.to(acc);
  const at::Tensor w = given(weight) ? weight->to(acc).add(weight_offset) : s.new_ones({x.size(-1)});
  auto [g_s, dw] = backward_cuda(grad_y.to(acc), s, w, inv_rms);
  // The prenorm grouping: residual_out's gradient joins the sum's, after the norm's backward.
  if (given(grad_residual_out)) g_s = g_s.add(grad_residual_out->to(acc));
  std::optional<at::Tensor> grad_residual;
  std::optional<at::Tensor> grad_weight;
  // Copies, so that grad_x and grad_residual never share memory where their dtypes match.
  if (given(residual)) grad_residual = g_s.to(residual->scalar_type(), /*non_blocking=*/false, /*copy=*/true);
  if (given(weight)) grad_weight = dw.to(weight->scalar_type());
  return {g_s.to(x.scalar_type()), grad_residual, grad_weight};
}

void fused_add_cuda_(const at::Tensor& x, const at::Tensor& residual, const std::optional<at::Tensor>& weight,
                     double eps, double weight_offset) {
  check_fused_add_args(x, residual, weight, eps, weight_offset);
  auto [y, residual_out, inv] = fused_forward_cuda(x, weight, eps, residual, weight_offset);
  residual.copy_(*residual_out);
  x.copy_(y);
}

}  // namespace

TORCH_LIBRARY_IMPL(rmsnorm, CUDA, m) {
  m.impl("forward", &forward_cuda);
  m.impl("backward", &backward_cuda);
  m.impl("fused_forward", &fused_forward_cuda);
  m.impl("fused_backward", &fused_backward_cuda);
  m.impl("fused_add_", &fused_add_cuda_);
}

}  // namespace rmsnorm
