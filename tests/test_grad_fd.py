"""Finite-difference check of every differentiable op kind, in float64.

CASES is keyed by op kind. test_every_differentiable_kind_has_a_case fails when a
registered kind with a grad rule has no case here, and each case asserts that its
kind really occurs in the traced graph. Each case is run at several shapes
(sizes 1, 3 and 7, broadcasting); the loss is sum(out * w) for a random w, so the
check covers full Jacobian-vector products, and the analytic gradient must not be
identically zero.
"""

from __future__ import annotations

import numpy as np
import pytest

import tgweb as tg
from tgweb.backends.reference import Context, evaluate
from tgweb.grad import append_grad
from tgweb.ir import NO_GRAD, REGISTRY, Graph, make, tracing

EPS = 1e-6


# ------------------------------------------------------------------ input makers


def normal(*shape):
    return ("n", shape)


def positive(*shape):  # in [0.5, 2]
    return ("p", shape)


def spaced(*shape):  # distinct values 0.1 apart, none within 0.02 of 0
    return ("s", shape)


def index(high, *shape, low=0):
    return ("i", shape, low, high)


def _make(spec, rng):
    kind = spec[0]
    if kind == "i":
        _, shape, low, high = spec
        return rng.integers(low, high, size=shape).astype(np.int32)
    shape = spec[1]
    if kind == "n":
        return rng.normal(size=shape)
    if kind == "p":
        return rng.uniform(0.5, 2.0, size=shape)
    n = int(np.prod(shape))
    vals = (rng.permutation(n) - (n - 1) / 2) * 0.1 + 0.03
    return vals.reshape(shape)


# ------------------------------------------------------------------ the check


def fd_check(fn, specs: dict, wrt: list[str], kind: str, seed: int = 0, entries: int = 6):
    rng = np.random.default_rng(seed)
    arrays = {k: _make(s, rng) for k, s in specs.items()}
    g = Graph()
    with tracing(g):
        feeds = {k: g.input(k, a.shape, "i32" if a.dtype.kind == "i" else "f32") for k, a in arrays.items()}
        out = fn(**feeds)
        w = g.input("_w", out.shape)
        loss = tg.sum(out * w)
    assert any(t.kind == kind for t in g.tensors), f"case for {kind} does not build a {kind} node"
    arrays["_w"] = rng.normal(size=out.shape)
    targets = [feeds[k] for k in wrt]
    grads = append_grad(g, loss, targets)
    ctx = Context("float64")
    ctx.scalars = {"seed": 12345}  # random ops draw the same numbers in every run

    def run(outs, arrs):
        return evaluate(g, outs, {feeds_all[k].id: v for k, v in arrs.items()}, ctx)

    feeds_all = dict(feeds, _w=w)
    analytic = run([grads[t.id] for t in targets], arrays)
    for name, ga in zip(wrt, analytic):
        x = arrays[name]
        assert ga.shape == x.shape
        assert np.abs(ga).max() > 1e-8, f"{kind}: gradient wrt {name} is identically zero"
        flat = rng.permutation(x.size)[:entries]
        for f in flat:
            pos = np.unravel_index(f, x.shape)
            plus, minus = x.copy(), x.copy()
            plus[pos] += EPS
            minus[pos] -= EPS
            lp = run([loss], dict(arrays, **{name: plus}))[0]
            lm = run([loss], dict(arrays, **{name: minus}))[0]
            num = (lp - lm) / (2 * EPS)
            assert abs(num - ga[pos]) <= 1e-5 * max(1.0, abs(num)), (
                f"{kind}: d/d{name}{list(pos)} analytic {ga[pos]} vs numeric {num}"
            )


# ------------------------------------------------------------------ cases by kind
# each case: (fn, {input: spec}, [inputs to differentiate])

UNARY_SHAPES = [(1,), (3, 7), (7, 1, 3)]
BINARY_SHAPES = [((3, 7), (3, 7)), ((7, 1), (1, 3)), ((1,), (3, 7)), ((7, 3, 1), (3, 7)), ((1, 1), (1,))]


def unary(fn, maker=normal):
    return [(fn, {"x": maker(*s)}, ["x"]) for s in UNARY_SHAPES]


def binary(fn, maker_a=normal, maker_b=normal):
    return [(fn, {"a": maker_a(*sa), "b": maker_b(*sb)}, ["a", "b"]) for sa, sb in BINARY_SHAPES]


