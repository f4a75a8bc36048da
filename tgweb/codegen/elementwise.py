"""Elementwise kinds as WGSL expressions, index ops (broadcast_to, permute, slice,
pad, concat, gathers) as index arithmetic, and the fused elementwise kernel.

A fused group is a set of nodes of one shape S evaluated at one flat index i of
S: elementwise members read each other as local values, and read tensors stored
elsewhere through broadcasting index arithmetic. Index ops are members whose
input is always stored elsewhere (they read it at a remapped index). The same
group body serves as a reduction's prologue and as its epilogue.
"""

from __future__ import annotations

import math

from ..ir import REGISTRY
from .common import (
    KernelCtx,
    add_idx,
    coord_exprs,
    f32_lit,
    i32_lit,
    invocations,
    lit,
    mul_idx,
    strides,
    u32_lit,
)

WG = 256

_ERF = """fn tg_erf(x: f32) -> f32 {
  let a = abs(x);
  let t = 1.0 / (1.0 + 0.5 * a);
  let y = 1.0 - t * exp(-a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418
    + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587
    + t * (-0.82215223 + t * 0.17087277)))))))));
  return select(-y, y, x >= 0.0);
}"""

_LOG1P = """fn tg_log1p(x: f32) -> f32 {
  let u = 1.0 + x;
  return select(log(u) * (x / (u - 1.0)), x, u == 1.0);
}"""

_TANH = """fn tg_tanh(x: f32) -> f32 {
  return tanh(clamp(x, -15.0, 15.0));
}"""


def _b(op):
    return lambda a, n, kc: f"({a[0]} {op} {a[1]})"


def _f(fn):
    return lambda a, n, kc: f"{fn}({', '.join(a)})"


def _sign(a, n, kc):
    x = a[0]
    if n.dtype == "f32":
        return f"sign({x})"
    return f"(select(0i, 1i, {x} > 0i) - select(0i, 1i, {x} < 0i))"


def _abs(a, n, kc):
    return f"abs({a[0]})"


def _tanh(a, n, kc):
    return f"{kc.helper('tg_tanh', _TANH)}({a[0]})"


def _erf(a, n, kc):
    return f"{kc.helper('tg_erf', _ERF)}({a[0]})"


def _softplus(a, n, kc):
    kc.helper("tg_log1p", _LOG1P)
    x = a[0]
    return f"(max({x}, 0.0) + tg_log1p(exp(-abs({x}))))"


def _gelu(a, n, kc):
    x = a[0]
    if n.attrs["approximate"] == "tanh":
        c = f32_lit(math.sqrt(2.0 / math.pi))
        return (
            f"(0.5 * {x} * (1.0 + {kc.helper('tg_tanh', _TANH)}({c} * ({x} + 0.044715 * {x} * {x} * {x}))))"
        )
    return f"(0.5 * {x} * (1.0 + {kc.helper('tg_erf', _ERF)}({x} * {f32_lit(1 / math.sqrt(2))})))"


def _pow(a, n, kc):
    x, e = a[0], n.attrs["exponent"]
    if e == int(e) and abs(e) <= 4:
        k = int(abs(e))
        p = "1.0" if k == 0 else "(" + " * ".join([x] * k) + ")"
        return p if e >= 0 else f"(1.0 / {p})"
    if e == 0.5:
        return f"sqrt({x})"
    if e == -0.5:
        return f"inverseSqrt({x})"
    if e == int(e):  # integral exponent: defined for negative bases too
        odd = int(e) % 2 == 1
        p = f"pow(abs({x}), {f32_lit(e)})"
        return f"select({p}, -{p}, {x} < 0.0)" if odd else p
    return f"pow({x}, {f32_lit(e)})"


def _clamp(a, n, kc):
    lo, hi = n.attrs["lo"], n.attrs["hi"]
    x = a[0]
    d = n.dtype
    if d == "f32":
        if lo != -math.inf:
            x = f"max({x}, {f32_lit(lo)})"
        if hi != math.inf:
            x = f"min({x}, {f32_lit(hi)})"
        return x
    if lo != -math.inf:
        x = f"max({x}, {i32_lit(math.ceil(lo))})"
    if hi != math.inf:
        x = f"min({x}, {i32_lit(math.floor(hi))})"
    return x


def _cast(a, n, kc):
    src, dst = n.inputs[0].dtype, n.dtype
    x = a[0]
    if src == dst:
        return x
    if dst == "bool":
        return f"({x} != {lit(0, src)})"
    if src == "bool":
        return f"select({lit(0, dst)}, {lit(1, dst)}, {x})"
    return f"{dst}({x})"


