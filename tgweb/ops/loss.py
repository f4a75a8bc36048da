"""The losses, composed of other ops: cross_entropy, nll_loss, mse_loss. Class axis
last: logits [..., C] with integer targets [...] (shape logits.shape[:-1]), unlike
PyTorch's [N, C, ...]."""

from __future__ import annotations

from ..ir import OpError, Tensor, make
from .base import as_tensor, op, require_float
from .softmax import log_softmax


def _reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    from .reduce import mean, sum

    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return sum(loss)
    return loss


def _check_reduction(reduction) -> None:
    if reduction not in ("mean", "sum", "none"):
        raise OpError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _check_class_targets(logp: Tensor, targets: Tensor) -> None:
    if targets.dtype != "i32":
        raise OpError(
            f"targets must be class indices (i32) or probabilities (f32), "
            f"got {targets.dtype} of shape {targets.shape}"
        )
    if targets.shape != logp.shape[:-1]:
        raise OpError(
            f"targets of shape {targets.shape} do not match logits {logp.shape} "
            f"(class axis last: targets must have shape {logp.shape[:-1]})"
        )


def _picked_nll(logp: Tensor, targets: Tensor, ignore_index: int) -> Tensor:
    """-logp[..., target]: the targets go to take_along_axis as they are, so the
    trainer range-checks them on the host; an ignored (out-of-range) one picks 0."""
    from .shape import reshape, unsqueeze

    picked = make("take_along_axis", (logp, unsqueeze(targets, -1)), axis=logp.ndim - 1, ignore=ignore_index)
    return -reshape(picked, targets.shape)


def _class_loss(logp: Tensor, targets: Tensor, ignore_index: int, smoothing: float, reduction: str) -> Tensor:
    """PyTorch's loss at class-index targets: (1 - e) * nll + e * mean over classes of
    -logp, 0 where the target is ignore_index; 'mean' divides by the targets kept."""
    from .elementwise import where
    from .reduce import mean, sum

    _check_class_targets(logp, targets)
    loss = _picked_nll(logp, targets, ignore_index)
    if smoothing:
        loss = loss * (1.0 - smoothing) - mean(logp, -1) * smoothing
    dropped = targets == ignore_index
    loss = where(dropped, 0.0, loss)
    if reduction == "mean":
        return sum(loss) / sum(where(dropped, 0.0, 1.0))  # all ignored: 0 / 0 = NaN, as in PyTorch
    return _reduce_loss(loss, reduction)


def _prob_loss(logp: Tensor, probs: Tensor, smoothing: float, reduction: str) -> Tensor:
    """sum over classes of -p * logp, with p mixed towards uniform by label smoothing."""
    from .reduce import sum

    if probs.shape != logp.shape:
        raise OpError(f"probability targets must have the logits' shape {logp.shape}, got {probs.shape}")
    if smoothing:
        probs = probs * (1.0 - smoothing) + smoothing / logp.shape[-1]
    return _reduce_loss(-sum(probs * logp, -1), reduction)


def _loss_args(x: Tensor, name: str, reduction, ignore_index=-100, smoothing=0.0) -> None:
    _check_reduction(reduction)
    require_float(name, x)
    if x.ndim < 1:
        raise OpError(f"{name} needs a class axis, got shape {x.shape}")
    if not isinstance(ignore_index, int) or isinstance(ignore_index, bool):
        raise OpError(f"ignore_index must be an int, got {ignore_index!r}")
    if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float)) or not 0.0 <= smoothing <= 1.0:
        raise OpError(f"label_smoothing must be a number in [0, 1], got {smoothing!r}")


@op
def cross_entropy(
    logits, target, ignore_index: int = -100, label_smoothing: float = 0.0, reduction: str = "mean"
) -> Tensor:
    """Softmax cross-entropy with torch.nn.functional.cross_entropy's options, but the
    class axis LAST: logits [..., C]; target [...] i32 class indices, or f32 class
    probabilities [..., C]. Targets equal to ignore_index add nothing, and 'mean'
    averages over the others; label_smoothing mixes the target with the uniform
    distribution. reduction 'mean', 'sum' or 'none' (shape [...])."""
    logits, target = as_tensor(logits), as_tensor(target)
    _loss_args(logits, "cross_entropy", reduction, ignore_index, label_smoothing)
    logp = log_softmax(logits, -1)
    if target.dtype == "f32":
        return _prob_loss(logp, target, float(label_smoothing), reduction)
    return _class_loss(logp, target, ignore_index, float(label_smoothing), reduction)


@op
def nll_loss(log_probs, target, ignore_index: int = -100, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of log-probabilities [..., C] (class axis LAST) at
    integer targets [...]; ignore_index and reduction as in cross_entropy."""
    log_probs, target = as_tensor(log_probs), as_tensor(target)
    _loss_args(log_probs, "nll_loss", reduction, ignore_index)
    return _class_loss(log_probs, target, ignore_index, 0.0, reduction)


@op
def mse_loss(input, target, reduction: str = "mean") -> Tensor:  # noqa: A002 - PyTorch's name
    """Mean squared error; input and target must have the same shape."""
    from .elementwise import square

    a, b = as_tensor(input), as_tensor(target)
    _check_reduction(reduction)
    require_float("mse_loss", a, b)
    if a.shape != b.shape:
        raise OpError(f"input {a.shape} and target {b.shape} must have the same shape")
    return _reduce_loss(square(a - b), reduction)
