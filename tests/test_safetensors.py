"""tgweb.io.safetensors (pure Python) against the `safetensors` package: files written
here open there and round-trip, and files written there load here."""

from __future__ import annotations

import array
import json
import struct

import numpy as np
import pytest
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from tgweb.arrays import Array
from tgweb.io import safetensors as tst


def _tensors():
    rng = np.random.default_rng(0)
    return {
        "net.0.weight": Array(array.array("f", rng.standard_normal(64).astype(np.float32)), (64, 1), "f32"),
        "net.0.bias": Array(array.array("f", [0.0] * 64), (64,), "f32"),
        "tokens": Array(array.array("i", range(-3, 9)), (3, 4), "i32"),
        "scalar": Array(array.array("f", [2.5]), (), "f32"),
        "empty": Array(array.array("f"), (0, 3), "f32"),
        "np": rng.standard_normal((2, 3, 5)).astype(np.float32),
    }


def test_written_files_open_with_the_safetensors_package(tmp_path):
    t = _tensors()
    path = tmp_path / "p.safetensors"
    tst.save_file(t, path, metadata={"sample": "sin", "steps": "12"})
    got = st_load(path.read_bytes())
    assert set(got) == set(t)
    for name, v in t.items():
        want = np.asarray(v)
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        np.testing.assert_array_equal(got[name], want)
    # header: 8-byte aligned, metadata kept
    n = struct.unpack("<Q", path.read_bytes()[:8])[0]
    assert n % 8 == 0
    assert json.loads(path.read_bytes()[8 : 8 + n])["__metadata__"] == {"sample": "sin", "steps": "12"}
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        assert f.metadata() == {"sample": "sin", "steps": "12"}


def test_files_from_the_safetensors_package_load_and_round_trip():
    rng = np.random.default_rng(1)
    src = {
        "a": rng.standard_normal((4, 7)).astype(np.float32),
        "b": np.arange(6, dtype=np.int32),
        "c": rng.standard_normal(3),
        "d": np.array([True, False]),
    }
    tensors, meta = tst.load(st_save(src, metadata={"k": "v"}))
    assert meta == {"k": "v"}
    assert tensors["a"].shape == (4, 7) and tensors["a"].dtype == "f32"
    np.testing.assert_array_equal(np.asarray(tensors["a"]), src["a"])
    np.testing.assert_array_equal(np.asarray(tensors["b"]), src["b"])
    np.testing.assert_allclose(np.asarray(tensors["c"]), src["c"].astype(np.float32))
    assert tensors["d"].tolist() == [True, False]
    # and back: bytes equal what the package reads
    again = st_load(tst.save({k: tensors[k] for k in ("a", "b")}))
    np.testing.assert_array_equal(again["a"], src["a"])
    np.testing.assert_array_equal(again["b"], src["b"])


def test_trainer_params_round_trip_through_a_file(tmp_path):
    import tgweb as tg
    from tgweb.samples import sin

    trainer = tg.compile(
        sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER, backend="reference", seed=0
    )
    for step in range(3):
        trainer.step(**sin.batch(step))
    before = {k: np.asarray(v) for k, v in trainer.params().items()}
    path = tmp_path / "sin.safetensors"
    tst.save_file(trainer.params(), path)
    trainer.reset()
    loaded, _ = tst.load_file(path)
    trainer.load_params(loaded)
    for k, v in trainer.params().items():
        np.testing.assert_array_equal(np.asarray(v), before[k])


@pytest.mark.parametrize(
    "blob, msg",
    [
        (b"\x01\x00", "only 2 bytes"),
        (struct.pack("<Q", 1 << 40) + b"{}", "header length"),
        (struct.pack("<Q", 2) + b"[]", "not a JSON object"),
        (struct.pack("<Q", 3) + b"{x}", "not JSON"),
        (
            struct.pack("<Q", 56) + b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}  ' + b"\0" * 4,
            r"4 bytes for F32 \[2\]",
        ),
        (
            struct.pack("<Q", 56) + b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}  ' + b"\0" * 8,
            "4 bytes after",
        ),
        (
            struct.pack("<Q", 56) + b'{"a":{"dtype":"X99","shape":[1],"data_offsets":[0,4]}}  ' + b"\0" * 4,
            "unsupported dtype",
        ),
    ],
)
def test_bad_files_raise_clear_errors(blob, msg):
    with pytest.raises(tst.SafetensorsError, match=msg):
        tst.load(blob)


def test_bad_values_raise():
    with pytest.raises(tst.SafetensorsError, match="ragged"):
        tst.save({"a": [[1.0, 2.0], [3.0]]})
    with pytest.raises(tst.SafetensorsError, match="cannot store"):
        tst.save({"a": object()})
    assert st_load(tst.save({"l": [[1.0, 2.0], [3.0, 4.0]], "i": [1, 2]}))["i"].dtype == np.int32
