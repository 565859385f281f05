// Matrix products: the matmul op (shape rule, grad) and the matmul, bmm and linear front ends.
// The op itself takes operands of at least 2 dims; PyTorch's 1-D conventions are views here.
#include "kernels/cpu/index.h"
#include "ops/frontend.h"

namespace ember {

namespace {
Shape batch_of(const Shape& s) {
  return Shape(s.begin(), s.end() - 2);
}

MetaList infer_matmul(std::span<const Tensor> in, const Attrs&) {
  const Shape &a = in[0].sizes(), &b = in[1].sizes();
  Shape s = broadcast_pair(batch_of(a), batch_of(b), "matmul");
  s.push_back(a[a.size() - 2]);
  s.push_back(b[b.size() - 1]);
  return {TensorMeta{s, {}, 0, in[0].dtype()}};
}

Tensor mm(const Tensor& a, const Tensor& b) {
  return dispatch1(OpId::matmul, {a, b});
}
Tensor mT(const Tensor& t) {
  return t.transpose(-2, -1);
}

// d(a @ b) = g @ b^T for a and a^T @ g for b, summed over the batch dims each was broadcast
// along. Transposed operands are views: the kernel hands them to BLAS as trans flags.
std::vector<Tensor> grad_matmul(const GradCtx& c) {
  const Tensor& g = c.grads[0];
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  Tensor ga, gb;
  if (c.needs_grad[0]) ga = sum_to_size(mm(g, mT(b)), a.sizes());
  if (c.needs_grad[1]) {
    if (b.dim() == 2 && a.dim() >= 2) {
      // One weight shared by every batch entry (a linear layer): a single gemm over the
      // stacked rows instead of a batched product and a sum. A transposed b (weight.t()) gets
      // its grad as the transpose of g^T a, so the weight's own grad comes out contiguous.
      const int64_t k = a.sizes().back(), n = g.sizes().back();
      const int64_t rows = shape_numel(Shape(a.sizes().begin(), a.sizes().end() - 1));
      const Tensor a2 = a.reshape({rows, k}), g2 = g.reshape({rows, n});
      gb = !b.is_contiguous() && b.t().is_contiguous() ? mm(g2.t(), a2).t() : mm(a2.t(), g2);
    } else {
      gb = sum_to_size(mm(mT(a), g), b.sizes());
    }
  }
  return {ga, gb};
}

// Common dtype of the two operands of a product; bool has none.
DType product_dtype(const Tensor& a, const Tensor& b, const char* op) {
  EMBER_CHECK(a.defined() && b.defined(), op, ": undefined tensor argument");
  DType t = promote_types(a.dtype(), b.dtype());
  EMBER_CHECK(t != DType::Bool, op, ": not supported for bool tensors (shapes ", a.shape_str(),
              " and ", b.shape_str(), "); cast with .to() first");
  return t;
}
}  // namespace

const OpImpl op_impl_matmul{infer_matmul, cpu::matmul, grad_matmul, 0b11};

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = autocast_lower(a_in), b = autocast_lower(b_in);
  DType t = product_dtype(a, b, "matmul");
  EMBER_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dim, got ",
              "shapes ", a.shape_str(), " and ", b.shape_str(), "; use mul for scalars");
  // A 1-D first operand is a row vector, a 1-D second one a column; the added dim goes away.
  const bool row = a.dim() == 1, col = b.dim() == 1;
  Tensor x = cast_to(a, t), y = cast_to(b, t);
  if (row) x = x.unsqueeze(0);
  if (col) y = y.unsqueeze(1);
  const int64_t ka = x.sizes()[x.dim() - 1], kb = y.sizes()[y.dim() - 2];
  EMBER_CHECK(ka == kb, "matmul: shapes ", a.shape_str(), " and ", b.shape_str(),
              " cannot be multiplied (", ka, " != ", kb,
              "): the last dim of the first must "
              "equal the ",
              col ? "size of the second" : "second-to-last dim of the second");
  const Shape ba = batch_of(x.sizes()), bb = batch_of(y.sizes());
  const size_t nb = std::max(ba.size(), bb.size());
  for (size_t i = 0; i < nb; ++i) {
    int64_t u = i < nb - ba.size() ? 1 : ba[i - (nb - ba.size())];
    int64_t v = i < nb - bb.size() ? 1 : bb[i - (nb - bb.size())];
    EMBER_CHECK(u == v || u == 1 || v == 1, "matmul: the batch dims of shapes ", a.shape_str(),
                " and ", b.shape_str(), " cannot be broadcast (", u, " vs ", v, ")");
  }
  Tensor r = mm(x, y);
  if (row) r = r.squeeze(-2);
  if (col) r = r.squeeze(-1);
  return r;
}

Tensor Tensor::matmul(const Tensor& o) const {
  return ember::matmul(*this, o);
}

Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = autocast_lower(a_in), b = autocast_lower(b_in);
  DType t = product_dtype(a, b, "bmm");
  EMBER_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expects two 3-D tensors [B, M, K] and ",
              "[B, K, N], got shapes ", a.shape_str(), " and ", b.shape_str(),
              "; use matmul for other ranks");
  EMBER_CHECK(a.sizes()[0] == b.sizes()[0], "bmm: batch sizes differ: shapes ", a.shape_str(),
              " and ", b.shape_str(), " (bmm does not broadcast; use matmul)");
  EMBER_CHECK(a.sizes()[2] == b.sizes()[1], "bmm: shapes ", a.shape_str(), " and ", b.shape_str(),
              " cannot be multiplied (", a.sizes()[2], " != ", b.sizes()[1], ")");
  return mm(cast_to(a, t), cast_to(b, t));
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  EMBER_CHECK(x.defined() && weight.defined(), "linear: undefined tensor argument");
  EMBER_CHECK(weight.dim() == 2, "linear: the weight must be 2-D [out_features, in_features], ",
              "got shape ", weight.shape_str());
  EMBER_CHECK(x.dim() >= 1 && x.sizes().back() == weight.sizes()[1], "linear: input of shape ",
              x.shape_str(), " does not match a weight of shape ", weight.shape_str(),
              " (the input's last dim must be in_features = ", weight.sizes()[1], ")");
  Tensor y = matmul(x, weight.t());
  if (!bias.defined()) return y;
  EMBER_CHECK(bias.dim() <= 1 && (bias.numel() == weight.sizes()[0] || bias.numel() == 1),
              "linear: the bias must have shape [", weight.sizes()[0], "], got ", bias.shape_str());
  return y + autocast_lower(bias);
}

}  // namespace ember
