"""torch.nn.functional over tgweb's ops; the losses take the class axis at dim 1, as
PyTorch's do (tgweb's own take it last)."""

from __future__ import annotations

from ... import ops as _ops
from ...ir import TraceError, user_site

relu, gelu, silu, sigmoid, tanh, softplus = (
    _ops.relu,
    _ops.gelu,
    _ops.silu,
    _ops.sigmoid,
    _ops.tanh,
    _ops.softplus,
)
softmax, log_softmax, leaky_relu, hardtanh = _ops.softmax, _ops.log_softmax, _ops.leaky_relu, _ops.hardtanh
conv2d, max_pool2d, avg_pool2d, layer_norm_core = (
    _ops.conv2d,
    _ops.max_pool2d,
    _ops.avg_pool2d,
    _ops.layer_norm,
)
mse_loss, one_hot, pad_axis = _ops.mse_loss, _ops.one_hot, _ops.pad


def linear(input, weight, bias=None):  # noqa: A002 - PyTorch's names
    y = _ops.matmul(input, _ops.transpose(weight))
    return y if bias is None else y + bias


def embedding(input, weight):  # noqa: A002
    return _ops.embedding(weight, input)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):  # noqa: A002
    return _ops.layer_norm(input, weight, bias, eps)


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False):  # noqa: A002
    return _ops.dropout(input, p, training)


def _class_last(x, target):
    """x [N, C, d1, ...] -> [N, d1, ..., C] (tgweb's losses take the class axis last)."""
    if x.ndim > 2 and target.ndim == x.ndim - 1:
        x = _ops.permute(x, (0,) + tuple(range(2, x.ndim)) + (1,))
    return x


def cross_entropy(
    input,
    target,
    weight=None,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
):  # noqa: A002,E501
    if weight is not None:
        raise TraceError("cross_entropy: class weights are not supported", user_site())
    return _ops.cross_entropy(_class_last(input, target), target, ignore_index, label_smoothing, reduction)


def nll_loss(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean"):  # noqa: A002
    if weight is not None:
        raise TraceError("nll_loss: class weights are not supported", user_site())
    return _ops.nll_loss(_class_last(input, target), target, ignore_index, reduction)


def scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False, scale=None
):
    """PyTorch's fused attention: tgweb's one kernel family (tgweb/ops/attention.py)."""
    return _ops.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale)


from .norm import batch_norm, group_norm, instance_norm  # noqa: E402,F401
