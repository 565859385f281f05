// Fusion planning (see pointwise_fusion.h): pointwise trees, row, gemm and attention groups.
#include "compiler/pointwise_fusion.h"

#include <algorithm>
#include <cmath>

#include "compiler/decompositions.h"
#include "compiler/pattern_groups.h"
#include "core/shape.h"
#include "graph/graph_util.h"

namespace ember::compiler {

namespace {

// Each op computes in its output dtype from inputs of that dtype, but for the comparisons (two
// inputs of one dtype, a bool result) and where (a bool condition); see dtypes_fit.
const FusedOpInfo* table_entry(OpId op) {
  static const FusedOpInfo eq{"Eq", 2}, ne{"Ne", 2}, lt{"Lt", 2}, le{"Le", 2}, gt{"Gt", 2},
      ge{"Ge", 2}, where{"Where", 3};
  static const FusedOpInfo add{"Add", 2}, sub{"Sub", 2}, mul{"Mul", 2}, div{"Div", 2},
      neg{"Neg", 1}, clone{"Identity", 1}, exp{"Exp", 1}, log{"Log", 1}, sqrt{"Sqrt", 1},
      rsqrt{"Rsqrt", 1}, pow{"Pow", 2}, abs{"Abs", 1}, sign{"Sign", 1}, maximum{"Maximum", 2},
      minimum{"Minimum", 2}, tanh{"Tanh", 1}, sigmoid{"Sigmoid", 1}, relu{"Relu", 1},
      silu{"Silu", 1};
  switch (op) {
    case OpId::add: return &add;
    case OpId::sub: return &sub;
    case OpId::mul: return &mul;
    case OpId::div: return &div;
    case OpId::neg: return &neg;
    case OpId::clone: return &clone;
    case OpId::exp: return &exp;
    case OpId::log: return &log;
    case OpId::sqrt: return &sqrt;
    case OpId::rsqrt: return &rsqrt;
    case OpId::pow: return &pow;
    case OpId::abs: return &abs;
    case OpId::sign: return &sign;
    case OpId::maximum: return &maximum;
    case OpId::minimum: return &minimum;
    case OpId::tanh: return &tanh;
    case OpId::sigmoid: return &sigmoid;
    case OpId::relu: return &relu;
    case OpId::silu: return &silu;
    case OpId::eq: return &eq;
    case OpId::ne: return &ne;
    case OpId::lt: return &lt;
    case OpId::le: return &le;
    case OpId::gt: return &gt;
    case OpId::ge: return &ge;
    case OpId::where: return &where;
    default: return nullptr;
  }
}

// Pointwise kernels: float16 and bfloat16 are stored as bits and computed in float (values
// inside a fused group are not rounded to 16 bits between ops, only the group's output).
bool supported_dtype(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Int32 || t == DType::Int64 ||
         t == DType::Float16 || t == DType::BFloat16 || t == DType::Bool;
}

bool is_comparison(OpId op) {
  return op == OpId::eq || op == OpId::ne || op == OpId::lt || op == OpId::le ||
         op == OpId::gt || op == OpId::ge;
}

// Whether n's inputs have the dtypes its fused form takes: the output's, but for comparisons
// (both inputs alike, a bool result) and where (a bool condition, then two of the output's).
bool dtypes_fit(const graph::Node& n) {
  const DType out = n.outputs[0]->meta.dtype;
  if (is_comparison(n.op))
    return out == DType::Bool && n.inputs[0]->meta.dtype == n.inputs[1]->meta.dtype &&
           supported_dtype(n.inputs[0]->meta.dtype);
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const DType want = n.op == OpId::where && k == 0 ? DType::Bool : out;
    if (n.inputs[k]->meta.dtype != want) return false;
  }
  return true;
}

// Whether a node reads a dtype other than the one it computes (a cast, a comparison, where).
bool mixes_dtypes(const graph::Node& n) {
  for (const graph::Value* v : n.inputs)
    if (v->meta.dtype != n.outputs[0]->meta.dtype) return true;
  return false;
}

// Whether n can be one step of a generated loop over its output's elements.
// slice_backward along the last dim: zeros but for the incoming grad's columns, which a
// fused kernel computes per column (a select), so a sum of such grads (the backward of a split)
// becomes one pass instead of zero-filled buffers, copies and adds.
bool fusable_slice_backward(const graph::Node& n, const Device& target) {
  if (n.op != OpId::slice_backward) return false;
  const graph::Value& g = *n.inputs[0];
  const graph::Value& out = *n.outputs[0];
  const Shape& os = out.meta.sizes;
  if (os.empty() || n.attrs.dim != int64_t(os.size()) - 1 || n.attrs.step < 1) return false;
  if (!supported_dtype(out.meta.dtype) || out.device != target || g.device != target) return false;
  if (g.meta.dtype != out.meta.dtype || g.meta.sizes.size() != os.size()) return false;
  for (size_t d = 0; d + 1 < os.size(); ++d)
    if (g.meta.sizes[d] != os[d]) return false;
  return out.meta.offset == 0 && out.meta.strides == contiguous_strides(os);
}

// A cast to a floating dtype from any non-bool one, same shape: a conversion in the loop. (To
// integers or bool the eager conversions' out-of-range behaviour is left to the eager kernel.)
bool fusable_cast(const graph::Node& n, const Device& target) {
  if (n.op != OpId::cast || n.inputs.size() != 1) return false;
  const graph::Value& in = *n.inputs[0];
  const graph::Value& out = *n.outputs[0];
  if (!is_floating(out.meta.dtype) || !supported_dtype(out.meta.dtype)) return false;
  if (!supported_dtype(in.meta.dtype) || in.device != target || out.device != target) return false;
  if (in.meta.sizes != out.meta.sizes) return false;
  return out.meta.offset == 0 && out.meta.strides == contiguous_strides(out.meta.sizes);
}

// dropout_rng on a GPU (its draws from the rng_state input, int64 [2]): a draw per element from
// the element's offset in the result, which is contiguous and of x's shape, so the kernel's flat
// offset (every node of a group has the group's shape).
bool fusable_dropout(const graph::Node& n, const Device& target) {
  if (n.op != OpId::dropout_rng || n.inputs.size() != 2 || target.type != DeviceType::CUDA)
    return false;
  const graph::Value &x = *n.inputs[0], &rng = *n.inputs[1], &out = *n.outputs[0];
  return is_floating(out.meta.dtype) && supported_dtype(out.meta.dtype) &&
         x.meta.dtype == out.meta.dtype && x.meta.sizes == out.meta.sizes &&
         rng.meta.dtype == DType::Int64 && shape_numel(rng.meta.sizes) == 2 &&
         contiguous(rng) && x.device == target && rng.device == target && out.device == target &&
         n.attrs.value > 0 && n.attrs.value < 1 && contiguous(out);
}

// Kernels fuse only values on `target`, the device the plan is for.
bool can_fuse(const graph::Node& n, const Device& target) {
  if (fusable_slice_backward(n, target)) return true;
  if (fusable_dropout(n, target)) return true;
  if (fusable_cast(n, target)) return true;
  const OpInfo& info = op_info(n.op);
  if (info.kind != OpKind::Pointwise || !info.has(kFusable)) return false;
  if (!fused_op_info(n) || n.outputs.size() != 1) return false;
  const graph::Value& out = *n.outputs[0];
  if (!supported_dtype(out.meta.dtype) || out.device != target) return false;
  if (out.meta.offset != 0 || out.meta.strides != contiguous_strides(out.meta.sizes)) return false;
  if (!dtypes_fit(n)) return false;
  for (const graph::Value* v : n.inputs) {
    if (v->device != target) return false;
    // Inputs broadcast to the output: right-aligned, each dim equal or 1.
    if (v->meta.sizes.size() > out.meta.sizes.size()) return false;
    const size_t lead = out.meta.sizes.size() - v->meta.sizes.size();
    for (size_t d = 0; d < v->meta.sizes.size(); ++d)
      if (v->meta.sizes[d] != 1 && v->meta.sizes[d] != out.meta.sizes[lead + d]) return false;
  }
  return true;
}

// Whether a row group's result v, read by a consumer whose output has the row op's input shape
// `out`, gives the consumer's element (r, j) the row kernel's value for row r: v has the whole
// shape (one value per element), or is one value per row broadcast along the last dim only,
// [..., 1] (a row reduction with keepdim). Without keepdim, broadcasting aligns the sums with
// the trailing dims instead (x - x.sum(-1) on [n, n] is x[i][j] - s[j]): that stays two
// kernels, the consumer reading the sums through its own index arithmetic.
bool row_aligned(const graph::Value& v, const Shape& out) {
  const Shape& s = v.meta.sizes;
  if (s == out) return true;
  if (s.size() > out.size()) return false;
  const size_t lead = out.size() - s.size();
  for (size_t d = 0; d < out.size(); ++d) {
    const int64_t vd = d < lead ? 1 : s[d - lead];
    if (d + 1 == out.size() ? vd != 1 : vd != out[d]) return false;
  }
  return true;
}

// Whether a group holds values of more than one dtype (a cast, a comparison, where): row,
// attention and gemm kernels compute in one element type, so such a group is never merged with
// one of them.
bool has_mixed_dtypes(const FusionGroup& grp) {
  for (const graph::Node* n : grp.nodes)
    if (mixes_dtypes(*n)) return true;
  return false;
}

bool has_slice_backward(const FusionGroup& grp) {
  for (const graph::Node* n : grp.nodes)
    if (n->op == OpId::slice_backward) return true;
  return false;
}

// Whether n's result is "input a + something": add with either operand, sub with a on the left.
bool adds_operand(const graph::Node& n, size_t a) {
  return n.op == OpId::add || (n.op == OpId::sub && a == 0);
}

// Whether n is a matmul the compiler runs as a gemm with its consumers as the epilogue:
// float32/float64 matrices on the CPU with a contiguous result.
bool can_run_gemm_group(const graph::Node& n) {
  if (n.op != OpId::matmul) return false;
  const graph::Value& out = *n.outputs[0];
  const DType t = out.meta.dtype;
  if ((t != DType::Float32 && t != DType::Float64) || out.device != kCPU || !contiguous(out))
    return false;
  for (const graph::Value* v : n.inputs)
    if (v->meta.dtype != t || v->device != kCPU || v->meta.sizes.size() < 2) return false;
  return shape_numel(out.meta.sizes) > 0;
}

// Whether n is a matmul of same-dtype float matrices whose batch dims equal its output's (no
// broadcasting), the form an attention kernel reads through strides.
bool attention_matmul(const graph::Node* n) {
  if (!n || n->op != OpId::matmul) return false;
  const graph::Value& out = *n->outputs[0];
  const DType t = out.meta.dtype;
  if ((t != DType::Float32 && t != DType::Float64) || out.device != kCPU) return false;
  const size_t nd = out.meta.sizes.size();
  if (nd < 2) return false;
  for (const graph::Value* v : n->inputs) {
    if (v->meta.dtype != t || v->device != kCPU || v->meta.sizes.size() != nd) return false;
    for (size_t d = 0; d + 2 < nd; ++d)
      if (v->meta.sizes[d] != out.meta.sizes[d]) return false;
  }
  return shape_numel(out.meta.sizes) > 0;
}

// Turns a softmax row group into an attention group when its neighbours allow (see
// FusionGroup::attn_qk); `uses` counts the readers of each value (graph outputs count 2),
// `is_output` marks the graph's outputs, and `gemm_product` the products another group already
// runs as its gemm (`softmax @ v + r`: that group's epilogue reads the probabilities, which an
// attention kernel keeps to itself).
void try_attention(FusionGroup& grp, const std::vector<int>& uses,
                   const std::vector<std::vector<const graph::Node*>>& readers,
                   const std::vector<char>& is_output, const std::vector<char>& gemm_product) {
  const graph::Node& row = *grp.row;
  if (row.op != OpId::softmax || !grp.extra_outputs.empty() || grp.output != row.outputs[0])
    return;
  const graph::Value* p = row.outputs[0];
  // The probabilities feed softmax @ v only, or also leave the graph once (a training forward
  // saves them for the backward): then the kernel writes them out as well.
  const bool probs_out = is_output[size_t(p->id)] && uses[size_t(p->id)] == 3;
  if ((uses[size_t(p->id)] != 1 && !probs_out) || readers[size_t(p->id)].size() != 1) return;
  const graph::Node* pv = readers[size_t(p->id)][0];
  if (!attention_matmul(pv) || pv->inputs[0] != p || pv->inputs[1] == p) return;
  if (gemm_product[size_t(pv->outputs[0]->id)]) return;
  if (!contiguous(*pv->outputs[0])) return;
  // The scores: a matmul product read by exactly one node of the group.
  const graph::Node* qk = nullptr;
  for (const graph::Value* v : grp.inputs) {
    if (attention_matmul(v->producer) && uses[size_t(v->id)] == 1 &&
        v->meta.sizes == p->meta.sizes) {
      qk = v->producer;
      break;
    }
  }
  if (!qk) return;
  grp.attn_qk = qk;
  grp.attn_pv = pv;
  grp.output = pv->outputs[0];
  if (probs_out) grp.extra_outputs.push_back(p);
  grp.inputs.erase(std::find(grp.inputs.begin(), grp.inputs.end(), qk->outputs[0]));
  // The result permuted and copied contiguous, with the last dim staying last: written in place.
  const graph::Value* y = pv->outputs[0];
  if (uses[size_t(y->id)] == 1 && readers[size_t(y->id)].size() == 1) {
    const graph::Node* perm = readers[size_t(y->id)][0];
    const graph::Value* yp = perm->outputs[0];
    const size_t nd = y->meta.sizes.size();
    if (perm->op == OpId::permute && perm->attrs.dims.size() == nd &&
        perm->attrs.dims.back() == int64_t(nd) - 1 && uses[size_t(yp->id)] == 1 &&
        readers[size_t(yp->id)].size() == 1) {
      const graph::Node* copy = readers[size_t(yp->id)][0];
      if (copy->op == OpId::clone && contiguous(*copy->outputs[0]) &&
          copy->outputs[0]->meta.dtype == y->meta.dtype) {
        grp.out_permute = perm;
        grp.out_copy = copy;
        grp.output = copy->outputs[0];
      }
    }
  }
  // A causal mask: the row input is add(x, triu(full(-inf), diag)) with the mask [.., L, S].
  const graph::Node* add = row.inputs[0]->producer;
  if (!add || add->op != OpId::add) return;
  for (const graph::Value* m : add->inputs) {
    const graph::Node* tri = m->producer;
    if (!tri || tri->op != OpId::triu || !tri->inputs[0]->producer) continue;
    const graph::Node* fill = tri->inputs[0]->producer;
    if (fill->op != OpId::full || !(std::isinf(fill->attrs.value) && fill->attrs.value < 0))
      continue;
    const Shape& ms = m->meta.sizes;
    const Shape& ps = p->meta.sizes;
    if (ms.size() < 2 || ms[ms.size() - 1] != ps.back() || ms[ms.size() - 2] != ps[ps.size() - 2])
      continue;
    if (shape_numel(ms) != ms[ms.size() - 1] * ms[ms.size() - 2]) continue;
    grp.causal = true;
    grp.causal_diag = tri->attrs.start;
  }
}

// Checks a planned group against the forms codegen has kernels for, so that a plan mixing them
// fails here, naming the nodes, instead of in generated code that reads a value it never
// loads: a product is the gemm's only in a pointwise kernel (the epilogue reads it from the
// output; any other kernel would need it as an input), and a slice_backward's grad, read at
// other columns than the node's own, is a buffer (an input), never a value of the kernel
// (pattern groups, whose emitters place such grads themselves, aside).
void check_form(const FusionGroup& grp) {
  auto where = [&] {
    std::string s;
    for (const graph::Node* n : grp.nodes) s += "\n  " + graph::node_str(*n);
    return s;
  };
  EMBER_CHECK(!grp.gemm || grp.elementwise(), "compiler: a ", grp.row ? "row" : "non-pointwise",
              " kernel planned as the epilogue of ", graph::node_str(*grp.gemm),
              ", which only a pointwise kernel can be; its nodes:", where());
  if (grp.attn_bwd || grp.ln_bwd) return;  // patterns: their emitters read their own way
  for (const graph::Node* n : grp.nodes)
    if (n->op == OpId::slice_backward)
      EMBER_CHECK(!grp.row && std::find(grp.inputs.begin(), grp.inputs.end(), n->inputs[0]) !=
                                  grp.inputs.end(),
                  "compiler: ", graph::node_str(*n),
                  " planned with its grad computed in the kernel; its nodes:", where());
}

// Drops the groups that no step runs: a group is run at its output's node, and an attention
// group takes over the copy of its result, which the greedy grouping made a kernel of its own.
// Only whole groups go: a node left in a dropped group would run nowhere.
void drop_groups_never_run(const graph::Graph& g, FusionPlan& plan) {
  const auto& nodes = g.nodes();
  std::vector<int> index(plan.groups.size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int k = plan.group_of_node[i];
    if (k >= 0 && nodes[i]->outputs[0] == plan.groups[size_t(k)].output) index[size_t(k)] = 0;
  }
  std::vector<FusionGroup> kept;
  for (size_t k = 0; k < plan.groups.size(); ++k)
    if (index[k] == 0) {
      index[k] = int(kept.size());
      kept.push_back(std::move(plan.groups[k]));
    }
  for (size_t i = 0; i < nodes.size(); ++i) {
    int& k = plan.group_of_node[i];
    if (k < 0) continue;
    EMBER_CHECK(index[size_t(k)] >= 0, "compiler: ", graph::node_str(*nodes[i]),
                " is planned in a kernel that never runs");
    k = index[size_t(k)];
  }
  plan.groups = std::move(kept);
}

// Checks the plan as a whole: every value a step reads from a buffer (an eager node's
// operands, a kernel's inputs, its gemm's or attention's operands, the graph's outputs and
// write-backs) is one a step writes (a graph input, an eager node's result, a kernel's output
// or extra outputs). A value that one kernel keeps to itself (a fused intermediate, a product
// its epilogue reads in place, attention probabilities) read by another step fails here,
// naming both, instead of running on a buffer nobody wrote.
void check_plan(const graph::Graph& g, const FusionPlan& plan) {
  const auto& nodes = g.nodes();
  std::vector<char> written(g.values().size(), 0);
  for (const graph::Value* v : g.inputs()) written[size_t(v->id)] = 1;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (plan.group_of_node[i] < 0)
      for (const graph::Value* v : nodes[i]->outputs) written[size_t(v->id)] = 1;
  for (const FusionGroup& grp : plan.groups) {
    written[size_t(grp.output->id)] = 1;
    for (const graph::Value* v : grp.extra_outputs) written[size_t(v->id)] = 1;
  }
  auto need = [&](const graph::Value* v, const std::string& reader) {
    if (written[size_t(v->id)]) return;
    std::string producer = v->producer ? graph::node_str(*v->producer) : "no node";
    EMBER_FAIL("compiler: ", reader, " reads %", v->id, " (made by ", producer,
               "), which the fusion plan keeps inside a kernel; a compiler bug, please report "
               "it with the graph");
  };
  for (size_t i = 0; i < nodes.size(); ++i)
    if (plan.group_of_node[i] < 0)
      for (const graph::Value* v : nodes[i]->inputs) need(v, graph::node_str(*nodes[i]));
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const FusionGroup& grp = plan.groups[k];
    const std::string reader = "the kernel of " + graph::node_str(*grp.nodes.back());
    std::vector<const graph::Value*> reads = grp.inputs;
    if (grp.gemm) reads.insert(reads.end(), grp.gemm->inputs.begin(), grp.gemm->inputs.end());
    if (grp.attn_qk)
      reads.insert(reads.end(),
                   {grp.attn_qk->inputs[0], grp.attn_qk->inputs[1], grp.attn_pv->inputs[1]});
    for (const graph::Value* v : reads) need(v, reader);
  }
  for (const graph::Value* v : g.outputs()) need(v, "the graph's outputs");
  for (const graph::Mutation& m : g.mutations()) need(m.value, "a write-back");
}

}  // namespace

