"""Stochastic ops from a counter-based PRNG: rand, randn, dropout, categorical.

Every random number is a pure function of (seed, stream, counter), so a kernel
computes its elements independently and the NumPy reference reproduces the WGSL
kernels bit for bit. All arithmetic is on unsigned 32-bit integers, wrapping
modulo 2**32 (WGSL u32 ``*``, ``+``, ``^``, ``>>``):

    lowbias32(x):
        x ^= x >> 16;  x *= 0x7FEB352D
        x ^= x >> 15;  x *= 0x846CA68B
        x ^= x >> 16
        return x

    key(seed, stream) = lowbias32(seed ^ lowbias32(stream * 0x9E3779B9 + 0x632BE5AB))
    bits(seed, stream, c) = lowbias32(lowbias32(c ^ key) + key)
    uniform(seed, stream, c) = f32(bits >> 8) * 2**-24          # in [0, 1), exact

- ``seed`` is the per-step host scalar ``graph.scalar("seed", "i32")``: one 32-bit
  word (reinterpreted as u32), which the trainer advances each step. It is the one
  input of the ``rand`` and ``randn`` nodes.
- ``stream`` is the node's attr ``stream``: a per-op constant, taken from
  ``graph.rng_ops`` when the op is traced (so two random ops never share numbers).
- ``c`` is a counter derived from the element's row-major linear index i.

Kinds (both f32, no gradient, input: the seed scalar; attrs {shape, stream}):

- ``rand``: element i = uniform(seed, stream, i).
- ``randn``: Box-Muller with u1 = uniform(seed, stream, 2i), u2 = uniform(seed,
  stream, 2i + 1):  element i = sqrt(-2 ln(1 - u1)) * cos(2 pi u2).  (1 - u1 is in
  (0, 1], so the log is finite; log/cos/sqrt are only as exact as the platform's.)

- ``init_draw``: a parameter's initial values (the Trainer draws them on the device with
  a program of these nodes, tgweb.nn.init.counter_values on the host), from
  ``seed = seed_word(seed, 0, INIT_STREAM)`` and the parameter's stream (its name's
  CRC-32). Only integer arithmetic, then one f32 multiply by the attr ``scale``, so the
  GPU's values equal the host's bit for bit (no transcendental, nothing to contract):
  "uniform": ``2 * (bits(seed, stream, i) >> 8) - (2**24 - 1)``, an odd integer spread
  evenly over (-2**24, 2**24); "normal": the sum of twelve 16-bit halves ``b`` of
  ``bits(seed, stream, 6 i + j)`` (j < 6), each as ``2 b + 1 - 2**16``: Irwin-Hall's
  approximation of a normal (variance exact, tails end at 6 standard deviations);
  "constant": 1 (the value is the scale: a state's or a constant parameter's fill).

dropout and categorical compose ``rand`` with elementwise ops:
dropout(x, p) = where(rand >= p, x * (1 / (1 - p)), 0); categorical(logits) =
argmax(logits - log(-log(rand)), axis) (Gumbel-max; rand == 0 gives -inf noise).
"""

from __future__ import annotations

import math
import struct

from ..codegen.common import f32_lit
from ..codegen.random import M32, init_ints_wgsl, key_wgsl, lowbias32, stream_hash
from ..ir import NO_GRAD, OpError, Tensor, current_graph, make, prod, register
from .base import as_tensor, norm_axis, op

# ---------------------------------------------------------------- the hash, in pure Python
# (lowbias32 and stream_hash: codegen/random.py, which the kernels' WGSL shares)


def key(seed: int, stream: int) -> int:
    return lowbias32((seed & M32) ^ stream_hash(stream))


def bits(seed: int, stream: int, counter: int) -> int:
    return keyed_bits(key(seed, stream), counter)


def keyed_bits(k: int, counter: int) -> int:
    """bits for the key k = key(seed, stream)."""
    return lowbias32((lowbias32((counter & M32) ^ k) + k) & M32)


def uniform(seed: int, stream: int, counter: int) -> float:
    """The value rand produces at counter (pure Python; for tests and the host)."""
    return (bits(seed, stream, counter) >> 8) * 2.0**-24


# ---------------------------------------------------------------- the hash in NumPy (reference)


def _np_lowbias32(np, x):
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def _np_bits(np, k: int, c):
    return _np_lowbias32(np, _np_lowbias32(np, c ^ np.uint32(k)) + np.uint32(k))


def _np_uniform(ctx, seed_arr, stream: int, counters):
    np = ctx.np
    seed = np.uint32(int(np.asarray(seed_arr).astype(np.int64)) & M32)
    k = int(key(int(seed), stream))
    with np.errstate(over="ignore"):
        h = _np_bits(np, k, counters.astype(np.uint32))
    return (h >> np.uint32(8)).astype(np.float64) * 2.0**-24