def _maximum_cases(op):
    # a and b interleaved so that no pair is within 0.05 of a tie
    def fn(a, b):
        return op(a, b + 0.025)

    # (the last pair is left out: one element against one never lets both win)
    return [(fn, {"a": spaced(*sa), "b": spaced(*sb)}, ["a", "b"]) for sa, sb in BINARY_SHAPES[:-1]]


def _where_cases():
    def fn(c, a, b):
        return tg.where(c > 0.0, a, b)

    return [
        (fn, {"c": normal(*sc), "a": normal(*sa), "b": normal(*sb)}, ["a", "b"])
        for sc, sa, sb in [((3, 7), (3, 7), (3, 7)), ((7, 1), (1, 3), (7, 3)), ((3, 7), (3, 1), (1, 7))]
    ]


def _reduce_cases(op, maker):
    return [
        (lambda x, a=a, k=k: op(x, a, k), {"x": maker(*s)}, ["x"])
        for s, a, k in [
            ((7,), None, False),
            ((3, 7), 1, True),
            ((3, 7), 0, False),
            ((7, 1, 3), (0, 2), False),
            ((1, 3, 7), (1,), True),
        ]
    ]


def _matmul_cases():
    cases = [
        (tg.matmul, {"a": normal(*sa), "b": normal(*sb)}, ["a", "b"])
        for sa, sb in [
            ((3, 7), (7, 1)),
            ((2, 3, 7), (7, 3)),
            ((1, 3, 7), (4, 7, 2)),
            ((7,), (7, 3)),
            ((3, 7), (7,)),
            ((1, 1), (1, 3)),
        ]
    ]
    for ta in (False, True):
        for tb in (False, True):
            sa = (2, 7, 3) if ta else (2, 3, 7)
            sb = (1, 5, 7) if tb else (1, 7, 5)
            cases.append(
                (
                    lambda a, b, ta=ta, tb=tb: make("matmul", (a, b), ta=ta, tb=tb),
                    {"a": normal(*sa), "b": normal(*sb)},
                    ["a", "b"],
                )
            )
    return cases


def _conv_cases():
    # (x shape, w shape, stride, padding, groups)
    return [
        ((2, 3, 7, 5), (4, 3, 3, 3), 1, 1, 1),
        ((1, 3, 7, 7), (2, 3, 3, 2), 2, 0, 1),
        ((1, 3, 5, 5), (6, 1, 3, 3), (2, 1), (1, 0), 3),
        ((3, 4, 3, 3), (2, 2, 1, 1), 1, 0, 2),
        ((1, 1, 1, 1), (3, 1, 1, 1), 1, 0, 1),
    ]


