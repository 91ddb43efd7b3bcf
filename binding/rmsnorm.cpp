// Argument checks and the CPU implementation of the RMSNorm extension (binding/rmsnorm_library.cpp
// registers them). Outputs come from Tensor::new_empty, which needs no operator header: with the
// registration elsewhere, this file (the one most mutants edit) builds without torch/library.h.
#include "rmsnorm.h"

#include <cmath>
#include <vector>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include "../kernels/rmsnorm_cpu_api.h"  // defined in rmsnorm_cpu.cpp

namespace rmsnorm {

at::ScalarType acc_dtype(at::ScalarType x_dtype) {
  return x_dtype == at::kDouble ? at::kDouble : at::kFloat;
}

std::vector<int64_t> stat_shape(const at::Tensor& x) {
  auto sizes = x.sizes().vec();
  sizes.pop_back();
  return sizes;
}

Rows as_rows(const at::Tensor& t) {
  const int64_t n = t.size(-1);
  const int64_t rows = n == 0 ? 0 : t.numel() / n;
  const int64_t d = t.dim();
  if (t.size(-1) == 1 || t.stride(-1) == 1) {
    // Walk the leading dims from the inside out, skipping size-1 dims: each must step by
    // the size times the stride of the next non-trivial dim inside it.
    int64_t row_stride = n;
    int64_t inner_size = 1;
    int64_t inner_stride = 0;
    bool found = false;
    bool collapses = true;
    for (int64_t i = d - 2; i >= 0; --i) {
      if (t.size(i) == 1) continue;
      if (!found) {
        row_stride = t.stride(i);
        found = true;
      } else if (t.stride(i) != inner_stride * inner_size) {
        collapses = false;
        break;
      }
      inner_size = t.size(i);
      inner_stride = t.stride(i);
    }
    if (collapses) return Rows{t, rows, n, row_stride};
  }
  return Rows{t.contiguous(), rows, n, n};
}

void check_forward_args(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK_VALUE(x.dim() >= 1,
                    "rmsnorm: expected x to have at least 1 dimension, but got a 0-dim tensor");
  TORCH_CHECK_VALUE(x.size(-1) >= 1,
                    "rmsnorm: expected the last dimension of x (N) to be at least 1, but got x "
                    "of shape ", x.sizes());
  TORCH_CHECK_VALUE(x.layout() == at::kStrided,
                    "rmsnorm: expected x to be a strided (dense) tensor, but got layout ",
                    x.layout());
  const auto dt = x.scalar_type();
  TORCH_CHECK_TYPE(dt == at::kFloat || dt == at::kDouble || dt == at::kHalf || dt == at::kBFloat16,
                   "rmsnorm: expected x of dtype float32, float64, float16 or bfloat16, but got ",
                   dt);
  TORCH_CHECK_VALUE(weight.dim() == 1 && weight.size(0) == x.size(-1),
                    "rmsnorm: expected weight of shape [", x.size(-1),
                    "] (the last dimension of x), but got weight of shape ", weight.sizes());
  TORCH_CHECK_TYPE(weight.scalar_type() == dt || weight.scalar_type() == at::kFloat,
                   "rmsnorm: expected weight of dtype ", dt, " (the dtype of x) or float32, but got ",
                   weight.scalar_type());
  TORCH_CHECK_VALUE(weight.device() == x.device(), "rmsnorm: expected weight on ", x.device(),
                    " (the device of x), but got weight on ", weight.device());
  TORCH_CHECK_VALUE(std::isfinite(eps) && eps >= 0.0,
                    "rmsnorm: expected eps to be finite and >= 0, but got ", eps);
}

void check_backward_args(const at::Tensor& grad_out, const at::Tensor& x,
                         const at::Tensor& weight, const at::Tensor& inv_rms) {
  check_forward_args(x, weight, 0.0);
  TORCH_CHECK_VALUE(grad_out.sizes() == x.sizes(), "rmsnorm: expected grad_out of shape ",
                    x.sizes(), " (the shape of x), but got ", grad_out.sizes());
  TORCH_CHECK_TYPE(grad_out.scalar_type() == x.scalar_type(), "rmsnorm: expected grad_out of dtype ",
                   x.scalar_type(), " (the dtype of x), but got ", grad_out.scalar_type());
  TORCH_CHECK_VALUE(grad_out.device() == x.device(), "rmsnorm: expected grad_out on ", x.device(),
                    " (the device of x), but got grad_out on ", grad_out.device());
  TORCH_CHECK_VALUE(grad_out.layout() == at::kStrided,
                    "rmsnorm: expected grad_out to be a strided (dense) tensor, but got layout ",
                    grad_out.layout());
  TORCH_CHECK_VALUE(inv_rms.sizes() == at::IntArrayRef(stat_shape(x)),
                    "rmsnorm: expected inv_rms of shape ", at::IntArrayRef(stat_shape(x)),
                    " (x.shape[:-1]), but got ", inv_rms.sizes());
  TORCH_CHECK_TYPE(inv_rms.scalar_type() == acc_dtype(x.scalar_type()),
                   "rmsnorm: expected inv_rms of dtype ", acc_dtype(x.scalar_type()),
                   ", but got ", inv_rms.scalar_type());
  TORCH_CHECK_VALUE(inv_rms.device() == x.device(), "rmsnorm: expected inv_rms on ", x.device(),
                    " (the device of x), but got inv_rms on ", inv_rms.device());
}

namespace {

constexpr int64_t kRowGrain = 16;

}  // namespace

ForwardIO forward_io(const at::Tensor& x, const at::Tensor& weight) {
  return ForwardIO{as_rows(x), weight.contiguous(), x.new_empty(x.sizes(), x.options()),
                   x.new_empty(stat_shape(x), x.options().dtype(acc_dtype(x.scalar_type())))};
}

BackwardIO backward_io(const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& weight,
                       const at::Tensor& inv_rms) {
  const at::Tensor w = weight.contiguous();
  return BackwardIO{as_rows(x), as_rows(grad_out), w, inv_rms.contiguous(),
                    x.new_empty(x.sizes(), x.options()), w.new_empty(w.sizes(), w.options())};
}

std::tuple<at::Tensor, at::Tensor> forward_cpu(const at::Tensor& x, const at::Tensor& weight,
                                               double eps) {
  check_forward_args(x, weight, eps);
  const ForwardIO io = forward_io(x, weight);  // no structured bindings: lambdas capture these (C++17)
  const Rows& xr = io.x;
  const at::Tensor& w = io.w;
  const at::Tensor& y = io.y;
  const at::Tensor& inv = io.inv;
  dispatch_types(x.scalar_type(), w.scalar_type(), [&](auto t, auto wt) {
    using T = decltype(t);
    using W = decltype(wt);
    using A = AccT<T>;
    const T* xp = xr.owner.data_ptr<T>();
    const W* wp = w.data_ptr<W>();
    T* yp = y.data_ptr<T>();
    A* ip = inv.data_ptr<A>();
    at::parallel_for(0, xr.rows, kRowGrain, [&](int64_t b, int64_t e) {
      cpu::rmsnorm_fwd_rows<T, W>(xp, xr.row_stride, wp, yp, ip, b, e, xr.n,
                                  static_cast<A>(eps));
    });
  });
  return {y, inv};
}

std::tuple<at::Tensor, at::Tensor> backward_cpu(const at::Tensor& grad_out, const at::Tensor& x,
                                                const at::Tensor& weight,
                                                const at::Tensor& inv_rms) {
  check_backward_args(grad_out, x, weight, inv_rms);
  const BackwardIO io = backward_io(grad_out, x, weight, inv_rms);
  const Rows& xr = io.x;
  const Rows& dyr = io.dy;
  const at::Tensor& w = io.w;
  const at::Tensor& inv = io.inv;
  const at::Tensor& dx = io.dx;
  const at::Tensor& dw = io.dw;
  const int64_t rows = xr.rows;
  const int64_t n = xr.n;
  const int64_t chunks = gw_num_chunks(rows, n);
  at::Tensor partial = inv.new_empty({chunks, n}, inv.options());
  dispatch_types(x.scalar_type(), w.scalar_type(), [&](auto t, auto wt) {
    using T = decltype(t);
    using W = decltype(wt);
    using A = AccT<T>;
    const T* xp = xr.owner.data_ptr<T>();
    const T* dyp = dyr.owner.data_ptr<T>();
    const W* wp = w.data_ptr<W>();
    const A* ip = inv.data_ptr<A>();
    at::parallel_for(0, rows, kRowGrain, [&](int64_t b, int64_t e) {
      cpu::rmsnorm_bwd_dx_rows<T, W>(dyp, dyr.row_stride, xp, xr.row_stride, wp, ip,
                                     dx.data_ptr<T>(), b, e, n);
    });
    A* pp = partial.data_ptr<A>();
    at::parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
      cpu::rmsnorm_bwd_dw_partial<T>(dyp, dyr.row_stride, xp, xr.row_stride, ip, pp, rows, n,
                                     b, e);
    });
    at::parallel_for(0, n, 1024, [&](int64_t b, int64_t e) {
      cpu::rmsnorm_bwd_dw_reduce<T, W>(pp, dw.data_ptr<W>(), chunks, n, b, e);
    });
  });
  return {dx, dw};
}

}  // namespace rmsnorm
