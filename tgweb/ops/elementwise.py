"""Elementwise ops: binary arithmetic with NumPy broadcasting, comparisons, where,
unary math and activations, and casts (full, zeros, ones, arange: tgweb.ops.creation).

Each kind's reference implementation is a NumPy expression and its WGSL is an
expression of its operands' values, so chains of them fuse into one kernel. A new
unary or binary kind is one row of _UNARY or _BINARY plus its public function.
"""

from __future__ import annotations

import math

from ..codegen.common import f32_lit, i32_lit, lit
from ..ir import DTYPES, NO_GRAD, OpError, Tensor, bound_ops, broadcast_shapes, dtype_name, make, register
from .base import as_tensor, op

# ---------------------------------------------------------------- WGSL expressions


def _wgsl(fn):
    """An emitter (group, node) -> expression from fn(operand values..., node, kernel):
    the operands are the inputs' values at the group's current index."""
    return lambda g, n: fn(*g.args(n), n, g.kc)


def _infix(op):
    return _wgsl(lambda a, b, n, kc: f"({a} {op} {b})")


def _call(fn):
    return lambda g, n: f"{fn}({', '.join(g.args(n))})"


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


def _sign_wgsl(x, n, kc):
    if n.dtype == "f32":
        return f"sign({x})"
    return f"(select(0i, 1i, {x} > 0i) - select(0i, 1i, {x} < 0i))"


def _gelu_wgsl(x, n, kc):
    if n.attrs["approximate"] == "tanh":
        c = f32_lit(math.sqrt(2.0 / math.pi))
        return (
            f"(0.5 * {x} * (1.0 + {kc.helper('tg_tanh', _TANH)}({c} * ({x} + 0.044715 * {x} * {x} * {x}))))"
        )
    return f"(0.5 * {x} * (1.0 + {kc.helper('tg_erf', _ERF)}({x} * {f32_lit(1 / math.sqrt(2))})))"


def _pow_wgsl(x, n, kc):
    e = n.attrs["exponent"]
    if e == int(e) and -4 <= e <= 4:  # (this module's abs and pow are ops, not builtins)
        k = int(e) if e >= 0 else -int(e)
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


def _clamp_wgsl(x, n, kc):
    lo, hi = n.attrs["lo"], n.attrs["hi"]
    if n.dtype == "f32":
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


def _cast_wgsl(x, n, kc):
    src, dst = n.inputs[0].dtype, n.dtype
    if src == dst:
        return x
    if dst == "bool":
        return f"({x} != {lit(0, src)})"
    if src == "bool":
        return f"select({lit(0, dst)}, {lit(1, dst)}, {x})"
    return f"{dst}({x})"


_RANK = {"bool": 0, "i32": 1, "f32": 2}


def _promote(a, b, operands="any"):
    """Tensors for two operands; a Python number takes the other operand's dtype
    (a float promotes an integer tensor to f32), mixed tensor dtypes promote upward.
    operands "float": always f32; "int": bools count as i32 (arithmetic); "any": as they
    are."""
    ta = a if isinstance(a, (bool, int, float)) else as_tensor(a)
    tb = b if isinstance(b, (bool, int, float)) else as_tensor(b)
    if not isinstance(ta, Tensor) and not isinstance(tb, Tensor):
        ta = as_tensor(ta)
    like = ta if isinstance(ta, Tensor) else tb

    def dt(x):
        if isinstance(x, Tensor):
            return x.dtype
        return "f32" if isinstance(x, float) else ("bool" if isinstance(x, bool) else "i32")

    da, db = dt(ta), dt(tb)
    # a Python int never raises a tensor's dtype above i32; a float gives f32
    target = max(da, db, key=_RANK.__getitem__)
    if operands == "float":
        target = "f32"
    if operands == "int" and target == "bool":
        target = "i32"
    return _to(ta, target, like), _to(tb, target, like)


def _to(x, dtype, like):
    if isinstance(x, Tensor):
        return x if x.dtype == dtype else cast(x, dtype)
    return as_tensor(x, like=like, dtype=dtype)


