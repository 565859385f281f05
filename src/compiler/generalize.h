// Kernels over symbolic sizes from kernels over concrete ones. Lowering sees concrete graphs;
// the same program traced at several sizes lowers to kernels of one form (kir::form) whose
// integers differ. Each integer is fitted as a polynomial in the size symbols (each symbol to
// at most the second power: strides, element counts and score matrices [T, T]), and the fit
// is checked against every sample: the symbolic kernel bound to a sample's sizes must be that
// sample's kernel exactly. A kernel the fit does not reproduce has no symbolic form.
// kir::substitute_symbols renames the fit's symbols (0, 1 ...) to the caller's.
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
// samples differ in form or an integer fits no polynomial. Each symbol must take two or more
// values in the samples; its power in the fit is at most one less than the values it takes
// (and at most 2), so two samples fit lines: a hypothesis that holds for the samples, which a
// user of the result checks on every other size it binds (bind, then compare with the kernel
// lowered at that size). Fewer samples than unknowns leave the fit undetermined: refused.
std::optional<kir::Kernel> generalize(const std::vector<KernelSample>& samples);

}  // namespace ember::compiler
