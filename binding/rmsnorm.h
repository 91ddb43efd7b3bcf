// The binding's shared pieces: argument checks and row geometry. Only binding/ sees at::Tensor.
#pragma once

#include <optional>
#include <tuple>
#include <type_traits>

// ATen/core/Tensor.h rather than ATen/ATen.h (every operator's header): each file of binding/
// compiles in about two thirds of the time, and a mutant of binding/rmsnorm.cpp rebuilds faster.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

namespace rmsnorm {

// A tensor of shape [..., n] seen as `rows` rows of `n` elements, row r starting at
// data + r * row_stride, with unit column stride. `owner` keeps a contiguous copy alive when
// the original layout could not be described that way.
struct Rows {
  at::Tensor owner;
  int64_t rows;
  int64_t n;
  int64_t row_stride;
};

// Describes t as rows without copying when its leading dims collapse to one stride and its
// last dim has unit stride (or size 1); otherwise makes a contiguous copy.
Rows as_rows(const at::Tensor& t);

// Raise a clear error (argument, what was expected, what was given) for anything outside the
// operator's contract. Called before any kernel runs.
void check_forward_args(const at::Tensor& x, const at::Tensor& weight, double eps);
void check_backward_args(const at::Tensor& grad_out, const at::Tensor& x,
                         const at::Tensor& weight, const at::Tensor& inv_rms);
// The fused forms: weight [N] or none (then weight_offset must be 0), residual of x's shape and of
// x's dtype or float32, or none.
void check_fused_args(const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps,
                      const std::optional<at::Tensor>& residual, double weight_offset);
void check_fused_backward_args(const at::Tensor& grad_y, const std::optional<at::Tensor>& grad_residual_out,
                               const at::Tensor& x, const std::optional<at::Tensor>& weight,
                               const std::optional<at::Tensor>& residual, const at::Tensor& inv_rms,
                               double weight_offset);
// The in-place add: check_fused_args, and x, residual and the weight in memory that does not overlap
// (the kernel writes x and residual while it reads the others' rows).
void check_fused_add_args(const at::Tensor& x, const at::Tensor& residual, const std::optional<at::Tensor>& weight,
                          double eps, double weight_offset);

// Whether an optional tensor argument (Tensor? in a schema) was given: a C++ caller may pass an
// undefined tensor for None.
inline bool given(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined();
}

// The dtype of inv_rms and of all statistics: float32, or float64 for float64 input.
at::ScalarType acc_dtype(at::ScalarType x_dtype);

// Shape of inv_rms: x.shape[:-1].
std::vector<int64_t> stat_shape(const at::Tensor& x);

// Inputs seen as rows and freshly allocated outputs, the same for the CPU and CUDA backends.
struct ForwardIO {
  Rows x;
  at::Tensor w;    // contiguous weight
  at::Tensor y;    // contiguous, shape and dtype of x
  at::Tensor inv;  // x.shape[:-1], acc_dtype
};
ForwardIO forward_io(const at::Tensor& x, const at::Tensor& weight);

struct BackwardIO {
  Rows x;
  Rows dy;
  at::Tensor w;    // contiguous weight
  at::Tensor inv;  // contiguous inv_rms
  at::Tensor dx;   // contiguous, shape and dtype of x
  at::Tensor dw;   // shape and dtype of weight
};
BackwardIO backward_io(const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& weight,
                       const at::Tensor& inv_rms);

// Calls fn(scalar_t(), weight_t()) with scalar_t the type of x and weight_t either scalar_t or
// float, as the weight's dtype says (check_forward_args has already vetted the pair).
template <typename Fn>
void dispatch_types(at::ScalarType x_dtype, at::ScalarType w_dtype, Fn&& fn) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_dtype, "rmsnorm", [&] {
    if (w_dtype == x_dtype) {
      fn(scalar_t(), scalar_t());
    } else {
      TORCH_INTERNAL_ASSERT(w_dtype == at::kFloat, "rmsnorm: unvetted weight dtype ", w_dtype);
      fn(scalar_t(), float());
    }
  });
}

// Calls fn(T(), R(), W(), std::bool_constant<kAdd>(), std::bool_constant<kWeight>()) with T the
// type of x, R the residual's (T or float; T, unused, without a residual: kAdd false) and W the
// weight's (T or float; T, unused, without a weight: kWeight false), the forms that
// binding/rmsnorm_cpu.cpp instantiates (check_fused_args has already vetted them).
template <typename Fn>
void dispatch_fused_types(at::ScalarType x_dtype, std::optional<at::ScalarType> r_dtype,
                          std::optional<at::ScalarType> w_dtype, Fn&& fn) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_dtype, "rmsnorm", [&] {
    using T = scalar_t;
    auto with_weight = [&](auto r, auto add) {
      if (!w_dtype) {
        fn(T(), r, T(), add, std::false_type());
      } else if (*w_dtype == x_dtype) {
        fn(T(), r, T(), add, std::true_type());
      } else {
        TORCH_INTERNAL_ASSERT(*w_dtype == at::kFloat, "rmsnorm: unvetted weight dtype ", *w_dtype);
        fn(T(), r, float(), add, std::true_type());
      }
    };
    if (!r_dtype) {
      with_weight(T(), std::false_type());
    } else if (*r_dtype == x_dtype) {
      with_weight(T(), std::true_type());
    } else {
      TORCH_INTERNAL_ASSERT(*r_dtype == at::kFloat, "rmsnorm: unvetted residual dtype ", *r_dtype);
      with_weight(float(), std::true_type());
    }
  });
}

std::tuple<at::Tensor, at::Tensor> forward_cpu(const at::Tensor& x, const at::Tensor& weight,
                                               double eps);
std::tuple<at::Tensor, at::Tensor> backward_cpu(const at::Tensor& grad_out, const at::Tensor& x,
                                                const at::Tensor& weight,
                                                const at::Tensor& inv_rms);

// The fused forms (binding/rmsnorm_library.cpp has their schemas): residual_out and grad_residual
// exist where a residual was given, grad_weight where a weight was.
std::tuple<at::Tensor, std::optional<at::Tensor>, at::Tensor> fused_forward_cpu(
    const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps,
    const std::optional<at::Tensor>& residual, double weight_offset);
std::tuple<at::Tensor, std::optional<at::Tensor>, std::optional<at::Tensor>> fused_backward_cpu(
    const at::Tensor& grad_y, const std::optional<at::Tensor>& grad_residual_out, const at::Tensor& x,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& residual, const at::Tensor& inv_rms,
    double weight_offset);
void fused_add_cpu_(const at::Tensor& x, const at::Tensor& residual, const std::optional<at::Tensor>& weight,
                    double eps, double weight_offset);

}  // namespace rmsnorm