# ---------------------------------------------------------------- binary


def _infer_binary(ins, attrs):
    a, b = ins
    if a.dtype != b.dtype:
        raise OpError(f"dtypes differ: {a.dtype} and {b.dtype}")
    return broadcast_shapes(a.shape, b.shape), a.dtype


def _infer_compare(ins, attrs):
    shape, _ = _infer_binary(ins, attrs)
    return shape, "bool"


@op
def unbroadcast(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum g down to shape: undo NumPy broadcasting in a gradient. (Grad rules run once
    every family is loaded; sum and reshape come from the bound namespace, so this
    module imports neither reduce nor shape, which both build on it.)"""
    ops = bound_ops()
    if g.shape == tuple(shape):
        return g
    lead = len(g.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1
    )
    if axes:
        g = ops.sum(g, axes)
    return ops.reshape(g, tuple(shape))


def _g_add(t, g):
    a, b = t.inputs
    return [unbroadcast(g, a.shape), unbroadcast(g, b.shape)]


def _g_sub(t, g):
    a, b = t.inputs
    return [unbroadcast(g, a.shape), unbroadcast(neg(g), b.shape)]


def _g_mul(t, g):
    a, b = t.inputs
    return [unbroadcast(g * b, a.shape), unbroadcast(g * a, b.shape)]


def _g_div(t, g):
    a, b = t.inputs
    return [unbroadcast(g / b, a.shape), unbroadcast(neg(g) * t / b, b.shape)]


def _g_maximum(t, g):
    a, b = t.inputs
    pick_a = greater_equal(a, b) if t.kind == "maximum" else less_equal(a, b)
    return [unbroadcast(where(pick_a, g, 0.0), a.shape), unbroadcast(where(pick_a, 0.0, g), b.shape)]


# kind -> (operands (_promote; "bool": bools only), reference, grad rule or NO_GRAD, WGSL
# expression of the two operands, PyTorch form)
_BINARY = {
    "add": ("int", lambda np, a, b: a + b, _g_add, _infix("+"), lambda tc, a, n: a[0] + a[1]),
    "sub": ("int", lambda np, a, b: a - b, _g_sub, _infix("-"), lambda tc, a, n: a[0] - a[1]),
    "mul": ("int", lambda np, a, b: a * b, _g_mul, _infix("*"), lambda tc, a, n: a[0] * a[1]),
    "div": ("float", lambda np, a, b: a / b, _g_div, _infix("/"), lambda tc, a, n: a[0] / a[1]),
    "maximum": (
        "int",
        lambda np, a, b: np.maximum(a, b),
        _g_maximum,
        _call("max"),
        lambda tc, a, n: tc.torch.maximum(a[0], a[1]),
    ),
    "minimum": (
        "int",
        lambda np, a, b: np.minimum(a, b),
        _g_maximum,
        _call("min"),
        lambda tc, a, n: tc.torch.minimum(a[0], a[1]),
    ),
    "less": ("any", lambda np, a, b: a < b, NO_GRAD, _infix("<"), lambda tc, a, n: a[0] < a[1]),
    "greater": ("any", lambda np, a, b: a > b, NO_GRAD, _infix(">"), lambda tc, a, n: a[0] > a[1]),
    "less_equal": ("any", lambda np, a, b: a <= b, NO_GRAD, _infix("<="), lambda tc, a, n: a[0] <= a[1]),
    "greater_equal": ("any", lambda np, a, b: a >= b, NO_GRAD, _infix(">="), lambda tc, a, n: a[0] >= a[1]),
    "equal": ("any", lambda np, a, b: a == b, NO_GRAD, _infix("=="), lambda tc, a, n: a[0] == a[1]),
    "logical_and": (
        "bool",
        lambda np, a, b: a & b,
        NO_GRAD,
        _infix("&&"),
        lambda tc, a, n: tc.torch.logical_and(a[0], a[1]),
    ),
    "logical_or": (
        "bool",
        lambda np, a, b: a | b,
        NO_GRAD,
        _infix("||"),
        lambda tc, a, n: tc.torch.logical_or(a[0], a[1]),
    ),
}


def _binary_ref(fn):
    def ref(ctx, args, t):
        a, b = args
        out = fn(ctx.np, a, b)
        return ctx.cast(out, t.dtype)

    return ref


for _k, (_, _fn, _g, _w, _torch) in _BINARY.items():
    register(
        _k,
        family="elementwise",
        role="elementwise",
        ref=_binary_ref(_fn),
        grad=_g,
        emit=_w,
        infer=_infer_compare if _g is NO_GRAD else _infer_binary,
        torch=_torch,
    )


def _binary_op(kind: str, doc: str | None = None, **exposure):
    """The public function of a binary kind of _BINARY: f(a, b), tensors or numbers;
    exposure: op()'s method= and torch=."""
    operands = _BINARY[kind][0]

    def fn(a, b) -> Tensor:
        a, b = _promote(a, b, "any" if operands == "bool" else operands)
        if operands == "bool" and a.dtype != "bool":
            raise OpError(f"{kind} needs bool tensors, got {a.dtype}")
        return make(kind, (a, b))

    fn.__name__ = fn.__qualname__ = kind
    fn.__doc__ = doc
    return op(fn, **exposure)


add = _binary_op("add", torch=True)
sub = _binary_op("sub", torch=True)
mul = _binary_op("mul", torch=True)
div = _binary_op("div", "True division; integer operands are promoted to f32.", torch=True)
maximum = _binary_op("maximum", method=True, torch=True)
minimum = _binary_op("minimum", method=True, torch=True)
less = _binary_op("less")
greater = _binary_op("greater")
less_equal = _binary_op("less_equal")
greater_equal = _binary_op("greater_equal")
equal = _binary_op("equal")
logical_and = _binary_op("logical_and", torch=True)
logical_or = _binary_op("logical_or", torch=True)


# ---------------------------------------------------------------- where


def _infer_where(ins, attrs):
    c, a, b = ins
    if c.dtype != "bool":
        raise OpError(f"condition must be bool, got {c.dtype} of shape {c.shape}")
    if a.dtype != b.dtype:
        raise OpError(f"branch dtypes differ: {a.dtype} and {b.dtype}")
    return broadcast_shapes(c.shape, a.shape, b.shape), a.dtype


def _g_where(t, g):
    c, a, b = t.inputs
    return [None, unbroadcast(where(c, g, 0.0), a.shape), unbroadcast(where(c, 0.0, g), b.shape)]


register(
    "where",
    family="elementwise",
    role="elementwise",
    emit=_wgsl(lambda c, a, b, n, kc: f"select({b}, {a}, {c})"),
    infer=_infer_where,
    grad=_g_where,
    ref=lambda ctx, args, t: ctx.cast(ctx.np.where(*args), t.dtype),
    torch=lambda tc, a, n: tc.torch.where(a[0], a[1], a[2]),
)


@op(torch=True)
def where(cond, a, b) -> Tensor:
    """Pick a where cond is true, else b (broadcasting); a and b may be numbers."""
    cond = as_tensor(cond)
    if all(isinstance(v, (bool, int, float)) for v in (a, b)):
        dtype = "f32" if any(isinstance(v, float) for v in (a, b)) else "i32"
        a, b = as_tensor(a, like=cond, dtype=dtype), as_tensor(b, like=cond, dtype=dtype)
    else:
        a, b = _promote(a, b)
    return make("where", (cond, a, b))


# ---------------------------------------------------------------- PyTorch forms

_TORCH_DTYPE = {"f32": "float32", "i32": "int32", "bool": "bool"}


def torch_dtype(tc, dtype: str):
    """The PyTorch dtype of a tgweb dtype (f32 follows the module's float type)."""
    return tc.float if dtype == "f32" else getattr(tc.torch, _TORCH_DTYPE[dtype])


def _torch(name: str, functional: bool = False):
    """The PyTorch form of a unary kind that is torch.<name> (torch.nn.functional's with
    functional) of its operand."""
    return lambda tc, a, n: getattr(tc.F if functional else tc.torch, name)(a[0])


def _torch_clamp(tc, a, n):
    lo, hi = n.attrs["lo"], n.attrs["hi"]
    return tc.torch.clamp(a[0], min=None if lo == -math.inf else lo, max=None if hi == math.inf else hi)


# ---------------------------------------------------------------- unary


def _infer_float_unary(ins, attrs):
    (x,) = ins
    if x.dtype != "f32":
        raise OpError(f"needs a float (f32) tensor, got {x.dtype} of shape {x.shape}")
    return x.shape, "f32"


def _infer_numeric_unary(ins, attrs):
    (x,) = ins
    if x.dtype == "bool":
        raise OpError(f"needs a numeric tensor, got bool of shape {x.shape}")
    return x.shape, x.dtype


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _np_erf(np, x):
    vec = np.frompyfunc(math.erf, 1, 1)
    return vec(x).astype(x.dtype)


def _np_gelu(np, x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _np_erf(np, x * _INV_SQRT_2))


def _g_gelu(t, g):
    (x,) = t.inputs
    if t.attrs["approximate"] == "tanh":
        u = _SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
        th = tanh(u)
        du = _SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x * x)
        d = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du
    else:
        cdf = 0.5 * (1.0 + erf(x * _INV_SQRT_2))
        pdf = exp(-0.5 * x * x) * _INV_SQRT_2PI
        d = cdf + x * pdf
    return [g * d]


