// Fusion planning: which graph nodes the compiler runs as one generated kernel. A group is a tree
// of fusable pointwise nodes of one output shape and dtype whose intermediates are read only inside
// the tree; its root's value is the result that leaves the group. A gemm group is a pointwise group
// over a matmul's product (out = f(a @ b, ...), f pointwise: bias, residual, activation). A row
// group also holds one row op (decompositions.h: softmax, log_softmax, layer_norm, sum or mean over
// the last dim of a float tensor): the pointwise nodes feeding its input and those consuming its
// output run in the same per-row kernel. An attention group is a softmax row group with the
// matmuls around it (see attn_qk).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace ember::compiler {

// How generated code computes one op: a functor of kernels/functors.h and its arity.
struct FusedOpInfo {
  const char* functor;  // "Relu": called as ember::fn::Relu{}(...)
  int arity;
};
// The one table of ops the compiler can fuse; null for ops it leaves to the eager kernels.
// Some ops pick their functor from attrs (gelu's tanh flag).
const FusedOpInfo* fused_op_info(const graph::Node& n);

struct FusionGroup {
  std::vector<const graph::Node*> nodes;     // in graph order; the last is the root
  std::vector<const graph::Value*> inputs;   // values read from outside, first-use order
  const graph::Value* output = nullptr;      // the root's value
  // The row op of a row group (null for a pointwise group). Nodes it depends on run in the
  // row's first pass, the others after the row op, element by element.
  const graph::Node* row = nullptr;
  // layer_norm's mean/rstd values read outside the group, written after the output (a group
  // with these has the row op as its root, so readers run after the kernel).
  std::vector<const graph::Value*> extra_outputs;
  // A matmul whose product the group's nodes read (a gemm group): the gemm writes the product
  // into the output, and the generated kernel is its epilogue, run on each block of rows as
  // the product there completes, so bias, residual and activation cost no pass of their own.
  // Its value is not an input.
  const graph::Node* gemm = nullptr;
  // An attention group: a softmax row group whose row input is computed from the scores
  // attn_qk = matmul(q, k) and whose result feeds attn_pv = matmul(softmax, v) and nothing
  // else. The kernel runs both matmuls per batch matrix, the scores never leave the cache, and
  // `output` is attn_pv's result; when the softmax output is also a graph output (saved for a
  // backward), it is the group's one extra output and the kernel writes it too. With a causal
  // mask (the row input is x + triu(-inf, diag)), keys the mask sets to -inf are skipped: row i
  // reads keys j < i + causal_diag.
  const graph::Node* attn_qk = nullptr;
  const graph::Node* attn_pv = nullptr;
  bool causal = false;
  int64_t causal_diag = 0;
  // When attn_pv's result is only permuted and copied contiguous (the heads merged back,
  // `y.transpose(1, 2).contiguous()`), the kernel writes straight into that copy: these are
  // the permute and the copy, and `output` is the copy's value.
  const graph::Node* out_permute = nullptr;
  const graph::Node* out_copy = nullptr;
  // A column group: `col` is a sum or mean over every dim but the last of a contiguous float
  // tensor (a bias grad), the group's only node; the kernel sums each column over the rows.
  const graph::Node* col = nullptr;
  // An attention backward group: the grads of q, k and v through p = softmax(q k^T * scale + mask)
  // and y = p @ v, from y's grad g and the saved p, each batch matrix in one pass with
  // everything in cache (the traced backward's four matmuls and the softmax grad):
  //   dp = g @ v^T,  ds = p * (dp - rowsum(dp * p)) * scale,
  //   dv = p^T @ g,  dq = ds @ k,  dk^T = q^T @ ds.
  // inputs are {g [.., T, D], v^T [.., D, T], p [.., T, T], k [.., T, D], q}, q being q^T
  // [.., D, T] when k's grad is computed as dk^T = q^T @ ds, or q [.., T, D] when as
  // dk = ds^T @ q (`dk_transposed` says which); the results are the values of dq, dk (or dk^T)
  // and dv, `output` the last of them in graph order and extra_outputs the other two. Work past
  // a row's last nonzero probability (a causal mask's zeros) is skipped.
  // When the three grads are only merged back into one [B, T, 3 * H * D] grad of the packed
  // qkv (heads moved next to each other, each placed by a slice_backward, the three added),
  // the group takes those nodes too: `output` is the merged grad, which the kernel writes
  // directly (merged_start: where q's, k's and v's columns start), with no extra outputs.
  struct AttentionBackward {
    const graph::Node *dp = nullptr, *dv = nullptr, *dq = nullptr, *dk = nullptr;
    bool dk_transposed = true;
    const graph::Value* p = nullptr;  // the saved probabilities
    // Under attention dropout, the dropout's scaled mask m: the kernel uses p * m where the
    // forward used the dropped probabilities, and the grad of p is dp * m (a 6th input).
    const graph::Value* mask = nullptr;
    double scale = 1;
    const graph::Value* merged = nullptr;
    int64_t merged_start[3] = {0, 0, 0};  // q, k, v
  };
  std::optional<AttentionBackward> attn_bwd;
  // A layer_norm backward group (pattern_groups.cpp): dx, and the weight and bias grads when
  // the graph has them, in one pass over the rows. inputs are {x, mean, rstd, g, w} and, when
  // dx is added to another grad r, r; the kernel writes dx (or r + dx), and sums g * xhat and g
  // over the rows per thread, in blocks of 32 rows, adding the threads' sums in thread order.
  struct LayerNormBackward {
    const graph::Node* dx = nullptr;   // rstd * centered
    const graph::Node* add = nullptr;  // r + dx, or null
    const graph::Node* dw = nullptr;   // sum of g * xhat over the leading dims, or null
    const graph::Node* db = nullptr;   // sum of g over the leading dims, or null
    const graph::Value *x = nullptr, *mean = nullptr, *rstd = nullptr, *g = nullptr,
                       *w = nullptr, *r = nullptr;
  };
  std::optional<LayerNormBackward> ln_bwd;

  // Whether the kernel is one loop over the output's elements (a pointwise group, or a gemm
  // group's epilogue): not a row, attention, column or pattern kernel.
  bool elementwise() const { return !row && !attn_qk && !col && !attn_bwd && !ln_bwd; }
};

// Whether n is a row op the compiler generates: softmax, log_softmax or layer_norm over the
// last dim of a float32/float64 tensor on `target` (layer_norm's weight and bias contiguous, of
// x's dtype); decompositions.h says how each decomposes.
bool can_fuse_row(const graph::Node& n, const Device& target);
// Whether v is laid out contiguously from its buffer's start.
bool contiguous(const graph::Value& v);
// Whether n is a column reduction the compiler generates (FusionGroup::col).
bool can_fuse_columns(const graph::Node& n);

struct FusionPlan {
  std::vector<FusionGroup> groups;
  // Per node (by position in g.nodes()): its group, or -1 when it runs eagerly.
  std::vector<int> group_of_node;
};

// The plan for kernels on `device`. On a GPU (render_cuda.h) only pointwise and row groups
// form: matmuls, attention and column sums stay the eager kernels' (cuBLAS, the fused
// attention), their producers and consumers fused around them.
FusionPlan plan_fusion(const graph::Graph& g, Device device = kCPU);
// A group's ops and output for profiles and logs: "(add, relu) -> f32[4, 8]".
std::string group_ops_str(const FusionGroup& g);

}  // namespace ember::compiler
