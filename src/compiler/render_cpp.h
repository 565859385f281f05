// The C++/OpenMP renderer of the kernel IR (kernel_ir.h): loops, pragmas, vector and
// streaming choices for the CPU, and the spelling of the IR's statements and index
// expressions as C++.
#pragma once
#include <sstream>
#include <string>

#include "compiler/kernel_ir.h"

namespace ember::compiler {
class SharedCode;
}

namespace ember::compiler {

// Whether an elementwise kernel loops over rows and columns of its last dim (when an input is
// read broadcast, strided or under conditions on the column, so a flat loop would need a
// division per element for its offset) rather than over flat elements. A kernel batch
// (codegen_cpp.h) only skips barriers between kernels that loop alike.
bool cpp_row_loop(const kir::Kernel& k);

// An offset over the kernel's coordinates as C++ in a loop over rows r (the domain's leading
// dims) and columns j: the part fixed per row and the column part ("" when zero).
struct CppRowOffset {
  std::string row, col;
};
CppRowOffset cpp_row_offset(const kir::Kernel& k, const kir::Index& index);

// A row kernel (kir::Kernel::rows) as one extern "C" function taking the kernel's buffers.
void render_cpp_rows(std::ostringstream& os, const kir::Kernel& k);

// A pattern kernel (kir::Kernel::pattern) as its emitter wrote it at the kernel's integers;
// over symbolic sizes, the symbols' values are read from the argument after its pointers.
// Its shared helpers are written once per translation unit (`shared`).
void render_cpp_pattern(std::ostringstream& os, const kir::Kernel& k, SharedCode& shared);

// The body of an elementwise kernel whose arguments are read from args[base ...]: pointers,
// uniform values loaded once, the loop. A kernel with size symbols (Kernel::size_symbols)
// takes one more argument after its buffers: the symbols' values, s<i> at [i]; its loop
// bounds are computed from them and its parallel choice is taken at run time. Inside a batch's parallel region (in_region) the loop
// is a worksharing loop without a barrier at its end. An epilogue's body is a plain loop over
// rows [r0, r1) (the kernel's extra arguments).
void render_cpp_elementwise(std::ostringstream& os, const kir::Kernel& k, size_t base,
                            bool in_region, const char* indent);

}  // namespace ember::compiler