def _np_softplus(np, x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


# kind -> (float only, reference, grad(t, g, x) or NO_GRAD, WGSL expression, PyTorch form)
_UNARY = {
    "neg": (
        False,
        lambda np, x, a: -x,
        lambda t, g, x: -g,
        _wgsl(lambda x, n, kc: f"(-{x})"),
        lambda tc, a, n: -a[0],
    ),
    "abs": (False, lambda np, x, a: np.abs(x), lambda t, g, x: g * sign(x), _call("abs"), _torch("abs")),
    "sign": (False, lambda np, x, a: np.sign(x), NO_GRAD, _wgsl(_sign_wgsl), _torch("sign")),
    "square": (
        False,
        lambda np, x, a: x * x,
        lambda t, g, x: g * (2.0 * x),
        _wgsl(lambda x, n, kc: f"({x} * {x})"),
        lambda tc, a, n: a[0] * a[0],
    ),
    "exp": (True, lambda np, x, a: np.exp(x), lambda t, g, x: g * t, _call("exp"), _torch("exp")),
    "log": (True, lambda np, x, a: np.log(x), lambda t, g, x: g / x, _call("log"), _torch("log")),
    "sqrt": (True, lambda np, x, a: np.sqrt(x), lambda t, g, x: g * 0.5 / t, _call("sqrt"), _torch("sqrt")),
    "rsqrt": (
        True,
        lambda np, x, a: 1 / np.sqrt(x),
        lambda t, g, x: g * (-0.5) * t * t * t,
        _call("inverseSqrt"),
        _torch("rsqrt"),
    ),
    "tanh": (
        True,
        lambda np, x, a: np.tanh(x),
        lambda t, g, x: g * (1.0 - t * t),
        _wgsl(lambda x, n, kc: f"{kc.helper('tg_tanh', _TANH)}({x})"),
        _torch("tanh"),
    ),
    "sigmoid": (
        True,
        lambda np, x, a: 1 / (1 + np.exp(-x)),
        lambda t, g, x: g * t * (1.0 - t),
        _wgsl(lambda x, n, kc: f"(1.0 / (1.0 + exp(-{x})))"),
        _torch("sigmoid"),
    ),
    "relu": (
        True,
        lambda np, x, a: np.maximum(x, 0),
        lambda t, g, x: where(t > 0.0, g, 0.0),
        _wgsl(lambda x, n, kc: f"select({x}, 0.0, {x} < 0.0)"),  # keeps NaN, like np.maximum
        _torch("relu"),
    ),
    "leaky_relu": (
        True,
        lambda np, x, a: np.where(x > 0, x, x * a["alpha"]),
        lambda t, g, x: where(x > 0.0, g, g * t.attrs["alpha"]),
        _wgsl(lambda x, n, kc: f"select({x} * {f32_lit(n.attrs['alpha'])}, {x}, {x} > 0.0)"),
        lambda tc, a, n: tc.F.leaky_relu(a[0], n.attrs["alpha"]),
    ),
    "gelu": (
        True,
        lambda np, x, a: _np_gelu(np, x, a["approximate"]),
        lambda t, g, x: _g_gelu(t, g)[0],
        _wgsl(_gelu_wgsl),
        lambda tc, a, n: tc.F.gelu(a[0], approximate=n.attrs["approximate"]),
    ),
    "silu": (
        True,
        lambda np, x, a: x / (1 + np.exp(-x)),
        lambda t, g, x: g * (sigmoid(x) * (1.0 + x * (1.0 - sigmoid(x)))),
        _wgsl(lambda x, n, kc: f"({x} / (1.0 + exp(-{x})))"),
        _torch("silu", functional=True),
    ),
    "softplus": (
        True,
        lambda np, x, a: _np_softplus(np, x),
        lambda t, g, x: g * sigmoid(x),
        _wgsl(lambda x, n, kc: f"(max({x}, 0.0) + {kc.helper('tg_log1p', _LOG1P)}(exp(-abs({x}))))"),
        _torch("softplus", functional=True),
    ),
    "erf": (
        True,
        lambda np, x, a: _np_erf(np, x),
        lambda t, g, x: g * (2.0 / math.sqrt(math.pi)) * exp(-(x * x)),
        _wgsl(lambda x, n, kc: f"{kc.helper('tg_erf', _ERF)}({x})"),
        _torch("erf"),
    ),
    "sin": (True, lambda np, x, a: np.sin(x), lambda t, g, x: g * cos(x), _call("sin"), _torch("sin")),
    "cos": (True, lambda np, x, a: np.cos(x), lambda t, g, x: -(g * sin(x)), _call("cos"), _torch("cos")),
    "pow": (
        True,
        lambda np, x, a: x ** a["exponent"],
        lambda t, g, x: g * (t.attrs["exponent"] * pow(x, t.attrs["exponent"] - 1.0)),
        _wgsl(_pow_wgsl),
        lambda tc, a, n: tc.torch.pow(a[0], n.attrs["exponent"]),
    ),
    "hardtanh": (
        True,
        lambda np, x, a: np.clip(x, a["lo"], a["hi"]),
        lambda t, g, x: where(logical_and(x > t.attrs["lo"], x < t.attrs["hi"]), g, 0.0),
        _wgsl(_clamp_wgsl),
        lambda tc, a, n: tc.F.hardtanh(a[0], n.attrs["lo"], n.attrs["hi"]),
    ),
    "clamp": (
        False,
        lambda np, x, a: np.clip(x, a["lo"], a["hi"]),
        lambda t, g, x: where(logical_and(x >= t.attrs["lo"], x <= t.attrs["hi"]), g, 0.0),
        _wgsl(_clamp_wgsl),
        _torch_clamp,
    ),
}


def _unary_ref(fn):
    def ref(ctx, args, t):
        return ctx.cast(fn(ctx.np, args[0], t.attrs), t.dtype)

    return ref


def _unary_grad(fn):
    def grad(t, g):
        return [fn(t, g, t.inputs[0])]

    return grad


for _k, (_float, _fn, _g, _w, _torch) in _UNARY.items():
    register(
        _k,
        family="elementwise",
        role="elementwise",
        emit=_w,
        ref=_unary_ref(_fn),
        grad=_g if _g is NO_GRAD else _unary_grad(_g),
        infer=_infer_float_unary if _float else _infer_numeric_unary,
        torch=_torch,
    )


def _unary(kind, x, **attrs):
    return make(kind, (as_tensor(x),), **attrs)


def _unary_op(kind: str, **exposure):
    """The public function of a unary kind of _UNARY with no parameters: f(x);
    exposure: op()'s method= and torch=."""

    def fn(x) -> Tensor:
        return _unary(kind, x)

    fn.__name__ = fn.__qualname__ = kind
    return op(fn, **exposure)


neg = _unary_op("neg", torch=True)
abs = _unary_op("abs", method=True, torch=True)
sign = _unary_op("sign", method=True, torch=True)
square = _unary_op("square", method=True, torch=True)
exp = _unary_op("exp", method=True, torch=True)
log = _unary_op("log", method=True, torch=True)
sqrt = _unary_op("sqrt", method=True, torch=True)
rsqrt = _unary_op("rsqrt", method=True, torch=True)
tanh = _unary_op("tanh", method=True, torch=True)
sigmoid = _unary_op("sigmoid", method=True, torch=True)
relu = _unary_op("relu", method=True, torch=True)
silu = _unary_op("silu")
softplus = _unary_op("softplus")
erf = _unary_op("erf", torch=True)
sin = _unary_op("sin", method=True, torch=True)
cos = _unary_op("cos", method=True, torch=True)


@op
def leaky_relu(x, negative_slope: float = 0.01):
    return _unary("leaky_relu", x, alpha=float(negative_slope))


@op
def gelu(x, approximate: str = "none"):
    """GELU; approximate='tanh' gives the tanh approximation, as in PyTorch."""
    if approximate not in ("none", "tanh"):
        raise OpError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return _unary("gelu", x, approximate=approximate)


@op(method=True, torch=True)
def pow(x, exponent):  # noqa: A001 - NumPy's name
    """x ** exponent for a number exponent."""
    if not isinstance(exponent, (int, float)) or isinstance(exponent, bool):
        raise OpError(f"the exponent must be a number, got {type(exponent).__name__}")
    if exponent == 2:
        return square(x)
    return _unary("pow", x, exponent=float(exponent))


@op
def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0):
    """torch.nn.functional.hardtanh: x clamped to [min_val, max_val]; the gradient passes
    strictly inside the range only."""
    if not min_val < max_val:
        raise OpError(f"min_val {min_val} must be less than max_val {max_val}")
    return _unary("hardtanh", x, lo=float(min_val), hi=float(max_val))


