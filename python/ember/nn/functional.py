"""ember.nn.functional: the layers as functions over tensors. Each one is an op of ember's C++
core (include/ember/ops.h), so it records autograd and is captured by ember.compile."""
from .. import _ember

linear = _ember.linear
embedding = _ember.embedding
layer_norm = _ember.layer_norm
cross_entropy = _ember.cross_entropy
scaled_dot_product_attention = _ember.scaled_dot_product_attention


def dropout(input, p=0.5, training=True):
    """Zeroes elements with probability p and scales the rest by 1/(1-p) when training."""
    return _ember.dropout(input, p, training)


def gelu(input, approximate="none"):
    """GELU, exact ("none") or the tanh approximation ("tanh")."""
    return input.gelu(approximate=approximate)


def softmax(input, dim):
    return input.softmax(dim)


def log_softmax(input, dim):
    return input.log_softmax(dim)


def relu(input):
    return input.relu()
