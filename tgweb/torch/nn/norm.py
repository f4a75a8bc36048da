"""Normalization layers with PyTorch's arguments, parameter and buffer names:
BatchNorm1d/2d/3d, InstanceNorm1d/2d/3d, GroupNorm, and F.batch_norm, F.instance_norm,
F.group_norm. Running statistics are buffers the step updates (Module.register_state):
graph state written with the step, as optimizer state is, and read in eval mode."""

from __future__ import annotations

from ... import ops
from ...ir import TraceError, current_graph, prod, user_site
from ...nn import init as _init
from .module import Module


def update_buffer(buffer, value) -> None:
    """The step writes value into a buffer registered with Module.register_state (PyTorch
    updates it in place); later reads in the same forward see the new value."""
    g = current_graph()
    state = g.buffer_tensors.get(id(buffer)) if g is not None else None
    if state is None:
        raise TraceError(
            "a running-statistics buffer is updated, but it is not a buffer of the model being "
            "traced (register it with register_state on a module of that model)",
            user_site(),
        )
    value = ops.reshape(ops.cast(value, "f32"), state.shape)
    g.updates[state.attrs["name"]] = value
    buffer._cache = (g, value)


def _channel_shape(x) -> tuple[int, ...]:
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _affine(y, weight, bias):
    shape = _channel_shape(y)
    if weight is not None:
        y = y * ops.reshape(weight, shape)
    if bias is not None:
        y = y + ops.reshape(bias, shape)
    return y


def _blend(buffer, new, momentum) -> None:
    """running = (1 - momentum) * running + momentum * new (PyTorch's update)."""
    update_buffer(buffer, buffer * (1.0 - momentum) + new * momentum)


def batch_norm(
    input,  # noqa: A002 - PyTorch's names
    running_mean,
    running_var,
    weight=None,
    bias=None,
    training: bool = False,
    momentum=0.1,
    eps: float = 1e-5,
):
    """F.batch_norm over axis 1 of [N, C, *]: batch statistics while training (the running
    ones, when given, move towards them: the variance unbiased), else the running ones.
    momentum may be a tensor (BatchNorm's cumulative average when momentum=None)."""
    axes = (0,) + tuple(range(2, input.ndim))
    if not training:
        if running_mean is None or running_var is None:
            raise TraceError("batch_norm in eval mode needs running_mean and running_var", user_site())
        shape = _channel_shape(input)
        mean, var = ops.reshape(running_mean, shape), ops.reshape(running_var, shape)
        return _affine((input - mean) * ops.rsqrt(var + eps), weight, bias)
    n = prod(input.shape) // input.shape[1]
    if n <= 1:
        raise TraceError(
            f"batch_norm in training mode needs more than one value per channel, got input of "
            f"shape {tuple(input.shape)}",
            user_site(),
        )
    mean = ops.mean(input, axes, keepdims=True)
    d = input - mean
    var = ops.mean(d * d, axes, keepdims=True)
    if running_mean is not None:
        _blend(running_mean, ops.reshape(mean, (input.shape[1],)), momentum)
    if running_var is not None:
        _blend(running_var, ops.reshape(var, (input.shape[1],)) * (n / (n - 1)), momentum)
    return _affine(d * ops.rsqrt(var + eps), weight, bias)


