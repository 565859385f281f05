// The kernel IR: what one generated kernel computes, independent of the device and of how its
// loops are spelled. Fusion planning (pointwise_fusion.h) decides which graph nodes form a
// kernel; lowering (lower.h) turns a group into a Kernel; a renderer per device writes its
// text (render_cpp.h: C++/OpenMP). Index math lives here, as size expressions
// (core/sym_expr.h) over the kernel's coordinates, so a renderer only chooses loops and spells
// expressions; sizes that are symbols stay symbols until a renderer binds them.
//
// A pointwise kernel iterates over its domain, the output's shape. Each element reads its
// inputs (Load: an element offset over the coordinates c0 .. c{n-1} of the output element),
// computes with the functors of kernels/functors.h (Call) and conversions (Cast), and writes
// the output (Store). A gemm epilogue is a pointwise kernel whose first load reads the product
// already in the output buffer, run by the caller on row ranges. A row kernel (RowProgram)
// reduces along the domain's last dim, row by row.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ember/dtype.h"
#include "core/sym_expr.h"

namespace ember::compiler::kir {

using Index = sym::Expr;

// Coordinate d of the domain in index expressions is the symbol kCoord + d; symbols below
// kCoord are sizes.
constexpr int kCoord = 1 << 20;
Index coord(int d);
// Whether `e` reads coordinate d / any coordinate.
bool reads_coord(const Index& e, int d);
bool reads_any_coord(const Index& e);

// A kernel argument: a tensor buffer of `numel` elements.
struct Buffer {
  DType dtype = DType::Float32;
  Index numel = 0;
  bool output = false;
  std::string about;  // what it holds, for comments: "v12 f32[64, 128]"
};

struct Stmt {
  enum class Kind : uint8_t {
    Load,   // out = buffer[index] (where `when` holds; 0 elsewhere)
    Call,   // out = ember::fn::<functor>{}(args...)
    Cast,   // out = args[0] converted to dtype (rounded to it, for 16-bit floats)
    Store,  // buffer[index] = args[0]
    Const,  // out = constant, in dtype (a size: `index`, when size_valued)
    Kept,   // out = the value a row step kept at this column (RowStep::keep)
    // out = args[0] under dropout with probability `constant`: scaled by 1 / (1 - p) where
    // draw `index` (the element's offset in the dropout's result) from the rng_state in
    // `buffer` ({seed, offset}) keeps it, else times 0 (dropout_rng; generated CUDA only).
    Dropout,
  };
  Kind kind = Kind::Load;
  std::string out;  // the value defined (Load, Call, Cast): a name unique in the kernel
  DType dtype = DType::Float32;  // of `out` (Store: of the buffer)
  int buffer = -1;               // Load, Store, Dropout (its rng_state)
  Index index = 0;               // Load, Store, Dropout: element offset over the coordinates
  // Load: conditions on the coordinates under which the element is read; elsewhere the value
  // is 0 and nothing is read (slice_backward's grad outside the slice). Index math under
  // these conditions need not be in bounds elsewhere.
  std::vector<sym::Rel> when;
  std::string functor;            // Call
  std::vector<std::string> args;  // Call operands; Cast, Store: the one value
  // Store: a bool value; the element is stored only where it holds (the buffer keeps its
  // contents elsewhere: a kernel writing into the input it changes, store_only_changes.h).
  std::string store_if;
  double constant = 0;            // Const; Dropout: its probability
  bool size_valued = false;       // Const: the value is the size expression `index`
  // Load of an arange's buffer (contiguous, integral start and step, every value exact in
  // dtype): the value is iota_start + iota_step * index, computed instead of read. The buffer
  // still holds those values, so a renderer may read it instead.
  bool iota = false;
  int64_t iota_start = 0, iota_step = 1;
};

// A row kernel computes a row op over the last dim of its input (the kernel's domain) with
// its fused pointwise producers and consumers. For each row: the steps in order, then the
// output. A Max or Sum step reduces `value`, computed by `body` at each column j, to the row
// statistic `name` (the first such step also runs `pre`, which computes the row op's input
// `input` at j); a Let step computes the row scalar `name` once per row from earlier ones.
struct RowStep {
  enum class Kind : uint8_t { Max, Sum, Let };
  Kind kind = Kind::Let;
  std::string name;
  std::vector<Stmt> body;
  std::string value;
  bool keep = false;  // Max, Sum: `value` at each column is kept for later steps (Kept)
};
struct RowProgram {
  std::string input;            // the row op's input at column j, defined by `pre`
  std::vector<Stmt> pre;        // per column: loads and the fused producers
  std::vector<RowStep> steps;
  // Per column: the row op's output, the fused consumers, the store; for an op that reduces
  // each row to one value (row_output false), once per row, storing at the row.
  std::vector<Stmt> out;
  bool row_output = true;
  // The row op's type, which the kernel computes in; the output buffer may be a 16-bit float
  // (a cast after the row op on the GPU: the store rounds).
  DType compute = DType::Float32;
  std::vector<std::pair<int, std::string>> stats;  // buffer <- statistic, stored per row
};

// A pattern kernel (attention forward and backward, layer_norm backward, column sums): the C++
// its emitter wrote, with the integers that follow from sizes (marked by the emitter, see
// codegen_util.h's sz) lifted out, so that the pattern at other sizes has the same text.
// `text` holds "@i@" where ints[i] goes; `shared`, when not empty, is code that kernels with
// the same helpers share (written once per translation unit under a name made from
// `shared_prefix`), which `text` calls through "@NS@". Integers the emitter did not mark (a
// head size that array bounds need, the choice of a loop by a stride) are part of the text:
// a pattern whose such integers differ has another form.
struct Pattern {
  std::string text, shared, shared_prefix;
  std::vector<Index> ints;
  size_t args = 0;  // the kernel's pointer arguments; symbolic sizes follow them
};

struct Kernel {
  std::string name;
  std::vector<std::string> comment;  // lines describing the kernel (the graph nodes)
  std::vector<Buffer> buffers;       // the arguments, in order
  std::vector<Index> domain;         // the output's shape
  std::vector<Stmt> body;            // per element, in order
  // A gemm epilogue: run by the caller on rows [r0, r1) of the domain (all dims but the last),
  // after the product's rows are in the output.
  bool epilogue = false;
  // A row kernel (then `body` is empty): the rows are the domain's leading dims.
  std::optional<RowProgram> rows;
  // A pattern kernel (then the fields above are empty but `name`).
  std::optional<Pattern> pattern;