@op(method=True, torch=True)
def clamp(x, min=None, max=None):  # noqa: A002 - PyTorch's names
    if min is None and max is None:
        raise OpError("clamp needs min, max or both")
    lo = -math.inf if min is None else float(min)
    hi = math.inf if max is None else float(max)
    if lo > hi:
        raise OpError(f"min {lo} is greater than max {hi}")
    return _unary("clamp", x, lo=lo, hi=hi)


# ---------------------------------------------------------------- casts


def _infer_cast(ins, attrs):
    return ins[0].shape, attrs["dtype"]


def _g_cast(t, g):
    x = t.inputs[0]
    return [g if x.dtype == "f32" and t.dtype == "f32" else None]


register(
    "cast",
    family="elementwise",
    role="elementwise",
    emit=_wgsl(_cast_wgsl),
    infer=_infer_cast,
    grad=_g_cast,
    ref=lambda ctx, args, t: ctx.cast(args[0], t.dtype),
    torch=lambda tc, a, n: (
        tc.torch.trunc(a[0]).to(torch_dtype(tc, n.dtype))
        if n.dtype == "i32" and a[0].is_floating_point()
        else a[0].to(torch_dtype(tc, n.dtype))
    ),
)


@op
def cast(x, dtype: str) -> Tensor:
    """Convert to 'f32', 'i32' or 'bool' (f32 -> i32 truncates toward zero)."""
    dtype = dtype_name(dtype)
    if dtype not in DTYPES:
        raise OpError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    x = as_tensor(x)
    return x if x.dtype == dtype else make("cast", (x,), dtype=dtype)
