"""torch.nn.functional over tgweb's ops; the losses take the class axis at dim 1, as
PyTorch's do (tgweb's own take it last)."""

from __future__ import annotations

from ... import ops as _ops

relu, gelu, silu, sigmoid, tanh = _ops.relu, _ops.gelu, _ops.silu, _ops.sigmoid, _ops.tanh
softmax, log_softmax, leaky_relu, hardtanh = _ops.softmax, _ops.log_softmax, _ops.leaky_relu, _ops.hardtanh
conv2d, max_pool2d, avg_pool2d, layer_norm_core = (
    _ops.conv2d,
    _ops.max_pool2d,
    _ops.avg_pool2d,
    _ops.layer_norm,
)
one_hot, pad_axis = _ops.one_hot, _ops.pad


def linear(input, weight, bias=None):  # noqa: A002 - PyTorch's names
    y = _ops.matmul(input, _ops.transpose(weight))
    return y if bias is None else y + bias


def embedding(input, weight):  # noqa: A002
    return _ops.embedding(weight, input)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):  # noqa: A002
    return _ops.layer_norm(input, weight, bias, eps)


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False):  # noqa: A002
    return _ops.dropout(input, p, training)


def scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False, scale=None
):
    """PyTorch's fused attention: tgweb's one kernel family (tgweb/ops/attention.py)."""
    return _ops.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale)


# the rest of the everyday set (extra.py), the losses (losses.py), normalization (norm.py)
from .extra import (  # noqa: E402,F401
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    avg_pool1d,
    celu,
    conv1d,
    conv_transpose1d,
    elu,
    hardsigmoid,
    hardswish,
    interpolate,
    logsigmoid,
    max_pool1d,
    mish,
    pad,
    pixel_shuffle,
    pixel_unshuffle,
    prelu,
    relu6,
    selu,
    softplus,
    softsign,
    tanhshrink,
    upsample,
)
from .losses import (  # noqa: E402,F401
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    kl_div,
    l1_loss,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)
from .norm import batch_norm, group_norm, instance_norm  # noqa: E402,F401

conv_transpose2d = _ops.conv_transpose2d
