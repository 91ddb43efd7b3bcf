// The binding's shared pieces: argument checks and row geometry. Only binding/ sees at::Tensor.
#pragma once

#include <tuple>

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

std::tuple<at::Tensor, at::Tensor> forward_cpu(const at::Tensor& x, const at::Tensor& weight,
                                               double eps);
std::tuple<at::Tensor, at::Tensor> backward_cpu(const at::Tensor& grad_out, const at::Tensor& x,
                                                const at::Tensor& weight,
                                                const at::Tensor& inv_rms);

}  // namespace rmsnorm
