// CUDA implementations of the rmsnorm operators: checks, device guard, current stream,
// dtype dispatch onto the torch-free launchers in kernels/.
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

}  // namespace

TORCH_LIBRARY_IMPL(rmsnorm, CUDA, m) {
  m.impl("forward", &forward_cuda);
  m.impl("backward", &backward_cuda);
}

}  // namespace rmsnorm