def _conv_out(xs, ws, s, p):
    s = (s, s) if isinstance(s, int) else s
    p = (p, p) if isinstance(p, int) else p
    return (xs[0], ws[0], (xs[2] + 2 * p[0] - ws[2]) // s[0] + 1, (xs[3] + 2 * p[1] - ws[3]) // s[1] + 1)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


POOLS = [
    ((2, 3, 6, 7), 2, None, 0),
    ((1, 2, 7, 7), 3, 2, 1),
    ((1, 1, 3, 7), (3, 1), 1, 0),
    ((1, 3, 1, 1), 1, None, 0),
    ((2, 1, 5, 5), (2, 3), (1, 2), (1, 1)),
]


def _pool_out(xs, k, s, p):
    k, p = _pair(k), _pair(p)
    s = k if s is None else _pair(s)
    return xs[:2] + ((xs[2] + 2 * p[0] - k[0]) // s[0] + 1, (xs[3] + 2 * p[1] - k[1]) // s[1] + 1)


def _pattrs(k, s, p):
    k, p = _pair(k), _pair(p)
    return {"kernel": k, "stride": k if s is None else _pair(s), "padding": p}


CASES: dict[str, list] = {
    "add": binary(tg.add) + [(lambda a: a + 2.0, {"a": normal(3, 7)}, ["a"])],
    "sub": binary(tg.sub) + [(lambda a: 1.0 - a, {"a": normal(7)}, ["a"])],
    "mul": binary(tg.mul),
    "div": binary(tg.div, normal, positive) + [(lambda a: 2.0 / a, {"a": positive(3, 7)}, ["a"])],
    "maximum": _maximum_cases(tg.maximum),
    "minimum": _maximum_cases(tg.minimum),
    "where": _where_cases(),
    "neg": unary(tg.neg),
    "abs": unary(tg.abs, spaced),
    "square": unary(tg.square),
    "exp": unary(tg.exp),
    "log": unary(tg.log, positive),
    "sqrt": unary(tg.sqrt, positive),
    "rsqrt": unary(tg.rsqrt, positive),
    "tanh": unary(tg.tanh),
    "sigmoid": unary(tg.sigmoid),
    "relu": unary(tg.relu, spaced),
    "leaky_relu": unary(lambda x: tg.leaky_relu(x, 0.1), spaced),
    "gelu": unary(tg.gelu) + unary(lambda x: tg.gelu(x, approximate="tanh")),
    "silu": unary(tg.silu),
    "softplus": unary(tg.softplus),
    "erf": unary(tg.erf),
    "sin": unary(tg.sin),
    "cos": unary(tg.cos),
    "pow": unary(lambda x: x**2.5, positive) + unary(lambda x: tg.pow(x, -1.5), positive),
    "hardtanh": unary(lambda x: tg.hardtanh(x, -0.325, 0.425), spaced),
    "clamp": unary(lambda x: tg.clamp(x, -0.325, 0.425), spaced)
    + unary(lambda x: tg.clamp(x, min=0.0251), spaced),
    "cast": [(lambda x: make("cast", (x,), dtype="f32") * x, {"x": normal(3, 7)}, ["x"])],
    "cumsum": [
        (lambda x: tg.cumsum(x, 0), {"x": normal(7)}, ["x"]),
        (lambda x: tg.cumsum(x, -1) * tg.arange(1.0, 8.0), {"x": normal(3, 7)}, ["x"]),
        (lambda x: tg.cumsum(x, 1), {"x": normal(2, 7, 3)}, ["x"]),
    ],
    "sum": _reduce_cases(tg.sum, normal),
    "max": _reduce_cases(tg.amax, spaced),
    "min": _reduce_cases(tg.amin, spaced),
    "reshape": [
        (lambda x: tg.reshape(x, (7, 3)) * tg.arange(3.0), {"x": normal(3, 7)}, ["x"]),
        (lambda x: x.reshape(-1), {"x": normal(7, 1, 3)}, ["x"]),
    ],
    "permute": [
        (lambda x: tg.permute(x, (2, 0, 1)), {"x": normal(7, 1, 3)}, ["x"]),
        (lambda x: x.T, {"x": normal(3, 7)}, ["x"]),
    ],
    "broadcast_to": [
        (lambda x: tg.broadcast_to(x, (3, 7)), {"x": normal(1, 7)}, ["x"]),
        (lambda x: tg.broadcast_to(x, (2, 7, 3)), {"x": normal(7, 1)}, ["x"]),
        (lambda x: tg.broadcast_to(x, (3, 7)), {"x": normal(1)}, ["x"]),
    ],
    "slice": [
        (lambda x: x[..., 1:4], {"x": normal(3, 7)}, ["x"]),
        (lambda x: tg.narrow(x, 0, 2, 5), {"x": normal(7, 1, 3)}, ["x"]),
        (lambda x: x[1], {"x": normal(3, 7)}, ["x"]),
    ],
    "pad": [
        (lambda x: tg.pad(x, 1, 2, 1), {"x": normal(3, 7)}, ["x"]),
        (lambda x: tg.pad(x, 0, 0, 3), {"x": normal(1)}, ["x"]),
    ],
    "concat": [
        (lambda a, b: tg.concat([a, b, a], 1), {"a": normal(3, 1), "b": normal(3, 7)}, ["a", "b"]),
        (lambda a, b: tg.stack([a, b], 0), {"a": normal(7, 3), "b": normal(7, 3)}, ["a", "b"]),
    ],
    "matmul": _matmul_cases(),
    "softmax": [
        (lambda x, a=a: tg.softmax(x, a), {"x": normal(*s)}, ["x"])
        for s, a in [((7,), -1), ((3, 7), 0), ((3, 7), -1), ((7, 3, 1), 1), ((2, 3, 7), 2)]
    ],
    "log_softmax": [
        (lambda x, a=a: tg.log_softmax(x, a), {"x": normal(*s)}, ["x"])
        for s, a in [((7,), -1), ((3, 7), 0), ((7, 1, 3), 2), ((2, 3, 7), 1)]
    ],
    "causal_softmax": [
        (lambda x: tg.causal_softmax(x), {"x": normal(*s)}, ["x"])
        for s in [(3, 3), (2, 7, 7), (1, 2, 3, 7), (7, 3), (1, 1, 7, 7)]
    ],
    "sdpa": [
        (
            lambda q, k, v: tg.scaled_dot_product_attention(q, k, v),
            {"q": normal(2, 3, 4), "k": normal(2, 5, 4), "v": normal(2, 5, 3)},
            ["q", "k", "v"],
        ),
        (
            lambda q, k, v: tg.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.7),
            {"q": normal(1, 2, 5, 4), "k": normal(1, 2, 5, 4), "v": normal(1, 1, 5, 4)},
            ["q", "k", "v"],
        ),
        (
            lambda q, k, v, m: (
                tg.scaled_dot_product_attention(q, k, v, m)
                + tg.scaled_dot_product_attention(q, k, v, m > 0.0)
            ),
            {"q": normal(2, 3, 4), "k": normal(1, 5, 4), "v": normal(2, 5, 4), "m": normal(3, 5)},
            ["q", "k", "v"],
        ),
        (  # dropout: the backward draws the forward's bits
            lambda q, k, v: tg.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.4),
            {"q": normal(2, 6, 4), "k": normal(2, 6, 4), "v": normal(2, 6, 4)},
            ["q", "k", "v"],
        ),
    ],
    "normalize": [
        (lambda x: tg.layer_norm(x), {"x": normal(3, 7)}, ["x"]),
        (lambda x: tg.layer_norm(x * 0.1, eps=1e-3), {"x": normal(2, 3, 5)}, ["x"]),
        (
            lambda x, w, b: tg.layer_norm(x, w, b),
            {"x": normal(4, 6), "w": normal(6), "b": normal(6)},
            ["x", "w", "b"],
        ),
        (lambda x: tg.layer_norm(x), {"x": normal(1, 9)}, ["x"]),
    ],
    "embedding": [
        (lambda w, i: tg.embedding(w, i), {"w": normal(*ws), "i": index(ws[0] + hi, *ish)}, ["w"])
        for ws, ish, hi in [((7, 3), (3,), 0), ((3, 7), (2, 7), 0), ((7, 1), (7, 3), 2), ((1, 3), (3,), 0)]
    ],
    "embedding_grad": [
        (
            lambda g, i, n=n: make("embedding_grad", (g, i), num=n),
            {"g": normal(*gs), "i": index(n, *gs[:-1])},
            ["g"],
        )
        for gs, n in [((7, 3), 3), ((2, 3, 7), 7), ((1, 1), 1)]
    ],
    "take_along_axis": [
        (
            lambda x, i, a=a: tg.take_along_axis(x, i, a),
            {"x": normal(*xs), "i": index(hi, *ish, low=lo)},
            ["x"],
        )
        for xs, ish, a, lo, hi in [
            ((3, 7), (3, 2), 1, 0, 7),
            ((7, 1, 3), (2, 1, 3), 0, 0, 7),
            ((3, 7), (3, 7), -1, -1, 8),
            ((1,), (3,), 0, 0, 1),
        ]
    ],
    "take_along_axis_grad": [
        (
            lambda g, i, a=a, n=n: make("take_along_axis_grad", (g, i), axis=a, size=n),
            {"g": normal(*gs), "i": index(n, *gs)},
            ["g"],
        )
        for gs, a, n in [((3, 2), 1, 7), ((2, 1, 3), 0, 7), ((3,), 0, 1)]
    ],
    "conv2d": [
        (
            lambda x, w, s=s, p=p, gr=gr: tg.conv2d(x, w, stride=s, padding=p, groups=gr),
            {"x": normal(*xs), "w": normal(*ws)},
            ["x", "w"],
        )
        for xs, ws, s, p, gr in _conv_cases()
    ],
    "conv2d_grad_input": [
        (
            lambda g, w, xs=xs, s=s, p=p, gr=gr: make(
                "conv2d_grad_input", (g, w), stride=_pair(s), padding=_pair(p), groups=gr, in_hw=xs[2:]
            ),
            {"g": normal(*_conv_out(xs, ws, s, p)), "w": normal(*ws)},
            ["g", "w"],
        )
        for xs, ws, s, p, gr in _conv_cases()
    ],
    "conv2d_grad_weight": [
        (
            lambda x, g, ws=ws, s=s, p=p, gr=gr: make(
                "conv2d_grad_weight", (x, g), stride=_pair(s), padding=_pair(p), groups=gr, kernel=ws[2:]
            ),
            {"x": normal(*xs), "g": normal(*_conv_out(xs, ws, s, p))},
            ["x", "g"],
        )
        for xs, ws, s, p, gr in _conv_cases()
    ],
    "max_pool2d": [
        (lambda x, k=k, s=s, p=p: tg.max_pool2d(x, k, s, p), {"x": spaced(*xs)}, ["x"])
        for xs, k, s, p in POOLS
    ],
    "max_pool2d_grad": [
        (
            lambda x, g, k=k, s=s, p=p: make("max_pool2d_grad", (x, g), **_pattrs(k, s, p)),
            {"x": spaced(*xs), "g": normal(*_pool_out(xs, k, s, p))},
            ["g"],
        )
        for xs, k, s, p in POOLS
    ],
    "max_pool2d_select": [
        (
            lambda x, h, k=k, s=s, p=p: make("max_pool2d_select", (x, h), **_pattrs(k, s, p)),
            {"x": spaced(*xs), "h": normal(*xs)},
            ["h"],
        )
        for xs, k, s, p in POOLS
    ],
    "avg_pool2d": [
        (lambda x, k=k, s=s, p=p: tg.avg_pool2d(x, k, s, p), {"x": normal(*xs)}, ["x"])
        for xs, k, s, p in POOLS
    ],
    "avg_pool2d_grad": [
        (
            lambda g, xs=xs, k=k, s=s, p=p: make("avg_pool2d_grad", (g,), in_hw=xs[2:], **_pattrs(k, s, p)),
            {"g": normal(*_pool_out(xs, k, s, p))},
            ["g"],
        )
        for xs, k, s, p in POOLS
    ],
}

