// The seed card's naive RMSNorm, written as the card shows it: float32 only, contiguous only,
// one block of 256 threads per row, a shared-memory tree reduction, dW by a column loop, the
// default stream, no checks. Kept as a demonstration target: the suite finds its bugs.
#include <cuda_runtime.h>

__global__ void rmsnorm_forward_kernel(const float* x, const float* weight, float* y, float* inv_rms,
                                       int rows, int hidden, float eps) {
    __shared__ float sdata[256];
    int row = blockIdx.x;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        float v = x[row * hidden + i];
        sum += v * v;
    }
    sdata[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sdata[threadIdx.x] += sdata[threadIdx.x + s];
        __syncthreads();
    }
    float inv = rsqrtf(sdata[0] / hidden + eps);
    if (threadIdx.x == 0) inv_rms[row] = inv;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        y[row * hidden + i] = x[row * hidden + i] * inv * weight[i];
    }
}

__global__ void rmsnorm_backward_dx_kernel(const float* grad_out, const float* x, const float* weight,
                                           const float* inv_rms, float* grad_x, int rows, int hidden) {
    __shared__ float sdata[256];
    int row = blockIdx.x;
    float inv = inv_rms[row];
    float dot = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        dot += grad_out[row * hidden + i] * weight[i] * x[row * hidden + i];
    }
    sdata[threadIdx.x] = dot;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sdata[threadIdx.x] += sdata[threadIdx.x + s];
        __syncthreads();
    }
    float c = inv * inv * sdata[0] / hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        float g = grad_out[row * hidden + i] * weight[i];
        grad_x[row * hidden + i] = inv * (g - x[row * hidden + i] * c);
    }
}

__global__ void rmsnorm_backward_dw_kernel(const float* grad_out, const float* x, const float* inv_rms,
                                           float* grad_weight, int rows, int hidden) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= hidden) return;
    float acc = 0.0f;
    for (int r = 0; r < rows; ++r) acc += grad_out[r * hidden + col] * x[r * hidden + col] * inv_rms[r];
    grad_weight[col] = acc;
}

void rmsnorm_forward_launch(const float* x, const float* weight, float* y, float* inv_rms, int rows, int hidden,
                            float eps) {
    rmsnorm_forward_kernel<<<rows, 256>>>(x, weight, y, inv_rms, rows, hidden, eps);
}

void rmsnorm_backward_launch(const float* grad_out, const float* x, const float* weight, const float* inv_rms,
                             float* grad_x, float* grad_weight, int rows, int hidden) {
    rmsnorm_backward_dx_kernel<<<rows, 256>>>(grad_out, x, weight, inv_rms, grad_x, rows, hidden);
    rmsnorm_backward_dw_kernel<<<(hidden + 255) / 256, 256>>>(grad_out, x, inv_rms, grad_weight, rows, hidden);
}
