// layer_norm's grad on a GPU with its neighbours folded in, for compiled graphs: the grad of
// the output may come in a 16-bit dtype (an autocast cast's grad, converted exactly as it is
// read), and a residual stream's grad may be added to dx (what an add after it would do), so
// neither takes a pass over memory of its own. src/kernels/cuda/layer_norm_backward.cu
// implements it; in a build without CUDA it takes nothing.
#pragma once
#include <functional>

#include "ember/tensor.h"

namespace ember::layer_norm_grad {

// How the weight and bias grads' fold (a second kernel, over the first's per-block partials) is
// launched: `defer` is given the partials, which it keeps alive until the fold has run, and the
// launch, which it runs on the device's stream (a recording's side branch: the fold then waits
// on nothing recorded after the first kernel, and nothing waits on it but dw's and db's readers).
using FoldLauncher =
    std::function<void(const Tensor& partials, const std::function<void()>& launch)>;

// dx (+ residual when defined), dw and db of layer_norm over x's last w.numel() elements, as
// the layer_norm_backward op computes them from g (float32, bfloat16 or float16), x, mean,
// rstd and w (float32); dx, dw and db are written. Every tensor contiguous on one CUDA
// device. False, with nothing written, where the kernel does not take the rows (their length
// past 1024 or no multiple of 4, a misaligned start): the caller runs the ops instead. With
// `defer`, the fold of dw and db is launched through it.
bool backward_fused(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                    const Tensor& w, const Tensor& residual, const Tensor& dx, const Tensor& dw,
                    const Tensor& db, const FoldLauncher* defer = nullptr);

}  // namespace ember::layer_norm_grad
