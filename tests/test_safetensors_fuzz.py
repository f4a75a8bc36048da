"""The hardened safetensors reader (issue 14, item 4): any malformed file gives
tgweb.io.SafetensorsError (an InputError) with a message, in time linear in the
file's size. A seeded fuzz run of a few thousand mutated files is part of the
suite; `python tests/test_safetensors_fuzz.py N [SEED]` runs a longer one."""

from __future__ import annotations

import json
import random
import struct
import sys
import time

import numpy as np
import pytest

import tgweb as tg
from tgweb.io import safetensors as tst

DTYPES = {"F32": "<f4", "I32": "<i4", "F64": "<f8", "I64": "<i8", "U8": "u1", "I8": "i1", "I16": "<i2"}
DTYPES.update({"U16": "<u2", "U32": "<u4", "BOOL": "?"})


def valid_file(rng: random.Random) -> bytes:
    tensors = {}
    for i in range(rng.randint(1, 4)):
        dt = rng.choice(list(DTYPES))
        shape = [rng.randint(0, 4) for _ in range(rng.randint(0, 3))]
        n = int(np.prod(shape)) if shape else 1
        vals = [rng.randint(0, 100) for _ in range(n)]
        a = np.array(vals).astype(np.dtype(DTYPES[dt]) if dt != "BOOL" else bool).reshape(shape)
        tensors[f"t{i}.{rng.choice(['w', 'b', 'x'])}"] = a
    meta = {"a": "b"} if rng.random() < 0.5 else None
    return tst.save(tensors, metadata=meta)


def hostile_json(rng: random.Random):
    choices = [
        lambda: -rng.randint(1, 10**6),
        lambda: rng.random() * 10,
        lambda: True,
        lambda: None,
        lambda: "F32",
        lambda: "x" * rng.randint(0, 20),
        lambda: 10 ** rng.randint(10, 400),
        lambda: [1] * rng.randint(0, 5),
        lambda: [[1, 2]],
        lambda: {"a": 1},
        lambda: [rng.randint(0, 3) for _ in range(rng.choice([65, 1000, 300_000]))],
        lambda: [0, 2**64],
        lambda: [True, False],
        lambda: float("nan"),
        lambda: [[]],
    ]
    return rng.choice(choices)()


def pack(header_text: bytes, data: bytes, rng: random.Random) -> bytes:
    if rng.random() < 0.5:
        header_text += b" " * (-len(header_text) % 8)
    return struct.pack("<Q", len(header_text)) + header_text + data


def split(blob: bytes):
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8 : 8 + n]), blob[8 + n :]


def mutate(blob: bytes, rng: random.Random) -> bytes:
    kind = rng.randrange(12)
    header, data = split(blob)
    names = [k for k in header if k != "__metadata__"]
    name = rng.choice(names)
    b = bytearray(blob)
    if kind == 0:  # flip bytes anywhere
        for _ in range(rng.randint(1, 6)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind == 1:  # truncate or extend
        return bytes(b[: rng.randrange(len(b))]) if rng.random() < 0.6 else blob + bytes(rng.randint(1, 9))
    if kind == 2:  # a wrong header length
        n = struct.unpack("<Q", blob[:8])[0]
        v = rng.choice([n + rng.randint(-9, 9), rng.randrange(2**64), 0, len(blob), 2**27])
        return struct.pack("<Q", max(0, v) % 2**64) + blob[8:]
    if kind == 3:  # one field replaced with hostile JSON
        field = rng.choice(["dtype", "shape", "data_offsets"])
        header[name][field] = hostile_json(rng)
    elif kind == 4:  # a field dropped or added, or the entry replaced
        r = rng.random()
        if r < 0.3:
            del header[name][rng.choice(list(header[name]))]
        elif r < 0.6:
            header[name]["extra"] = hostile_json(rng)
        else:
            header[name] = hostile_json(rng)
    elif kind == 5:  # offsets shifted: overlaps, gaps, out of range
        lo, hi = header[name]["data_offsets"]
        d = rng.randint(-8, 8)
        header[name]["data_offsets"] = [lo + d, hi + rng.choice([0, d])]
    elif kind == 6:  # metadata gone wrong
        header["__metadata__"] = rng.choice([{"a": 1}, [1], "x", {"a": {"b": "c"}}, {"a": None}, 5])
    elif kind == 7:  # a duplicate name, at the text level
        text = json.dumps(header)
        entry = json.dumps({name: header[name]})[1:-1]
        return pack(b"{" + entry.encode() + b"," + text[1:].encode(), data, rng)
    elif kind == 8:  # deep nesting
        depth = rng.choice([70, 1000, 100_000])
        text = json.dumps(header)[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}"
        return pack(text.encode(), data, rng)
    elif kind == 9:  # not an object, not JSON, not UTF-8
        text = rng.choice([b"[]", b"1", b'"s"', b"{", b"\xff\xfe{}", b"{}" + bytes([0x80]), b"null", b""])
        return pack(text, data, rng)
    elif kind == 10:  # shapes and dtypes that disagree with the data
        header[name]["dtype"] = rng.choice(list(DTYPES) + ["F16", "BF16", "f32", ""])
        if rng.random() < 0.5:
            header[name]["shape"] = header[name]["shape"] + [rng.randint(0, 3)]
    else:  # data bytes changed in length
        data = data + bytes(rng.randint(1, 4)) if rng.random() < 0.5 else data[: -rng.randint(1, 4) or None]
    return pack(json.dumps(header).encode(), data, rng)


def fuzz(cases: int, seed: int = 0) -> dict:
    """Run `cases` mutated files; every one must load or raise SafetensorsError. Returns
    the counts and the slowest case's time."""
    rng = random.Random(seed)
    counts = {"loaded": 0, "refused": 0}
    slowest = 0.0
    for i in range(cases):
        blob = mutate(valid_file(rng), rng)
        t = time.perf_counter()
        try:
            tensors, meta = tst.load(blob)
            counts["loaded"] += 1
            assert all(isinstance(v, tg.Array) for v in tensors.values())
        except tst.SafetensorsError as e:
            counts["refused"] += 1
            assert str(e)
        except Exception as e:  # noqa: BLE001 - the point of the test
            raise AssertionError(f"case {i} (seed {seed}): {type(e).__name__}: {e}\n{blob[:300]!r}") from e
        slowest = max(slowest, time.perf_counter() - t)
    counts["slowest_s"] = slowest
    return counts


def test_fuzz_a_few_thousand_files():
    c = fuzz(3000, seed=14)
    assert c["loaded"] + c["refused"] == 3000 and c["refused"] > 2000
    assert c["slowest_s"] < 1.0


def test_the_error_is_an_input_error():
    assert issubclass(tst.SafetensorsError, tg.InputError)
    assert tst.SafetensorsError is tg.io.SafetensorsError


def _file(header: dict | str, data: bytes = b"") -> bytes:
    text = header if isinstance(header, str) else json.dumps(header)
    return struct.pack("<Q", len(text)) + text.encode() + data


E = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}


