"""torch.nn.init: in-place initialisers of a parameter's values, before compiling, in
PyTorch's argument order. They draw from the generator torch.manual_seed seeds."""

from __future__ import annotations

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


calculate_gain = _gain


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