  Index numel() const;
  // The offset of coordinate tuple (c0 ..) in a contiguous tensor of the domain's shape.
  Index contiguous_index() const;
  // The size symbols the kernel reads (in its domain, buffer sizes and offsets), ascending.
  // Renderers take their values at run time: one compiled kernel serves every size.
  std::vector<int> size_symbols() const;
  // Whether a value is the same for every element (its load reads one element): renderers
  // load it once.
  bool uniform(const Stmt& s) const;
};

// C++ text without its // comments (lines that were only a comment removed).
std::string strip_comments(const std::string& code);

// The kernel as text, one statement a line (tests, docs and EMBER_LOGS=output_code).
std::string print(const Kernel& k);

// What a kernel computes apart from its integers (sizes, strides, offsets, size-valued
// constants), and those integers in the same fixed order: two kernels of one form differ only
// in them. with_integers gives the kernel with each integer replaced by an expression (as many
// as integers() has), names and comments kept: a kernel over symbolic sizes when the
// expressions read symbols.
std::string form(const Kernel& k);
std::vector<int64_t> integers(const Kernel& k);
Kernel with_integers(const Kernel& k, std::span<const Index> values);
// The kernel with size symbol i bound to values[i] (sizes become constants).
Kernel bind(const Kernel& k, std::span<const int64_t> values);
// The kernel with each size symbol i for which `by(i)` gives an expression replaced by it.
Kernel substitute_symbols(const Kernel& k, const Index::Substitution& by);

}  // namespace ember::compiler::kir