def _relu(a, n, kc):
    return f"select({a[0]}, 0.0, {a[0]} < 0.0)"  # keeps NaN, like np.maximum


def _leaky(a, n, kc):
    return f"select({a[0]} * {f32_lit(n.attrs['alpha'])}, {a[0]}, {a[0]} > 0.0)"


def _max(a, n, kc):
    return f"max({a[0]}, {a[1]})"


def _min(a, n, kc):
    return f"min({a[0]}, {a[1]})"


# kind -> expression builder(args, node, kernel ctx)
EXPR = {
    "add": _b("+"),
    "sub": _b("-"),
    "mul": _b("*"),
    "div": _b("/"),
    "maximum": _max,
    "minimum": _min,
    "less": _b("<"),
    "greater": _b(">"),
    "less_equal": _b("<="),
    "greater_equal": _b(">="),
    "equal": _b("=="),
    "logical_and": _b("&&"),
    "logical_or": _b("||"),
    "where": lambda a, n, kc: f"select({a[2]}, {a[1]}, {a[0]})",
    "neg": lambda a, n, kc: f"(-{a[0]})",
    "abs": _abs,
    "sign": _sign,
    "square": lambda a, n, kc: f"({a[0]} * {a[0]})",
    "exp": _f("exp"),
    "log": _f("log"),
    "sqrt": _f("sqrt"),
    "rsqrt": _f("inverseSqrt"),
    "tanh": _tanh,
    "sigmoid": lambda a, n, kc: f"(1.0 / (1.0 + exp(-{a[0]})))",
    "relu": _relu,
    "leaky_relu": _leaky,
    "gelu": _gelu,
    "silu": lambda a, n, kc: f"({a[0]} / (1.0 + exp(-{a[0]})))",
    "softplus": _softplus,
    "erf": _erf,
    "sin": _f("sin"),
    "cos": _f("cos"),
    "pow": _pow,
    "clamp": _clamp,
    "cast": _cast,
}

# Index ops: kinds whose value at index i of their own shape reads their inputs,
# stored elsewhere, at other indices. kind -> emitter(group emitter, node) -> value expr.
INDEX_OPS: dict = {}

# kinds that are pure data, built into any group that uses them
CONST_KINDS = ("full",)


def index_op(kind):
    def deco(fn):
        INDEX_OPS[kind] = fn
        return fn

    return deco


class GroupEmitter:
    """Emits the body of a fused group at flat index `ivar` of shape `shape`.

    members: the group's nodes in topological order. provided: node id -> WGSL
    expression for values the host kernel computes (a reduction's result)."""

    def __init__(self, kc: KernelCtx, shape, members, provided=None) -> None:
        self.kc = kc
        self.shape = tuple(shape)
        self.members = list(members)
        self.member_ids = {m.id for m in self.members}
        self.provided = dict(provided or {})
        self.lines: list[str] = []
        self.local: dict[int, str] = {}
        self._coords: dict[int, str] = {}
        self.inl: dict[int, str] = {}
        self.ivar = "i"

    def emit(self, ivar: str) -> list[str]:
        self.ivar = ivar
        for m in self.members:
            self.local[m.id] = self.compute(m)
        return self.lines

    def let(self, expr: str, prefix: str = "v") -> str:
        v = self.kc.fresh(prefix)
        self.lines.append(f"let {v} = {expr};")
        return v

    def coord(self, d: int) -> str:
        n = self.shape[d]
        if n == 1:
            return "0u"
        if d not in self._coords:
            self._coords[d] = self.let(coord_exprs(self.shape, self.ivar)[d], "c")
        return self._coords[d]

    def compute(self, m) -> str:
        if m.kind in INDEX_OPS:
            return INDEX_OPS[m.kind](self, m)
        if m.kind == "arange":
            i = self.coord(0)
            if m.dtype == "i32":
                e = f"({i32_lit(m.attrs['start'])} + {i32_lit(m.attrs['step'])} * i32({i}))"
            else:
                e = f"({f32_lit(m.attrs['start'])} + {f32_lit(m.attrs['step'])} * f32({i}))"
            return self.let(e)
        if m.kind in CONST_KINDS:
            return lit(m.attrs["value"], m.dtype)
        args = [self.value(x) for x in m.inputs]
        return self.let(EXPR[m.kind](args, m, self.kc))

    def value(self, x) -> str:
        """x's value at the current index, broadcast from x.shape to the group shape."""
        if x.id in self.local:
            return self.local[x.id]
        if x.id in self.provided:
            return self.provided[x.id]
        from .common import _alias_root

        r = _alias_root(x)
        if r.id in self.provided and tuple(x.shape) == self.shape:  # a reshape of it
            return self.provided[r.id]
        if r.id in self.local and tuple(x.shape) == self.shape:  # same flat index
            return self.local[r.id]
        return self.load_at(x, self.bcast_index(x.shape))

    def load_at(self, x, idx: str) -> str:
        from .common import _alias_root

        r = _alias_root(x)
        if r.kind in CONST_KINDS:
            return lit(r.attrs["value"], r.dtype)
        if r.id in self.kc.inlined:  # a size-1 chain over constants and scalars
            if r.id not in self.inl:
                args = [self.load_at(a, "0u") for a in r.inputs]
                self.inl[r.id] = self.let(EXPR[r.kind](args, r, self.kc))
            return self.inl[r.id]
        if r.kind == "scalar":
            return self.kc.load(r, "0u")
        return self.kc.load(x, idx)

    def bcast_index(self, xshape) -> str:
        xshape = tuple(xshape)
        if xshape == self.shape:
            return self.ivar
        size = 1
        for d in xshape:
            size *= d
        if size == 1:
            return "0u"
        lead = len(self.shape) - len(xshape)
        st = strides(xshape)
        return add_idx(*[mul_idx(self.coord(lead + d), st[d]) for d in range(len(xshape)) if xshape[d] != 1])

    def index_in(self, xshape, coords: list[str]) -> str:
        st = strides(tuple(xshape))
        return add_idx(*[mul_idx(c, s) for c, s, n in zip(coords, st, xshape) if n != 1])


