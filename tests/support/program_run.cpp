// Running random programs: each step applied with ember's ops, the inputs they take (dense,
// strided, offset views of fresh buffers), and the training form (a weighted loss, its grads).
#include <cmath>

#include "ember/autograd.h"
#include "support/program_gen.h"
#include "support/program_layers.h"
#include "support/program_rng.h"

namespace ember::testgen {

namespace {
// A Slice's or Narrow's end: counted back from the dim's size when `from_end`.
int64_t step_end(const Step& s, const Tensor& x) {
  return s.from_end ? x.size(s.dim) - s.end : s.end;
}

// A Reshape's target: the entries that copy an operand dim take its size.
Shape reshape_target(const Step& s, const Tensor& x) {
  Shape out = s.shape;
  for (size_t i = 0; i < s.copy.size(); ++i)
    if (s.copy[i] >= 0) out[i] = x.size(s.copy[i]);
  return out;
}

}  // namespace

Tensor apply_step(const Step& s, const std::vector<Tensor>& v) {
  const Tensor& x = v[size_t(s.args[0])];
  auto other = [&](size_t i) -> const Tensor& { return v[size_t(s.args[i])]; };
  switch (s.op) {
    case Op::Unary:
      switch (UnaryFn(s.fn)) {
        case UnaryFn::Neg: return x.neg();
        case UnaryFn::Exp: return x.clamp(-4.0, 4.0).exp();
        case UnaryFn::Log: return (x.abs() + 0.5).log();
        case UnaryFn::Sqrt: return (x.abs() + 0.5).sqrt();
        case UnaryFn::Tanh: return x.tanh();
        case UnaryFn::Sigmoid: return x.sigmoid();
        case UnaryFn::Relu: return x.relu();
        case UnaryFn::Gelu: return x.gelu();
        case UnaryFn::Silu: return x.silu();
        case UnaryFn::Abs: return x.abs();
        default: break;
      }
      break;
    case Op::Binary:
      switch (BinaryFn(s.fn)) {
        case BinaryFn::Add: return x.add(other(1));
        case BinaryFn::Sub: return x.sub(other(1));
        case BinaryFn::Mul: return x.mul(other(1));
        case BinaryFn::Div: return x.div(other(1).abs() + 0.5);
        case BinaryFn::Maximum: return x.maximum(other(1));
        case BinaryFn::Minimum: return x.minimum(other(1));
        default: break;
      }
      break;
    case Op::AddScalar: return x + s.scalar;
    case Op::MulScalar: return x * s.scalar;
    case Op::Where: return other(1).where(x.gt(s.scalar), other(2));
    case Op::Transpose: return x.transpose(s.dim, s.dim2);
    case Op::Permute: return x.permute(s.shape);
    case Op::Reshape: return x.reshape(reshape_target(s, x));
    case Op::Unsqueeze: return x.unsqueeze(s.dim);
    case Op::Slice: return x.slice(s.dim, s.start, step_end(s, x), s.step);
    case Op::Expand: return x.expand(s.shape);
    case Op::Cast: return x.to(s.dtype);
    case Op::Sum:
      return x.sum(s.shape.empty() ? Shape{s.dim} : s.shape, s.keepdim);
    case Op::Mean:
      return x.mean(s.shape.empty() ? Shape{s.dim} : s.shape, s.keepdim);
    case Op::Amax: return x.amax({s.dim}, s.keepdim);
    case Op::Softmax:
      return s.flag ? x.log_softmax(s.dim) : x.softmax(s.dim);
    case Op::Narrow: return x.narrow(s.dim, s.start, step_end(s, x) - s.start);
    case Op::Matmul: {
      const Tensor& y = other(1);
      return x.matmul(s.flag ? y.transpose(y.dim() - 2, y.dim() - 1) : y);
    }
    case Op::LayerNorm:
      return layer_norm(x, {x.size(-1)}, s.args.size() > 1 ? other(1) : Tensor(),
                        s.args.size() > 2 ? other(2) : Tensor(), s.scalar);
    case Op::Composite:
      if (s.fn == 0) return rms_norm(x, {x.size(-1)}, Tensor(), s.scalar);
      if (s.fn == 1) return cumsum(x, s.dim);
      return roll(x, {s.start}, {s.dim});
    case Op::ReduceBroadcast: {
      const Tensor red = s.fn == 0   ? x.sum({s.dim}, s.keepdim)
                         : s.fn == 1 ? x.mean({s.dim}, s.keepdim)
                                     : x.amax({s.dim}, s.keepdim);
      const Tensor& a = s.flag ? red : x;
      const Tensor& b = s.flag ? x : red;
      switch (BinaryFn(s.fn2)) {
        case BinaryFn::Add:
          return a.add(b);
        case BinaryFn::Sub:
          return a.sub(b);
        default:
          return a.mul(b);
      }
    }
    case Op::Layer: return apply_layer_step(s, v);
    case Op::kCount:
      break;
  }
  EMBER_CHECK(false, "program_gen: bad step");
  return x;
}

std::vector<Tensor> run_all(const Program& p, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> v = inputs;
  for (const Step& s : p.steps) v.push_back(apply_step(s, v));
  return v;
}

std::vector<Tensor> run_program(const Program& p, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> v = run_all(p, inputs), out;
  for (int o : p.outputs) out.push_back(v[size_t(o)]);
  return out;
}

double value_bound(const Program& p, int v) {
  size_t ni = p.inputs.size();
  return size_t(v) < ni ? 2 * p.inputs[size_t(v)].range : p.steps[size_t(v) - ni].bound;
}

namespace {

// A strided input is every other element along its last dim of a twice-as-wide tensor.
Tensor strided_view(const Tensor& buffer) {
  const int64_t last = buffer.dim() - 1;
  return buffer.slice(last, 1, buffer.size(last), 2);
}

// Each input's data at a call's sizes: the whole buffer a strided input views.
std::vector<Tensor> make_buffers(const Program& p, uint64_t data_seed, size_t call) {
  Rng r(data_seed * 0x9E3779B97F4A7C15ull + 1);
  std::vector<Tensor> out;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const InputSpec& in = p.inputs[i];
    Shape shape = input_shape(p, i, call);
    if (in.strided && !shape.empty()) shape.back() *= 2;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    if (in.dtype == DType::Int64) {
      std::vector<int64_t> v(static_cast<size_t>(n));
      for (auto& e : v) e = uniform(r, -4, 4);
      out.push_back(from_vector(v, shape, DType::Int64));
    } else {
      std::vector<double> v(static_cast<size_t>(n));
      for (auto& e : v) e = std::uniform_real_distribution<double>(-in.range, in.range)(r);
      out.push_back(from_vector(v, shape, in.dtype));
    }
  }
  return out;
}

}  // namespace

