// Kernels over symbolic sizes from kernels over concrete ones. Lowering sees concrete graphs;
// the same program traced at several sizes lowers to kernels of one form (kir::form) whose
// integers differ. Each integer is fitted as a polynomial in the size symbols (each symbol to
// at most the second power: strides, element counts and score matrices [T, T]), and the fit
// is checked against every sample: the symbolic kernel bound to a sample's sizes must be that
// sample's kernel exactly. A kernel the fit does not reproduce has no symbolic form.
#pragma once
#include <optional>
#include <vector>

#include "compiler/kernel_ir.h"

namespace ember::compiler {

struct KernelSample {
  std::vector<int64_t> sizes;  // the value of each symbol s0, s1 ... in this sample
  kir::Kernel kernel;
};

// The kernel over symbolic sizes that every sample is an instance of, or nothing when the
// samples differ in form or an integer fits no polynomial. Needs, per symbol, samples at three
// or more distinct values (any combination with the other symbols' values: fewer samples
// than unknowns leave the fit undetermined, and it is refused).
std::optional<kir::Kernel> generalize(const std::vector<KernelSample>& samples);

}  // namespace ember::compiler
