"""torch.nn's everyday layers beyond the core set, composed from tgweb's ops: 1-D
convolutions and pools, adaptive pools, Upsample / F.interpolate (nearest, linear,
bilinear), PixelShuffle / PixelUnshuffle, padding (zeros, constant, reflection,
replication, circular), and activations as modules. A resize or an uneven adaptive
average is a product with a small interpolation matrix, a data constant of the graph
(tgweb.ops.constant)."""

from __future__ import annotations

import math

from ... import ops
from ...ir import TraceError, user_site
from ...nn import init as _init
from ...ops.constant import constant
from .module import Module


def _tuple(v, n: int, name: str) -> tuple:
    t = tuple(v) if isinstance(v, (tuple, list)) else (v,) * n
    if len(t) != n:
        raise TraceError(f"{name} must be an int or {n} ints, got {v!r}", user_site())
    return t


def _refuse(what: str, instead: str):
    raise TraceError(f"{what} is not supported; {instead}", user_site())


# ---------------------------------------------------------------- 1-D through the 2-D ops


def _as_2d(x):
    """[N, C, L] (or [C, L]) as [N, C, 1, L], and how to undo it."""
    if x.ndim == 2:
        return ops.unsqueeze(ops.unsqueeze(x, 0), 2), lambda y: ops.squeeze(ops.squeeze(y, 2), 0)
    if x.ndim != 3:
        raise TraceError(f"a 1-D layer takes [N, C, L] or [C, L], got shape {tuple(x.shape)}", user_site())
    return ops.unsqueeze(x, 2), lambda y: ops.squeeze(y, 2)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):  # noqa: A002
    x, back = _as_2d(input)
    pad = padding if isinstance(padding, str) else (0, _tuple(padding, 1, "padding")[0])
    w = ops.reshape(weight, (weight.shape[0], weight.shape[1], 1, weight.shape[2]))
    s, d = _tuple(stride, 1, "stride")[0], _tuple(dilation, 1, "dilation")[0]
    return back(ops.conv2d(x, w, bias, (1, s), pad, (1, d), groups))


def conv_transpose1d(
    input,  # noqa: A002
    weight,
    bias=None,
    stride=1,
    padding=0,
    output_padding=0,
    groups: int = 1,
    dilation=1,
):
    x, back = _as_2d(input)
    w = ops.reshape(weight, (weight.shape[0], weight.shape[1], 1, weight.shape[2]))
    s, p, o, d = (
        _tuple(v, 1, n)[0]
        for v, n in (
            (stride, "stride"),
            (padding, "padding"),
            (output_padding, "output_padding"),
            (dilation, "dilation"),
        )
    )
    return back(ops.conv_transpose2d(x, w, bias, (1, s), (0, p), (0, o), groups, (1, d)))


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):  # noqa: A002
    if dilation != 1 or return_indices:
        _refuse("max_pool1d with dilation or return_indices", "use dilation=1 and no indices")
    x, back = _as_2d(input)
    k = _tuple(kernel_size, 1, "kernel_size")[0]
    s = k if stride is None else _tuple(stride, 1, "stride")[0]
    return back(ops.max_pool2d(x, (1, k), (1, s), (0, _tuple(padding, 1, "padding")[0]), ceil_mode))


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):  # noqa: A002
    x, back = _as_2d(input)
    k = _tuple(kernel_size, 1, "kernel_size")[0]
    s = k if stride is None else _tuple(stride, 1, "stride")[0]
    p = _tuple(padding, 1, "padding")[0]
    return back(ops.avg_pool2d(x, (1, k), (1, s), (0, p), ceil_mode, count_include_pad))


# ---------------------------------------------------------------- matrices along an axis


def _along(x, axis: int, rows: list[list[float]]):
    """x with its axis (-1 or -2) mapped through the matrix rows [out][in] (a constant)."""
    m = constant([v for r in rows for v in r], (len(rows), len(rows[0])), "f32")
    if axis == -1:
        return ops.matmul(x, ops.transpose(m))
    return ops.matmul(m, x)


