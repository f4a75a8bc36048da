"""torch.nn's losses, functional and as modules, with PyTorch's arguments: the class
axis at dim 1 (tgweb's own losses take it last), class weights, ignore_index,
label_smoothing, reduction. A weight table made from data is a data constant."""

from __future__ import annotations

from ... import ops
from ...ir import TraceError, user_site
from .module import Module


def _reduce(loss, reduction: str):
    if reduction == "mean":
        return ops.mean(loss)
    if reduction == "sum":
        return ops.sum(loss)
    if reduction == "none":
        return loss
    raise TraceError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}", user_site())


def _class_last(x):
    """[N, C, d1, ...] -> [N, d1, ..., C] (tgweb's losses take the class axis last)."""
    return ops.permute(x, (0,) + tuple(range(2, x.ndim)) + (1,)) if x.ndim > 2 else x


def _weighted(logp, target, weight, ignore_index: int, smoothing: float, reduction: str):
    """PyTorch's weighted loss at class indices, class axis last: each term scaled by
    its target's weight, 'mean' divided by the kept targets' total weight."""
    c = logp.shape[-1]
    w = ops.reshape(weight, (c,))
    kept = ops.where(target == ignore_index, 0.0, 1.0)
    w_t = ops.sum(ops.one_hot(ops.where(target == ignore_index, 0, target), c) * w, -1) * kept
    # the nll term goes through tgweb's own loss, which range-checks the targets
    loss = ops.nll_loss(logp, target, ignore_index, "none") * w_t * (1.0 - smoothing)
    if smoothing:
        loss = loss - ops.sum(logp * w, -1) * kept * (smoothing / c)
    if reduction == "mean":
        return ops.sum(loss) / ops.sum(w_t)
    return _reduce(loss, reduction)


def _check_smoothing(s) -> float:
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0.0 <= s <= 1.0:
        raise TraceError(f"label_smoothing must be a number in [0, 1], got {s!r}", user_site())
    return float(s)


def cross_entropy(
    input,  # noqa: A002 - PyTorch's names
    target,
    weight=None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
):
    """F.cross_entropy: input [N, C, ...] or [C]; target class indices [N, ...] or
    probabilities of input's shape."""
    smoothing = _check_smoothing(label_smoothing)
    x = _class_last(input)
    if target.dtype == "f32":  # class probabilities
        p = _class_last(target)
        if smoothing:
            p = p * (1.0 - smoothing) + smoothing / x.shape[-1]
        terms = ops.log_softmax(x, -1) * p
        if weight is not None:
            terms = terms * ops.reshape(weight, (x.shape[-1],))
        return _reduce(-ops.sum(terms, -1), reduction)
    if weight is None:
        return ops.cross_entropy(x, target, ignore_index, smoothing, reduction)
    return _weighted(ops.log_softmax(x, -1), target, weight, ignore_index, smoothing, reduction)


def nll_loss(
    input,  # noqa: A002
    target,
    weight=None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
):
    x = _class_last(input)
    if weight is None:
        return ops.nll_loss(x, target, ignore_index, reduction)
    return _weighted(x, target, weight, ignore_index, 0.0, reduction)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):  # noqa: A002
    """-(y log x + (1 - y) log(1 - x)), each log clamped at -100 as PyTorch does."""
    loss = -(
        target * ops.maximum(ops.log(input), -100.0)
        + (1.0 - target) * ops.maximum(ops.log(1.0 - input), -100.0)
    )
    return _reduce(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy_with_logits(
    input,  # noqa: A002
    target,
    weight=None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    pos_weight=None,
):
    """(1 - y) x + (1 + (pos_weight - 1) y) softplus(-x): stable for any x."""
    scale = 1.0 if pos_weight is None else (pos_weight - 1.0) * target + 1.0
    loss = (1.0 - target) * input + ops.softplus(-input) * scale
    return _reduce(loss if weight is None else loss * weight, reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):  # noqa: A002
    return _reduce(ops.abs(input - target), reduction)


def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):  # noqa: A002
    loss = ops.square(input - target)
    return _reduce(loss if weight is None else loss * weight, reduction)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta: float = 1.0):  # noqa: A002
    d = ops.abs(input - target)
    if beta == 0.0:
        return _reduce(d, reduction)
    return _reduce(ops.where(d < beta, ops.square(d) * (0.5 / beta), d - 0.5 * beta), reduction)


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0, weight=None):  # noqa: A002
    d = ops.abs(input - target)
    loss = ops.where(d < delta, ops.square(d) * 0.5, (d - 0.5 * delta) * delta)
    return _reduce(loss if weight is None else loss * weight, reduction)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target: bool = False):  # noqa: A002
    """target (log target) times (log target - input); 0 where the target is 0, as PyTorch's
    xlogy. reduction 'batchmean' divides the sum by the batch size."""
    if log_target:
        loss = ops.exp(target) * (target - input)
    else:
        safe = ops.where(target > 0, target, 1.0)
        loss = ops.where(target > 0, target * ops.log(safe), 0.0) - target * input
    if reduction == "batchmean":
        return ops.sum(loss) / (input.shape[0] if input.ndim else 1)
    return _reduce(loss, reduction)


def _loss_module(name: str, fn, *names, **defaults):
    """A loss Module: forward(input, target) is fn with its settings by keyword."""

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        vals = dict(zip(names, args)) | {k: v for k, v in kwargs.items() if k in names}
        for k in names:
            v = vals.get(k, defaults.get(k))
            if k in ("weight", "pos_weight") and v is not None:
                self.register_buffer(k, v)  # a state-dict entry, as in PyTorch
            else:
                setattr(self, k, v)

    def forward(self, input, target):  # noqa: A002
        return fn(input, target, **{k: getattr(self, k) for k in names})

    return type(name, (Module,), {"__init__": __init__, "forward": forward})


_R = {"reduction": "mean"}
CrossEntropyLoss = _loss_module(
    "CrossEntropyLoss", cross_entropy, "weight", "size_average", "ignore_index", "reduce", "reduction",
    "label_smoothing", ignore_index=-100, label_smoothing=0.0, **_R,
)  # fmt: skip
NLLLoss = _loss_module(
    "NLLLoss",
    nll_loss,
    "weight",
    "size_average",
    "ignore_index",
    "reduce",
    "reduction",
    ignore_index=-100,
    **_R,
)
BCELoss = _loss_module("BCELoss", binary_cross_entropy, "weight", "size_average", "reduce", "reduction", **_R)
BCEWithLogitsLoss = _loss_module(
    "BCEWithLogitsLoss", binary_cross_entropy_with_logits, "weight", "size_average", "reduce", "reduction",
    "pos_weight", **_R,
)  # fmt: skip
L1Loss = _loss_module("L1Loss", l1_loss, "size_average", "reduce", "reduction", **_R)
MSELoss = _loss_module("MSELoss", mse_loss, "size_average", "reduce", "reduction", **_R)
SmoothL1Loss = _loss_module(
    "SmoothL1Loss", smooth_l1_loss, "size_average", "reduce", "reduction", "beta", beta=1.0, **_R
)
HuberLoss = _loss_module("HuberLoss", huber_loss, "reduction", "delta", delta=1.0, **_R)
KLDivLoss = _loss_module(
    "KLDivLoss", kl_div, "size_average", "reduce", "reduction", "log_target", log_target=False, **_R
)
