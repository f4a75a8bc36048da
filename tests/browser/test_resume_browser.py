"""Exact resume across the browser: a checkpoint made in the worker restores in a fresh
browser trainer and in a native one."""

from __future__ import annotations

from .conftest import py

RESUME = """
import tgweb as tg
from tgweb.io import checkpoint
from tgweb.samples import sin

def trainer(seed):
    return tg.compile(sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer={**sin.OPTIMIZER, "clip": 1.0},
                      seed=seed)

a = trainer(0)
for i in range(5):
    a.step(**sin.batch(i))
blob = checkpoint.save(a)
b = trainer(9)
checkpoint.load(b, blob)
la = [a.step(**sin.batch(i)).loss for i in range(5, 10)]
lb = [b.step(**sin.batch(i)).loss for i in range(5, 10)]
{"a": la, "b": lb, "blob": list(blob)}
"""


def test_the_browser_resumes_from_a_checkpoint_and_so_does_native(page):
    """A checkpoint made in the browser restores in a fresh browser trainer and in a
    native one (issue 14, item 3): the same next steps within kernel tolerance."""
    import numpy as np

    import tgweb as tg
    from tgweb.io import checkpoint
    from tgweb.samples import sin

    out = py(page, RESUME)
    np.testing.assert_allclose(out["b"], out["a"], rtol=1e-6)
    nat = tg.compile(
        sin.Model(),
        sin.loss_fn,
        inputs=sin.INPUTS,
        optimizer={**sin.OPTIMIZER, "clip": 1.0},
        backend="native",
        seed=5,
    )
    checkpoint.load(nat, bytes(out["blob"]))
    assert nat.steps == 5
    np.testing.assert_allclose([nat.step(**sin.batch(i)).loss for i in range(5, 10)], out["a"], rtol=1e-4)
