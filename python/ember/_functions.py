"""Tensor methods that ember also offers as functions (ember.exp(x), ember.sum(x, 1) ...)."""

TENSOR_METHODS = [
    "add", "sub", "mul", "div", "pow", "neg", "exp", "log", "sqrt", "rsqrt", "abs", "tanh",
    "sigmoid", "relu", "silu", "sign", "clamp", "maximum", "minimum", "matmul", "eq", "ne", "lt",
    "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not", "masked_fill",
    "sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "var", "std", "logsumexp",
    "softmax", "log_softmax", "topk", "reshape", "permute", "transpose", "t", "squeeze",
    "unsqueeze", "flatten", "narrow", "select", "split", "chunk", "unbind", "index_select",
    "gather", "tril", "triu", "clone", "numel",
]
