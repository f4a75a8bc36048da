"""Host-side arrays without NumPy.

Values cross between the user and tgweb as flat `array.array` buffers plus a
shape. Users may pass NumPy arrays, nested lists, `array.array`, memoryview,
bytes or (in Pyodide) JS typed arrays; they get NumPy arrays back where NumPy
is importable, else `tgweb.Array`.
"""

from __future__ import annotations

import array as _array
import functools
import math
import sys
from typing import Any

from .ir import prod

TYPECODE = {"f32": "f", "i32": "i", "bool": "I"}
F32_MAX = 3.4028234663852886e38  # the largest finite f32


class InputError(ValueError):
    """A value handed to tgweb (step input, parameter, state) is unusable; nothing changed."""


class Array:
    """A minimal n-d array for environments without NumPy: flat data plus a shape."""

    __slots__ = ("shape", "dtype", "data")

    def __init__(self, data: _array.array, shape: tuple[int, ...], dtype: str) -> None:
        self.data, self.shape, self.dtype = data, tuple(shape), dtype

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def tolist(self):
        flat = [bool(v) for v in self.data] if self.dtype == "bool" else self.data.tolist()
        if not self.shape:
            return flat[0]
        return _nest(flat, self.shape)

    def item(self):
        if self.size != 1:
            raise ValueError(f"item() needs a one-element array, not shape {self.shape}")
        v = self.data[0]
        return bool(v) if self.dtype == "bool" else v

    def __float__(self) -> float:
        return float(self.item())

    def __array__(self, dtype=None, copy=None):
        import numpy as np

        npd = {"f32": np.float32, "i32": np.int32, "bool": np.uint32}[self.dtype]
        a = np.frombuffer(self.data.tobytes(), npd).reshape(self.shape)
        if self.dtype == "bool":
            a = a.astype(bool)
        return a if dtype is None else a.astype(dtype)

    def __repr__(self) -> str:
        return f"tgweb.Array({self.tolist()!r}, dtype={self.dtype})"