bool contiguous(const graph::Value& v) {
  return v.meta.offset == 0 && v.meta.strides == contiguous_strides(v.meta.sizes);
}

bool can_fuse_row(const graph::Node& n, const Device& target) {
  if (!has_row_decomposition(n)) return false;  // the table says which ops are row ops
  const graph::Value& x = *n.inputs[0];
  const graph::Value& out = *n.outputs[0];
  const DType t = out.meta.dtype;
  const Shape& s = x.meta.sizes;
  // x itself may be strided: generated code reads it through index arithmetic.
  if ((t != DType::Float32 && t != DType::Float64) || x.meta.dtype != t) return false;
  if (x.device != target || out.device != target || s.empty() || shape_numel(s) == 0)
    return false;
  if (!contiguous(out)) return false;
  const int64_t last = int64_t(s.size()) - 1;
  if (n.op == OpId::sum || n.op == OpId::mean)  // one value per row
    return n.attrs.dims == std::vector<int64_t>{last};
  if (out.meta.sizes != s) return false;
  if (n.op != OpId::layer_norm) return n.attrs.dim == last;  // softmax, log_softmax
  if (n.attrs.shape.size() != 1 || n.attrs.shape[0] != s.back()) return false;
  for (size_t k = 1; k < n.inputs.size(); ++k) {
    const graph::Value& p = *n.inputs[k];
    if (p.meta.dtype != t || p.device != target || p.meta.sizes != Shape{s.back()} || !contiguous(p))
      return false;
  }
  for (size_t k = 1; k < n.outputs.size(); ++k)
    if (n.outputs[k]->meta.dtype != t || !contiguous(*n.outputs[k])) return false;
  return true;
}