Shape input_shape(const Program& p, size_t i, size_t call) {
  const InputSpec& in = p.inputs[i];
  Shape shape = in.shape;
  for (size_t d = 0; d < in.sym.size(); ++d)
    if (in.sym[d] >= 0) shape[d] = p.sizes.at(call).at(size_t(in.sym[d]));
  return shape;
}

std::vector<Tensor> make_inputs(const Program& p, uint64_t data_seed, size_t call) {
  std::vector<Tensor> out = make_buffers(p, data_seed, call);
  for (size_t i = 0; i < out.size(); ++i)
    if (p.inputs[i].strided && !p.inputs[i].shape.empty()) out[i] = strided_view(out[i]);
  return out;
}

TrainingArgs training_args(const Program& p, uint64_t data_seed,
                           const std::vector<Tensor>& weights, size_t call) {
  TrainingArgs t;
  std::vector<Tensor> buffers = make_buffers(p, data_seed, call);
  for (size_t i = 0; i < buffers.size(); ++i) {
    const bool strided = p.inputs[i].strided && !p.inputs[i].shape.empty();
    Tensor leaf = buffers[i];  // the whole buffer a strided input views
    if (is_floating(leaf.dtype())) leaf.requires_grad_(true);
    t.args.push_back(strided ? strided_view(leaf) : leaf);
    t.leaves.push_back(leaf);
  }
  t.args.insert(t.args.end(), weights.begin(), weights.end());
  return t;
}

std::vector<Tensor> loss_weights(const std::vector<Tensor>& outs, uint64_t data_seed) {
  Rng r(data_seed * 0xD1B54A32D192ED03ull + 7);
  std::vector<Tensor> w;
  for (const Tensor& o : outs) {
    if (!is_floating(o.dtype())) continue;
    std::vector<double> v(size_t(o.numel()));
    for (auto& e : v) e = std::uniform_real_distribution<double>(-1, 1)(r);
    w.push_back(from_vector(v, o.sizes(), o.dtype()));
  }
  return w;
}

std::vector<Tensor> run_training(const Program& p, const std::vector<Tensor>& args) {
  const size_t ni = p.inputs.size();
  std::vector<Tensor> outs =
      run_program(p, std::vector<Tensor>(args.begin(), args.begin() + long(ni)));
  Tensor loss = zeros({}, DType::Float64);
  size_t k = ni;
  for (const Tensor& o : outs)
    if (is_floating(o.dtype())) loss = loss + (o * args.at(k++)).sum().to(DType::Float64);
  outs.push_back(loss);
  return outs;
}

std::vector<Tensor> leaf_grads(const std::vector<Tensor>& leaves) {
  std::vector<Tensor> g;
  for (const Tensor& l : leaves) g.push_back(l.requires_grad() ? l.grad() : Tensor());
  return g;
}

// Whether some float output of p depends on a float input (so a loss over the outputs has
// grads w.r.t. the inputs).

}  // namespace ember::testgen