# issue 15: rope; dilation, transposed convolution (conv2d_grad_input) and the pools'
# ceil_mode / count_include_pad, through the same kinds, second-order kinds included
# (x shape, w shape, stride, padding, dilation, groups, conv output shape)
DILATED = [
    ((1, 2, 7, 6), (2, 2, 3, 2), 1, 1, 2, 1, (1, 2, 5, 6)),
    ((1, 4, 8, 7), (2, 2, 2, 3), 2, 0, (3, 1), 2, (1, 2, 3, 3)),
]
# (x shape, kernel, stride, padding, ceil_mode, pooled shape)
CEIL_POOLS = [
    ((2, 1, 6, 5), (3, 2), (2, 3), (1, 1), True, (2, 1, 4, 2)),
    ((1, 1, 5, 5), 2, 2, 1, True, (1, 1, 3, 3)),
]


def _dattrs(s, p, d, gr):
    return {"stride": _pair(s), "padding": _pair(p), "dilation": _pair(d), "groups": gr}


CASES["rope"] = [
    (lambda x: tg.rope(x), {"x": normal(2, 3, 4)}, ["x"]),
    (
        lambda x, p: tg.rope(x, p, base=50.0, interleaved=True),
        {"x": normal(3, 5, 6), "p": index(20, 5)},
        ["x"],
    ),
    (lambda x, p: tg.rope(x, p, base=7.0), {"x": normal(2, 1, 3, 2), "p": index(9, 2, 1, 3)}, ["x"]),
]
CASES["conv2d"] += [
    (
        lambda x, w, c=c: tg.conv2d(x, w, stride=c[2], padding=c[3], dilation=c[4], groups=c[5]),
        {"x": normal(*c[0]), "w": normal(*c[1])},
        ["x", "w"],
    )
    for c in DILATED
] + [
    (
        lambda x, w: tg.conv2d(x, w, padding="same"),
        {"x": normal(1, 2, 5, 4), "w": normal(3, 2, 2, 3)},
        ["x", "w"],
    )
]
CASES["conv2d_grad_input"] += [
    (
        lambda g, w, c=c: make("conv2d_grad_input", (g, w), in_hw=c[0][2:], **_dattrs(*c[2:6])),
        {"g": normal(*c[6]), "w": normal(*c[1])},
        ["g", "w"],
    )
    for c in DILATED
] + [
    (lambda x, w, kw=kw: tg.conv_transpose2d(x, w, **kw), {"x": normal(*xs), "w": normal(*ws)}, ["x", "w"])
    for xs, ws, kw in [
        ((1, 4, 3, 4), (4, 3, 3, 2), {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}),
        ((1, 2, 3, 3), (2, 1, 3, 2), {"dilation": 3, "output_padding": 2}),  # rows conv never sees
    ]
]
CASES["conv2d_grad_weight"] += [
    (
        lambda x, g, c=c: make("conv2d_grad_weight", (x, g), kernel=c[1][2:], **_dattrs(*c[2:6])),
        {"x": normal(*c[0]), "g": normal(*c[6])},
        ["x", "g"],
    )
    for c in DILATED
]
for _xs, _k, _s, _p, _ceil, _out in CEIL_POOLS:
    _a = dict(_pattrs(_k, _s, _p), ceil_mode=_ceil)
    CASES["max_pool2d"].append((lambda x, a=_a: make("max_pool2d", (x,), **a), {"x": spaced(*_xs)}, ["x"]))
    CASES["max_pool2d_grad"].append(
        (
            lambda x, g, a=_a: make("max_pool2d_grad", (x, g), **a),
            {"x": spaced(*_xs), "g": normal(*_out)},
            ["g"],
        )
    )
    CASES["max_pool2d_select"].append(
        (
            lambda x, h, a=_a: make("max_pool2d_select", (x, h), **a),
            {"x": spaced(*_xs), "h": normal(*_xs)},
            ["h"],
        )
    )
    for _cp in (True, False):
        _b = dict(_a, count_include_pad=_cp)
        CASES["avg_pool2d"].append(
            (lambda x, b=_b: make("avg_pool2d", (x,), **b), {"x": normal(*_xs)}, ["x"])
        )
        CASES["avg_pool2d_grad"].append(
            (
                lambda g, b=_b, xs=_xs: make("avg_pool2d_grad", (g,), in_hw=xs[2:], **b),
                {"g": normal(*_out)},
                ["g"],
            )
        )

