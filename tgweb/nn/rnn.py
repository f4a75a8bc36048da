"""Recurrent layers (RNN, LSTM, GRU) and their cells with PyTorch's arguments, parameter
names, shapes, gate order and initialisation, so that state dicts load both ways.

The time loop is unrolled into the static graph. Each layer computes its input
projection for every step at once (one product over [T, B, I]), with the biases that
can be added there; a step is then the recurrent product h W_hh^T, whose epilogue adds
the step's projection, and one fused elementwise kernel for the gates (an Elman RNN's
tanh or relu runs in the product's epilogue itself: one kernel a step). A missing
initial state skips the first step's product."""

from __future__ import annotations

import math

from .. import ops
from ..ir import TraceError, user_site
from . import init
from .module import Module

GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


# ---------------------------------------------------------------- one step


def _linear(x, w, b=None):
    y = ops.matmul(x, ops.transpose(w))
    return y if b is None else y + b


def _step(mode: str, gi, h, c, w_hh, b_hh=None, w_hr=None):
    """(h', c') of one step from gi, the step's input projection x W_ih^T + b_ih (plus b_hh
    for every mode but GRU, whose b_hn sits inside r * (...); a GRU's gi is its three gate
    parts); h None: a zero state."""
    if mode == "GRU":
        return _gru_step(gi, h, w_hh, b_hh), None
    pre = gi if h is None else _linear(h, w_hh) + gi
    if mode == "RNN_TANH":
        return ops.tanh(pre), None
    if mode == "RNN_RELU":
        return ops.relu(pre), None
    i, f, g, o = ops.chunk(pre, 4, -1)
    c_new = ops.sigmoid(i) * ops.tanh(g)
    if c is not None:
        c_new = ops.sigmoid(f) * c + c_new
    h_new = ops.sigmoid(o) * ops.tanh(c_new)
    return (h_new if w_hr is None else _linear(h_new, w_hr)), c_new


def _gru_step(gi, h, w_hh, b_hh):
    gh = b_hh if h is None else _linear(h, w_hh, b_hh)
    gi_r, gi_z, gi_n = gi
    if gh is None:  # no state and no bias: h W_hh^T + b_hh is zero
        r_part = z_part = n_part = 0.0
    else:
        r_part, z_part, n_part = ops.chunk(gh, 3, -1)
    r = ops.sigmoid(gi_r + r_part)
    z = ops.sigmoid(gi_z + z_part)
    n = ops.tanh(gi_n + r * n_part)
    return n - z * n if h is None else n + z * (h - n)


def _folded_bias(mode: str, b_ih, b_hh):
    """The bias added to the whole input projection: b_ih, and b_hh where it adds there too."""
    if b_ih is None or mode == "GRU":
        return b_ih
    return b_ih + b_hh


# Every read of the projection inside the loop is one slice of a stored tensor, of the
# shape of the step's elementwise work ([1, B, H]), so that it fuses into that kernel
# (a slice of a slice, or a slice read through a reshape, would be a copy kernel a step).


def _projection(mode: str, x, w_ih, b_ih, b_hh):
    """x [T, B, I] @ W_ih^T + bias for every step at once: [T, B, G]; a GRU's gate-major,
    [3T, B, H] (gate k of step t at row k T + t), since its gates are read apart."""
    if mode != "GRU":
        return _linear(x, w_ih, _folded_bias(mode, b_ih, b_hh))
    (t, b, i), h = x.shape, w_ih.shape[0] // 3
    y = ops.matmul(ops.reshape(x, (1, t * b, i)), ops.transpose(ops.reshape(w_ih, (3, h, i)), 1, 2))
    if b_ih is not None:
        y = y + ops.reshape(b_ih, (3, 1, h))
    return ops.reshape(y, (3 * t, b, h))


def _run(mode: str, x, weights, h0, c0, reverse: bool):
    """One direction of one layer over x [T, B, I], states [1, B, H] (None: zero):
    (outputs [T, B, H'], h_T, c_T)."""
    w_ih, w_hh, b_ih, b_hh, w_hr = weights
    n = x.shape[0]
    proj = _projection(mode, x, w_ih, b_ih, b_hh)
    outs = [None] * n
    h, c = h0, c0
    for t in range(n - 1, -1, -1) if reverse else range(n):
        if mode == "GRU":
            gi = [ops.narrow(proj, 0, k * n + t, 1) for k in range(3)]
        else:
            gi = ops.narrow(proj, 0, t, 1)
        h, c = _step(mode, gi, h, c, w_hh, b_hh if mode == "GRU" else None, w_hr)
        outs[t] = h
    return ops.concat(outs, 0), h, c


# ---------------------------------------------------------------- layers


def _check_mode(mode: str, nonlinearity: str) -> str:
    """RNN's mode from its nonlinearity ("RNN_TANH", "RNN_RELU")."""
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
    return "RNN_" + nonlinearity.upper()


