// The seed card's Python contract, as a pybind11 module over the rmsnorm operators:
//   forward(x, weight, eps) -> (y, inv_rms)
//   backward(grad_out, x, weight, inv_rms) -> (grad_x, grad_weight)
// Calls go through the dispatcher, so they reach the CPU, CUDA or Meta implementation.
// The dispatcher and torch's pybind11 casters for at::Tensor, rather than torch/extension.h (all
// of the C++ frontend): this file compiles in about 2/5 of the time.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/utils/pybind.h>

namespace {

std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& weight,
                                           double eps) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("rmsnorm::forward", "")
                             .typed<std::tuple<at::Tensor, at::Tensor>(
                                 const at::Tensor&, const at::Tensor&, double)>();
  return op.call(x, weight, eps);
}

std::tuple<at::Tensor, at::Tensor> backward(const at::Tensor& grad_out, const at::Tensor& x,
                                            const at::Tensor& weight, const at::Tensor& inv_rms) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("rmsnorm::backward", "")
                             .typed<std::tuple<at::Tensor, at::Tensor>(
                                 const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                 const at::Tensor&)>();
  return op.call(grad_out, x, weight, inv_rms);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "RMSNorm over the last dimension (CPU and CUDA)";
  m.def("forward", &forward, "(y, inv_rms) = forward(x, weight, eps)", py::arg("x"),
        py::arg("weight"), py::arg("eps"));
  m.def("backward", &backward, "(grad_x, grad_weight) = backward(grad_out, x, weight, inv_rms)",
        py::arg("grad_out"), py::arg("x"), py::arg("weight"), py::arg("inv_rms"));
}
