# ruff: noqa: E501  (Python and JavaScript sources embedded in strings)
"""Kernel parity in the browser: one op kind (at least) of every family is traced and
lowered to a Program inside Pyodide, run on web/gpu.mjs through the browser backend,
and compared with the reference backend (NumPy, in this CPython process)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tgweb as tg
from tgweb.backends.reference import Context, evaluate
from tgweb.trace import trace

from .conftest import py, run_py

# name: (source defining fn(**inputs), {input: (shape, dtype)}, tolerance)
CASES = {
    "elementwise": (
        """
def fn(x, y):
    return tg.gelu(x) * tg.sigmoid(y) + tg.where(x > y, tg.exp(x * 0.5), tg.tanh(y)) - tg.sqrt(tg.abs(y) + 1.0)
""",
        {"x": ((7, 33), "f32"), "y": ((7, 33), "f32")},
        2e-5,
    ),
    "reduce": (
        """
def fn(x):
    return tg.sum(x, axis=1), tg.mean(x, axis=0)
""",
        {"x": ((33, 257), "f32")},
        2e-5,
    ),
    "reduce_max": (
        """
def fn(x):
    return tg.amax(x, axis=0), tg.amin(x, axis=1), tg.argmax(x, axis=-1)
""",
        {"x": ((33, 257), "f32")},
        0,
    ),
    "shape": (
        """
def fn(x, y):
    z = tg.concat([tg.permute(x, (1, 0)), y], axis=0)
    return tg.pad(z, 1, 2, 1), tg.broadcast_to(tg.reshape(x[1:4], (3, 1, 7)), (3, 5, 7))
""",
        {"x": ((5, 7), "f32"), "y": ((3, 5), "f32")},
        0,
    ),
    "matmul": (
        """
def fn(a, b, c):
    return tg.matmul(a, b), tg.matmul(c, tg.permute(c, (0, 2, 1)))
""",
        {"a": ((7, 33), "f32"), "b": ((33, 65), "f32"), "c": ((3, 9, 17), "f32")},
        1e-4,
    ),
    "softmax": (
        """
def fn(x):
    return tg.softmax(x, axis=-1), tg.log_softmax(x, axis=0)
""",
        {"x": ((9, 130), "f32")},
        2e-5,
    ),
    "layer_norm": (  # rows of 130 (one invocation each here) and of 1100 (a workgroup each)
        """
def fn(x, w, b, y):
    return tg.layer_norm(x, w, b), tg.layer_norm(y * 3.0 + 1.0, eps=1e-3)
""",
        {"x": ((9, 130), "f32"), "w": ((130,), "f32"), "b": ((130,), "f32"), "y": ((3, 1100), "f32")},
        2e-5,
    ),
    "cumsum": (  # rows of 9 (one invocation each here), of 1100 (a workgroup each) and i32
        """
def fn(x, y, k):
    return tg.cumsum(x, 0), tg.cumsum(y, -1), tg.cumsum(k, 1)
""",
        {"x": ((9, 130), "f32"), "y": ((3, 1100), "f32"), "k": ((4, 70), "i32")},
        2e-5,
    ),
    "embedding": (
        """
def fn(table, ids):
    return tg.embedding(table, ids), tg.one_hot(ids, 11)
""",
        {"table": ((11, 6), "f32"), "ids": ((3, 5), "i32")},
        0,
    ),
    "conv_pool": (
        """
def fn(x, w):
    y = tg.conv2d(x, w, stride=1, padding=1)
    return y, tg.max_pool2d(y, 2), tg.avg_pool2d(x, 3, stride=2)
""",
        {"x": ((2, 3, 9, 9), "f32"), "w": ((4, 3, 3, 3), "f32")},
        1e-4,
    ),
    # WGSL allows sin/cos an absolute error of 2^-11; SwiftShader's reach 3e-4
    "rope": (
        """
def fn(t, q):
    return tg.rope(t, q), tg.rope(t * 2.0, interleaved=True, base=100.0)
""",
        {"t": ((2, 5, 8), "f32"), "q": ((5,), "i32")},
        1e-3,
    ),
    "issue15": (
        """
