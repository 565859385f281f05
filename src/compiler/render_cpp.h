// The C++/OpenMP renderer of the kernel IR (kernel_ir.h): loops, pragmas, vector and
// streaming choices for the CPU, and the spelling of the IR's statements and index
// expressions as C++.
#pragma once
#include <sstream>

#include "compiler/kernel_ir.h"

namespace ember::compiler {

// Whether an elementwise kernel loops over rows and columns of its last dim (when an input is
// read broadcast, strided or under conditions on the column, so a flat loop would need a
// division per element for its offset) rather than over flat elements. A kernel batch
// (codegen_cpp.h) only skips barriers between kernels that loop alike.
bool cpp_row_loop(const kir::Kernel& k);

// The body of an elementwise kernel whose arguments are read from args[base ...]: pointers,
// uniform values loaded once, the loop. Inside a batch's parallel region (in_region) the loop
// is a worksharing loop without a barrier at its end. An epilogue's body is a plain loop over
// rows [r0, r1) (the kernel's extra arguments).
void render_cpp_elementwise(std::ostringstream& os, const kir::Kernel& k, size_t base,
                            bool in_region, const char* indent);

}  // namespace ember::compiler