const FusedOpInfo* fused_op_info(const graph::Node& n) {
  if (n.op == OpId::gelu) {  // 16-bit results: the 16-bit form, as the eager kernels
    static const FusedOpInfo exact{"Gelu", 1}, half{"GeluHalf", 1}, approx{"GeluTanh", 1};
    const DType t = n.outputs[0]->meta.dtype;
    if (n.attrs.flag) return &approx;
    return t == DType::BFloat16 || t == DType::Float16 ? &half : &exact;
  }
  if (n.op == OpId::slice_backward) {  // generated as a select, not a functor call
    static const FusedOpInfo select{"", 1};
    return &select;
  }
  if (n.op == OpId::cast) {  // generated as a conversion (and a rounding to 16 bits)
    static const FusedOpInfo convert{"", 1};
    return &convert;
  }
  if (n.op == OpId::gelu_backward) {  // (grad, x); 16-bit results as gelu's
    static const FusedOpInfo exact{"GeluBackward", 2}, half{"GeluBackwardHalf", 2},
        approx{"GeluTanhBackward", 2};
    const DType t = n.outputs[0]->meta.dtype;
    if (n.attrs.flag) return &approx;
    return t == DType::BFloat16 || t == DType::Float16 ? &half : &exact;
  }
  return table_entry(n.op);
}

