// Helpers for the graph tests: metadata shorthands, bit-exact comparison, and a recorder
// that captures what a function runs into a graph while computing it for real.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <unordered_map>

#include "dispatch/dispatcher.h"
#include "ember/ember.h"
#include "graph/graph.h"

namespace ember::graph_test {

using graph::Graph;
using graph::InputKind;
using graph::Node;
using graph::Value;

inline TensorMeta meta(const Shape& sizes, DType dtype = DType::Float32) {
  return TensorMeta{sizes, {}, 0, dtype};
}

inline Attrs dims_attrs(const Shape& dims, bool keepdim = false) {
  Attrs a;
  a.dims = dims;
  a.keepdim = keepdim;
  return a;
}

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Same sizes, dtype and bytes (element by element in logical order).
inline void expect_bit_equal(const Tensor& a, const Tensor& b, const std::string& what = "") {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  NoGradGuard no_grad;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  const size_t n = size_t(a.numel()) * dtype_size(a.dtype());
  EXPECT_EQ(std::memcmp(ca.data_ptr(), cb.data_ptr(), n), 0) << what << " values differ";
}

// Records the ops a function runs into a graph while computing them for real: a small
// stand-in for the capture layer, so that tests can compare interpret() with eager calls.
class Recorder : public CaptureHook {
 public:
  Graph g;
  std::vector<Tensor> inputs;  // the tensors lifted to graph inputs, in order

  Value* value_of(const Tensor& t, InputKind kind = InputKind::Captured) {
    auto it = values_.find(t.impl());
    if (it != values_.end()) return it->second;
    Value* v = g.add_input(TensorMeta{t.sizes(), t.strides(), t.storage_offset(), t.dtype()},
                           t.device(), kind, "");
    inputs.push_back(t);
    values_[t.impl()] = v;
    return v;
  }

  std::vector<Tensor> on_op(OpId op, std::span<const Tensor> ins, const Attrs& attrs) override {
    std::vector<Value*> vs;
    for (const Tensor& t : ins) vs.push_back(value_of(t));
    std::vector<Tensor> outs = run_backend(op, ins, attrs);
    Node* n = g.add_node(op, vs, attrs, {});
    for (size_t j = 0; j < outs.size(); ++j) {
      // The shape rule run on metadata alone agrees with the real result.
      const TensorMeta& m = n->outputs[j]->meta;
      EXPECT_EQ(m.sizes, outs[j].sizes()) << op_name(op);
      EXPECT_EQ(m.dtype, outs[j].dtype()) << op_name(op);
      EXPECT_EQ(m.strides, outs[j].strides()) << op_name(op);
      EXPECT_EQ(m.offset, outs[j].storage_offset()) << op_name(op);
      values_[outs[j].impl()] = n->outputs[j];
      keep_.push_back(outs[j]);  // so that no later tensor reuses the address
    }
    return outs;
  }
  void on_inplace(OpId op, std::span<const Tensor>, const Tensor&, const Attrs&) override {
    ADD_FAILURE() << "unexpected in-place " << op_name(op);
  }
  void on_sync(const Tensor&, const char* why, ember::SourceLocation) override {
    ADD_FAILURE() << "unexpected sync " << why;
  }

 private:
  std::unordered_map<const TensorImpl*, Value*> values_;
  std::vector<Tensor> keep_;
};

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Records fn(args) with args as the first graph inputs (in order) and fn's results as the
// outputs.
inline void record(Recorder& r, const Fn& fn, const std::vector<Tensor>& args) {
  for (const Tensor& a : args) r.value_of(a, InputKind::Argument);
  set_capture_hook(&r);
  std::vector<Tensor> outs;
  try {
    outs = fn(args);
  } catch (...) {
    set_capture_hook(nullptr);
    throw;
  }
  set_capture_hook(nullptr);
  std::vector<Value*> vs;
  for (const Tensor& t : outs) vs.push_back(r.value_of(t));
  r.g.set_outputs(vs);
  r.g.validate();
}

}  // namespace ember::graph_test