def fn(x, w, q, s, k):
    return (
        tg.conv2d(x, w, padding="same", dilation=2),
        tg.conv_transpose2d(x, tg.permute(w, (1, 0, 2, 3)), stride=2, padding=1, output_padding=1),
        tg.max_pool2d(x, 3, 2, 1, ceil_mode=True), tg.avg_pool2d(x, 2, ceil_mode=True, count_include_pad=False),
        tg.scatter_add(s, 0, k, s[:2] * 2.0), tg.index_add(s, 0, q[:4], s[:4]),
    )
""",
        {
            "x": ((2, 3, 9, 8), "f32"),
            "w": ((4, 3, 3, 3), "f32"),
            "q": ((5,), "i32"),
            "s": ((11, 3), "f32"),
            "k": ((2, 3), "i32"),
        },
        1e-4,
    ),
    "stochastic": (
        """
def fn(x):
    return tg.rand((5, 67)), tg.dropout(x, 0.3)
""",
        {"x": ((4, 33), "f32")},
        1e-6,
    ),
}
SEED = 1234

RUN_IN_PYODIDE = """
import array, json
import tgweb as tg
from tgweb.trace import trace
from tgweb.lower import lower
from tgweb.backends import browser

def _parity(src, specs, data, seed):
    ns = {"tg": tg}
    exec(compile(src, "case.py", "exec"), ns)
    graph, out = trace(ns["fn"], None, {k: (tuple(s), d) for k, (s, d) in specs.items()})
    outs = out if isinstance(out, (tuple, list)) else (out,)
    for i, t in enumerate(outs):
        graph.outputs[f"out{i}"] = t
    prog = lower(graph, limits=browser.device_limits())
    rt = browser.Runtime(prog)
    try:
        codes = {"f32": "f", "i32": "i", "bool": "I"}
        inputs = {k: array.array(codes[specs[k][1]], v) for k, v in data.items()}
        scalars = {"seed": seed} if "seed" in graph.scalars else {}
        got = rt.run(inputs, scalars, [("outputs", f"out{i}") for i in range(len(outs))])
        return [got[("outputs", f"out{i}")].tolist() for i in range(len(outs))]
    finally:
        rt.close()
"""


def _data(specs):
    rng = np.random.default_rng(0)
    out = {}
    for k, (shape, dtype) in specs.items():
        if dtype == "i32":
            out[k] = rng.integers(0, 11, shape).astype(np.int32)
        else:
            out[k] = rng.standard_normal(shape).astype(np.float32)
    return out


def _reference(src, specs, data):
    ns = {"tg": tg}
    exec(compile(src, "case.py", "exec"), ns)
    graph, out = trace(ns["fn"], None, specs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    ctx = Context()
    ctx.scalars = {"seed": SEED}
    feeds = {graph.inputs[k].id: v for k, v in data.items()}
    return evaluate(graph, outs, feeds, ctx)


@pytest.fixture(scope="module")
def parity_helper(page):
    py(page, RUN_IN_PYODIDE)


@pytest.mark.parametrize("family", list(CASES))
def test_kernel_parity(page, parity_helper, family):
    src, specs, tol = CASES[family]
    data = _data(specs)
    want = _reference(src, specs, data)
    payload = json.dumps(
        [
            src,
            {k: [list(s), d] for k, (s, d) in specs.items()},
            {k: v.ravel().tolist() for k, v in data.items()},
            SEED,
        ]
    )
    py(page, f"_case = json.loads({payload!r})")  # kept out of the traceback's source line
    status, got = run_py(page, "_parity(*_case)", filename="parity.py")
    if status != "ok":
        raise AssertionError(got["message"])
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g, dtype=np.float64).reshape(w.shape)
        w = np.asarray(w, dtype=np.float64)
        if tol == 0:
            np.testing.assert_array_equal(g, w, err_msg=f"{family} output {i}")
        else:
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"{family} output {i}")


# ---- backward kernels and the optimizer update, through whole training steps ----------
# The same model, data and seed train for a few steps in the browser and on the reference
# backend here; parameters and optimizer states must agree.

TRAIN_CASES = {
    # SGD with lr 1 and one step: parameter change = -gradient, so this checks the backward
    # kernels of embedding, conv2d, avg_pool2d, matmul, gelu, layer norm and mean
    "backward": (
        """
import tgweb as tg
from tgweb import nn