def _ref_rand(ctx, args, t):
    np = ctx.np
    n = prod(t.shape)
    u = _np_uniform(ctx, args[0], t.attrs["stream"], np.arange(n, dtype=np.uint64))
    return u.astype(np.float32).astype(ctx.f).reshape(t.shape)


def _ref_randn(ctx, args, t):
    np = ctx.np
    n = prod(t.shape)
    i = np.arange(n, dtype=np.uint64)
    u1 = _np_uniform(ctx, args[0], t.attrs["stream"], 2 * i)
    u2 = _np_uniform(ctx, args[0], t.attrs["stream"], 2 * i + 1)
    f = ctx.f
    z = np.sqrt(-2.0 * np.log((1.0 - u1).astype(f))) * np.cos((2 * math.pi * u2).astype(f))
    return z.astype(f).reshape(t.shape)


def _infer_random(ins, attrs):
    (seed,) = ins
    if seed.shape != () or seed.dtype != "i32":
        raise OpError(f"the seed must be an i32 scalar, got {seed.dtype} of shape {seed.shape}")
    return attrs["shape"], "f32"


# ---------------------------------------------------------------- WGSL (the hash: codegen/random.py)


def _key_wgsl(g, m) -> str:
    return g.let(key_wgsl(g.kc, g.load_at(m.inputs[0], "0u"), m.attrs["stream"]), "k")


def _rand_wgsl(g, m) -> str:
    k = _key_wgsl(g, m)
    return g.let(f"tg_uniform({k}, {g.ivar})")


def _randn_wgsl(g, m) -> str:
    k = _key_wgsl(g, m)
    u1 = g.let(f"tg_uniform({k}, 2u * {g.ivar})")
    u2 = g.let(f"tg_uniform({k}, 2u * {g.ivar} + 1u)")
    return g.let(f"sqrt(-2.0 * log(1.0 - {u1})) * cos({f32_lit(6.283185307179586)} * {u2})")


# ---------------------------------------------------------------- initial values (init_draw)

INIT_STREAM = 3  # seed_word's stream of initial values (1: training steps, 2: inference runs)


def seed_word(seed: int, n: int, stream: int = 1) -> int:
    """The PRNG seed scalar of the n-th run of a stream (1: training steps, 2: inference
    runs, INIT_STREAM: initial values) for a trainer's seed: every run draws new numbers."""
    return (seed * 0x9E3779B1 + n * 0x85EBCA6B + stream) & 0x7FFFFFFF


def init_ints(seed: int, stream: int, dist: str, n: int):
    """init_draw's integers for elements 0..n-1 (see the module docstring): an int32 NumPy
    array where NumPy is importable, else a list (pure Python, one element at a time)."""
    from ..arrays import _numpy

    k = key(seed, stream)
    np = _numpy()
    if dist == "constant":
        return [1] * n if np is None else np.ones(n, np.int32)
    if np is None:
        if dist == "uniform":
            return [2 * (keyed_bits(k, c) >> 8) - 0xFFFFFF for c in range(n)]
        out = []
        for i in range(n):
            hs = [keyed_bits(k, 6 * i + j) for j in range(6)]
            out.append(2 * sum((h & 0xFFFF) + (h >> 16) for h in hs) - 786420)
        return out
    with np.errstate(over="ignore"):
        if dist == "uniform":
            return 2 * (_np_bits(np, k, np.arange(n, dtype=np.uint32)) >> 8).astype(np.int32) - 0xFFFFFF
        s = np.zeros(n, np.int32)
        for j in range(6):
            h = _np_bits(np, k, (6 * np.arange(n, dtype=np.uint64) + j).astype(np.uint32))
            s += (h & np.uint32(0xFFFF)).astype(np.int32) + (h >> np.uint32(16)).astype(np.int32)
        return 2 * s - 786420


def _ref_init_draw(ctx, args, t):
    np = ctx.np
    seed = int(np.asarray(args[0]).astype(np.int64)) & M32
    ints = init_ints(seed, t.attrs["stream"], t.attrs["dist"], prod(t.shape))
    v = ints.astype(np.float32) * np.float32(t.attrs["scale"])
    return v.astype(ctx.f).reshape(t.shape)


def _init_draw_wgsl(g, m) -> str:
    k = _key_wgsl(g, m)
    scale = g.kc.word(struct.unpack("<I", struct.pack("<f", m.attrs["scale"]))[0])
    return g.let(f"f32({init_ints_wgsl(g.kc, k, m.attrs['dist'], g.ivar)}) * bitcast<f32>({scale})")


