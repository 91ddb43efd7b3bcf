// Argument checks and the CPU implementation of the RMSNorm extension (binding/rmsnorm_library.cpp
// registers them). Outputs come from Tensor::new_empty, which needs no operator header: with the
// registration elsewhere, this file (the one most mutants edit) builds without torch/library.h.
#include "rmsnorm.h"

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/Dispatch.h>
#include <ATen/MemoryOverlap.h>
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

namespace {

// The checks of one argument each, shared by the plain and the fused forms.
void check_x_arg(const at::Tensor& x) {
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
}

void check_weight_arg(const at::Tensor& x, const at::Tensor& weight) {
  const auto dt = x.scalar_type();
  TORCH_CHECK_VALUE(weight.dim() == 1 && weight.size(0) == x.size(-1),
                    "rmsnorm: expected weight of shape [", x.size(-1),
                    "] (the last dimension of x), but got weight of shape ", weight.sizes());
  TORCH_CHECK_TYPE(weight.scalar_type() == dt || weight.scalar_type() == at::kFloat,
                   "rmsnorm: expected weight of dtype ", dt, " (the dtype of x) or float32, but got ",
                   weight.scalar_type());
  TORCH_CHECK_VALUE(weight.device() == x.device(), "rmsnorm: expected weight on ", x.device(),
                    " (the device of x), but got weight on ", weight.device());
}

void check_eps_arg(double eps) {
  TORCH_CHECK_VALUE(std::isfinite(eps) && eps >= 0.0,
                    "rmsnorm: expected eps to be finite and >= 0, but got ", eps);
}

// grad_out (named `name` in messages) and inv_rms of a backward of x.
void check_grad_and_stat_args(const char* name, const at::Tensor& grad_out, const at::Tensor& x,
                              const at::Tensor& inv_rms) {
  TORCH_CHECK_VALUE(grad_out.sizes() == x.sizes(), "rmsnorm: expected ", name, " of shape ",
                    x.sizes(), " (the shape of x), but got ", grad_out.sizes());
  TORCH_CHECK_TYPE(grad_out.scalar_type() == x.scalar_type(), "rmsnorm: expected ", name, " of dtype ",
                   x.scalar_type(), " (the dtype of x), but got ", grad_out.scalar_type());
  TORCH_CHECK_VALUE(grad_out.device() == x.device(), "rmsnorm: expected ", name, " on ", x.device(),
                    " (the device of x), but got ", name, " on ", grad_out.device());
  TORCH_CHECK_VALUE(grad_out.layout() == at::kStrided, "rmsnorm: expected ", name,
                    " to be a strided (dense) tensor, but got layout ", grad_out.layout());
  TORCH_CHECK_VALUE(inv_rms.sizes() == at::IntArrayRef(stat_shape(x)),
                    "rmsnorm: expected inv_rms of shape ", at::IntArrayRef(stat_shape(x)),
                    " (x.shape[:-1]), but got ", inv_rms.sizes());
  TORCH_CHECK_TYPE(inv_rms.scalar_type() == acc_dtype(x.scalar_type()),
                   "rmsnorm: expected inv_rms of dtype ", acc_dtype(x.scalar_type()),
                   ", but got ", inv_rms.scalar_type());
  TORCH_CHECK_VALUE(inv_rms.device() == x.device(), "rmsnorm: expected inv_rms on ", x.device(),
                    " (the device of x), but got inv_rms on ", inv_rms.device());
}

// The first and one past the last byte of its storage that a strided tensor's elements occupy.
std::pair<int64_t, int64_t> storage_byte_extent(const at::Tensor& t) {
  int64_t last = 0;
  for (int64_t i = 0; i < t.dim(); ++i) last += (t.size(i) - 1) * t.stride(i);
  const int64_t size = static_cast<int64_t>(t.element_size());
  return {t.storage_offset() * size, (t.storage_offset() + last + 1) * size};
}

// Raise unless a and b (non-empty) occupy disjoint memory. at::get_overlap_status answers "too
// hard" whenever either is not dense (a slice, a transpose); then two views of one storage must
// span disjoint bytes of it, which refuses interleaved views (x[..., ::2] and residual[..., 1::2] of
// one buffer) that share no element: an honest limit, not a wrong answer.
void check_apart(const char* a_name, const at::Tensor& a, const char* b_name, const at::Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0 || !a.storage().is_alias_of(b.storage())) return;
  const at::MemOverlapStatus status = at::get_overlap_status(a, b);
  const bool same = status == at::MemOverlapStatus::Full ||
                    (a.data_ptr() == b.data_ptr() && a.sizes() == b.sizes() && a.strides() == b.strides());
  TORCH_CHECK_VALUE(!same, "rmsnorm: expected ", a_name, " and ", b_name,
                    " in separate memory (the in-place add writes x and residual), but got the same memory for both");
  TORCH_CHECK_VALUE(status != at::MemOverlapStatus::Partial, "rmsnorm: expected ", a_name, " and ", b_name,
                    " in separate memory (the in-place add writes x and residual), but got overlapping memory");
  if (status == at::MemOverlapStatus::TooHard) {
    const auto [a_begin, a_end] = storage_byte_extent(a);
    const auto [b_begin, b_end] = storage_byte_extent(b);
    TORCH_CHECK_VALUE(a_end <= b_begin || b_end <= a_begin, "rmsnorm: expected ", a_name, " and ", b_name,
                      " in separate memory (the in-place add writes x and residual), but got views of one "
                      "storage spanning its bytes [", a_begin, ", ", a_end, ") and [", b_begin, ", ", b_end,
                      ")");
  }
}

}  // namespace