def instance_norm(
    input,  # noqa: A002
    running_mean=None,
    running_var=None,
    weight=None,
    bias=None,
    use_input_stats: bool = True,
    momentum=0.1,
    eps: float = 1e-5,
):
    """F.instance_norm: each sample's channels normalized over their own positions; the
    running statistics, when given, move towards the batch's average of them."""
    n, c = input.shape[:2]
    if not use_input_stats:
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    rows = ops.reshape(input, (n, c, prod(input.shape[2:])))
    if rows.shape[-1] <= 1:
        raise TraceError(
            f"instance_norm needs more than one position per channel, got shape {tuple(input.shape)}",
            user_site(),
        )
    if running_mean is not None or running_var is not None:
        m = rows.shape[-1]
        mean = ops.mean(rows, -1)
        var = ops.mean(ops.square(rows - ops.unsqueeze(mean, -1)), -1) * (m / (m - 1))
        if running_mean is not None:
            _blend(running_mean, ops.mean(mean, 0), momentum)
        if running_var is not None:
            _blend(running_var, ops.mean(var, 0), momentum)
    y = ops.reshape(ops.layer_norm(rows, None, None, eps), input.shape)
    return _affine(y, weight, bias)


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):  # noqa: A002
    """F.group_norm: the channels of each sample in num_groups groups, each group
    normalized over its channels and positions, then a per-channel affine."""
    n, c = input.shape[:2]
    if c % num_groups:
        raise TraceError(f"group_norm: {c} channels do not divide into {num_groups} groups", user_site())
    rows = ops.reshape(input, (n, num_groups, prod(input.shape[1:]) // num_groups))
    return _affine(ops.reshape(ops.layer_norm(rows, None, None, eps), input.shape), weight, bias)


class _NormBase(Module):
    """Parameters weight (ones) and bias (zeros) when affine; buffers running_mean,
    running_var and num_batches_tracked when track_running_stats."""

    ranks: tuple[int, ...] = ()  # the input ranks the layer takes
    unbatched: int | None = None  # the rank of an input without its batch axis, if taken

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, **_):
        from ... import torch

        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = self.param((num_features,), _init.ones()) if affine else None
        self.bias = self.param((num_features,), _init.zeros()) if affine else None
        if track_running_stats:
            self.register_state("running_mean", torch.zeros(num_features))
            self.register_state("running_var", torch.ones(num_features))
            self.register_state("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def _check(self, x):
        if x.ndim not in self.ranks:
            raise TraceError(
                f"{type(self).__name__} takes input of rank {' or '.join(map(str, self.ranks))}, "
                f"got shape {tuple(x.shape)}",
                user_site(),
            )
        c = x.shape[0 if x.ndim == self.unbatched else 1]
        if c != self.num_features:
            raise TraceError(
                f"{type(self).__name__}({self.num_features}) got {c} channels (shape {tuple(x.shape)})",
                user_site(),
            )

    def _factor(self):
        """BatchNorm's momentum for this step's update; counts the step (PyTorch's order)."""
        if not (self.training and self.track_running_stats):
            return self.momentum if self.momentum is not None else 0.0
        count = self.num_batches_tracked + 1
        update_buffer(self.num_batches_tracked, count)
        return 1.0 / count if self.momentum is None else self.momentum

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}"


class _BatchNorm(_NormBase):
    def forward(self, input):  # noqa: A002
        self._check(input)
        factor = self._factor()
        use_batch = self.training or not self.track_running_stats
        track = not self.training or self.track_running_stats
        rm, rv = (self.running_mean, self.running_var) if track else (None, None)
        return batch_norm(input, rm, rv, self.weight, self.bias, use_batch, factor, self.eps)


class BatchNorm1d(_BatchNorm):
    ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    ranks = (4,)


class BatchNorm3d(_BatchNorm):
    ranks = (5,)


class _InstanceNorm(_NormBase):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False, track_running_stats=False, **_):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def forward(self, input):  # noqa: A002
        self._check(input)
        unbatched = input.ndim == self.unbatched
        x = ops.unsqueeze(input, 0) if unbatched else input
        factor = self.momentum if self.momentum is not None else 0.0  # PyTorch counts no batches here
        use_input = self.training or not self.track_running_stats
        y = instance_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, use_input, factor, self.eps
        )
        return ops.squeeze(y, 0) if unbatched else y


class InstanceNorm1d(_InstanceNorm):
    ranks = (2, 3)
    unbatched = 2


class InstanceNorm2d(_InstanceNorm):
    ranks = (3, 4)
    unbatched = 3


class InstanceNorm3d(_InstanceNorm):
    ranks = (4, 5)
    unbatched = 4


class GroupNorm(Module):
    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self.weight = self.param((num_channels,), _init.ones()) if affine else None
        self.bias = self.param((num_channels,), _init.zeros()) if affine else None

    def forward(self, input):  # noqa: A002
        return group_norm(input, self.num_groups, self.weight, self.bias, self.eps)
