"""Parameter initialisers. Each is a small object: called with (shape, rng) it
returns the values as a flat array('f'); `kind` tells the optimizer whether the
parameter is a gain or offset (zeros/ones: no weight decay by default).

A module's parameters (Module.init_params, and the Trainer, which draws them on the
device) start from the graph's counter-based stream instead, where the initialiser
says how (`spec`: a `Draw`, which the built-in random ones give): the values are a
function of the seed, the parameter's name and the element's index, the same on the
GPU as on the host bit for bit (ops/random.py's init_draw), so set-up neither loops nor
uploads per element. `initial_values` is that choice for one parameter.

Called directly, the random ones draw from a `random.Random` exactly as a loop of `rng.random()` or
`rng.gauss()` calls would, value for value and leaving `rng` in the same state. They
draw in bulk from the same Mersenne Twister words, handed the rng's state, so set-up
does not cost a Python loop per element: with NumPy's legacy generator where NumPy is
importable, with web/bulk.mjs in Pyodide (tgweb.jsbridge: in the worker or not). Only
elsewhere (CPython without NumPy) are they that loop.
"""

from __future__ import annotations

import array
import math
import random
import struct
import zlib
from dataclasses import dataclass

from ..ir import prod
from ..ops.random import INIT_STREAM, init_ints, key, seed_word


def fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """(fan_in, fan_out) as PyTorch computes them: [out, in, *kernel]."""
    if len(shape) < 2:
        return shape[0] if shape else 1, shape[0] if shape else 1
    rf = prod(shape[2:])
    return shape[1] * rf, shape[0] * rf


# ---------------------------------------------------------------- drawing, in bulk

TWOPI = 2.0 * math.pi  # as random.gauss has it
# A value of gauss within this relative distance of an f32 rounding boundary is
# recomputed with `math`, since NumPy's and JavaScript's sin/cos/log may differ from libm's
# in the last bit; the margin is far above any libm's error and far below f32's spacing (2**-24).
_MARGIN = 2.0**-36
_CHUNK = 1 << 16  # random()s per block of the bulk normal: its temporaries stay in cache
_BULK_MIN = 256  # below this many values the loop is faster than handing over the state


def draw_uniform(rng: random.Random, n: int, low: float, high: float) -> array.array:
    """n values low + (high - low) * rng.random(), as f32."""
    w = high - low
    bulk = _bulk(rng, "random", n)
    if bulk is None:
        u = rng.random
        return array.array("f", [low + w * u() for _ in range(n)])
    return bulk.uniform(rng, n, low, w)