bool can_fuse_columns(const graph::Node& n) {
  if (n.op != OpId::sum && n.op != OpId::mean) return false;
  const graph::Value& x = *n.inputs[0];
  const graph::Value& out = *n.outputs[0];
  const DType t = out.meta.dtype;
  if ((t != DType::Float32 && t != DType::Float64) || x.meta.dtype != t) return false;
  if (x.device != kCPU || out.device != kCPU || !contiguous(x) || !contiguous(out)) return false;
  const int64_t nd = int64_t(x.meta.sizes.size());
  if (nd < 2 || shape_numel(x.meta.sizes) == 0) return false;
  std::vector<int64_t> lead(size_t(nd - 1));
  for (int64_t d = 0; d < nd - 1; ++d) lead[size_t(d)] = d;
  return n.attrs.dims == lead;
}

FusionPlan plan_fusion(const graph::Graph& g, Device device) {
  const auto& nodes = g.nodes();
  std::vector<int> uses(g.values().size(), 0);
  for (const auto& n : nodes)
    for (const graph::Value* v : n->inputs) ++uses[size_t(v->id)];
  // Results the graph hands out or writes back must exist as buffers.
  for (const graph::Value* v : g.outputs()) uses[size_t(v->id)] += 2;
  for (const graph::Mutation& m : g.mutations()) uses[size_t(m.value->id)] += 2;

  FusionPlan plan;
  plan.group_of_node.assign(nodes.size(), -1);
  std::vector<int> group_of_value(g.values().size(), -1);
  std::vector<std::vector<const graph::Node*>> readers(g.values().size());
  for (const auto& n : nodes)
    for (const graph::Value* v : n->inputs) readers[size_t(v->id)].push_back(n.get());

  // Groups for known subgraphs first: their nodes are taken out of the greedy grouping below.
  std::vector<char> taken(nodes.size(), 0);
  plan_pattern_groups(g, uses, readers, taken, plan.groups);

  for (size_t i = 0; i < nodes.size(); ++i) {
    const graph::Node& n = *nodes[i];
    if (taken[i]) continue;
    if (can_fuse_columns(n)) {  // a kernel of its own: producers stay materialized
      FusionGroup group;
      group.col = &n;
      group.nodes.push_back(&n);
      group.output = n.outputs[0];
      plan.groups.push_back(std::move(group));
      continue;
    }
    const bool row = can_fuse_row(n, device);
    if (!row && !can_fuse(n, device)) continue;
    FusionGroup group;
    if (row) {
      group.row = &n;
      for (size_t k = 1; k < n.outputs.size(); ++k)
        if (uses[size_t(n.outputs[k]->id)] > 0) group.extra_outputs.push_back(n.outputs[k]);
    }
    // Absorb each producer group whose root feeds only this node and matches its shape (a row
    // op only the producer of its row input). One row op per group; a row group whose
    // statistics are read elsewhere stays the root of its kernel. A slice_backward reads its
    // grad at other columns than its own (shifted, strided): the grad stays a buffer, an input.
    const size_t absorbable = row ? 1 : n.op == OpId::slice_backward ? 0 : n.inputs.size();
    for (size_t a = 0; a < absorbable; ++a) {
      const graph::Value* v = n.inputs[a];
      // A row op absorbs producers of its input's shape (a reduction's output is smaller).
      const Shape& full = row ? n.inputs[0]->meta.sizes : n.outputs[0]->meta.sizes;
      const bool same_shape = v->meta.sizes == full;
      // A matmul product read only here: the group becomes a gemm group around it. A batched
      // product starts one only through an add, so that scores scaled or masked on their way
      // to a softmax stay an attention group's. A row kernel has no gemm: a row group that
      // reads a product reads it as an input.
      if (!row && !group.gemm && !group.row && !mixes_dtypes(n) && v->producer &&
          same_shape && uses[size_t(v->id)] == 1 && can_run_gemm_group(*v->producer) &&
          (adds_operand(n, a) || v->producer->inputs[1]->meta.sizes.size() == 2)) {
        group.gemm = v->producer;
        continue;
      }
      const int src = group_of_value[size_t(v->id)];
      // A row group is absorbed by consumers over whole rows: its row op's input shape, reading
      // the group's result row for row (a row reduction's one value per row broadcast back
      // along the row).
      const bool row_consumer =
          src >= 0 && plan.groups[size_t(src)].row &&
          n.outputs[0]->meta.sizes == plan.groups[size_t(src)].row->inputs[0]->meta.sizes &&
          row_aligned(*v, n.outputs[0]->meta.sizes);
      if (src >= 0 && uses[size_t(v->id)] == 1 &&
          (plan.groups[size_t(src)].row ? row_consumer : same_shape)) {
        FusionGroup& other = plan.groups[size_t(src)];
        // On the GPU, a row group's float result cast to a 16-bit float: the cast is the
        // kernel's store (the group computes in the row op's type and rounds when it stores),
        // so the float result is never written. Its statistics stay outputs; nothing joins the
        // group after the cast (it mixes dtypes).
        const bool row_cast = other.row && !other.gemm && device.type == DeviceType::CUDA &&
                              n.op == OpId::cast && group.nodes.empty() &&
                              is_16bit_float(n.outputs[0]->meta.dtype) &&
                              !has_mixed_dtypes(other) && row_consumer;
        if (!row_cast && other.row && (group.row || group.gemm || !other.extra_outputs.empty()))
          continue;
        // Row and attention kernels load inputs element for element: no slice_backward there.
        const bool rows = row || group.row || other.row;
        if (rows && (has_slice_backward(other) || has_slice_backward(group) ||
                     n.op == OpId::slice_backward))
          continue;
        // A gemm group's epilogue is pointwise, with one product.
        if (other.gemm && (row || group.gemm || group.row)) continue;
        // Casts, comparisons and where stay out of row, attention and gemm kernels (one element
        // type each).
        const bool typed = rows || group.gemm || other.gemm;
        if (!row_cast && typed &&
            (has_mixed_dtypes(other) || has_mixed_dtypes(group) || mixes_dtypes(n)))
          continue;
        if (other.gemm) group.gemm = other.gemm;
        if (other.row) group.row = other.row;
        if (row_cast)  // the statistics the row op hands out
          group.extra_outputs.insert(group.extra_outputs.end(), other.extra_outputs.begin(),
                                     other.extra_outputs.end());
        group.nodes.insert(group.nodes.end(), other.nodes.begin(), other.nodes.end());
        other.nodes.clear();  // emptied: dropped below
        group_of_value[size_t(v->id)] = -1;
      }
    }
    group.nodes.push_back(&n);
    group.output = n.outputs[0];
    group_of_value[size_t(n.outputs[0]->id)] = int(plan.groups.size());
    plan.groups.push_back(std::move(group));
  }

  // Drop the absorbed groups, order nodes by graph position, and collect external inputs.
  std::vector<int> index_of(g.values().size(), -1);  // node position by output value id
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const graph::Value* v : nodes[i]->outputs) index_of[size_t(v->id)] = int(i);
  std::vector<FusionGroup> kept;
  for (FusionGroup& grp : plan.groups) {
    if (grp.nodes.empty()) continue;
    std::sort(grp.nodes.begin(), grp.nodes.end(), [&](const graph::Node* a, const graph::Node* b) {
      return index_of[size_t(a->outputs[0]->id)] < index_of[size_t(b->outputs[0]->id)];
    });
    std::vector<const graph::Value*> inside;
    for (const graph::Node* n : grp.nodes)
      inside.insert(inside.end(), n->outputs.begin(), n->outputs.end());
    if (grp.gemm) inside.push_back(grp.gemm->outputs[0]);  // the product is not read as input
    for (const graph::Node* n : grp.nodes)
      for (const graph::Value* v : n->inputs)
        if (std::find(inside.begin(), inside.end(), v) == inside.end() &&
            std::find(grp.inputs.begin(), grp.inputs.end(), v) == grp.inputs.end())
          grp.inputs.push_back(v);
    for (const graph::Node* n : grp.nodes)
      plan.group_of_node[size_t(index_of[size_t(n->outputs[0]->id)])] = int(kept.size());
    finish_pattern_group(grp, index_of);
    check_form(grp);
    if (grp.gemm)
      plan.group_of_node[size_t(index_of[size_t(grp.gemm->outputs[0]->id)])] = int(kept.size());
    kept.push_back(std::move(grp));
  }
  plan.groups = std::move(kept);

  std::vector<char> is_output(g.values().size(), 0), gemm_product(g.values().size(), 0);
  for (const graph::Value* v : g.outputs()) is_output[size_t(v->id)] = 1;
  for (const FusionGroup& grp : plan.groups)
    if (grp.gemm) gemm_product[size_t(grp.gemm->outputs[0]->id)] = 1;
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    FusionGroup& grp = plan.groups[k];
    if (!grp.row) continue;
    try_attention(grp, uses, readers, is_output, gemm_product);
    if (!grp.attn_qk) continue;
    for (const graph::Node* mm : {grp.attn_qk, grp.attn_pv, grp.out_permute, grp.out_copy})
      if (mm) plan.group_of_node[size_t(index_of[size_t(mm->outputs[0]->id)])] = int(k);
  }
  drop_groups_never_run(g, plan);
  check_plan(g, plan);
  return plan;
}

std::string group_ops_str(const FusionGroup& g) {
  std::string d = "(";
  for (size_t i = 0; i < g.nodes.size(); ++i)
    d += (i ? ", " : "") + std::string(op_name(g.nodes[i]->op));
  return d + ") -> " + graph::value_type_str(*g.output);
}

}  // namespace ember::compiler