# composite ops: checked end to end through the kinds they are built from
COMPOSITE_CASES = {
    "cross_entropy": [
        (lambda x, t: tg.cross_entropy(x, t), {"x": normal(3, 7), "t": index(7, 3)}, ["x"]),
        (
            lambda x, t: tg.cross_entropy(x, t, reduction="none"),
            {"x": normal(2, 3, 7), "t": index(7, 2, 3)},
            ["x"],
        ),
        (
            lambda x, t: tg.cross_entropy(x, tg.softmax(t), reduction="sum"),
            {"x": normal(3, 7), "t": normal(3, 7)},
            ["x", "t"],
        ),
    ],
    "nll_loss": [
        (
            lambda x, t: tg.nll_loss(tg.log_softmax(x), t, reduction="sum"),
            {"x": normal(7, 3), "t": index(3, 7)},
            ["x"],
        )
    ],
    "cross_entropy_options": [
        (
            lambda x, t: tg.cross_entropy(x, t, ignore_index=2, label_smoothing=0.3),
            {"x": normal(7, 3), "t": index(3, 7)},
            ["x"],
        ),
        (
            lambda x, t: tg.cross_entropy(x, tg.softmax(t), label_smoothing=0.2, reduction="none"),
            {"x": normal(2, 3, 5), "t": normal(2, 3, 5)},
            ["x", "t"],
        ),
        (
            lambda x, t: tg.nll_loss(tg.log_softmax(x), t, ignore_index=0),
            {"x": normal(3, 7), "t": index(7, 3)},
            ["x"],
        ),
    ],
    "scatter_add": [
        (
            lambda x, i, s: tg.scatter_add(x, 1, i, s),
            {"x": normal(3, 4, 2), "i": index(4, 2, 5, 2), "s": normal(3, 6, 2)},
            ["x", "s"],
        ),
        (
            lambda x, i, s: tg.scatter_add(x, 0, i, s),
            {"x": normal(3), "i": index(3, 7), "s": normal(7)},
            ["x", "s"],
        ),
    ],
    "index_add": [
        (
            lambda x, i, s: tg.index_add(x, 0, i, s, alpha=-2.0),
            {"x": normal(3, 4), "i": index(3, 5), "s": normal(5, 4)},
            ["x", "s"],
        ),
        (
            lambda x, i, s: tg.index_add(x, -1, i, s),
            {"x": normal(2, 3), "i": index(3, 4), "s": normal(2, 4)},
            ["x", "s"],
        ),
    ],
    "mse_loss": [(lambda a, b: tg.mse_loss(a, b), {"a": normal(3, 7), "b": normal(3, 7)}, ["a", "b"])],
    "upsample_nearest2d": [
        (lambda x: tg.upsample_nearest2d(x, 2), {"x": normal(2, 3, 3, 1)}, ["x"]),
        (lambda x: tg.upsample_nearest2d(x, (1, 3)), {"x": normal(1, 1, 7, 3)}, ["x"]),
    ],
    "mean": [(lambda x: tg.mean(x, 1), {"x": normal(3, 7)}, ["x"])],
    "conv2d_bias": [
        (
            lambda x, w, b: tg.conv2d(x, w, b, padding=1),
            {"x": normal(1, 3, 3, 7), "w": normal(2, 3, 3, 3), "b": normal(2)},
            ["x", "w", "b"],
        )
    ],
    "dropout": [
        (lambda x: tg.dropout(x, 0.0) * tg.dropout(x, 0.5, training=False), {"x": normal(3, 7)}, ["x"])
    ],
}