void check_forward_args(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_x_arg(x);
  check_weight_arg(x, weight);
  check_eps_arg(eps);
}

void check_backward_args(const at::Tensor& grad_out, const at::Tensor& x,
                         const at::Tensor& weight, const at::Tensor& inv_rms) {
  check_forward_args(x, weight, 0.0);
  check_grad_and_stat_args("grad_out", grad_out, x, inv_rms);
}

void check_fused_args(const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps,
                      const std::optional<at::Tensor>& residual, double weight_offset) {
  check_x_arg(x);
  if (given(weight)) check_weight_arg(x, *weight);
  check_eps_arg(eps);
  TORCH_CHECK_VALUE(std::isfinite(weight_offset), "rmsnorm: expected weight_offset to be finite, but got ",
                    weight_offset);
  TORCH_CHECK_VALUE(given(weight) || weight_offset == 0.0,
                    "rmsnorm: expected weight_offset 0 without a weight (y = x * inv_rms), but got ",
                    weight_offset);
  if (!given(residual)) return;
  const at::Tensor& r = *residual;
  TORCH_CHECK_VALUE(r.layout() == at::kStrided,
                    "rmsnorm: expected residual to be a strided (dense) tensor, but got layout ", r.layout());
  TORCH_CHECK_VALUE(r.sizes() == x.sizes(), "rmsnorm: expected residual of shape ", x.sizes(),
                    " (the shape of x), but got residual of shape ", r.sizes());
  TORCH_CHECK_TYPE(r.scalar_type() == x.scalar_type() || r.scalar_type() == at::kFloat,
                   "rmsnorm: expected residual of dtype ", x.scalar_type(), " (the dtype of x) or float32, but got ",
                   r.scalar_type());
  TORCH_CHECK_VALUE(r.device() == x.device(), "rmsnorm: expected residual on ", x.device(),
                    " (the device of x), but got residual on ", r.device());
}

void check_fused_backward_args(const at::Tensor& grad_y, const std::optional<at::Tensor>& grad_residual_out,
                               const at::Tensor& x, const std::optional<at::Tensor>& weight,
                               const std::optional<at::Tensor>& residual, const at::Tensor& inv_rms,
                               double weight_offset) {
  check_fused_args(x, weight, 0.0, residual, weight_offset);
  check_grad_and_stat_args("grad_y", grad_y, x, inv_rms);
  if (!given(grad_residual_out)) return;
  TORCH_CHECK_VALUE(given(residual),
                    "rmsnorm: expected no grad_residual_out without a residual, but got one of shape ",
                    grad_residual_out->sizes());
  const at::Tensor& g = *grad_residual_out;
  TORCH_CHECK_VALUE(g.layout() == at::kStrided,
                    "rmsnorm: expected grad_residual_out to be a strided (dense) tensor, but got layout ", g.layout());
  TORCH_CHECK_VALUE(g.sizes() == x.sizes(), "rmsnorm: expected grad_residual_out of shape ", x.sizes(),
                    " (the shape of x), but got ", g.sizes());
  TORCH_CHECK_TYPE(g.scalar_type() == residual->scalar_type(), "rmsnorm: expected grad_residual_out of dtype ",
                   residual->scalar_type(), " (the dtype of residual), but got ", g.scalar_type());
  TORCH_CHECK_VALUE(g.device() == x.device(), "rmsnorm: expected grad_residual_out on ", x.device(),
                    " (the device of x), but got grad_residual_out on ", g.device());
}