class Net(nn.Module):
    def __init__(self):
        self.emb = nn.Embedding(11, 4)
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.norm = nn.LayerNorm(18)
        self.out = nn.Linear(18, 1)

    def forward(self, ids, img):
        e = self.emb(ids).reshape((2, 2, 3, 4))            # [batch, channels, h, w]
        c = tg.avg_pool2d(tg.gelu(self.conv(e + img)), 2, stride=1)   # [2, 3, 2, 3]
        return self.out(self.norm(c.reshape((2, 18))))

def loss_fn(model, ids, img, y):
    return ((model(ids, img) - y) ** 2).mean()

INPUTS = {"ids": ((2, 6), "i32"), "img": (2, 2, 3, 4), "y": (2, 1)}
OPT = tg.optim.SGD(1.0)
STEPS = 1
""",
        1e-4,
    ),
    # AdamW with weight decay, global clipping and a schedule, over 4 steps
    "optimizer_update": (
        """
import tgweb as tg
from tgweb import nn

class Net(nn.Module):
    def __init__(self):
        self.l1 = nn.Linear(5, 7)
        self.l2 = nn.Linear(7, 3)

    def forward(self, x):
        return self.l2(tg.tanh(self.l1(x)))

def loss_fn(model, x, y):
    return ((model(x) - y) ** 2).mean()

INPUTS = {"x": (6, 5), "y": (6, 3)}
OPT = {"name": "adamw", "lr": 0.05, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 0.1,
       "schedule": {"kind": "cosine", "start": 0.05, "end": 0.005, "steps": 4}, "clip": 0.5}
STEPS = 4
""",
        1e-5,
    ),
}

TRAIN_RUN = """
def _train(src, data, backend):
    ns = {}
    exec(compile(src, "model.py", "exec"), ns)
    tg = ns["tg"]
    trainer = tg.compile(ns["Net"](), ns["loss_fn"], inputs=ns["INPUTS"], optimizer=ns["OPT"],
                         backend=backend, seed=3)
    losses = [float(trainer.step(**data).loss) for _ in range(ns["STEPS"])]
    # NumPy arrays in CPython, tgweb.Array (flat .data) in the browser
    flat = lambda d: {k: (v.ravel().tolist() if hasattr(v, "ravel") else list(v.data)) for k, v in d.items()}
    return {"losses": losses, "params": flat(trainer.params()), "states": flat(trainer.states())}
"""


@pytest.mark.parametrize("case", list(TRAIN_CASES))
def test_training_step_parity(page, case):
    src, tol = TRAIN_CASES[case]
    ns: dict = {}
    exec(compile(src, "model.py", "exec"), ns)
    rng = np.random.default_rng(1)
    data = {}
    for k, spec in ns["INPUTS"].items():
        shape, dtype = spec if isinstance(spec[1], str) else (spec, "f32")
        data[k] = (
            rng.integers(0, 11, shape).astype(np.int32)
            if dtype == "i32"
            else rng.standard_normal(shape).astype(np.float32)
        )
    ref_ns: dict = {}
    exec(TRAIN_RUN, ref_ns)
    want = ref_ns["_train"](src, data, "reference")
    js = {k: v.ravel().tolist() for k, v in data.items()}
    types = {k: ("Int32Array" if v.dtype == np.int32 else "Float32Array") for k, v in data.items()}
    py(page, TRAIN_RUN)
    got = page.evaluate(
        """async ([src, data, types]) => {
        // each input as a JS typed array, as a page would hand it over
        const globals = {_src: src};
        for (const [k, v] of Object.entries(data)) globals["_in_" + k] = new self[types[k]](v);
        const names = Object.keys(data).map((k) => `"${k}": _in_${k}`).join(", ");
        try { return ["ok", await window.tg.run(`_train(_src, {${names}}, "browser")`,
                                                 {filename: "train_parity.py", globals})]; }
        catch (e) { return ["error", e.message]; } }""",
        [src, js, types],
    )
    status, got = got
    if status != "ok":
        raise AssertionError(got)
    print(f"\n{case}: losses {got['losses']}, {len(got['params'])} params, {len(got['states'])} states")
    np.testing.assert_allclose(got["losses"], want["losses"], rtol=tol, atol=tol, err_msg=f"{case}: losses")
    for kind in ("params", "states"):
        assert set(got[kind]) == set(want[kind])
        for n in want[kind]:
            np.testing.assert_allclose(
                got[kind][n], want[kind][n], rtol=tol, atol=tol, err_msg=f"{case}: {kind} {n}"
            )
