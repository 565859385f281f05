// What the C++ and CUDA renderers spell alike (CUDA C++ is C++): loop variables, the
// coordinates of a flat element, and the statements of an elementwise kernel at one element.
#pragma once
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/kernel_ir.h"

namespace ember::compiler {

// The loop variables i (flat element), r (row) and j (column) are symbols just below the
// coordinates; sizes print as s<id>.
constexpr int kVarI = kir::kCoord - 3, kVarR = kir::kCoord - 2, kVarJ = kir::kCoord - 1;
std::string loop_names(int id);

// Coordinates of flat element `var` of a row-major domain `dims` (or, over the leading dims,
// of row `var`): the last varies fastest; the first needs no modulo.
kir::Index::Substitution flat_coordinates(const std::vector<kir::Index>& dims, int var);

// "in<b>", or "out" for the output buffer.
std::string buffer_name(const kir::Kernel& k, int b);
// "const float v12 = ": the declaration of a statement's value in its compute type.
std::string value_decl(const kir::Stmt& s);
// An iota load's value (kir::Stmt::iota) at element offset `offset`, in its compute type.
std::string iota_value(const kir::Stmt& s, const std::string& offset);

// An elementwise kernel's statements at one element, one a line: `offset(load)` spells a
// load's element offset, `element(load)` (when given and not "") the whole element read
// instead (a register, the output's row pointer); the store goes to `store_to`. Uniform loads
// are left out (declared once by the caller). A load under conditions on the last coordinate
// reads it as `j`. A dropout's draw is word `lane` of Philox block `block` past its rng_state's
// offset, with (block, lane) spelled by `draw(dropout)` when given and not "" ("block, lane":
// the vector loop's, which neighbouring elements share), else from `offset` (offset / 4, % 4).
void emit_pointwise_body(std::ostringstream& os, const kir::Kernel& k, const std::string& ind,
                         const std::function<std::string(const kir::Stmt&)>& offset,
                         const std::string& store_to,
                         const std::function<std::string(const kir::Stmt&)>& element = {},
                         const std::function<std::string(const kir::Stmt&)>& draw = {});

// Whether `name` is read by one of `stmts` or is `value`, without being defined by them (a
// consumer may load the row op's input itself).
bool reads_value(const std::vector<kir::Stmt>& stmts, const std::string& value,
                 const std::string& name);

// A row kernel's load offsets: one entry per distinct index, its row part a base b<p> computed
// once per row and its column part a term in j (render_cpp.h, cpp_row_offset). Built from the
// loads of the program's pre and out statements; others are added as they are asked for.
struct RowOffsets {
  struct Entry {
    kir::Index index;
    std::string row, col;  // as cpp_row_offset spells them ("" when zero)
  };
  explicit RowOffsets(const kir::Kernel& k);
  size_t position(const kir::Stmt& load);
  // "b<p> + <col>", "b<p>", "<col>" or "0".
  std::string offset(const kir::Stmt& load);
  // "b<p>" when entry p has a row part, else "0".
  std::string base(size_t p) const;
  std::vector<Entry> entries;

 private:
  const kir::Kernel& k_;
};

// Declares a row kernel's one-element inputs once, at its start: `const T v = in<b>[0];`.
void emit_uniform_row_loads(std::ostringstream& os, const kir::Kernel& k, const char* T);

// A row kernel's statements (kir::RowProgram) as lines at column j (or, in the output of a row
// reduction, at row r): loads at their offsets (`offset(stmt)`), kept values where the pass
// finds them (`kept_at`), the store to `store_to`. Every value has the row's element type.
struct RowSpell {
  const kir::Kernel& k;
  std::function<std::string(const kir::Stmt&)> offset;
  std::string kept_at, store_to;
  // When set and not "": the whole element a load reads instead (a register).
  std::function<std::string(const kir::Stmt&)> element = {};

  void operator()(std::ostringstream& os, const std::vector<kir::Stmt>& stmts,
                  const std::string& ind) const;
};

}  // namespace ember::compiler
