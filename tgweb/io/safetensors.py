"""The safetensors file format, read and written in pure Python (no NumPy), so that
the trainer page can save and load parameters inside Pyodide.

A file is: an 8-byte little-endian unsigned header length N; N bytes of JSON, an
object mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
(offsets into the data that follows, which the tensors cover with no gaps), plus an
optional "__metadata__" object of string -> string; then the raw little-endian data.
The header is padded with spaces to a multiple of 8 bytes, as the reference
implementation does, so that the data starts aligned.

    from tgweb.io import safetensors
    blob = safetensors.save(trainer.params(), metadata={"sample": "sin"})
    tensors, meta = safetensors.load(blob)      # name -> tgweb.Array, metadata dict
    trainer.load_params(tensors)
"""

from __future__ import annotations

import array
import json
import os
import re
import struct
import sys
from typing import Any

from ..arrays import Array, InputError
from ..ir import is_text

# safetensors dtype -> (array typecode, tgweb dtype or None when tgweb has no such dtype)
_DTYPES = {
    "F32": ("f", "f32"),
    "I32": ("i", "i32"),
    "F64": ("d", None),
    "I64": ("q", None),
    "U8": ("B", None),
    "I8": ("b", None),
    "I16": ("h", None),
    "U16": ("H", None),
    "U32": ("I", None),
    "BOOL": ("B", "bool"),
}
_FROM_TGWEB = {"f32": "F32", "i32": "I32", "bool": "BOOL"}
_FROM_TYPECODE = {
    "f": "F32",
    "i": "I32",
    "d": "F64",
    "q": "I64",
    "B": "U8",
    "b": "I8",
    "h": "I16",
    "H": "U16",
    "I": "U32",
}
_FROM_NUMPY = {
    "float32": "F32",
    "int32": "I32",
    "float64": "F64",
    "int64": "I64",
    "uint8": "U8",
    "int8": "I8",
    "int16": "I16",
    "uint16": "U16",
    "uint32": "U32",
    "bool": "BOOL",
}
_MAX_HEADER = 100 * 1024 * 1024  # the reference implementation's limit
MAX_RANK = 64  # far beyond any real tensor; bounds the work a hostile shape costs
MAX_NESTING = 64  # JSON nesting in the header (tensor entries need 3 levels)


class SafetensorsError(InputError):
    """The bytes are not a valid safetensors file, or a value cannot be stored."""


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _nested(x) -> tuple[list[int], list]:
    """Shape and flat values of a nested list of numbers."""
    shape, level = [], x
    while isinstance(level, (list, tuple)):
        shape.append(len(level))
        level = level[0] if level else None
    flat: list = []

    def walk(v, depth):
        if depth == len(shape):
            if isinstance(v, (list, tuple)):
                raise SafetensorsError("a nested list with ragged rows")
            flat.append(v)
            return
        if not isinstance(v, (list, tuple)) or len(v) != shape[depth]:
            raise SafetensorsError("a nested list with ragged rows")
        for w in v:
            walk(w, depth + 1)

    walk(x, 0)
    return shape, flat


def _encode(name: str, value: Any) -> tuple[str, list[int], bytes]:
    """(dtype, shape, little-endian bytes) of one tensor."""
    if isinstance(value, Array):
        dtype, shape = _FROM_TGWEB[value.dtype], list(value.shape)
        data = value.data
        if value.dtype == "bool":
            data = array.array("B", [1 if v else 0 for v in data])
    elif hasattr(value, "dtype") and hasattr(value, "tobytes") and hasattr(value, "shape"):  # NumPy
        dtype = _FROM_NUMPY.get(str(value.dtype))
        if dtype is None:
            raise SafetensorsError(f"tensor {name!r}: dtype {value.dtype} is not supported")
        shape = [int(d) for d in value.shape]
        order = getattr(value.dtype, "byteorder", "=")
        le = value.astype(value.dtype.newbyteorder("<")) if order == ">" else value
        return dtype, shape, le.tobytes(order="C")
    elif isinstance(value, array.array):
        if value.typecode not in _FROM_TYPECODE:
            raise SafetensorsError(f"tensor {name!r}: array typecode {value.typecode!r} is not supported")
        dtype, shape, data = _FROM_TYPECODE[value.typecode], [len(value)], value
    elif isinstance(value, (list, tuple)):
        shape, flat = _nested(value)
        if all(isinstance(v, bool) for v in flat) and flat:
            dtype, data = "BOOL", array.array("B", [int(v) for v in flat])
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in flat) and flat:
            dtype, data = "I32", array.array("i", flat)
        else:
            dtype, data = "F32", array.array("f", [float(v) for v in flat])
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        dtype, shape, data = "F32", [], array.array("f", [float(value)])
    else:
        raise SafetensorsError(f"tensor {name!r}: cannot store a {type(value).__name__}")
    if len(data) != _prod(shape):
        raise SafetensorsError(f"tensor {name!r}: {len(data)} values for shape {shape}")
    if sys.byteorder == "big" and data.itemsize > 1:
        data = array.array(data.typecode, data)
        data.byteswap()
    return dtype, shape, data.tobytes()


