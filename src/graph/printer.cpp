// Printing graphs as text, one line per node, in the style of an FX graph:
//   graph(%0: f32[4, 8] (arg 0), %1: f32[8] (captured "fc.bias")):
//     %2 = matmul(%0, %1)  # f32[4]  (model.cpp:12)
//     return (%2)
#include <sstream>

#include "core/shape.h"
#include "graph/graph_util.h"

namespace ember::graph {

namespace {

const char* short_dtype(DType t) {
  switch (t) {
    case DType::Bool:
      return "b8";
    case DType::Int32:
      return "i32";
    case DType::Int64:
      return "i64";
    case DType::Float16:
      return "f16";
    case DType::BFloat16:
      return "bf16";
    case DType::Float32:
      return "f32";
    case DType::Float64:
      return "f64";
  }
  return "?";
}

// The file name without its directories: locations are for reading, and full build paths
// would drown the graph.
const char* base_name(const char* path) {
  const char* base = path;
  for (const char* p = path; *p; ++p)
    if (*p == '/' || *p == '\\') base = p + 1;
  return base;
}

std::string ref(const Value* v) {
  std::string s = "%";
  s += v ? std::to_string(v->id) : "?";
  return s;
}

std::string refs(const std::vector<Value*>& vs) {
  std::string s;
  for (size_t i = 0; i < vs.size(); ++i) s += (i ? ", " : "") + ref(vs[i]);
  return s;
}

}  // namespace

std::string value_type_str(const Value& v) {
  std::string s = short_dtype(v.meta.dtype);
  s += shape_str(v.meta.sizes);
  if (v.meta.strides != contiguous_strides(v.meta.sizes)) {
    s += " strides=";
    s += shape_str(v.meta.strides);
  }
  if (v.meta.offset != 0) {
    s += " offset=";
    s += std::to_string(v.meta.offset);
  }
  if (v.device != kCPU) {
    s += " ";
    s += v.device.str();
  }
  return s;
}

std::string node_str(const Node& n) {
  std::string s = refs(n.outputs) + " = " + std::string(op_name(n.op)) + "(" + refs(n.inputs);
  std::string attrs = n.attrs.str();
  if (!attrs.empty()) s += (n.inputs.empty() ? "" : ", ") + attrs;
  s += ")  # ";
  for (size_t j = 0; j < n.outputs.size(); ++j)
    s += (j ? ", " : "") + (n.outputs[j] ? value_type_str(*n.outputs[j]) : std::string("?"));
  if (n.no_grad) s += " no_grad";
  if (n.skipped_draws) s += " after " + std::to_string(n.skipped_draws) + " skipped draws";
  if (n.loc.file && n.loc.line)
    s += std::string("  (") + base_name(n.loc.file) + ":" + std::to_string(n.loc.line) + ")";
  return s;
}

std::string Graph::str() const {
  std::ostringstream os;
  os << "graph(";
  int arg = 0;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const Value& v = *inputs_[i];
    os << (i ? ", " : "") << ref(&v) << ": " << value_type_str(v);
    if (input_kinds_[i] == InputKind::Argument) {
      os << " (arg " << arg++;
      if (!input_names_[i].empty()) os << " \"" << input_names_[i] << "\"";
      os << ")";
    } else {
      os << " (captured \"" << input_names_[i] << "\")";
    }
  }
  os << "):\n";
  for (const auto& n : nodes_) os << "  " << node_str(*n) << "\n";
  for (const Mutation& m : mutations_)
    os << "  mutate " << ref(m.target) << " <- " << ref(m.value) << "\n";
  if (trailing_skipped_draws_)
    os << "  skip " << trailing_skipped_draws_ << " random draws\n";
  os << "  return (" << refs(outputs_) << ")\n";
  return os.str();
}

}  // namespace ember::graph
