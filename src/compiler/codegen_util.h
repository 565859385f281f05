// Pieces of C++ generation shared by the kernel emitters (codegen_cpp.cpp, the renderers
// render_cpp_*.cpp, codegen_attention.cpp and codegen_columns.cpp): element types, value
// names, index arithmetic, fused node lines.
#pragma once
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/pointwise_fusion.h"
#include "core/shape.h"

namespace ember::compiler {

const char* c_type(DType t);
// Pointwise kernels: the C++ type an element of dtype t is stored as (the bits, uint16_t, for
// float16 and bfloat16) and computed in (float for those); reading a stored element as its
// compute type, and a computed value as its storage type (rounded to nearest even).
const char* storage_type(DType t);
const char* compute_type(DType t);
std::string load_value(DType t, const std::string& element);
std::string store_value(DType t, const std::string& value);
// `text` with each value name (v<id>) renamed t0, t1, ... in order of first appearance: the
// same loop over other values reads the same.
std::string canonical_names(const std::string& text);
// `text` with every `from` replaced by `to`.
std::string replace_all(std::string text, const std::string& from, const std::string& to);
// `text` with `extra` put before each line but pragmas.
std::string indent(const std::string& text, const std::string& extra);

// Code that kernels of one translation unit share, written once: by its text, the name it got.
class SharedCode {
 public:
  SharedCode() = default;
  // Deferring: use() writes nothing and names nothing; it keeps the text for the caller
  // (lowering a pattern kernel, which shares its helpers when it is rendered).
  struct Defer {};
  explicit SharedCode(Defer) : defer_(true) {}
  // The name of `text`, whose "@NS@" stands for it. On the first use of a text the name is
  // fresh (`prefix` and a number) and `comment` then the text are written to os. Deferring,
  // "@NS@" itself.
  std::string use(std::ostringstream& os, const std::string& text, const std::string& prefix,
                  const std::string& comment = "");
  const std::string& deferred_text() const { return deferred_text_; }
  const std::string& deferred_prefix() const { return deferred_prefix_; }

 private:
  std::map<std::string, std::string> names_;
  bool defer_ = false;
  std::string deferred_text_, deferred_prefix_;
};

// A pattern kernel's integer that follows from sizes (a row count, a stride along a dim that
// may vary), as its emitter writes it: marked, so that lowering lifts it out of the text
// (kir::Pattern) and kernels of the pattern at other sizes share one text. Mark only integers
// the C++ reads at run time (never an array bound or a template argument): a marked integer
// may become an expression over sizes. Decisions an emitter takes on such an integer (a loop
// chosen by a stride of 1) stay in the text; a decision that should not split the kernels of
// one program (parallel or not) belongs in the text as a run-time condition.
std::string sz(int64_t v);
std::string var(const graph::Value* v);  // "v12": the C++ name of a value
// The offset of input `v`'s element read by the output element at row r (over all dims but
// the last) and column j, `v` broadcast to `out`, split for row kernels: `row` is computed once
// per row, `col` per element ("" when v does not vary along the row). Both empty when v is one
// element. Its integers are marked (sz): the attention kernel reads it.
struct RowIndex {
  std::string row, col;
};
RowIndex row_index(const graph::Value& v, const Shape& out);

// Emits declarations of row bases (b<k> = row part) for the non-scalar group inputs and returns
// each input's element offset expression in terms of b<k> and j ("" for one-element inputs).
// Inputs in `skip` get no offset (the caller reads them its own way).
std::vector<std::string> emit_row_bases(std::ostringstream& os, const FusionGroup& grp,
                                        const Shape& out, const char* indent,
                                        const std::vector<const graph::Value*>& skip = {});

// Fails, naming the kernel and the value, when the generated `code` of a kernel (or of a
// batch's part) reads a value v<id> before declaring it in an enclosing scope: a value the
// fusion plan let a kernel read that it neither loads nor computes (an input it never took, a
// product its form does not compute). Such a plan fails here, at generation, not in the C++
// compiler.
void check_reads_declared(const std::string& code, const std::string& kernel);

// One fused node as a line: `const T v<id> = ember::fn::<Functor>{}(v<a>, ...)`.
void emit_functor_line(std::ostringstream& os, const graph::Node& node, const char* T,
                       const std::string& indent);

// Emits the loads of the group inputs that `nodes` (or also_read) read, then the nodes, one a
// line (emit_functor_line).
void emit_elementwise(std::ostringstream& os, const FusionGroup& grp,
                      const std::vector<const graph::Node*>& nodes,
                      const std::vector<std::string>& idx, const char* T, const char* indent,
                      const graph::Value* also_read = nullptr);

// The reduction helpers the attention kernels call, once per translation unit that has any.
void emit_attention_helpers(std::ostringstream& os);
// An attention group's kernel (see FusionGroup::attn_qk).
void emit_attention_kernel(std::ostringstream& os, const std::string& name, const FusionGroup& grp);
// An attention backward group's kernel (see FusionGroup::attn_bwd). Its helpers are shared
// by the kernels of the same form (a model's layers).
void emit_attention_backward_kernel(std::ostringstream& os, const std::string& name,
                                    const FusionGroup& grp, SharedCode& shared);
// A layer_norm backward group's kernel (see FusionGroup::ln_bwd).
void emit_layer_norm_backward_kernel(std::ostringstream& os, const std::string& name,
                                     const FusionGroup& grp);
// A column group's kernel (see FusionGroup::col).
void emit_column_kernel(std::ostringstream& os, const std::string& name, const FusionGroup& grp);

}  // namespace ember::compiler