@pytest.mark.parametrize(
    "blob, match",
    [
        (_file({"a": {**E, "dtype": ["F32"]}}, bytes(4)), r"'a': unsupported dtype \['F32'\]"),
        (_file({"a": {**E, "data_offsets": [True, 4]}}, bytes(4)), "data_offsets must be two ints"),
        (_file({"a": {**E, "data_offsets": [[0], [4]]}}, bytes(4)), "data_offsets must be two ints"),
        (_file({"a": {**E, "shape": [True]}}, bytes(4)), "bad shape"),
        (_file({"a": {**E, "shape": [1] * 65}}, bytes(4)), "at most 64 ints"),
        (_file('{"a":' + json.dumps(E) + ',"a":' + json.dumps(E) + "}", bytes(4)), "names 'a' twice"),
        (_file({"a": E, "b": E}, bytes(4)), r"tensor '[ab]' at bytes \[0, 4\) overlaps"),
        (_file({"a": {**E, "data_offsets": [4, 8]}}, bytes(8)), "leaves a gap of 4 bytes"),
        (_file('{"x":' + "[" * 100_000 + "]" * 100_000 + "}"), "nests deeper than 64"),
        (_file({"__metadata__": {"a": 1}}), "__metadata__ must map strings to strings"),
        (
            _file({"a": {**E, "dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}, b"\xff" * 7 + b"\x7f"),
            "fit in i32",
        ),
    ],
)
def test_malformed_headers_are_named(blob, match):
    with pytest.raises(tst.SafetensorsError, match=match):
        tst.load(blob)


def test_a_huge_shape_is_refused_in_linear_time():
    t = time.perf_counter()
    for dims in (300_000, 3_000_000):
        with pytest.raises(tst.SafetensorsError, match="at most 64"):
            tst.load(_file({"a": {**E, "shape": [7] * dims}}, bytes(4)))
    assert time.perf_counter() - t < 2.0
    # a big product of a few dims is compared, not multiplied out
    with pytest.raises(tst.SafetensorsError, match="bytes for F32"):
        tst.load(_file({"a": {**E, "shape": [10**4000 // 10**3999] * 60}}, bytes(4)))


def test_loading_is_atomic_for_the_caller_and_valid_files_still_load():
    rng = random.Random(1)
    for _ in range(50):
        blob = valid_file(rng)
        tensors, _ = tst.load(blob)
        from safetensors.numpy import load as st_load

        theirs = st_load(blob)
        assert set(theirs) == set(tensors)
        for k, v in theirs.items():
            ours = np.asarray(tensors[k])
            want = v.astype(bool) if v.dtype == bool else v
            np.testing.assert_array_equal(ours.astype(want.dtype), want)


if __name__ == "__main__":  # the long run: python tests/test_safetensors_fuzz.py 100000 [seed]
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    t0 = time.perf_counter()
    print(fuzz(n, seed), f"{time.perf_counter() - t0:.1f} s")
