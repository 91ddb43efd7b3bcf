// Autograd for rmsnorm::forward and rmsnorm::fused_forward, registered in C++ under the Autograd key,
// so that eager calls, torch.compile and C++ users share one backward (and no call redispatches
// through Python); and the guard of the in-place rmsnorm::fused_add_, which autograd cannot record.
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "rmsnorm.h"

namespace rmsnorm {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::tuple<at::Tensor, at::Tensor> call_forward(const at::Tensor& x, const at::Tensor& w, double eps) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("rmsnorm::forward", "")
                             .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, double)>();
  return op.call(x, w, eps);
}

std::tuple<at::Tensor, at::Tensor> call_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                                 const at::Tensor& inv) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("rmsnorm::backward", "")
                             .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                       const at::Tensor&, const at::Tensor&)>();
  return op.call(dy, x, w, inv);
}

using FusedOutputs = std::tuple<at::Tensor, std::optional<at::Tensor>, at::Tensor>;
using FusedGrads = std::tuple<at::Tensor, std::optional<at::Tensor>, std::optional<at::Tensor>>;

FusedOutputs call_fused_forward(const at::Tensor& x, const std::optional<at::Tensor>& w, double eps,
                                const std::optional<at::Tensor>& residual, double weight_offset) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("rmsnorm::fused_forward", "")
                             .typed<FusedOutputs(const at::Tensor&, const std::optional<at::Tensor>&, double,
                                                 const std::optional<at::Tensor>&, double)>();
  return op.call(x, w, eps, residual, weight_offset);
}

FusedGrads call_fused_backward(const at::Tensor& dy, const std::optional<at::Tensor>& dres, const at::Tensor& x,
                               const std::optional<at::Tensor>& w, const std::optional<at::Tensor>& residual,
                               const at::Tensor& inv, double weight_offset) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("rmsnorm::fused_backward", "")
          .typed<FusedGrads(const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&,
                            const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, const at::Tensor&,
                            double)>();
  return op.call(dy, dres, x, w, residual, inv, weight_offset);
}

void call_fused_add_(const at::Tensor& x, const at::Tensor& residual, const std::optional<at::Tensor>& w, double eps,
                     double weight_offset) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("rmsnorm::fused_add_", "")
                             .typed<void(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                         double, double)>();
  op.call(x, residual, w, eps, weight_offset);
}

// A bool as Python spells it, for messages Python users read.
const char* py_bool(bool b) {
  return b ? "True" : "False";
}

// An optional argument or output from a tensor that may be undefined (a saved None, an unused grad).
std::optional<at::Tensor> as_optional(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

class RMSNormFunction : public torch::autograd::Function<RMSNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps) {
    at::AutoDispatchBelowADInplaceOrView below;
    auto [y, inv] = call_forward(x, weight, eps);
    ctx->save_for_backward({x, weight, inv});
    // Outputs whose gradient nobody asked for (inv_rms, almost always) stay undefined in
    // backward instead of arriving as materialised zeros: otherwise backward applies a zero
    // inv_rms term to every element, several elementwise passes over the tensor (10x the
    // backward kernel's time, seen on the H200).
    ctx->set_materialize_grads(false);
    return {y, inv};
  }

  // grads: (dL/dy, dL/dinv_rms), each undefined when no gradient flows into that output (the
  // second usually is); a defined dL/dinv_rms adds dinv/dx = -inv^3 x / N, computed as
  // -(inv^2 / N) * (x * inv) to stay in range.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& inv = saved[2];
    at::Tensor gy = grads[0].defined() ? grads[0] : x.new_zeros(x.sizes());
    auto [gx, gw] = call_backward(gy, x, weight, inv);
    if (grads[1].defined()) {
      const auto acc = inv.scalar_type();
      const at::Tensor scale = grads[1].to(acc).neg().mul(inv).mul(inv).div(x.size(-1)).unsqueeze(-1);
      gx = gx.to(acc).add(scale.mul(x.to(acc).mul(inv.unsqueeze(-1)))).to(x.scalar_type());
    }
    return {gx, gw, at::Tensor()};
  }
};

