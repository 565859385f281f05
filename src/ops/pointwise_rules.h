// Shape rules shared by pointwise op families.
#pragma once
#include "ops/op_impl.h"

namespace ember {

MetaList infer_broadcast(std::span<const Tensor> in, const Attrs& a);       // dtype of input 0
MetaList infer_broadcast_bool(std::span<const Tensor> in, const Attrs& a);  // bool output
MetaList infer_same(std::span<const Tensor> in, const Attrs& a);            // like input 0

}  // namespace ember