void check_fused_add_args(const at::Tensor& x, const at::Tensor& residual, const std::optional<at::Tensor>& weight,
                          double eps, double weight_offset) {
  TORCH_CHECK_VALUE(residual.defined(), "rmsnorm: expected a residual for the in-place add, but got None");
  check_fused_args(x, weight, eps, residual, weight_offset);
  TORCH_CHECK_VALUE(at::has_internal_overlap(x) != at::MemOverlap::Yes,
                    "rmsnorm: expected x with one element per memory location (the in-place add writes it), but "
                    "got x of shape ", x.sizes(), " and strides ", x.strides());
  TORCH_CHECK_VALUE(at::has_internal_overlap(residual) != at::MemOverlap::Yes,
                    "rmsnorm: expected residual with one element per memory location (the in-place add writes it), "
                    "but got residual of shape ", residual.sizes(), " and strides ", residual.strides());
  check_apart("x", x, "residual", residual);
  if (given(weight)) {
    check_apart("x", x, "weight", *weight);
    check_apart("residual", residual, "weight", *weight);
  }
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


namespace {

// The fused forward over rows: y and residual_out written at their own row strides, so that the
// in-place add can hand in x's and residual's own memory.
void fused_forward_rows(const Rows& xr, const std::optional<Rows>& rr, const at::Tensor& w, double weight_offset,
                        const at::Tensor& y, int64_t y_row_stride, const at::Tensor& residual_out,
                        int64_t residual_out_row_stride, const at::Tensor& inv, double eps) {
  const auto r_dtype = rr ? std::optional<at::ScalarType>(rr->owner.scalar_type()) : std::nullopt;
  const auto w_dtype = w.defined() ? std::optional<at::ScalarType>(w.scalar_type()) : std::nullopt;
  dispatch_fused_types(xr.owner.scalar_type(), r_dtype, w_dtype, [&](auto t, auto rt, auto wt, auto add, auto has_w) {
    using T = decltype(t);
    using R = decltype(rt);
    using W = decltype(wt);
    using A = AccT<T>;
    constexpr bool kAdd = decltype(add)::value;
    constexpr bool kWeight = decltype(has_w)::value;
    const T* xp = xr.owner.data_ptr<T>();
    const R* rp = nullptr;
    R* rop = nullptr;
    int64_t r_stride = 0;
    if constexpr (kAdd) {
      rp = rr->owner.data_ptr<R>();
      r_stride = rr->row_stride;
      rop = residual_out.data_ptr<R>();
    }
    const W* wp = nullptr;
    if constexpr (kWeight) wp = w.data_ptr<W>();
    T* yp = y.data_ptr<T>();
    A* ip = inv.data_ptr<A>();
    at::parallel_for(0, xr.rows, kRowGrain, [&](int64_t b, int64_t e) {
      cpu::rmsnorm_fused_fwd_rows<T, R, W, kAdd, kWeight>(xp, xr.row_stride, rp, r_stride, wp,
                                                         static_cast<A>(weight_offset), yp, y_row_stride, rop,
                                                         residual_out_row_stride, ip, b, e, xr.n,
                                                         static_cast<A>(eps));
    });
  });
}

}  // namespace

std::tuple<at::Tensor, std::optional<at::Tensor>, at::Tensor> fused_forward_cpu(
    const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps,
    const std::optional<at::Tensor>& residual, double weight_offset) {
  check_fused_args(x, weight, eps, residual, weight_offset);
  const Rows xr = as_rows(x);
  const std::optional<Rows> rr = given(residual) ? std::optional<Rows>(as_rows(*residual)) : std::nullopt;
  const at::Tensor w = given(weight) ? weight->contiguous() : at::Tensor();
  const at::Tensor y = x.new_empty(x.sizes(), x.options());
  const at::Tensor inv = x.new_empty(stat_shape(x), x.options().dtype(acc_dtype(x.scalar_type())));
  const at::Tensor residual_out = rr ? residual->new_empty(x.sizes(), residual->options()) : at::Tensor();
  fused_forward_rows(xr, rr, w, weight_offset, y, xr.n, residual_out, xr.n, inv, eps);
  return {y, rr ? std::optional<at::Tensor>(residual_out) : std::nullopt, inv};
}

void fused_add_cpu_(const at::Tensor& x, const at::Tensor& residual, const std::optional<at::Tensor>& weight,
                    double eps, double weight_offset) {
  check_fused_add_args(x, residual, weight, eps, weight_offset);
  // The kernel writes y over x and the sum over residual, row by row, each row read before it is
  // written. A layout as_rows cannot describe is copied, computed in place there, and copied back.
  const Rows xr = as_rows(x);
  const Rows rr = as_rows(residual);
  const at::Tensor w = given(weight) ? weight->contiguous() : at::Tensor();
  const at::Tensor inv = x.new_empty(stat_shape(x), x.options().dtype(acc_dtype(x.scalar_type())));
  fused_forward_rows(xr, rr, w, weight_offset, xr.owner, xr.row_stride, rr.owner, rr.row_stride, inv, eps);
  if (!xr.owner.is_same(x)) x.copy_(xr.owner);
  if (!rr.owner.is_same(residual)) residual.copy_(rr.owner);
}

std::tuple<at::Tensor, std::optional<at::Tensor>, std::optional<at::Tensor>> fused_backward_cpu(
    const at::Tensor& grad_y, const std::optional<at::Tensor>& grad_residual_out, const at::Tensor& x,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& residual, const at::Tensor& inv_rms,
    double weight_offset) {
  check_fused_backward_args(grad_y, grad_residual_out, x, weight, residual, inv_rms, weight_offset);
  const Rows xr = as_rows(x);
  const Rows dyr = as_rows(grad_y);
  const std::optional<Rows> rr = given(residual) ? std::optional<Rows>(as_rows(*residual)) : std::nullopt;
  const std::optional<Rows> drr =
      given(grad_residual_out) ? std::optional<Rows>(as_rows(*grad_residual_out)) : std::nullopt;
  const at::Tensor w = given(weight) ? weight->contiguous() : at::Tensor();
  const at::Tensor inv = inv_rms.contiguous();
  const at::Tensor dx = x.new_empty(x.sizes(), x.options());
  const at::Tensor dr = rr ? residual->new_empty(x.sizes(), residual->options()) : at::Tensor();
  const at::Tensor dw = w.defined() ? w.new_empty(w.sizes(), w.options()) : at::Tensor();
  const int64_t rows = xr.rows;
  const int64_t n = xr.n;
  const auto r_dtype = rr ? std::optional<at::ScalarType>(residual->scalar_type()) : std::nullopt;
  const auto w_dtype = w.defined() ? std::optional<at::ScalarType>(w.scalar_type()) : std::nullopt;
  dispatch_fused_types(x.scalar_type(), r_dtype, w_dtype, [&](auto t, auto rt, auto wt, auto add, auto has_w) {
    using T = decltype(t);
    using R = decltype(rt);
    using W = decltype(wt);
    using A = AccT<T>;
    constexpr bool kAdd = decltype(add)::value;
    constexpr bool kWeight = decltype(has_w)::value;
    const T* xp = xr.owner.data_ptr<T>();
    const T* dyp = dyr.owner.data_ptr<T>();
    const R* rp = nullptr;
    R* drp = nullptr;
    int64_t r_stride = 0;
    if constexpr (kAdd) {
      rp = rr->owner.data_ptr<R>();
      r_stride = rr->row_stride;
      drp = dr.data_ptr<R>();
    }
    const W* wp = nullptr;
    if constexpr (kWeight) wp = w.data_ptr<W>();
    const A off = static_cast<A>(weight_offset);
    const A* ip = inv.data_ptr<A>();
    T* dxp = dx.data_ptr<T>();
    at::parallel_for(0, rows, kRowGrain, [&](int64_t b, int64_t e) {
      if constexpr (kAdd) {
        if (drr) {
          cpu::rmsnorm_fused_bwd_dx_rows<T, R, W, kAdd, kWeight, true>(
              dyp, dyr.row_stride, drr->owner.data_ptr<R>(), drr->row_stride, xp, xr.row_stride, rp, r_stride, wp,
              off, ip, dxp, drp, b, e, n);
          return;
        }
      }
      cpu::rmsnorm_fused_bwd_dx_rows<T, R, W, kAdd, kWeight, false>(dyp, dyr.row_stride, nullptr, 0, xp,
                                                                   xr.row_stride, rp, r_stride, wp, off, ip, dxp,
                                                                   drp, b, e, n);
    });
    if constexpr (kWeight) {
      // grad_weight as the plain backward sums it (two deterministic stages), over s = x + residual.
      const int64_t chunks = gw_num_chunks(rows, n);
      const at::Tensor partial = inv.new_empty({chunks, n}, inv.options());
      A* pp = partial.data_ptr<A>();
      at::parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
        if constexpr (kAdd) {
          cpu::rmsnorm_add_bwd_dw_partial<T, R>(dyp, dyr.row_stride, xp, xr.row_stride, rp, r_stride, ip, pp,
                                                rows, n, b, e);
        } else {
          cpu::rmsnorm_bwd_dw_partial<T>(dyp, dyr.row_stride, xp, xr.row_stride, ip, pp, rows, n, b, e);
        }
      });
      at::parallel_for(0, n, 1024, [&](int64_t b, int64_t e) {
        cpu::rmsnorm_bwd_dw_reduce<T, W>(pp, dw.data_ptr<W>(), chunks, n, b, e);
      });
    }
  });
  return {dx, rr ? std::optional<at::Tensor>(dr) : std::nullopt,
          w.defined() ? std::optional<at::Tensor>(dw) : std::nullopt};
}

}  // namespace rmsnorm