def draw_normal(rng: random.Random, n: int, mean: float, std: float) -> array.array:
    """n values rng.gauss(mean, std), as f32."""
    bulk = _bulk(rng, "gauss", n)
    if bulk is None:
        g = rng.gauss
        return array.array("f", [g(mean, std) for _ in range(n)])
    # gauss makes values in pairs from two random()s and keeps the second for the next
    # call: a pending one comes first, an odd last one is a pair made by gauss itself
    head = [rng.gauss(mean, std)] if n and rng.getstate()[2] is not None else []
    out, fix = bulk.normal(rng, (n - len(head)) // 2 * 2, mean, std)
    for i, u1, u2 in fix:
        out[i] = mean + _gauss_z(u1, u2, i & 1) * std
    tail = [rng.gauss(mean, std)] if (n - len(head)) % 2 else []
    return array.array("f", head) + out + array.array("f", tail)


def _gauss_z(u1: float, u2: float, second: int) -> float:
    """The standard normal random.gauss makes from its two random()s (first or second of the pair)."""
    x2pi, g2rad = u1 * TWOPI, math.sqrt(-2.0 * math.log(1.0 - u2))
    return (math.sin(x2pi) if second else math.cos(x2pi)) * g2rad


def _bulk(rng, method: str, n: int):
    """The bulk drawer (NumPy where it is importable, else web/bulk.mjs in Pyodide)
    where n is large enough and rng's `random` and `method` are random.Random's own (not
    SystemRandom's, nor a subclass's): else None, and the caller loops."""
    if n < _BULK_MIN or not isinstance(rng, random.Random):
        return None
    cls = type(rng)
    if cls.random is not random.Random.random or getattr(cls, method) is not getattr(random.Random, method):
        return None
    from ..arrays import _numpy

    np = _numpy()
    if np is not None:
        return _NumpyDraw(np)
    js = _js_bulk()
    return _JsDraw(js) if js is not None else None


class _NumpyDraw:
    """Draws with NumPy's legacy generator, handed the rng's Mersenne Twister state."""

    def __init__(self, np) -> None:
        self.np = np

    def uniform(self, rng, n: int, low: float, w: float) -> array.array:
        return array.array("f", (low + w * self.randoms(rng, n)).astype(self.np.float32).tobytes())

    def normal(self, rng, n: int, mean: float, std: float):
        """n (even) f32 values of gauss, and (index, u1, u2) of those to compute again."""
        np, u = self.np, self.randoms(rng, n)
        out, fix = np.empty(n, np.float32), []
        for i in range(0, n, _CHUNK):
            out[i : i + _CHUNK], near = _normals(np, u[i : i + _CHUNK], mean, std)
            fix += [(i + k, float(u[i + (k & ~1)]), float(u[i + (k | 1)])) for k in near]
        return array.array("f", out.tobytes()), fix

    def randoms(self, rng: random.Random, n: int):
        """n values of rng.random() as float64, rng left as after n calls. CPython's random()
        is (a * 2**26 + b) / 2**53 of two MT19937 words (a = w1 >> 5, b = w2 >> 6), and so is
        NumPy's legacy random_sample: handed rng's words, it continues the same stream."""
        np = self.np
        version, words, pending = rng.getstate()
        rs = np.random.RandomState(0)
        rs.set_state(("MT19937", np.array(words[:-1], np.uint32), words[-1]))
        u = rs.random_sample(n)
        _, key, pos = rs.get_state()[:3]
        rng.setstate((version, (*key.tolist(), pos), pending))
        return u


def _normals(np, u, mean: float, std: float):
    """The f32 values gauss(mean, std) makes from the random()s u, a pair from each two,
    and the indices of those within _MARGIN of an f32 rounding boundary."""
    x2pi, g2rad = u[0::2] * TWOPI, np.sqrt(-2.0 * np.log(1.0 - u[1::2]))
    z = np.empty(len(u))
    z[0::2], z[1::2] = np.cos(x2pi) * g2rad, np.sin(x2pi) * g2rad
    t = z * std
    lo, hi = (mean + t * (1 - _MARGIN)).astype(np.float32), (mean + t * (1 + _MARGIN)).astype(np.float32)
    return (mean + t).astype(np.float32), np.flatnonzero(lo != hi).tolist()


class _JsDraw:
    """Draws with web/bulk.mjs in Pyodide, handed the rng's Mersenne Twister
    state: one call and one copy of the values each way, whatever n is."""

    def __init__(self, js) -> None:
        self.js = js

    def uniform(self, rng, n: int, low: float, w: float) -> array.array:
        return self._call(rng, "uniform", n, low, w)[0]

    def normal(self, rng, n: int, mean: float, std: float):
        out, r = self._call(rng, "normal", n, mean, std, _MARGIN)
        f = array.array("d", r.fix.to_bytes())
        return out, [(int(f[k]), f[k + 1], f[k + 2]) for k in range(0, len(f), 3)]

    def _call(self, rng, name: str, n: int, *args):
        from pyodide.ffi import to_js

        version, words, pending = rng.getstate()
        key = to_js(memoryview(array.array("I", words[:-1])))
        r = getattr(self.js, name)(key, words[-1], n, *args)
        out = array.array("f", [0.0]) * n
        r.values.assign_to(out)
        rng.setstate((version, (*array.array("I", key.to_bytes()), r.pos), pending))
        return out, r


# ---------------------------------------------------------------- the counter-based stream


def f32_round(x: float) -> float:
    """x rounded to the nearest f32 value."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


@dataclass(frozen=True)
class Draw:
    """How a parameter's values come from the counter-based stream: init_draw's integers
    of `dist` ("uniform" or "normal") times `scale`, plus `shift` (both f32 values)."""

    dist: str
    scale: float
    shift: float = 0.0

    @classmethod
    def normal(cls, mean: float, std: float) -> "Draw":
        # the sum of twelve halves has standard deviation 2**17 (see ops/random.py)
        return cls("normal", f32_round(std * 2.0**-17), f32_round(mean))

    @classmethod
    def uniform(cls, low: float, high: float) -> "Draw":
        # odd integers in (-2**24, 2**24): the half-width is 2**24
        return cls("uniform", f32_round((high - low) / 2 * 2.0**-24), f32_round((high + low) / 2))


def param_stream(name: str) -> int:
    """A parameter's stream: its name's CRC-32 (adding a layer changes no other's values)."""
    return zlib.crc32(name.encode("utf-8", "surrogatepass"))


def counter_values(draw: Draw, n: int, seed: int, name: str) -> array.array:
    """n initial values of the parameter `name` for a trainer's seed, as the device draws
    them: one f32 product, then the shift as one f32 sum (NumPy; else web/bulk.mjs in
    Pyodide; else a Python loop)."""
    word, stream = seed_word(seed, 0, INIT_STREAM), param_stream(name)
    from ..arrays import _numpy

    js = None if _numpy() is not None else _js_bulk()
    if js is not None:
        out = array.array("f", [0.0]) * n
        js.counter(key(word, stream), draw.dist, n, draw.scale, draw.shift).assign_to(out)
        return out
    ints = init_ints(word, stream, draw.dist, n)
    if isinstance(ints, list):  # array('f') rounds each (exact) product and sum to f32
        v = array.array("f", [k * draw.scale for k in ints])
        return array.array("f", [x + draw.shift for x in v]) if draw.shift else v
    import numpy as np

    v = ints.astype(np.float32) * np.float32(draw.scale)
    if draw.shift:
        v = v + np.float32(draw.shift)
    return array.array("f", v.tobytes())


def _js_bulk():
    """web/bulk.mjs where this Python runs in Pyodide with tgweb's JavaScript, else None."""
    from .. import jsbridge

    return getattr(jsbridge.made(), "bulk", None)


def counter_draw(init, shape: tuple[int, ...]) -> Draw | None:
    """The Draw of a parameter's initialiser, or None where it draws otherwise: not one
    with a spec, or a subclass that defines its own __call__ below the class whose spec
    it inherits."""
    spec = getattr(init, "spec", None)
    if spec is None:
        return None
    for cls in type(init).__mro__:
        if "spec" in vars(cls):
            break
        if "__call__" in vars(cls):
            return None
    return spec(shape)


def param_rng(seed: int, name: str) -> random.Random:
    """The generator for one parameter: depends on the seed and its name only,
    so adding a layer does not change the others' initial values."""
    return random.Random(zlib.crc32(f"{seed}/{name}".encode()) ^ (seed * 0x9E3779B1 & 0xFFFFFFFF))


def initial_values(init, shape: tuple[int, ...], seed: int, name: str) -> array.array:
    """A parameter's initial values for a seed: from the counter-based stream where its
    initialiser has a Draw, else the initialiser called with the parameter's own rng."""
    draw = counter_draw(init, shape)
    if draw is None:
        return init(shape, param_rng(seed, name))
    return counter_values(draw, prod(shape), seed, name)


class Init:
    kind = "random"

    def __call__(self, shape: tuple[int, ...], rng: random.Random) -> array.array:
        raise NotImplementedError  # pragma: no cover - every subclass defines it

    def spec(self, shape: tuple[int, ...]) -> Draw | None:
        """How a module's parameter with this initialiser is drawn from the counter-based
        stream; None: called with the parameter's rng instead."""
        return None

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class normal(Init):
    def __init__(self, std: float = 1.0, mean: float = 0.0) -> None:
        if std < 0:
            raise ValueError(f"normal: std must be >= 0, got {std}")
        self.std, self.mean = float(std), float(mean)

    def __call__(self, shape, rng):
        return draw_normal(rng, prod(shape), self.mean, self.std)

    def spec(self, shape):
        return Draw.normal(self.mean, self.std)


class uniform(Init):
    def __init__(self, low: float = -1.0, high: float = 1.0) -> None:
        if high < low:
            raise ValueError(f"uniform: high {high} is below low {low}")
        self.low, self.high = float(low), float(high)

    def __call__(self, shape, rng):
        return draw_uniform(rng, prod(shape), self.low, self.high)

    def spec(self, shape):
        return Draw.uniform(self.low, self.high)


class _Scaled(Init):
    """An initialiser that is normal or uniform with a scale from the shape's fans."""

    def _as(self, shape) -> Init:
        raise NotImplementedError  # pragma: no cover - every subclass defines it

    def __call__(self, shape, rng):
        return self._as(shape)(shape, rng)

    def spec(self, shape):
        return self._as(shape).spec(shape)


class kaiming(_Scaled):
    """Normal with std gain / sqrt(fan_in) (He et al.; gain sqrt(2) suits ReLU)."""

    def __init__(self, gain: float = math.sqrt(2.0)) -> None:
        self.gain = float(gain)

    def _as(self, shape) -> "normal":
        return normal(self.gain / math.sqrt(fans(shape)[0]))


class xavier(_Scaled):
    """Uniform in +-gain*sqrt(6 / (fan_in + fan_out)) (Glorot and Bengio)."""

    def __init__(self, gain: float = 1.0) -> None:
        self.gain = float(gain)

    def _as(self, shape) -> "uniform":
        fi, fo = fans(shape)
        a = self.gain * math.sqrt(6.0 / (fi + fo))
        return uniform(-a, a)


class fan_in_uniform(_Scaled):
    """Uniform in +-1/sqrt(fan_in): PyTorch's default for Linear and Conv2d weights."""

    def _as(self, shape) -> "uniform":
        a = 1.0 / math.sqrt(fans(shape)[0])
        return uniform(-a, a)


class constant(Init):
    def __init__(self, value: float) -> None:
        self.value = float(value)

    @property
    def kind(self):  # type: ignore[override]
        return "zeros" if self.value == 0 else "ones" if self.value == 1 else "constant"

    def __call__(self, shape, rng):
        return array.array("f", [self.value]) * prod(shape)


def zeros() -> constant:
    return constant(0.0)


def ones() -> constant:
    return constant(1.0)


class from_array(Init):
    """Fixed values (NumPy array, nested list, ...), checked against the shape."""

    kind = "fixed"

    def __init__(self, values) -> None:
        self.values = values

    def __call__(self, shape, rng):
        from ..arrays import from_user

        return from_user(self.values, shape, "f32", "init.from_array")