def _infer_init_draw(ins, attrs):
    if attrs["dist"] not in ("uniform", "normal", "constant"):
        raise OpError(f"init_draw: dist must be 'uniform', 'normal' or 'constant', got {attrs['dist']!r}")
    return _infer_random(ins, attrs)


register(
    "init_draw",
    family="random",
    role="index",
    emit=_init_draw_wgsl,
    infer=_infer_init_draw,
    grad=NO_GRAD,
    ref=_ref_init_draw,
)


def init_draw(shape, stream: int, dist: str, scale: float, graph=None) -> Tensor:
    """A parameter's initial values as a node (see the module docstring); scale must be
    an f32 value (tgweb.nn.init.Draw rounds it)."""
    graph = graph or current_graph()
    return make(
        "init_draw", (graph.scalar("seed", "i32"),), shape=tuple(shape), stream=stream, dist=dist, scale=scale
    )


# the same counter hash on int64 tensors, so a traced module draws tgweb's numbers for the
# seed it is given (TgwebModule.rng_seed); a product is split in 16-bit halves so that
# nothing overflows int64


def _torch_mul32(x, c: int):
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & M32


def _torch_lowbias32(x):
    x = x ^ (x >> 16)
    x = _torch_mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _torch_mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def _torch_uniform(tc, seed, stream: int, counters):
    k = key(int(seed.item()) & M32, stream)
    h = _torch_lowbias32((_torch_lowbias32(counters ^ k) + k) & M32)
    return (h >> 8).to(tc.torch.float64) * 2.0**-24


def _torch_rand(tc, a, n):
    i = tc.torch.arange(prod(n.shape), dtype=tc.torch.int64, device=tc.device)
    return _torch_uniform(tc, a[0], n.attrs["stream"], i).to(tc.float).reshape(n.shape)


def _torch_randn(tc, a, n):
    torch = tc.torch
    i = torch.arange(prod(n.shape), dtype=torch.int64, device=tc.device)
    u1 = _torch_uniform(tc, a[0], n.attrs["stream"], 2 * i).to(tc.float)
    u2 = _torch_uniform(tc, a[0], n.attrs["stream"], 2 * i + 1)
    z = torch.sqrt(-2.0 * torch.log(1.0 - u1)) * torch.cos((2 * math.pi * u2).to(tc.float))
    return z.reshape(n.shape)


register(
    "rand",
    family="random",
    role="index",
    emit=_rand_wgsl,
    infer=_infer_random,
    grad=NO_GRAD,
    ref=_ref_rand,
    torch=_torch_rand,
)
register(
    "randn",
    family="random",
    role="index",
    emit=_randn_wgsl,
    infer=_infer_random,
    grad=NO_GRAD,
    ref=_ref_randn,
    torch=_torch_randn,
)


def _random(kind: str, shape, graph=None) -> Tensor:
    from .creation import check_shape

    shape = check_shape(shape)
    graph = graph or current_graph()
    if graph is None:
        raise OpError("random ops run only while tracing")
    return make(kind, (graph.scalar("seed", "i32"),), shape=shape, stream=next_stream(graph))


def next_stream(graph) -> int:
    """A stream of its own for a stochastic op being traced."""
    graph.rng_ops += 1
    return graph.rng_ops - 1


@op
def rand(shape) -> Tensor:
    """Uniform [0, 1) floats of the given shape, new every step (the per-step seed)."""
    return _random("rand", shape)


@op
def randn(shape) -> Tensor:
    """Standard normal floats of the given shape, new every step."""
    return _random("randn", shape)


@op
def dropout(x, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability p and scale the rest by 1 / (1 - p);
    identity when not training or p == 0."""
    from .elementwise import where

    x = as_tensor(x)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
        raise OpError(f"dropout probability must be in [0, 1], got {p!r}")
    if x.dtype != "f32":
        raise OpError(f"dropout needs a float (f32) tensor, got {x.dtype} of shape {x.shape}")
    if not training or p == 0:
        return x
    if p == 1:
        return x * 0.0
    keep = _random("rand", x.shape, x.graph) >= float(p)
    return where(keep, x * (1.0 / (1.0 - p)), 0.0)


@op
def categorical(logits, axis: int = -1) -> Tensor:
    """One sample per row from softmax(logits) along axis, as i32 indices (Gumbel-max)."""
    from .elementwise import log
    from .reduce import argmax

    x = as_tensor(logits)
    if x.dtype != "f32":
        raise OpError(f"categorical needs float (f32) logits, got {x.dtype} of shape {x.shape}")
    a = norm_axis(axis, x.ndim, x.shape)
    u = _random("rand", x.shape, x.graph)
    return argmax(x - log(-log(u)), a)