# ---------------------------------------------------------------- shape ops


@index_op("broadcast_to")
def _broadcast(g: GroupEmitter, m) -> str:
    x = m.inputs[0]
    return g.load_at(x, g.bcast_index(x.shape))


@index_op("permute")
def _permute(g: GroupEmitter, m) -> str:
    x = m.inputs[0]
    perm = m.attrs["perm"]
    coords = ["0u"] * len(perm)
    for d, p in enumerate(perm):
        coords[p] = g.coord(d)
    return g.load_at(x, g.index_in(x.shape, coords))


@index_op("slice")
def _slice(g: GroupEmitter, m) -> str:
    x = m.inputs[0]
    a = m.attrs["axis"]
    coords = [g.coord(d) for d in range(len(m.shape))]
    coords[a] = add_idx(coords[a], u32_lit(m.attrs["start"]))
    return g.load_at(x, g.index_in(x.shape, coords))


@index_op("pad")
def _pad(g: GroupEmitter, m) -> str:
    x = m.inputs[0]
    a, before = m.attrs["axis"], m.attrs["before"]
    n = x.shape[a]
    coords = [g.coord(d) for d in range(len(m.shape))]
    c = coords[a]
    coords[a] = f"({c} - {before}u)" if before else c
    idx = g.index_in(x.shape, coords)
    v = g.kc.fresh()
    cond = f"{c} >= {before}u && {c} < {before + n}u" if before else f"{c} < {n}u"
    g.lines.append(f"var {v} = {lit(0, m.dtype)};")
    g.lines.append(f"if ({cond}) {{ {v} = {g.load_at(x, idx)}; }}")
    return v


@index_op("concat")
def _concat(g: GroupEmitter, m) -> str:
    a = m.attrs["axis"]
    coords = [g.coord(d) for d in range(len(m.shape))]
    c = coords[a]
    v = g.kc.fresh()
    g.lines.append(f"var {v} = {lit(0, m.dtype)};")
    off = 0
    for j, x in enumerate(m.inputs):
        n = x.shape[a]
        cc = list(coords)
        cc[a] = f"({c} - {off}u)" if off else c
        idx = g.index_in(x.shape, cc)
        body = f"{v} = {g.load_at(x, idx)};"
        if j == 0:
            g.lines.append(f"if ({c} < {off + n}u) {{ {body} }}")
        elif j == len(m.inputs) - 1:
            g.lines.append(f"else {{ {body} }}")
        else:
            g.lines.append(f"else if ({c} < {off + n}u) {{ {body} }}")
        off += n
    return v


# ---------------------------------------------------------------- gathers (nn)


@index_op("one_hot")
def _one_hot(g: GroupEmitter, m) -> str:
    idx = m.inputs[0]
    nd = len(m.shape)
    k = g.load_at(idx, g.index_in(idx.shape, [g.coord(d) for d in range(nd - 1)]))
    return g.let(f"select(0.0, 1.0, {k} == i32({g.coord(nd - 1)}))")