// The fused forms: outputs (y, residual_out, inv_rms) with a residual, (y, inv_rms) without (autograd
// takes no undefined output).
class FusedRMSNormFunction : public torch::autograd::Function<FusedRMSNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const std::optional<at::Tensor>& weight,
                               double eps, const std::optional<at::Tensor>& residual, double weight_offset) {
    at::AutoDispatchBelowADInplaceOrView below;
    auto [y, residual_out, inv] = call_fused_forward(x, weight, eps, residual, weight_offset);
    // x and residual, not residual_out: the backward needs the float32 sum, which a 16-bit
    // residual_out has rounded.
    ctx->save_for_backward({x, weight.value_or(at::Tensor()), residual.value_or(at::Tensor()), inv});
    ctx->saved_data["weight_offset"] = weight_offset;
    ctx->set_materialize_grads(false);  // as RMSNormFunction: no zeros for the outputs nobody used
    if (residual_out) return {y, *residual_out, inv};
    return {y, inv};
  }

  // grads: dL/dy, dL/dresidual_out (with a residual) and dL/dinv_rms, each undefined when nothing
  // flows into it. The sum s = x + residual gets dL/dresidual_out plus the norm's gradient
  // (fused_backward), and a defined dL/dinv_rms adds -(inv^2 / N) * (s * inv) times it; x and
  // residual each get s's.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& residual = saved[2];
    const at::Tensor& inv = saved[3];
    const double weight_offset = ctx->saved_data["weight_offset"].toDouble();
    const at::Tensor gy = grads[0].defined() ? grads[0] : x.new_zeros(x.sizes());
    const at::Tensor g_res = residual.defined() ? grads[1] : at::Tensor();
    const at::Tensor& g_inv = grads.back();
    auto [gx, gr, gw] =
        call_fused_backward(gy, as_optional(g_res), x, as_optional(weight), as_optional(residual), inv, weight_offset);
    if (g_inv.defined()) {
      const auto acc = inv.scalar_type();
      const at::Tensor s = residual.defined() ? x.to(acc).add(residual.to(acc)) : x.to(acc);
      const at::Tensor scale = g_inv.to(acc).neg().mul(inv).mul(inv).div(x.size(-1)).unsqueeze(-1);
      const at::Tensor term = scale.mul(s.mul(inv.unsqueeze(-1)));
      gx = gx.to(acc).add(term).to(x.scalar_type());
      if (gr) gr = gr->to(acc).add(term).to(residual.scalar_type());
    }
    return {gx, gw.value_or(at::Tensor()), at::Tensor(), gr.value_or(at::Tensor()), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> forward_autograd(const at::Tensor& x, const at::Tensor& weight, double eps) {
  auto out = RMSNormFunction::apply(x, weight, eps);
  return {out[0], out[1]};
}

FusedOutputs fused_forward_autograd(const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps,
                                    const std::optional<at::Tensor>& residual, double weight_offset) {
  auto out = FusedRMSNormFunction::apply(x, weight, eps, residual, weight_offset);
  if (out.size() == 3) return {out[0], out[1], out[2]};
  return {out[0], std::nullopt, out[1]};
}

// The in-place add overwrites the x and residual that a backward would need, so it refuses to run
// where autograd would have to record it; otherwise it runs below autograd and bumps the two
// tensors' versions as a native in-place op does, so that a graph that saved them raises.
void fused_add_autograd_(const at::Tensor& x, const at::Tensor& residual, const std::optional<at::Tensor>& weight,
                         double eps, double weight_offset) {
  const bool weight_grad = given(weight) && weight->requires_grad();
  TORCH_CHECK(!at::GradMode::is_enabled() || !(x.requires_grad() || residual.requires_grad() || weight_grad),
              "rmsnorm: expected fused_add_ (the in-place add, for inference) on tensors that do not require grad "
              "or under torch.no_grad(), but got x.requires_grad=", py_bool(x.requires_grad()),
              ", residual.requires_grad=", py_bool(residual.requires_grad()), ", weight.requires_grad=",
              py_bool(weight_grad), " with grad mode on");
  {
    at::AutoDispatchBelowADInplaceOrView below;
    call_fused_add_(x, residual, weight, eps, weight_offset);
  }
  torch::autograd::impl::bump_version(x);
  torch::autograd::impl::bump_version(residual);
}

}  // namespace

TORCH_LIBRARY_IMPL(rmsnorm, Autograd, m) {
  m.impl("forward", &forward_autograd);
  m.impl("fused_forward", &fused_forward_autograd);
  m.impl("fused_add_", &fused_add_autograd_);
}

}  // namespace rmsnorm