def _nest(flat, shape):
    if len(shape) == 1:
        return list(flat)
    step = prod(shape[1:])
    return [_nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


@functools.cache
def _numpy():
    """NumPy, or None where it is missing (the browser): looked up once, since a failed
    import searches the whole path again each time (about 0.5 ms in Pyodide)."""
    try:
        import numpy

        return numpy
    except ImportError:
        return None


def to_user(data: _array.array, shape: tuple[int, ...], dtype: str):
    """The array handed back to users: NumPy when it is importable."""
    np = _numpy()
    if np is None:
        return Array(data, shape, dtype)
    a = np.frombuffer(data, {"f32": np.float32, "i32": np.int32, "bool": np.uint32}[dtype])
    a = a.reshape(shape).copy()
    return a.astype(bool) if dtype == "bool" else a


def from_user(x: Any, shape: tuple[int, ...], dtype: str, what: str) -> _array.array:
    """Check x against shape/dtype and return its values as a flat array.array.

    Strict: the shape must match (a flat buffer of the right length is accepted for
    any shape), integer values must fit the dtype (no wrapping: i32 in [-2**31, 2**31),
    bool 0 or 1), floats are refused for integer dtypes, finite floats must fit f32,
    buffers must be C-contiguous with a numeric format, strings are refused. Raw
    bytes/bytearray are a little-endian buffer of exactly 4 bytes per element.
    Every refusal is an InputError naming `what`, what was expected and what came.
    """
    try:
        return _from_user(x, tuple(shape), dtype, what)
    except InputError:
        raise
    except (TypeError, ValueError, OverflowError, RecursionError, BufferError, MemoryError) as e:
        # odd objects whose conversions fail in ways not foreseen above
        raise InputError(
            f"{what}: unusable value of type {type(x).__name__} ({type(e).__name__}: {e})"
        ) from None


def _from_user(x: Any, shape: tuple[int, ...], dtype: str, what: str) -> _array.array:
    n = prod(shape)
    if hasattr(x, "to_py") and not hasattr(x, "shape"):  # a Pyodide JsProxy (typed array)
        x = x.to_py()
    if isinstance(x, str):
        raise InputError(f"{what}: expected {dtype} values of shape {shape}, got a string {_short(x)}")
    if isinstance(x, Array):
        if not isinstance(x.data, _array.array):
            raise InputError(f"{what}: a tgweb.Array whose data is a {type(x.data).__name__}")
        _check_shape(x.shape, shape, what)
        return _from_array(x.data, n, shape, dtype, what)
    if hasattr(x, "__array_interface__") or type(x).__module__ == "numpy":
        return _from_numpy(x, shape, dtype, what)
    if isinstance(x, (bytes, bytearray)):
        return _from_raw(bytes(x), n, shape, dtype, what)
    if isinstance(x, memoryview):
        return _from_memoryview(x, n, shape, dtype, what)
    if isinstance(x, _array.array):
        return _from_array(x, n, shape, dtype, what)
    if isinstance(x, (list, tuple, int, float)):
        flat = _flatten(x, shape, what)
        return _pack([_scalar(v, what) for v in flat], shape, dtype, what)
    raise InputError(
        f"{what}: expected an array (NumPy, list, array.array, memoryview, bytes "
        f"or a JS typed array) of {dtype} values of shape {shape}, got {type(x).__name__}"
    )


def _short(x) -> str:
    r = repr(x)
    return r if len(r) <= 40 else r[:37] + "..."


def _int_range(dtype: str) -> tuple[int, int]:
    return (0, 1) if dtype == "bool" else (-(2**31), 2**31 - 1)


def _range_error(what, dtype, shape, v, i) -> InputError:
    lo, hi = _int_range(dtype)
    rng = "0 or 1" if dtype == "bool" else f"[{lo}, {hi}]"
    return InputError(
        f"{what}: expected {dtype} values of shape {shape}, got {_short(v)} at flat index {i}, "
        f"which does not fit {dtype} ({rng})"
    )


def _pack(vals: list, shape, dtype: str, what: str) -> _array.array:
    """Python numbers (int, float, bool) -> array.array of dtype, refusing what does not fit."""
    code = TYPECODE[dtype]
    if dtype == "f32":
        for i, v in enumerate(vals):
            if type(v) is bool:
                raise InputError(
                    f"{what}: expected f32 values of shape {shape}, got a bool at flat index {i}"
                )
        try:
            out = _array.array(code, vals)
        except OverflowError:  # an int beyond float range
            i = next(i for i, v in enumerate(vals) if isinstance(v, int) and abs(v) > F32_MAX)
            raise _fit_error(what, shape, vals[i], i) from None
        for i, v in enumerate(out):
            if math.isinf(v) and not math.isinf(vals[i]):
                raise _fit_error(what, shape, vals[i], i)
        return out
    for i, v in enumerate(vals):
        if type(v) is float:
            raise InputError(
                f"{what}: expected {dtype} values of shape {shape}, got the float {v!r} at flat index {i}"
            )
    lo, hi = _int_range(dtype)
    for i, v in enumerate(vals):
        if not lo <= v <= hi:
            raise _range_error(what, dtype, shape, v, i)
    return _array.array(code, vals)


def _fit_error(what, shape, v, i) -> InputError:
    return InputError(
        f"{what}: expected f32 values of shape {shape}, got {_short(v)} at flat index {i}, "
        f"beyond the largest finite f32 ({F32_MAX:.7g})"
    )


def _scalar(v: Any, what: str):
    """A Python number from one element of a nested list (NumPy scalars unwrapped)."""
    t = type(v)
    if t is float or t is int or t is bool:
        return v
    if type(v).__module__ == "numpy" and getattr(v, "shape", None) == ():
        if v.dtype.kind in "biuf":
            return v.item()
    if isinstance(v, (str, bytes, bytearray)):
        raise InputError(f"{what}: values must be numbers, got the string {_short(v)}")
    raise InputError(f"{what}: values must be numbers (int, float or bool), got a {type(v).__name__}")


# memoryview / array.array formats: float formats, bool and integer formats
_FLOAT_FORMATS, _INT_FORMATS = "fd", "bBhHiIlLqQnN"


def _format_kind(fmt: str, what: str) -> str:
    if fmt in _FLOAT_FORMATS:
        return "float"
    if fmt == "?":
        return "bool"
    if fmt in _INT_FORMATS:
        return "int"
    raise InputError(
        f"{what}: unsupported buffer format {fmt!r} (expected a numeric format such as 'f' or 'i')"
    )


def _check_buffer_kind(kind: str, dtype: str, fmt: str, shape, what: str) -> None:
    if kind == "float" and dtype != "f32":
        raise InputError(f"{what}: expected {dtype} values of shape {shape}, got floats (format {fmt!r})")
    if kind == "bool" and dtype == "f32":
        raise InputError(f"{what}: expected f32 values of shape {shape}, got bools (format {fmt!r})")


def _from_array(a: _array.array, n: int, shape, dtype: str, what: str) -> _array.array:
    kind = _format_kind(a.typecode, what)
    if len(a) != n:
        raise InputError(f"{what}: expected {n} values for shape {shape}, got {len(a)}")
    _check_buffer_kind(kind, dtype, a.typecode, shape, what)
    if a.typecode == TYPECODE[dtype] and dtype != "bool":
        return _array.array(a.typecode, a)
    return _pack(a.tolist(), shape, dtype, what)


def _from_memoryview(mv: memoryview, n: int, shape, dtype: str, what: str) -> _array.array:
    fmt = mv.format
    if fmt[:1] in "@=" or (fmt[:1] == "<" and sys.byteorder == "little"):
        fmt = fmt[1:]
    kind = _format_kind(fmt, what)
    got = tuple(mv.shape or ())
    if got != shape and not (mv.ndim == 1 and got == (n,)):
        raise InputError(
            f"{what}: expected shape {shape} (or {n} flat values), got a memoryview of shape {got}"
        )
    if not mv.c_contiguous:
        raise InputError(f"{what}: the memoryview is not C-contiguous; copy it first (e.g. bytes(...))")
    _check_buffer_kind(kind, dtype, fmt, shape, what)
    flat = mv.cast("B").cast(fmt) if fmt != "B" else mv.cast("B")
    if fmt == TYPECODE[dtype] and dtype != "bool":
        out = _array.array(fmt)
        out.frombytes(flat.tobytes())
        return out
    return _pack(flat.tolist(), shape, dtype, what)


def _from_raw(raw: bytes, n: int, shape, dtype: str, what: str) -> _array.array:
    if len(raw) != 4 * n:
        raise InputError(f"{what}: expected {n} values of 4 bytes for shape {shape}, got {len(raw)} bytes")
    out = _array.array(TYPECODE[dtype])
    out.frombytes(raw)
    if sys.byteorder == "big":
        out.byteswap()
    if dtype == "bool":
        for i, v in enumerate(out):
            if v > 1:
                raise _range_error(what, dtype, shape, v, i)
    return out


def _from_numpy(x: Any, shape, dtype: str, what: str) -> _array.array:
    np = _numpy()
    a = np.asarray(x)
    _check_shape(a.shape, shape, what)
    k = a.dtype.kind
    if k not in "biuf":
        raise InputError(f"{what}: expected {dtype} values of shape {shape}, got dtype {a.dtype}")
    if k == "f" and dtype != "f32":
        raise InputError(f"{what}: expected {dtype} values of shape {shape}, got floats ({a.dtype})")
    if k == "b" and dtype == "f32":
        raise InputError(f"{what}: expected f32 values of shape {shape}, got bools")
    if k in "iu" and dtype != "f32" and a.size:
        lo, hi = _int_range(dtype)
        bad = (a < lo) | (a > hi)
        if bad.any():
            i = int(np.flatnonzero(bad.reshape(-1))[0])
            raise _range_error(what, dtype, shape, a.reshape(-1)[i].item(), i)
    if k == "f" and a.dtype.itemsize > 4 and a.size:
        with np.errstate(invalid="ignore"):
            bad = np.isfinite(a) & (np.abs(a) > F32_MAX)
        if bad.any():
            i = int(np.flatnonzero(bad.reshape(-1))[0])
            raise _fit_error(what, shape, a.reshape(-1)[i].item(), i)
    npd = {"f32": np.float32, "i32": np.int32, "bool": np.uint32}[dtype]
    out = _array.array(TYPECODE[dtype])
    out.frombytes(np.ascontiguousarray(a, dtype=npd).tobytes())
    return out


def _flatten(x, shape: tuple[int, ...], what: str) -> list:
    """The flat values of nested lists/tuples that must have exactly `shape`; level by
    level, so deep nesting costs no recursion and ragged rows are named."""
    level = [x]
    for depth, want in enumerate(shape):
        nxt: list = []
        for v in level:
            if not isinstance(v, (list, tuple)):
                raise InputError(
                    f"{what}: expected shape {shape}, got nested lists of shape {tuple(shape[:depth])}"
                    f" (a {type(v).__name__} where a list of {want} was expected)"
                )
            if len(v) != want:
                raise InputError(
                    f"{what}: expected shape {shape}, got a list of length {len(v)} at depth {depth}"
                    f" (expected {want}){' — ragged' if nxt else ''}"
                )
            nxt.extend(v)
        level = nxt
    for v in level:
        if isinstance(v, (list, tuple)):
            raise InputError(
                f"{what}: expected shape {shape}, got lists nested deeper than {len(shape)} levels"
            )
    return level


def _check_shape(got, want, what):
    if tuple(got) != tuple(want):
        raise InputError(f"{what}: expected shape {tuple(want)}, got {tuple(got)}")