@index_op("embedding")
def _embedding(g: GroupEmitter, m) -> str:
    w, idx = m.inputs
    nd = len(m.shape)
    num, dim = w.shape
    k = g.let(g.load_at(idx, g.index_in(idx.shape, [g.coord(d) for d in range(nd - 1)])))
    v = g.kc.fresh()
    g.lines.append(f"var {v} = 0.0;")
    widx = add_idx(mul_idx(f"u32({k})", dim), g.coord(nd - 1))
    g.lines.append(f"if ({k} >= 0i && {k} < {num}i) {{ {v} = {g.load_at(w, widx)}; }}")
    return v


@index_op("take_along_axis")
def _take(g: GroupEmitter, m) -> str:
    x, idx = m.inputs
    a = m.attrs["axis"]
    coords = [g.coord(d) for d in range(len(m.shape))]
    k = g.let(g.load_at(idx, g.bcast_index(idx.shape)))
    cc = list(coords)
    cc[a] = f"u32({k})"
    v = g.kc.fresh()
    g.lines.append(f"var {v} = {lit(0, m.dtype)};")
    g.lines.append(
        f"if ({k} >= 0i && {k} < {x.shape[a]}i) {{ {v} = {g.load_at(x, g.index_in(x.shape, cc))}; }}"
    )
    return v


@index_op("take_along_axis_grad")
def _take_grad(g: GroupEmitter, m) -> str:
    # out[.., j, ..] = sum over k of gr[.., k, ..] where idx[.., k, ..] == j: a loop over
    # the index axis, so no atomics and a fixed summation order
    gr, idx = m.inputs
    a = m.attrs["axis"]
    coords = [g.coord(d) for d in range(len(m.shape))]
    kk = g.kc.fresh("k")
    cc = list(coords)
    cc[a] = kk
    gi = g.index_in(gr.shape, cc)
    v = g.kc.fresh()
    g.lines.append(f"var {v} = 0.0;")
    g.lines.append(f"for (var {kk} = 0u; {kk} < {gr.shape[a]}u; {kk} = {kk} + 1u) {{")
    g.lines.append(f"  if ({g.load_at(idx, gi)} == i32({coords[a]})) {{ {v} = {v} + {g.load_at(gr, gi)}; }}")
    g.lines.append("}")
    return v


def fusable(kind: str) -> bool:
    """Kinds a fused elementwise group can hold."""
    d = REGISTRY.get(kind)
    return bool(d and d.elementwise) or kind in INDEX_OPS


def same_index(kind: str) -> bool:
    """Kinds that read their inputs at their own index (broadcasting aside)."""
    d = REGISTRY.get(kind)
    return bool(d and d.elementwise)


def emit_group(kc: KernelCtx, shape, members, stored) -> tuple[list[str], tuple[int, int, int]]:
    """A whole elementwise kernel: one invocation per element of shape."""
    n = 1
    for d in shape:
        n *= d
    body, disp = invocations("i", n, WG)
    g = GroupEmitter(kc, shape, members)
    body += g.emit("i")
    for m in members:
        if m.id in stored:
            body.append(kc.store(m, "i", g.local[m.id]))
    return body, disp


def emit_copy(kc: KernelCtx, dst, src) -> tuple[list[str], tuple[int, int, int]]:
    """dst <- src (same shape): the fallback when an update cannot be written in place."""
    n = 1
    for d in dst.shape:
        n *= d
    body, disp = invocations("i", n, WG)
    g = GroupEmitter(kc, dst.shape, [])
    g.ivar = "i"
    val = g.load_at(src, "i")
    body += g.lines
    body.append(kc.store(dst, "i", val))
    return body, disp


def store_result(kc, node, idx: str, value: str, epilogue) -> list[str]:
    """Lines storing a matmul's or a reduction's result at flat index idx, or running
    the fused elementwise epilogue (shape, members, stored) on it (bias, activation,
    mean's scaling) and storing what the epilogue must."""
    if epilogue is None:
        return [kc.store(node, idx, value)]
    shape, members, stored = epilogue
    v = kc.fresh("r")
    g = GroupEmitter(kc, shape, members, provided={node.id: v})
    lines = [f"let {v} = {value};"] + g.emit(idx)
    for m in members:
        if m.id in stored:
            lines.append(kc.store(m, idx, g.local[m.id]))
    if node.id in stored:
        lines.append(kc.store(node, idx, v))
    return lines
