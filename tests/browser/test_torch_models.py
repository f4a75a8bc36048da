"""A PyTorch model file (tests/torch_models/gpt.py) trains in the browser under
tgweb.torch: Pyodide has no torch, so tgweb.torch stands in for it in sys.modules while
the file's source (shipped to the page as a string) is executed. Its losses step by step
match the same file on the reference backend here, from the same initial weights."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from .conftest import py

MODELS = pathlib.Path(__file__).resolve().parents[1] / "torch_models"
STEPS = 6

# run in CPython and in Pyodide alike: the file under tgweb.torch, trained from `init`
HELPER = """
import array, importlib, json, sys, types

import tgweb as tg

_NAMES = ("", ".nn", ".nn.functional", ".nn.init", ".optim", ".optim.lr_scheduler")


def _torch_file(src, name):
    saved = {n: sys.modules.get("torch" + n) for n in _NAMES}
    for n in _NAMES:
        sys.modules["torch" + n] = importlib.import_module("tgweb.torch" + n)
    try:
        mod = types.ModuleType(name)
        exec(compile(src, name + ".py", "exec"), mod.__dict__)
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop("torch" + n, None)
            else:
                sys.modules["torch" + n] = m
    return mod


def _train_file(case, backend):
    # losses of training the file's model from `init`, with its own lr loop (set_lr) if any
    src, name, args, init, batches = json.loads(case)
    mod = _torch_file(src, name)
    m = mod.model(*args)
    m.load_state_dict({k: array.array("f", v) for k, v in init.items()}, strict=False)
    opt = mod.optimizer(m)[0]
    trainer = tg.compile(m, mod.loss, mod.INPUTS, optimizer=opt, backend=backend)
    steps = []
    for i, b in enumerate(batches):
        if hasattr(mod, "set_lr"):
            mod.set_lr(opt, i)
        feeds = {k: array.array("f" if kind == "f" else "q", v) for k, (kind, v) in b.items()}
        steps.append(trainer.step(**feeds))
    losses = [float(r.loss) for r in steps]
    trainer.close()
    return losses
"""

# nanoGPT's model; an LSTM word model; convolutions with batch norm (running statistics as
# graph state) and transposed convolutions; data constants the forward builds
CASES = [
    ("gpt", [True]),
    ("gpt", [False]),
    ("manual_lr", []),
    ("wordlm", ["LSTM"]),
    ("dcgan", []),
    ("classweights", []),
]


@pytest.mark.parametrize("name,args", CASES, ids=[f"{n}-{'-'.join(map(str, a))}" for n, a in CASES])
def test_model_file_trains_in_chromium_as_on_the_reference_backend(page, name, args):
    ns: dict = {}
    exec(HELPER, ns)
    src = (MODELS / f"{name}.py").read_text()
    mod = ns["_torch_file"](src, name)
    params = dict(mod.model(*args).named_parameters())  # buffers are rebuilt by the file
    init = {k: np.asarray(v.value).ravel().tolist() for k, v in params.items()}
    rng = np.random.default_rng(1)
    batches = [
        {k: [v.dtype.kind, v.ravel().tolist()] for k, v in mod.batch(rng).items()} for _ in range(STEPS)
    ]
    case = json.dumps([src, name, args, init, batches])
    want = ns["_train_file"](case, "reference")
    py(page, HELPER)
    status, got = page.evaluate(
        """async (payload) => {
        try { return ["ok", await window.tg.run("_train_file(_case, 'browser')",
                                                 {filename: "torch_model.py", globals: {_case: payload}})]; }
        catch (e) { return ["error", e.message]; } }""",
        case,
    )
    assert status == "ok", got
    print(f"\n{name}.py {args} in Chromium: {got}\nreference: {want}")
    assert py(page, "import sys; sorted(m for m in sys.modules if m.split('.')[0] == 'torch')") == []
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)  # kernel tolerance
    assert np.ptp(want) > 1e-3  # the steps change the model