class _Recurrent(Module):
    """The multi-layer recurrent layer (PyTorch's RNNBase); the subclasses take PyTorch's
    constructor arguments in PyTorch's order."""

    def _setup(
        self, mode, input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, proj_size
    ):
        name = type(self).__name__
        for arg, v in (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: {arg} must be a positive int, got {v!r}")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
            raise ValueError(f"{name}: dropout must be a number in [0, 1], got {dropout!r}")
        if proj_size and not 0 < proj_size < hidden_size:
            raise ValueError(f"{name}: proj_size must be in 0 < proj_size < hidden_size, got {proj_size}")
        self.mode = mode
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bool(bias), bool(batch_first), float(dropout)
        self.bidirectional, self.proj_size = bool(bidirectional), int(proj_size)
        self.training = True
        self._make_weights()

    def _make_weights(self) -> None:
        """weight_ih_l{k}{_reverse}, ... in PyTorch's order, all uniform in +-1/sqrt(H)."""
        h, g = self.hidden_size, GATES[self.mode] * self.hidden_size
        out = self.proj_size or h
        k = 1.0 / math.sqrt(h)
        draw = init.uniform(-k, k)
        self._flat_weights_names = []
        for layer in range(self.num_layers):
            for suffix in ("", "_reverse")[: 1 + self.bidirectional]:
                fan_in = self.input_size if layer == 0 else out * (1 + self.bidirectional)
                shapes = [("weight_ih", (g, fan_in)), ("weight_hh", (g, out))]
                if self.bias:
                    shapes += [("bias_ih", (g,)), ("bias_hh", (g,))]
                if self.proj_size:
                    shapes.append(("weight_hr", (self.proj_size, h)))
                for kind, shape in shapes:
                    name = f"{kind}_l{layer}{suffix}"
                    setattr(self, name, self.param(shape, draw, decay=kind.startswith("weight")))
                    self._flat_weights_names.append(name)

    def _weights(self, layer: int, reverse: bool):
        s = f"_l{layer}" + ("_reverse" if reverse else "")
        get = lambda kind: getattr(self, kind + s, None)  # noqa: E731
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh"), get("weight_hr")

    @property
    def all_weights(self):
        """The parameters of each layer and direction, as PyTorch lists them."""
        per = len(self._flat_weights_names) // (self.num_layers * (1 + self.bidirectional))
        names = self._flat_weights_names
        return [[getattr(self, n) for n in names[i : i + per]] for i in range(0, len(names), per)]

    def flatten_parameters(self) -> None:
        """PyTorch's cuDNN packing: nothing to do here."""

    def train(self, mode: bool = True):
        self.training = bool(mode)
        return self

    def eval(self):
        return self.train(False)

    def forward(self, input, hx=None):  # noqa: A002 - PyTorch's names
        x, batched = self._time_major(input)
        h0, c0 = self._initial_state(hx, x.shape[1], batched)
        dirs = 1 + self.bidirectional
        hs, cs = [], []
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                y, h, c = _run(self.mode, x, self._weights(layer, d == 1), h0[k], c0[k], d == 1)
                outs.append(y)
                hs.append(h)
                cs.append(c)
            x = ops.concat(outs, -1)
            if layer < self.num_layers - 1:
                x = ops.dropout(x, self.dropout, self.training)
        return self._results(x, hs, cs, batched)

    def _results(self, x, hs, cs, batched: bool):
        if self.batch_first and batched:
            x = ops.swapaxes(x, 0, 1)
        h_n = ops.concat(hs, 0)
        if not batched:
            x, h_n = ops.squeeze(x, 1), ops.squeeze(h_n, 1)
        if self.mode != "LSTM":
            return x, h_n
        c_n = ops.concat(cs, 0)
        return x, (h_n, c_n if batched else ops.squeeze(c_n, 1))

    def _time_major(self, input):
        name = type(self).__name__
        if input.ndim not in (2, 3) or input.shape[-1] != self.input_size or input.dtype != "f32":
            raise TraceError(
                f"{name}: input must be float of shape [T, {self.input_size}] or "
                f"{'[B, T' if self.batch_first else '[T, B'}, {self.input_size}], "
                f"got {input.dtype} of shape {tuple(input.shape)}",
                user_site(),
            )
        if input.ndim == 2:
            return ops.unsqueeze(input, 1), False
        return (ops.swapaxes(input, 0, 1) if self.batch_first else input), True

    def _initial_state(self, hx, batch: int, batched: bool):
        """Per layer and direction: (h0 rows, c0 rows), None where the state starts at zero."""
        n = self.num_layers * (1 + self.bidirectional)
        if hx is None:
            return [None] * n, [None] * n
        if self.mode == "LSTM":
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise TraceError("LSTM: hx must be a tuple (h_0, c_0)", user_site())
            shapes = ((self.proj_size or self.hidden_size), self.hidden_size)
            return tuple(
                self._rows(s, n, batch, batched, w, nm) for s, w, nm in zip(hx, shapes, ("h_0", "c_0"))
            )
        return self._rows(hx, n, batch, batched, self.hidden_size, "h_0"), [None] * n

    def _rows(self, s, n: int, batch: int, batched: bool, width: int, what: str):
        want = (n, batch, width) if batched else (n, width)
        if tuple(s.shape) != want:
            raise TraceError(
                f"{type(self).__name__}: {what} must have shape {want}, got {tuple(s.shape)}", user_site()
            )
        if not batched:
            s = ops.unsqueeze(s, 1)
        return [ops.narrow(s, 0, k, 1) for k in range(n)]


class RNN(_Recurrent):
    """Elman RNN: h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (nonlinearity="relu": relu).
    forward(input, h_0=None) -> (output, h_n), as torch.nn.RNN."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
    ) -> None:
        self.nonlinearity = nonlinearity
        mode = _check_mode("RNN", nonlinearity)
        self._setup(mode, input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0)


class LSTM(_Recurrent):
    """Gates i, f, g, o (in that order in weight_ih/weight_hh); proj_size projects h.
    forward(input, (h_0, c_0)=None) -> (output, (h_n, c_n)), as torch.nn.LSTM."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
    ) -> None:
        self._setup(
            "LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, proj_size
        )


