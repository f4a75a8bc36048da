"""Host-side arrays without NumPy.

Values cross between the user and tgweb as flat `array.array` buffers plus a
shape. Users may pass NumPy arrays, nested lists, `array.array`, memoryview,
bytes or (in Pyodide) JS typed arrays; they get NumPy arrays back where NumPy
is importable, else `tgweb.Array`.
"""

from __future__ import annotations

import array as _array
import math
from typing import Any

from .ir import prod

TYPECODE = {"f32": "f", "i32": "i", "bool": "I"}


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


def _numpy():
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

    Raises InputError naming `what` on a wrong shape, length, dtype or type.
    """
    n = prod(shape)
    code = TYPECODE[dtype]
    if hasattr(x, "to_py") and not hasattr(x, "shape"):  # a Pyodide JsProxy (typed array)
        x = x.to_py()
    if isinstance(x, Array):
        _check_shape(x.shape, shape, what)
        _check_kind(x.dtype, dtype, what)
        return _array.array(code, x.data)
    if hasattr(x, "__array_interface__") or type(x).__module__ == "numpy":
        np = _numpy()
        a = np.asarray(x)
        _check_shape(a.shape, shape, what)
        kind = {"f": "f32", "i": "i32", "u": "i32", "b": "bool"}.get(a.dtype.kind)
        if kind is None:
            raise InputError(f"{what}: unsupported dtype {a.dtype}")
        _check_kind(kind, dtype, what)
        npd = {"f32": np.float32, "i32": np.int32, "bool": np.uint32}[dtype]
        out = _array.array(code)
        out.frombytes(np.ascontiguousarray(a, dtype=npd).tobytes())
        return out
    if isinstance(x, (bytes, bytearray, memoryview)):
        mv = memoryview(x).cast("B")
        if len(mv) != 4 * n:
            raise InputError(f"{what}: expected {n} values of 4 bytes for shape {shape}, got {len(mv)} bytes")
        out = _array.array(code)
        out.frombytes(mv.tobytes())
        return out
    if isinstance(x, _array.array):
        if len(x) != n:
            raise InputError(f"{what}: expected {n} values for shape {shape}, got {len(x)}")
        if dtype == "f32" and x.typecode not in "fd":
            _check_kind("i32", dtype, what)
        return _array.array(code, x)
    if isinstance(x, (list, tuple, int, float, bool)):
        flat, got = _flatten(x)
        _check_shape(got, shape, what)
        try:
            if dtype == "f32":
                vals = [float(v) for v in flat]
            else:
                if any(isinstance(v, float) for v in flat):
                    raise InputError(f"{what}: expected {dtype} values, got floats")
                vals = [int(v) for v in flat]
            return _array.array(code, vals)
        except (TypeError, OverflowError):
            raise InputError(f"{what}: values must be numbers") from None
    raise InputError(
        f"{what}: expected an array (NumPy, list, array.array, memoryview, bytes "
        f"or a JS typed array), got {type(x).__name__}"
    )


def _flatten(x):
    if not isinstance(x, (list, tuple)):
        return [x], ()
    if not x:
        return [], (0,)
    parts = [_flatten(v) for v in x]
    shapes = {p[1] for p in parts}
    if len(shapes) != 1:
        raise InputError("nested lists are ragged")
    return [v for p in parts for v in p[0]], (len(x),) + shapes.pop()


def _check_shape(got, want, what):
    if tuple(got) != tuple(want):
        raise InputError(f"{what}: expected shape {tuple(want)}, got {tuple(got)}")


def _check_kind(got, want, what):
    ok = got == want or (want == "f32" and got == "i32") or (want == "i32" and got == "bool")
    if not ok:
        raise InputError(f"{what}: expected {want} values, got {got}")


def all_finite(data: _array.array) -> bool:
    return all(math.isfinite(v) for v in data)
