"""attach() with free (None) axes and dtype spellings from NumPy and PyTorch (issue 15,
item 6): each new size compiles once, a bounded number stay compiled, and the training
graph is never recompiled."""

from __future__ import annotations

import numpy as np
import pytest

import tgweb as tg
from tgweb import samples
from tgweb.inference import FreeInference
from tgweb.samples import addition, sin


def _sin_trainer(backend="reference"):
    tr = samples.compile(sin, backend=backend)
    for i in range(5):
        tr.step(**sin.batch(i))
    return tr


@pytest.mark.parametrize("backend", ["reference", "native"])
def test_a_free_batch_axis_runs_any_size_and_compiles_each_once(backend, monkeypatch):
    tr = _sin_trainer(backend)
    free = tr.attach(sin.forward, inputs={"x": (None, 1)})
    monkeypatch.setattr(FreeInference, "KEEP", 2)
    for n in (1, 7, 1000, 7):
        x = np.linspace(-3, 3, n, dtype=np.float32).reshape(n, 1)
        want = tr.attach(sin.forward, inputs={"x": (n, 1)}).run(x=x).output
        np.testing.assert_allclose(free.run(x=x).output, want, rtol=1e-6, atol=1e-7)
    assert len(free._compiled) == 2  # 1000 and 7 stay, 1 was closed
    tr.step(**sin.batch(5))  # it sees every update: the parameters are shared
    x = np.zeros((3, 1), np.float32)
    np.testing.assert_allclose(
        free.run(x=x).output,
        tr.attach(sin.forward, inputs={"x": (3, 1)}).run(x=x).output,
        rtol=1e-6,
        atol=1e-7,
    )
    with pytest.raises(tg.InputError, match=r"input 'x' has shape \(3, 2\), expected \(None, 1\)"):
        free.run(x=np.zeros((3, 2), np.float32))


def test_integer_inputs_with_free_axes_and_dtype_spellings():
    tr = tg.compile(
        addition.Model(),
        addition.loss_fn,
        inputs={
            "tokens": ((addition.BATCH, addition.CTX), "int32"),
            "targets": ((addition.BATCH, addition.CTX), np.int32),
        },
        optimizer=addition.OPTIMIZER,
        backend="reference",
    )
    free = tr.attach(addition.forward, inputs={"tokens": ((None, addition.CTX), "int32")})
    b = addition.batch(0)
    toks = np.asarray(b["tokens"], np.int32).reshape(addition.BATCH, addition.CTX)[:5]
    fixed = tr.attach(addition.forward, inputs={"tokens": ((5, addition.CTX), "i32")})
    np.testing.assert_array_equal(free.run(tokens=toks).output, fixed.run(tokens=toks).output)
    graph, x = tg.trace(lambda x: x, None, {"x": ((2,), "float32")})
    assert x.dtype == "f32" and graph.inputs["x"].dtype == "f32"
    with tg.ir.tracing(graph):
        assert tg.cast(x, "int32").dtype == "i32" and tg.cast(x, np.bool_).dtype == "bool"
        assert tg.full((2,), 1, dtype="float32").dtype == "f32"
    with pytest.raises(tg.TraceError, match="dtype must be one of"):
        tg.trace(lambda x: x, None, {"x": ((2,), "float64")})