class GRU(_Recurrent):
    """Gates r, z, n; n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn)).
    forward(input, h_0=None) -> (output, h_n), as torch.nn.GRU."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
    ) -> None:
        self._setup("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0)


# ---------------------------------------------------------------- cells


class _Cell(Module):
    """One step (PyTorch's RNNCellBase): weight_ih, weight_hh, bias_ih, bias_hh."""

    def _setup(self, mode: str, input_size: int, hidden_size: int, bias: bool) -> None:
        for arg, v in (("input_size", input_size), ("hidden_size", hidden_size)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{type(self).__name__}: {arg} must be a positive int, got {v!r}")
        self.mode, self.input_size, self.hidden_size, self.bias = mode, input_size, hidden_size, bool(bias)
        g = GATES[mode] * hidden_size
        k = 1.0 / math.sqrt(hidden_size)
        self.weight_ih = self.param((g, input_size), init.uniform(-k, k))
        self.weight_hh = self.param((g, hidden_size), init.uniform(-k, k))
        self.bias_ih = self.param((g,), init.uniform(-k, k), decay=False) if bias else None
        self.bias_hh = self.param((g,), init.uniform(-k, k), decay=False) if bias else None

    def forward(self, input, hx=None):  # noqa: A002 - PyTorch's names
        name, h = type(self).__name__, self.hidden_size
        if input.ndim not in (1, 2) or input.shape[-1] != self.input_size or input.dtype != "f32":
            raise TraceError(
                f"{name}: input must be float of shape [{self.input_size}] or [B, {self.input_size}], "
                f"got {input.dtype} of shape {tuple(input.shape)}",
                user_site(),
            )
        batched = input.ndim == 2
        x = input if batched else ops.unsqueeze(input, 0)
        if hx is not None and self.mode == "LSTM" and not (isinstance(hx, (tuple, list)) and len(hx) == 2):
            raise TraceError(f"{name}: hx must be a tuple (h, c)", user_site())
        states = () if hx is None else tuple(hx) if self.mode == "LSTM" else (hx,)
        want = (x.shape[0], h) if batched else (h,)
        for s in states:
            if tuple(s.shape) != want:
                raise TraceError(
                    f"{name}: the state must have shape {want}, got {tuple(s.shape)}", user_site()
                )
        states = [s if batched else ops.unsqueeze(s, 0) for s in states] or [None, None]
        gi = _linear(x, self.weight_ih, _folded_bias(self.mode, self.bias_ih, self.bias_hh))
        if self.mode == "GRU":
            gi = ops.chunk(gi, 3, -1)
        b_hh = self.bias_hh if self.mode == "GRU" else None
        h_new, c_new = _step(self.mode, gi, states[0], states[-1], self.weight_hh, b_hh)
        if not batched:
            h_new, c_new = ops.squeeze(h_new, 0), c_new if c_new is None else ops.squeeze(c_new, 0)
        return (h_new, c_new) if self.mode == "LSTM" else h_new


class RNNCell(_Cell):
    """h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or relu), as torch.nn.RNNCell."""

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh"
    ) -> None:
        self.nonlinearity = nonlinearity
        self._setup(_check_mode("RNN", nonlinearity), input_size, hidden_size, bias)


class LSTMCell(_Cell):
    """forward(input, (h, c)=None) -> (h', c'), as torch.nn.LSTMCell."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True) -> None:
        self._setup("LSTM", input_size, hidden_size, bias)


class GRUCell(_Cell):
    """forward(input, h=None) -> h', as torch.nn.GRUCell."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True) -> None:
        self._setup("GRU", input_size, hidden_size, bias)
