// The seed card's binding: takes raw pointers out of torch.Tensors and launches the kernels.
#include <torch/extension.h>

void rmsnorm_forward_launch(const float* x, const float* weight, float* y, float* inv_rms, int rows, int hidden,
                            float eps);
void rmsnorm_backward_launch(const float* grad_out, const float* x, const float* weight, const float* inv_rms,
                             float* grad_x, float* grad_weight, int rows, int hidden);

std::vector<torch::Tensor> rmsnorm_forward(torch::Tensor x, torch::Tensor weight, double eps) {
    int hidden = x.size(-1);
    int rows = x.numel() / hidden;
    auto y = torch::empty_like(x);
    auto inv_rms = torch::empty({rows}, x.options());
    rmsnorm_forward_launch(x.data_ptr<float>(), weight.data_ptr<float>(), y.data_ptr<float>(),
                           inv_rms.data_ptr<float>(), rows, hidden, static_cast<float>(eps));
    return {y, inv_rms};
}

std::vector<torch::Tensor> rmsnorm_backward(torch::Tensor grad_out, torch::Tensor x, torch::Tensor weight,
                                            torch::Tensor inv_rms) {
    int hidden = x.size(-1);
    int rows = x.numel() / hidden;
    auto grad_x = torch::empty_like(x);
    auto grad_weight = torch::empty_like(weight);
    rmsnorm_backward_launch(grad_out.data_ptr<float>(), x.data_ptr<float>(), weight.data_ptr<float>(),
                            inv_rms.data_ptr<float>(), grad_x.data_ptr<float>(), grad_weight.data_ptr<float>(),
                            rows, hidden);
    return {grad_x, grad_weight};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &rmsnorm_forward, "RMSNorm forward (naive)");
    m.def("backward", &rmsnorm_backward, "RMSNorm backward (naive)");
}