def save(tensors: dict[str, Any], metadata: dict[str, str] | None = None) -> bytes:
    """The safetensors bytes of tensors: name -> tgweb.Array, NumPy array, array.array
    (1-d), nested list or number. metadata: extra string -> string entries."""
    if not isinstance(tensors, dict):
        raise SafetensorsError(f"save: expected a dict of name -> tensor, got {type(tensors).__name__}")
    header: dict[str, Any] = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise SafetensorsError("save: metadata must map strings to strings")
        _check_text(metadata, "save: metadata")
        header["__metadata__"] = dict(metadata)
    _check_text(tensors, "save: tensor name")
    chunks, offset = [], 0
    for name in tensors:
        if not isinstance(name, str) or not name or name == "__metadata__":
            raise SafetensorsError(f"save: bad tensor name {name!r}")
        dtype, shape, raw = _encode(name, tensors[name])
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def _check_text(d: dict, what: str) -> None:
    """The format's header is UTF-8 JSON: a key or string value with no UTF-8 form (a
    lone surrogate, which JSON can escape) is refused, naming it."""
    for k, v in d.items():
        for s in (k, v):
            if isinstance(s, str) and not is_text(s):
                raise SafetensorsError(f"{what} {s!r} is not valid UTF-8 text (it holds a lone surrogate)")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_entry(name: str, info: Any, size: int) -> tuple[str, list[int], int, int]:
    """(dtype, shape, begin, end) of one header entry, every field validated, in time
    linear in the entry's size; SafetensorsError naming the tensor otherwise."""
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise SafetensorsError(f"tensor {name!r}: a header entry needs exactly dtype, shape, data_offsets")
    dtype, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in _DTYPES:
        raise SafetensorsError(f"tensor {name!r}: unsupported dtype {_short(dtype)}")
    if not isinstance(shape, list) or len(shape) > MAX_RANK:
        raise SafetensorsError(
            f"tensor {name!r}: bad shape {_short(shape)} (a list of at most {MAX_RANK} ints)"
        )
    itemsize = array.array(_DTYPES[dtype][0]).itemsize
    nbytes = itemsize
    for d in shape:
        if not _is_int(d) or d < 0:
            raise SafetensorsError(f"tensor {name!r}: bad shape {_short(shape)}")
        nbytes = nbytes * d if nbytes <= size else nbytes  # stays small: compared below
    if not isinstance(offs, list) or len(offs) != 2 or not all(_is_int(o) for o in offs):
        raise SafetensorsError(f"tensor {name!r}: data_offsets must be two ints, got {_short(offs)}")
    lo, hi = offs
    if not 0 <= lo <= hi <= size:
        raise SafetensorsError(f"tensor {name!r}: data_offsets {offs!r} outside the {size} data bytes")
    if 0 in shape:
        nbytes = 0
    if hi - lo != nbytes:
        raise SafetensorsError(f"tensor {name!r}: {hi - lo} bytes for {dtype} {shape}")
    return dtype, shape, lo, hi


def _short(x: Any) -> str:
    r = repr(x)
    return r if len(r) <= 60 else r[:57] + "..."


