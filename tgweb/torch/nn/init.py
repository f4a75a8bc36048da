"""torch.nn.init: in-place initialisers of a parameter's values, before compiling, in
PyTorch's argument order. They draw from the generator torch.manual_seed seeds."""

from __future__ import annotations

import array
import math

from ...ir import TraceError, current_graph, user_site
from ...nn import init as _init
from .._host import GENERATOR


def _set(p, init):
    if current_graph() is not None:
        raise TraceError(
            "nn.init changes a parameter in place, which a compiled graph cannot do: "
            "initialise parameters in __init__ or before tg.compile",
            user_site(),
        )
    p.value = init(p.shape, GENERATOR)
    return p


def _gain(nonlinearity: str, a: float = 0.0) -> float:
    if nonlinearity == "leaky_relu":
        return math.sqrt(2.0 / (1 + a * a))
    return {"relu": math.sqrt(2.0), "tanh": 5.0 / 3, "linear": 1.0, "sigmoid": 1.0}.get(nonlinearity, 1.0)


def calculate_gain(nonlinearity: str, param=None) -> float:
    """PyTorch's recommended gain for a nonlinearity (leaky_relu's slope defaults to 0.01)."""
    if nonlinearity == "leaky_relu":
        return _gain(nonlinearity, 0.01 if param is None else param)
    if nonlinearity == "selu":
        return 3.0 / 4
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "sigmoid")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity in ("relu", "tanh"):
        return _gain(nonlinearity)
    raise ValueError(f"unsupported nonlinearity {nonlinearity!r}")


def _orthonormal_rows(a: list[list[float]]) -> list[list[float]]:
    """Gram-Schmidt (modified, done twice for f32-grade orthogonality) of the rows of a
    (rows <= columns), each row's sign as QR's positive diagonal gives it."""
    out: list[list[float]] = []
    for r in a:
        v = list(r)
        for _ in range(2):
            for q in out:
                d = sum(x * y for x, y in zip(v, q))
                v = [x - d * y for x, y in zip(v, q)]
        n = math.sqrt(sum(x * x for x in v)) or 1.0
        out.append([x / n for x in v])
    return out


def orthogonal_(tensor, gain: float = 1.0):
    """A (semi-)orthogonal matrix from normal draws, as PyTorch's orthogonal_ makes one
    (the draws are tgweb's generator's, not torch's); dims past the first are flattened."""
    if len(tensor.shape) < 2:
        raise ValueError("orthogonal_ needs a tensor of at least 2 dimensions")
    rows, cols = tensor.shape[0], math.prod(tensor.shape[1:])
    draws = _init.normal(1.0)((rows, cols), GENERATOR)
    flat = [draws[i * cols : (i + 1) * cols] for i in range(rows)]
    if rows > cols:  # orthonormal columns: orthonormalize the transpose
        cols_of = [[flat[i][j] for i in range(rows)] for j in range(cols)]
        q = _orthonormal_rows(cols_of)
        values = [q[j][i] * gain for i in range(rows) for j in range(cols)]
    else:
        values = [v * gain for row in _orthonormal_rows(flat) for v in row]
    return _set(tensor, _init.from_array(array.array("f", values)))


def normal_(tensor, mean: float = 0.0, std: float = 1.0):
    return _set(tensor, _init.normal(std, mean))


def uniform_(tensor, a: float = 0.0, b: float = 1.0):
    return _set(tensor, _init.uniform(a, b))


def constant_(tensor, val: float):
    return _set(tensor, _init.constant(val))


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)


def xavier_uniform_(tensor, gain: float = 1.0):
    return _set(tensor, _init.xavier(gain))


def xavier_normal_(tensor, gain: float = 1.0):
    fi, fo = _init.fans(tensor.shape)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fi + fo)))


def _kaiming_std(tensor, a, mode, nonlinearity):
    fi, fo = _init.fans(tensor.shape)
    return _gain(nonlinearity, a) / math.sqrt(fi if mode == "fan_in" else fo)


def kaiming_uniform_(tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"):
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"):
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity))
