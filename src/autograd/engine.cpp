// The backward engine: runs nodes in reverse creation order once all their grads arrived.
#include <queue>
#include <unordered_map>

#include "autograd/hooks.h"
#include "autograd/node.h"
#include "dispatch/dispatcher.h"
#include "ember/autograd.h"
#include "ember/ops.h"

namespace ember {

using autograd::Edge;
using autograd::Node;

namespace {
// Whether a grad being summed may take the next one in place: nothing else holds it or its
// memory (a grad passed through unchanged to two inputs, or a view of another tensor, is
// shared), the sum has its shape and dtype, and no capture records the step (a traced
// backward keeps the out-of-place sum). Saves a buffer per sum: the peak of a backward that
// adds up the grads of many views of one tensor (q, k and v split from one product).
bool owns_alone(const Tensor& slot, const Tensor& g) {
  const auto& impl = slot.impl_ptr();
  return capture_hook() == nullptr && impl.use_count() == 1 && impl->storage &&
         impl->storage.use_count() == 1 && slot.is_contiguous() && g.sizes() == slot.sizes() &&
         g.dtype() == slot.dtype() && g.device() == slot.device() && !g.is_symbolic();
}
}  // namespace

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads,
              bool retain_graph) {
  EMBER_CHECK(grads.empty() || grads.size() == outputs.size(), "backward: got ", grads.size(),
              " gradients for ", outputs.size(), " outputs");
  NoGradGuard no_grad;  // grad formulas do not record history (no higher-order grads)
  autograd::BackwardCallbacks callbacks;  // queue_backward_callback, run after the last node

  std::vector<std::pair<Edge, Tensor>> roots;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    EMBER_CHECK(out.requires_grad(), "backward: output ", i, " (shape ", out.shape_str(),
                ") does not require grad and has no grad_fn; did you call it under "
                "NoGradGuard, or forget requires_grad_() on the inputs?");
    Tensor g = grads.empty() ? Tensor() : grads[i];
    if (!g.defined()) {
      EMBER_CHECK(out.numel() == 1, "backward: output ", i, " has shape ", out.shape_str(),
                  "; a gradient can be implied only for a one-element output; pass the "
                  "gradient explicitly");
      g = ones_like(out);
    }
    EMBER_CHECK(g.sizes() == out.sizes(), "backward: gradient shape ", g.shape_str(),
                " does not match output shape ", out.shape_str());
    roots.push_back({autograd::gradient_edge(out), g});
  }

  // Count, for every reachable node, how many edges point at it.
  std::unordered_map<Node*, int> deps;
  {
    std::vector<Node*> stack;
    std::unordered_map<Node*, bool> seen;
    for (auto& [e, g] : roots)
      if (!seen[e.fn.get()]) {
        seen[e.fn.get()] = true;
        stack.push_back(e.fn.get());
      }
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const Edge& e : n->next_edges) {
        if (!e.valid()) continue;
        deps[e.fn.get()]++;
        if (!seen[e.fn.get()]) {
          seen[e.fn.get()] = true;
          stack.push_back(e.fn.get());
        }
      }
    }
  }

  struct Pending {
    std::shared_ptr<Node> node;
    std::vector<Tensor> grads;
  };
  std::unordered_map<Node*, Pending> buffers;
  auto add_grad = [&](const Edge& e, const Tensor& g) {
    Pending& p = buffers[e.fn.get()];
    if (!p.node) {
      p.node = e.fn;
      p.grads.resize(e.fn->output_meta.size());
    }
    Tensor& slot = p.grads[e.input_nr];
    if (!slot.defined()) slot = g;
    else if (owns_alone(slot, g)) slot.add_(g);
    else slot = slot + g;
  };
  auto later_first = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) {
    return a->sequence_nr < b->sequence_nr;
  };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>,
                      decltype(later_first)>
      ready(later_first);
  for (auto& [e, g] : roots) {
    bool first = !buffers.count(e.fn.get());
    add_grad(e, g);
    if (first && deps[e.fn.get()] == 0) ready.push(e.fn);
  }

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    Pending p = std::move(buffers[node.get()]);
    buffers.erase(node.get());
    node->released_after_apply = !retain_graph;
    std::vector<Tensor> in_grads = node->apply(std::move(p.grads));
    if (!retain_graph) node->release();
    for (size_t i = 0; i < node->next_edges.size() && i < in_grads.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      if (in_grads[i].defined()) add_grad(e, in_grads[i]);
      if (--deps[e.fn.get()] == 0) {
        // Run it even when no grad arrived, so the nodes behind it are released in turn.
        Pending& q = buffers[e.fn.get()];
        if (!q.node) {
          q.node = e.fn;
          q.grads.resize(e.fn->output_meta.size());
        }
        ready.push(e.fn);
      }
    }
  }
  callbacks.run();
}

}  // namespace ember