def _decode(name: str, dtype: str, shape: list[int], raw: memoryview) -> Array:
    code, tg_dtype = _DTYPES[dtype]
    out = array.array(code)
    out.frombytes(raw)
    if sys.byteorder == "big" and out.itemsize > 1:
        out.byteswap()
    if tg_dtype is None and code == "d":  # tgweb has no f64: narrow to f32
        out, tg_dtype = array.array("f", out), "f32"
    elif tg_dtype is None:  # other integer types become i32 when every value fits
        if out and not (-(2**31) <= min(out) and max(out) < 2**31):
            raise SafetensorsError(f"tensor {name!r}: {dtype} values do not fit in i32")
        out, tg_dtype = array.array("i", out), "i32"
    if tg_dtype == "bool":
        out = array.array("I", [1 if v else 0 for v in out])
    return Array(out, tuple(shape), tg_dtype)


def _no_duplicates(pairs: list) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise SafetensorsError(f"the header names {dup!r} twice")
    return d


_SPECIAL = re.compile(rb'[\[\]{}"\\]')


def _nesting(text: bytes) -> int:
    """The deepest bracket nesting of a JSON text (strings skipped), in one pass over
    its brackets, quotes and backslashes."""
    depth = deepest = 0
    in_str = False
    skip = -1  # the index of a character escaped by a backslash
    for m in _SPECIAL.finditer(text):
        i, c = m.start(), text[m.start()]
        if i == skip:
            continue
        if in_str:
            if c == 0x5C:
                skip = i + 1
            elif c == 0x22:
                in_str = False
        elif c == 0x22:
            in_str = True
        elif c in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif c in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _header(raw: bytes) -> dict:
    if _nesting(raw) > MAX_NESTING:
        raise SafetensorsError(f"not a safetensors file: the header nests deeper than {MAX_NESTING} levels")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except SafetensorsError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise SafetensorsError(f"not a safetensors file: the header is not JSON ({_short(str(e))})") from None
    if not isinstance(header, dict):
        raise SafetensorsError("not a safetensors file: the header is not a JSON object")
    return header


def load(blob: bytes | bytearray | memoryview) -> tuple[dict[str, Array], dict[str, str]]:
    """(tensors, metadata) from safetensors bytes; tensors are tgweb.Array (F32 as f32,
    I32 as i32, F64 narrowed to f32, other integers to i32 when they fit).

    Any malformed file gives SafetensorsError (an InputError) with a message, in time
    linear in its size: the header is at most 100 MiB of JSON nested at most
    MAX_NESTING deep, with no duplicate names; each entry has a known dtype, a shape
    of at most MAX_RANK non-negative ints and data_offsets that match it; the ranges
    tile the data section with no overlap, gap or trailing bytes."""
    try:
        mv = memoryview(blob).cast("B")
    except TypeError as e:
        raise SafetensorsError(
            f"not a safetensors file: expected bytes, got {type(blob).__name__} ({e})"
        ) from None
    if len(mv) < 8:
        raise SafetensorsError(f"not a safetensors file: only {len(mv)} bytes")
    (n,) = struct.unpack("<Q", mv[:8])
    if n > _MAX_HEADER or 8 + n > len(mv):
        raise SafetensorsError(f"not a safetensors file: header length {n} does not fit in {len(mv)} bytes")
    header = _header(bytes(mv[8 : 8 + n]))
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise SafetensorsError("__metadata__ must map strings to strings")
    _check_text(meta, "__metadata__")
    _check_text({k: None for k in header}, "tensor name")
    data = mv[8 + n :]
    entries = {name: _check_entry(name, info, len(data)) for name, info in header.items()}
    # the format forbids holes and overlaps: the ranges tile the data section
    end = 0
    for lo, hi, name in sorted((e[2], e[3], k) for k, e in entries.items()):
        if lo != end:
            what = "overlaps the tensor before it" if lo < end else f"leaves a gap of {lo - end} bytes"
            raise SafetensorsError(f"tensor {name!r} at bytes [{lo}, {hi}) {what}")
        end = hi
    if end != len(data):
        raise SafetensorsError(f"{len(data) - end} bytes after the last tensor")
    tensors = {k: _decode(k, e[0], e[1], data[e[2] : e[3]]) for k, e in entries.items()}
    return tensors, dict(meta)


def save_file(
    tensors: dict[str, Any], path: str | os.PathLike, metadata: dict[str, str] | None = None
) -> None:
    with open(path, "wb") as f:
        f.write(save(tensors, metadata))


def load_file(path: str | os.PathLike) -> tuple[dict[str, Array], dict[str, str]]:
    with open(path, "rb") as f:
        return load(f.read())
