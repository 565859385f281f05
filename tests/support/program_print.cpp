// Random programs as C++-like text (program_gen.h): what a failing test prints.
#include <sstream>

#include "support/program_gen.h"
#include "support/program_layers.h"

namespace ember::testgen {
namespace {

const char* unary_name(UnaryFn f) {
  static const char* n[] = {"neg", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "gelu", "silu", "abs"};
  return n[int(f)];
}
const char* binary_name(BinaryFn f) {
  static const char* n[] = {"add", "sub", "mul", "div", "maximum", "minimum"};
  return n[int(f)];
}
const char* dtype_cpp(DType t) {
  switch (t) {
    case DType::Float32: return "kFloat32";
    case DType::Float64: return "kFloat64";
    case DType::Int64: return "kInt64";
    default: return "?";
  }
}
std::string shape_cpp(const Shape& s) {
  std::string out = "{";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "}";
}
// An input's shape, its symbolic dims by name (s0, s1).
std::string input_shape_cpp(const InputSpec& in) {
  std::string out = "{";
  for (size_t i = 0; i < in.shape.size(); ++i) {
    out += i ? ", " : "";
    const bool sym = i < in.sym.size() && in.sym[i] >= 0;
    out += sym ? std::string("s").append(std::to_string(in.sym[i])) : std::to_string(in.shape[i]);
  }
  return out + "}";
}
std::string num(double v) {
  std::ostringstream os;
  os << v;
  std::string s = os.str();
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

std::string to_string(const Program& p) {
  std::ostringstream os;
  size_t ni = p.inputs.size();
  auto name = [&](int v) {
    std::string s(size_t(v) < ni ? "x" : "v");
    s += std::to_string(size_t(v) < ni ? v : v - int(ni));
    return s;
  };
  // A Slice's or Narrow's end, from the dim's size when it counts back from there.
  auto end = [](const Step& s, const std::string& x) {
    return s.from_end ? x + ".size(" + std::to_string(s.dim) + ") - " + std::to_string(s.end)
                      : std::to_string(s.end);
  };
  os << "// program seed " << p.seed << "\n";
  if (!p.sizes.empty()) {
    os << "// called at (s0, s1 ...) =";
    for (const auto& row : p.sizes) os << " " << shape_cpp(row);
    os << "\n";
  }
  for (size_t i = 0; i < ni; ++i)
    os << "Tensor x" << i << " = " << (p.inputs[i].strided ? "strided_input(" : "input(")
       << input_shape_cpp(p.inputs[i]) << ", " << dtype_cpp(p.inputs[i].dtype)
       << (p.inputs[i].range != 2 ? ", range " + num(p.inputs[i].range) : std::string()) << ");\n";
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step& s = p.steps[i];
    std::string x = name(s.args[0]), e;
    switch (s.op) {
      case Op::Unary:
        switch (UnaryFn(s.fn)) {
          case UnaryFn::Exp: e = x + ".clamp(-4.0, 4.0).exp()"; break;
          case UnaryFn::Log: e = "(" + x + ".abs() + 0.5).log()"; break;
          case UnaryFn::Sqrt: e = "(" + x + ".abs() + 0.5).sqrt()"; break;
          default: e = x + "." + unary_name(UnaryFn(s.fn)) + "()";
        }
        break;
      case Op::Binary:
        e = BinaryFn(s.fn) == BinaryFn::Div ? x + ".div(" + name(s.args[1]) + ".abs() + 0.5)"
                                            : x + "." + binary_name(BinaryFn(s.fn)) + "(" + name(s.args[1]) + ")";
        break;
      case Op::AddScalar: e = x + " + " + num(s.scalar); break;
      case Op::MulScalar: e = x + " * " + num(s.scalar); break;
      case Op::Where:
        e = name(s.args[1]) + ".where(" + x + ".gt(" + num(s.scalar) + "), " + name(s.args[2]) + ")";
        break;
      case Op::Transpose: e = x + ".transpose(" + std::to_string(s.dim) + ", " + std::to_string(s.dim2) + ")"; break;
      case Op::Permute: e = x + ".permute(" + shape_cpp(s.shape) + ")"; break;
      case Op::Reshape: {
        e = x + ".reshape({";
        for (size_t k = 0; k < s.shape.size(); ++k) {
          e += k ? ", " : "";
          const bool copy = k < s.copy.size() && s.copy[k] >= 0;
          e += copy ? x + ".size(" + std::to_string(s.copy[k]) + ")" : std::to_string(s.shape[k]);
        }
        e += "})";
        break;
      }
      case Op::Unsqueeze: e = x + ".unsqueeze(" + std::to_string(s.dim) + ")"; break;
      case Op::Slice:
        e = x + ".slice(" + std::to_string(s.dim) + ", " + std::to_string(s.start) + ", " +
            end(s, x) + ", " + std::to_string(s.step) + ")";
        break;
      case Op::Expand: e = x + ".expand(" + shape_cpp(s.shape) + ")"; break;
      case Op::Cast: e = x + ".to(" + dtype_cpp(s.dtype) + ")"; break;
      case Op::Sum:
      case Op::Mean:
      case Op::Amax:
        e = x +
            (s.op == Op::Sum    ? ".sum("
             : s.op == Op::Mean ? ".mean("
                                : ".amax(") +
            (s.shape.empty() ? shape_cpp({s.dim}) : shape_cpp(s.shape)) + ", " +
            (s.keepdim ? "true" : "false") + ")";
        break;
      case Op::Softmax:
        e = x + (s.flag ? ".log_softmax(" : ".softmax(") + std::to_string(s.dim) + ")";
        break;
      case Op::Narrow:
        e = x + ".narrow(" + std::to_string(s.dim) + ", " + std::to_string(s.start) + ", " +
            (s.from_end ? end(s, x) + " - " + std::to_string(s.start)
                        : std::to_string(s.end - s.start)) +
            ")";
        break;
      case Op::Matmul:
        e = x + ".matmul(" + name(s.args[1]) + (s.flag ? ".transpose(-2, -1))" : ")");
        break;
      case Op::LayerNorm:
        e = "layer_norm(" + x + ", {" + x + ".size(-1)}, " +
            (s.args.size() > 1 ? name(s.args[1]) : "{}") + ", " +
            (s.args.size() > 2 ? name(s.args[2]) : "{}") + ", " + num(s.scalar) + ")";
        break;
      case Op::Composite:
        e = s.fn == 0   ? "rms_norm(" + x + ", {" + x + ".size(-1)}, {}, " + num(s.scalar) + ")"
            : s.fn == 1 ? "cumsum(" + x + ", " + std::to_string(s.dim) + ")"
                        : "roll(" + x + ", {" + std::to_string(s.start) + "}, {" +
                              std::to_string(s.dim) + "})";
        break;
      case Op::ReduceBroadcast: {
        const char* red[] = {".sum({", ".mean({", ".amax({"};
        const std::string r =
            x + red[s.fn] + std::to_string(s.dim) + "}, " + (s.keepdim ? "true" : "false") + ")";
        e = (s.flag ? r : x) + "." + binary_name(BinaryFn(s.fn2)) + "(" + (s.flag ? x : r) + ")";
        break;
      }
      case Op::Layer: e = layer_cpp(s, name); break;
      case Op::kCount:
        break;
    }
    os << "Tensor v" << i << " = " << e << ";\n";
  }
  os << "return {";
  for (size_t i = 0; i < p.outputs.size(); ++i) os << (i ? ", " : "") << name(p.outputs[i]);
  os << "};\n";
  if (p.backward)
    os << "// training: the loss sum((out * w).sum()) over the float outputs, random weights w,\n"
       << "// and its grads w.r.t. the float inputs\n";
  return os.str();
}

}  // namespace ember::testgen
