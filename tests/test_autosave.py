"""tgweb.worker.autosave (issue 29): a training loop's checkpoint goes out as an "autosave"
event while it runs; the bytes restore a run that continues bitwise (reference backend)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tgweb import samples, worker
from tgweb.io import checkpoint
from tgweb.samples import sin


@pytest.fixture
def events():
    got: list = []
    worker.set_handler(lambda event, data: got.append((event, data)))
    yield got
    worker.set_handler(None)


def _loop(trainer, steps):
    for _ in range(steps):
        worker.metric("loss", trainer.step(**sin.batch(trainer.calls)))
    worker.flush()


def test_autosave_sends_whole_checkpoints_that_resume_bitwise(events):
    a = samples.compile("sin", backend="reference", seed=0)
    with worker.autosave(a, every_s=1e-9, name="sin", metadata={"note": "x"}) as saver:
        _loop(a, 7)
    _loop(a, 3)  # closed: no more saves
    saves = [d for e, d in events if e == "autosave"]
    assert saver.saves == len(saves) == 7 and saver.seconds > 0
    last = saves[-1]
    assert (last["name"], last["step"], last["calls"], last["metadata"]) == ("sin", 7, 7, {"note": "x"})
    assert last["size"] == len(last["bytes"]) and abs(last["time"] - time.time()) < 60
    # every loss of the saved steps went to the page before the save that holds them
    order = [(e, d["step"]) for e, d in events if e in ("metric", "autosave")]
    assert order.index(("metric", 7)) < order.index(("autosave", 7))
    b = samples.compile("sin", backend="reference", seed=5)
    meta = checkpoint.load(b, last["bytes"])
    assert meta["name"] == "sin" and meta["note"] == "x" and b.calls == 7
    losses_b = [b.step(**sin.batch(b.calls)).loss for _ in range(3)]
    losses_a = [d["value"] for e, d in events if e == "metric"][7:]
    assert losses_b == losses_a


def test_autosave_waits_every_s_between_saves(events):
    a = samples.compile("sin", backend="reference", seed=0)
    with worker.autosave(a, every_s=3600, name="sin") as saver:
        _loop(a, 5)
        assert saver.saves == 0
        saver.save()  # on demand
    assert [d["step"] for e, d in events if e == "autosave"] == [5]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"every_s": 0}, "every_s must be a number of seconds > 0, got 0"),
        ({"every_s": True}, "every_s must be a number of seconds > 0, got True"),
        ({"every_s": "30"}, "every_s must be a number of seconds > 0, got '30'"),
        ({"name": ""}, "name must be a non-empty string"),
        ({"metadata": {"a": 1}}, "metadata must map strings to strings"),
    ],
)
def test_autosave_refuses_bad_arguments(kwargs, message):
    n = len(worker._autosaves)
    with pytest.raises(ValueError, match=message):
        worker.autosave(object(), **kwargs)
    assert len(worker._autosaves) == n  # nothing registered


def test_the_older_name_tgweb_web_is_the_same_module(events):
    """Scripts written before the rename (the page's saved edits too) import tgweb.web: it
    is tgweb.worker itself, so a handler set through one name hears events sent through
    the other, and a fresh interpreter's `import tgweb.web` finds it without a file."""
    import importlib
    import subprocess
    import sys

    import tgweb
    from tgweb import web

    assert web is tgweb.web is importlib.import_module("tgweb.web") is worker is sys.modules["tgweb.worker"]
    web.emit("ping", {"n": 1})
    assert events[-1] == ("ping", {"n": 1})
    fresh = "import tgweb.web, tgweb.worker, sys; print(tgweb.web is tgweb.worker, tgweb.web.__name__)"
    out = subprocess.run([sys.executable, "-c", fresh], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "tgweb.worker"]
    assert not (Path(tgweb.__file__).parent / "web.py").exists()  # one module, one file