COMPOSITE_KIND = {
    "cross_entropy": "log_softmax",
    "nll_loss": "take_along_axis",
    "cross_entropy_options": "log_softmax",
    "scatter_add": "take_along_axis_grad",
    "index_add": "take_along_axis_grad",
    "mse_loss": "square",
    "upsample_nearest2d": "broadcast_to",
    "mean": "sum",
    "conv2d_bias": "conv2d",
    "dropout": "mul",
}


# Kinds finite differences cannot reach, each with a test of its own below: to_f16's
# gradient is not its derivative, by design (rounding to binary16 has derivative 0 almost
# everywhere; mixed precision passes the f32 cotangent through its f16 copies), and
# from_f16 reads an f16 tensor, which no finite difference in f32 can perturb.
OWN_TEST = {"to_f16": "test_f16_copies_pass_the_cotangent_through", "from_f16": "the same"}


def differentiable_kinds():
    return sorted(k for k, d in REGISTRY.items() if d.grad is not NO_GRAD and k not in OWN_TEST)


def test_f16_copies_pass_the_cotangent_through():
    """to_f16 rounds as binary16 does, from_f16 reads the halves back, and the gradient
    through both is the cotangent, unrounded."""
    rng = np.random.default_rng(0)
    x, v, w = rng.normal(size=(5, 7)) * 3, rng.normal(size=(7, 1)), rng.normal(size=(5, 7))
    g = Graph()
    with tracing(g):
        xi, vi, wi = g.input("x", x.shape), g.input("v", v.shape), g.input("w", w.shape)
        y = make("to_f16", (xi,))
        back = make("from_f16", (y,))
        loss = tg.sum(tg.matmul(y, vi)) + tg.sum(back * wi)
    grads = append_grad(g, loss, [xi])
    out, gx = evaluate(g, [back, grads[xi.id]], {xi.id: x, vi.id: v, wi.id: w}, Context("float64"))
    assert np.array_equal(out, x.astype(np.float16).astype(np.float64)) and not np.array_equal(out, x)
    assert np.array_equal(gx, np.broadcast_to(v.T, x.shape) + w)


def test_every_differentiable_kind_has_a_case():
    missing = [k for k in differentiable_kinds() if not CASES.get(k)]
    assert not missing, f"differentiable op kinds without a finite-difference case: {missing}"
    unknown = [k for k in CASES if k not in REGISTRY or REGISTRY[k].grad is NO_GRAD]
    assert not unknown, f"cases for kinds that are not differentiable kinds: {unknown}"


@pytest.mark.parametrize("kind", differentiable_kinds())
def test_fd(kind):
    for n, (fn, specs, wrt) in enumerate(CASES.get(kind, [])):
        fd_check(fn, specs, wrt, kind, seed=n)


@pytest.mark.parametrize("name", sorted(COMPOSITE_CASES))
def test_fd_composite(name):
    for n, (fn, specs, wrt) in enumerate(COMPOSITE_CASES[name]):
        fd_check(fn, specs, wrt, COMPOSITE_KIND[name], seed=100 + n)