def _bins(n_in: int, n_out: int) -> list[tuple[int, int]]:
    """PyTorch's adaptive pooling windows: [floor(i n / m), ceil((i + 1) n / m))."""
    return [((i * n_in) // n_out, -(-((i + 1) * n_in) // n_out)) for i in range(n_out)]


def _adaptive(x, out: tuple, kind: str):
    """Adaptive pooling of the last len(out) axes; an even split is one pooling op."""
    spatial = x.shape[-len(out) :]
    out = tuple(s if o is None else o for s, o in zip(spatial, out))
    if all(s % o == 0 for s, o in zip(spatial, out)):
        k = tuple(s // o for s, o in zip(spatial, out))
        if len(out) == 1:
            return (max_pool1d if kind == "max" else avg_pool1d)(x, k[0])
        return (ops.max_pool2d if kind == "max" else ops.avg_pool2d)(x, k)
    for i, (n, m) in enumerate(zip(spatial, out)):
        axis = i - len(out)
        if kind == "avg":
            x = _along(
                x, axis, [[1.0 / (b - a) if a <= j < b else 0.0 for j in range(n)] for a, b in _bins(n, m)]
            )
        else:
            parts = [ops.amax(ops.narrow(x, axis, a, b - a), axis, keepdims=True) for a, b in _bins(n, m)]
            x = ops.concat(parts, axis % x.ndim)
    return x


def adaptive_avg_pool1d(input, output_size):  # noqa: A002
    return _adaptive(input, _tuple(output_size, 1, "output_size"), "avg")


def adaptive_avg_pool2d(input, output_size):  # noqa: A002
    return _adaptive(input, _tuple(output_size, 2, "output_size"), "avg")


def adaptive_max_pool1d(input, output_size, return_indices=False):  # noqa: A002
    if return_indices:
        _refuse("return_indices", "pool without indices")
    return _adaptive(input, _tuple(output_size, 1, "output_size"), "max")


def adaptive_max_pool2d(input, output_size, return_indices=False):  # noqa: A002
    if return_indices:
        _refuse("return_indices", "pool without indices")
    return _adaptive(input, _tuple(output_size, 2, "output_size"), "max")


# ---------------------------------------------------------------- interpolate


def _source(i: int, n_in: int, n_out: int, scale, align: bool) -> float:
    """Where output position i samples the input (PyTorch's coordinate rule)."""
    if align:
        return i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    step = 1.0 / scale if scale else n_in / n_out
    return max((i + 0.5) * step - 0.5, 0.0)


def _linear_rows(n_in: int, n_out: int, scale, align: bool) -> list[list[float]]:
    rows = []
    for i in range(n_out):
        src = _source(i, n_in, n_out, scale, align)
        a = min(int(math.floor(src)), n_in - 1)
        b, t = min(a + 1, n_in - 1), src - a
        r = [0.0] * n_in
        r[a] += 1.0 - t
        r[b] += t
        rows.append(r)
    return rows


def _nearest_rows(n_in: int, n_out: int, scale) -> list[list[float]]:
    step = 1.0 / scale if scale else n_in / n_out
    return [
        [1.0 if j == min(int(math.floor(i * step)), n_in - 1) else 0.0 for j in range(n_in)]
        for i in range(n_out)
    ]


def interpolate(
    input,  # noqa: A002
    size=None,
    scale_factor=None,
    mode: str = "nearest",
    align_corners=None,
    recompute_scale_factor=None,
    antialias: bool = False,
):
    """F.interpolate of [N, C, L] or [N, C, H, W]: nearest (integer factors are one
    broadcast), linear / bilinear (a product with an interpolation matrix per axis)."""
    dims = input.ndim - 2
    if dims not in (1, 2) or antialias:
        _refuse(
            f"interpolate of a rank-{input.ndim} input or with antialias", "resize [N, C, L] or [N, C, H, W]"
        )
    if mode != "nearest" and mode != ("linear", "bilinear")[dims - 1]:
        _refuse(
            f"interpolate mode {mode!r} of a rank-{input.ndim} input",
            "use nearest, linear (1-D), bilinear (2-D)",
        )
    if (size is None) == (scale_factor is None):
        raise TraceError("interpolate: give exactly one of size and scale_factor", user_site())
    spatial = input.shape[2:]
    scales = _tuple(scale_factor, dims, "scale_factor") if scale_factor is not None else (None,) * dims
    out = (
        _tuple(size, dims, "size")
        if size is not None
        else tuple(int(math.floor(n * s)) for n, s in zip(spatial, scales))
    )
    if recompute_scale_factor:
        scales = (None,) * dims
    integer = all(o % n == 0 for o, n in zip(out, spatial)) and all(
        s in (None, o // n) for s, o, n in zip(scales, out, spatial)
    )
    if mode == "nearest" and dims == 2 and integer:
        return ops.upsample_nearest2d(input, tuple(o // n for o, n in zip(out, spatial)))
    x = input
    for i, (n, m, s) in enumerate(zip(spatial, out, scales)):
        rows = _nearest_rows(n, m, s) if mode == "nearest" else _linear_rows(n, m, s, bool(align_corners))
        x = _along(x, i - dims, rows)
    return x


upsample = interpolate


def pixel_shuffle(input, upscale_factor: int):  # noqa: A002
    n, c, h, w = input.shape[-4:] if input.ndim == 4 else (None,) * 4
    if input.ndim != 4 or c % (upscale_factor * upscale_factor):
        raise TraceError(
            f"pixel_shuffle({upscale_factor}) needs [N, C, H, W] with C divisible by {upscale_factor**2}, "
            f"got shape {tuple(input.shape)}",
            user_site(),
        )
    r = upscale_factor
    y = ops.reshape(input, (n, c // (r * r), r, r, h, w))
    return ops.reshape(ops.permute(y, (0, 1, 4, 2, 5, 3)), (n, c // (r * r), h * r, w * r))


def pixel_unshuffle(input, downscale_factor: int):  # noqa: A002
    r = downscale_factor
    if input.ndim != 4 or input.shape[2] % r or input.shape[3] % r:
        raise TraceError(
            f"pixel_unshuffle({r}): needs [N, C, H, W], H and W divisible by {r}; got {tuple(input.shape)}",
            user_site(),
        )
    n, c, h, w = input.shape
    y = ops.reshape(input, (n, c, h // r, r, w // r, r))
    return ops.reshape(ops.permute(y, (0, 1, 3, 5, 2, 4)), (n, c * r * r, h // r, w // r))


# ---------------------------------------------------------------- padding


def _pad_axis(x, axis: int, before: int, after: int, mode: str, value: float):
    n = x.shape[axis]
    if before < 0 or after < 0:  # negative padding crops, as in PyTorch
        x = ops.narrow(x, axis, max(-before, 0), n - max(-before, 0) - max(-after, 0))
        return _pad_axis(x, axis, max(before, 0), max(after, 0), mode, value)
    if before == after == 0:
        return x
    if mode == "constant" and not value:
        return ops.pad(x, axis, before, after)
    if mode == "reflect" and max(before, after) >= n:
        raise TraceError(
            f"reflect padding {before}, {after} must be less than the axis size {n}", user_site()
        )
    one = lambda i: ops.narrow(x, axis, i, 1)  # noqa: E731
    if mode == "constant":
        fill = lambda k: ops.full(x.shape[:axis] + (k,) + x.shape[axis + 1 :], float(value), x.dtype)  # noqa: E731
        left, right = [fill(before)] if before else [], [fill(after)] if after else []
    elif mode == "reflect":
        left, right = [one(i) for i in range(before, 0, -1)], [one(n - 2 - i) for i in range(after)]
    elif mode == "replicate":
        left, right = [one(0)] * before, [one(n - 1)] * after
    else:  # circular
        left = [ops.narrow(x, axis, n - before, before)] if before else []
        right = [ops.narrow(x, axis, 0, after)] if after else []
    return ops.concat(left + [x] + right, axis)


def pad(input, pad, mode: str = "constant", value=None):  # noqa: A002
    """F.pad: pad = (last axis before, after, next-to-last before, after, ...)."""
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise TraceError(f"pad: unknown mode {mode!r}", user_site())
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise TraceError(f"pad: {tuple(pad)} must be pairs for at most {input.ndim} axes", user_site())
    x = input
    for k in range(len(pad) // 2):
        x = _pad_axis(x, input.ndim - 1 - k, pad[2 * k], pad[2 * k + 1], mode, value or 0.0)
    return x


# ---------------------------------------------------------------- activations


def elu(input, alpha: float = 1.0, inplace: bool = False):  # noqa: A002
    # exp of the clamped value: the unused branch must not overflow into the gradient
    return ops.where(input > 0, input, (ops.exp(ops.minimum(input, 0.0)) - 1.0) * alpha)


def selu(input, inplace: bool = False):  # noqa: A002
    return elu(input, 1.6732632423543772) * 1.0507009873554805


def celu(input, alpha: float = 1.0, inplace: bool = False):  # noqa: A002
    return ops.where(input > 0, input, (ops.exp(ops.minimum(input, 0.0) / alpha) - 1.0) * alpha)


def softplus(input, beta: float = 1.0, threshold: float = 20.0):  # noqa: A002
    z = input * beta
    return ops.where(z > threshold, input, ops.softplus(ops.minimum(z, threshold)) / beta)


def prelu(input, weight):  # noqa: A002
    w = (
        weight
        if weight.shape[0] == 1 or input.ndim < 2
        else ops.reshape(weight, (1, -1) + (1,) * (input.ndim - 2))
    )
    return ops.where(input > 0, input, input * w)


def logsigmoid(input):  # noqa: A002
    return -ops.softplus(-input)


def softsign(input):  # noqa: A002
    return input / (ops.abs(input) + 1.0)


def hardsigmoid(input, inplace: bool = False):  # noqa: A002
    return ops.hardtanh(input / 6.0 + 0.5, 0.0, 1.0)


def hardswish(input, inplace: bool = False):  # noqa: A002
    return input * ops.clamp(input + 3.0, 0.0, 6.0) / 6.0


def mish(input, inplace: bool = False):  # noqa: A002
    return input * ops.tanh(softplus(input))


def relu6(input, inplace: bool = False):  # noqa: A002
    return ops.hardtanh(input, 0.0, 6.0)


def tanhshrink(input):  # noqa: A002
    return input - ops.tanh(input)


def _implicit_dim(x, dim):
    """Softmax(dim=None)'s axis, as PyTorch picks it (with a warning there)."""
    return dim if dim is not None else (0 if x.ndim in (0, 1, 3) else 1)


def _module(name: str, fn, *names, **defaults):
    """A Module class whose forward is fn(x, *its settings), taking PyTorch's arguments."""

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        vals = dict(zip(names, args)) | {k: v for k, v in kwargs.items() if k in names}
        for k in names:
            setattr(self, k, vals.get(k, defaults.get(k)))

    def forward(self, input):  # noqa: A002
        return fn(input, *(getattr(self, k) for k in names))

    return type(name, (Module,), {"__init__": __init__, "forward": forward})


LeakyReLU = _module("LeakyReLU", lambda x, s: ops.leaky_relu(x, s), "negative_slope", negative_slope=0.01)
ELU = _module("ELU", elu, "alpha", alpha=1.0)
CELU = _module("CELU", celu, "alpha", alpha=1.0)
SELU = _module("SELU", selu)
Softplus = _module("Softplus", softplus, "beta", "threshold", beta=1.0, threshold=20.0)
Hardtanh = _module(
    "Hardtanh", lambda x, a, b: ops.hardtanh(x, a, b), "min_val", "max_val", min_val=-1.0, max_val=1.0
)
ReLU6 = _module("ReLU6", relu6)
LogSigmoid = _module("LogSigmoid", logsigmoid)
Softsign = _module("Softsign", softsign)
Hardsigmoid = _module("Hardsigmoid", hardsigmoid)
Hardswish = _module("Hardswish", hardswish)
Mish = _module("Mish", mish)
Tanhshrink = _module("Tanhshrink", tanhshrink)
Softmax = _module("Softmax", lambda x, d: ops.softmax(x, _implicit_dim(x, d)), "dim")
LogSoftmax = _module("LogSoftmax", lambda x, d: ops.log_softmax(x, _implicit_dim(x, d)), "dim")
Softmax2d = _module("Softmax2d", lambda x: ops.softmax(x, -3))
PixelShuffle = _module("PixelShuffle", pixel_shuffle, "upscale_factor")
PixelUnshuffle = _module("PixelUnshuffle", pixel_unshuffle, "downscale_factor")
MaxPool1d = _module(
    "MaxPool1d",
    max_pool1d,
    "kernel_size",
    "stride",
    "padding",
    "dilation",
    "ceil_mode",
    padding=0,
    dilation=1,
    ceil_mode=False,
)
AvgPool1d = _module(
    "AvgPool1d",
    avg_pool1d,
    "kernel_size",
    "stride",
    "padding",
    "ceil_mode",
    "count_include_pad",
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
)
AdaptiveAvgPool1d = _module("AdaptiveAvgPool1d", adaptive_avg_pool1d, "output_size")
AdaptiveAvgPool2d = _module("AdaptiveAvgPool2d", adaptive_avg_pool2d, "output_size")
AdaptiveMaxPool1d = _module("AdaptiveMaxPool1d", adaptive_max_pool1d, "output_size")
AdaptiveMaxPool2d = _module("AdaptiveMaxPool2d", adaptive_max_pool2d, "output_size")
Upsample = _module("Upsample", interpolate, "size", "scale_factor", "mode", "align_corners", mode="nearest")
UpsamplingNearest2d = _module("UpsamplingNearest2d", interpolate, "size", "scale_factor")
UpsamplingBilinear2d = _module(
    "UpsamplingBilinear2d",
    lambda x, size, sf: interpolate(x, size, sf, "bilinear", True),
    "size",
    "scale_factor",
)


class PReLU(Module):
    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None) -> None:
        super().__init__()
        self.num_parameters = num_parameters
        self.weight = self.param((num_parameters,), _init.constant(init))

    def forward(self, input):  # noqa: A002
        return prelu(input, self.weight)


def _padding(mode: str, n: int):
    """A padding module of n axes (PyTorch's ZeroPad2d, ReflectionPad1d, ...)."""

    def __init__(self, padding, value: float = 0.0):
        Module.__init__(self)
        self.padding, self.value = _tuple(padding, 2 * n, "padding"), value

    def forward(self, input):  # noqa: A002
        return pad(input, self.padding, mode, self.value)

    return __init__, forward


def _pad_class(name: str, mode: str, n: int):
    init, fwd = _padding(mode, n)
    return type(name, (Module,), {"__init__": init, "forward": fwd})


ZeroPad1d, ZeroPad2d = _pad_class("ZeroPad1d", "constant", 1), _pad_class("ZeroPad2d", "constant", 2)
ConstantPad1d, ConstantPad2d = (
    _pad_class("ConstantPad1d", "constant", 1),
    _pad_class("ConstantPad2d", "constant", 2),
)
ReflectionPad1d, ReflectionPad2d = (
    _pad_class("ReflectionPad1d", "reflect", 1),
    _pad_class("ReflectionPad2d", "reflect", 2),
)
ReplicationPad1d = _pad_class("ReplicationPad1d", "replicate", 1)
ReplicationPad2d = _pad_class("ReplicationPad2d", "replicate", 2)
CircularPad1d, CircularPad2d = (
    _pad_class("CircularPad1d", "circular", 1),
    _pad_class("CircularPad2d", "circular", 2),
)


class Conv1d(Module):
    """weight [out, in/groups, k], bias [out], PyTorch's initialisation; padding_mode
    zeros, reflect, replicate or circular."""

    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups=1,
        bias=True,
        padding_mode="zeros",
        device=None,
        dtype=None,
    ):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(
                f"Conv1d: channels {in_channels}->{out_channels} do not divide into {groups} groups"
            )
        k = _tuple(kernel_size, 1, "kernel_size")[0]
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.padding_mode = padding_mode
        self.weight = self.param((out_channels, in_channels // groups, k), _init.fan_in_uniform())
        bound = 1.0 / math.sqrt(in_channels // groups * k)
        self.bias = self.param((out_channels,), _init.uniform(-bound, bound)) if bias else None

    def forward(self, input):  # noqa: A002
        if self.padding_mode == "zeros" or isinstance(self.padding, str):
            return conv1d(
                input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups
            )
        p = _tuple(self.padding, 1, "padding")[0]
        x = pad(input, (p, p), self.padding_mode)
        return conv1d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


class ConvTranspose1d(Module):
    """weight [in, out/groups, k], bias [out]."""

    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups=1,
        bias=True,
        dilation=1,
        padding_mode="zeros",
        device=None,
        dtype=None,
    ):
        super().__init__()
        if padding_mode != "zeros":
            _refuse(f"ConvTranspose1d padding_mode={padding_mode!r}", "use padding_mode='zeros' (as PyTorch)")
        k = _tuple(kernel_size, 1, "kernel_size")[0]
        self.stride, self.padding, self.output_padding = stride, padding, output_padding
        self.groups, self.dilation = groups, dilation
        self.weight = self.param((in_channels, out_channels // groups, k), _init.fan_in_uniform())
        bound = 1.0 / math.sqrt(out_channels // groups * k)
        self.bias = self.param((out_channels,), _init.uniform(-bound, bound)) if bias else None

    def forward(self, input):  # noqa: A002
        return conv_transpose1d(
            input,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            self.output_padding,
            self.groups,
            self.dilation,
        )
