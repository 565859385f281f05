// The CUDA renderer of the kernel IR (kernel_ir.h): each kernel as an extern "C" __global__
// function for NVRTC (toolchain_cuda.h). Elementwise kernels run a grid-stride loop, 16 bytes
// per access where every flat buffer is aligned for it; row kernels run a block per row, the
// row held in registers when its length is known and fits, with warp-shuffle and shared-memory
// reductions. Parameters: the kernel's buffers in order, then the values of its size symbols
// (int64, in Kernel::size_symbols() order), so one binary serves every size.
#pragma once
#include <sstream>
#include <string>
#include <vector>

#include "compiler/kernel_ir.h"

namespace ember::compiler {

// How a rendered kernel is launched.
struct CudaLaunch {
  bool rows = false;
  int block = 256;          // threads per block
  int vector = 1;           // elementwise: elements per 16-byte step
  kir::Index work = 0;      // elementwise: elements; rows: rows (over the size symbols)
};

// The code every generated CUDA translation unit opens with: functors.h and the reductions.
const std::string& cuda_prelude();

CudaLaunch render_cuda_elementwise(std::ostringstream& os, const kir::Kernel& k);
CudaLaunch render_cuda_rows(std::ostringstream& os, const kir::Kernel& k);
// Either, by the kernel's kind (elementwise or row; others raise an Error).
CudaLaunch render_cuda_kernel(std::ostringstream& os, const kir::Kernel& k);

// The grid of a launch of `work` (CudaLaunch::work at the call's sizes) on a GPU with `sms`
// multiprocessors; 0 when there is no work.
unsigned cuda_grid(const CudaLaunch& l, int64_t work, int sms);

}  // namespace ember::compiler
