"""The compiled-Program cache natively (tgweb/progcache.py, on lavapipe): a hit trains with
exactly the losses of a compile, a source edit misses, a damaged entry is rebuilt, and
what cannot be cached (the reference backend, a tgweb.torch optimizer) is not. The
browser's store, a tgweb change and another adapter class: tests/browser/test_progcache.py."""

from __future__ import annotations

import pytest

import tgweb as tg
from tgweb import progcache
from tgweb.samples import sin

pytestmark = pytest.mark.native  # tests/conftest.py: skipped without an adapter, fails in CI


@pytest.fixture
def store():
    s = progcache.MemoryStore()
    progcache.use(s)
    yield s
    progcache.use(None)


def _run(source, backend="native", steps=3):
    """(the compile's outcome, the losses); natively also an inference program attached
    in the same scope: (outcome, losses, the attach's outcome, its outputs)."""
    with progcache.keyed(source, "sin"):
        tr = tg.compile(sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER, backend=backend)
        outcome = progcache.last.get("outcome")
        inf = tr.attach(sin.forward, inputs=sin.EVAL_INPUTS) if backend == "native" else None
    try:
        losses = [tr.step(**sin.batch(i)).loss for i in range(steps)]
        if inf is None:
            return outcome, losses
        return outcome, losses, progcache.log[-1]["outcome"], inf.run(**sin.grid()).output.tolist()
    finally:
        tr.close()


def test_hit_trains_exactly_as_a_compile_and_an_edit_misses(store, monkeypatch):
    first = _run("source")
    # the step, the attached forward, and the trainer's program of initial values
    assert first[0] == "miss" and first[2] == "miss" and len(store) == 3
    with monkeypatch.context() as m:  # a hit lowers nothing, its initial values included
        m.setattr("tgweb.initial.lower", None)
        assert _run("source") == ("hit", first[1], "hit", first[3])  # the same losses and outputs
    assert [e["kind"] for e in progcache.log] == ["step", "forward"]
    edited = _run("source # edited")
    assert edited[0] == edited[2] == "miss" and len(store) == 6


def test_attached_program_from_the_cache_exports_and_is_keyed_by_its_call(store, tmp_path):
    def attach_twice():
        with progcache.keyed("attach", "sin"):
            tr = tg.compile(sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER)
            return (
                tr,
                tr.attach(sin.forward, inputs=sin.EVAL_INPUTS),
                tr.attach(sin.forward, inputs={"x": (5, 1)}),
            )

    tr, a, b = attach_twice()
    keys = [e["key"] for e in progcache.log]
    tr.close()
    tr, a, b = attach_twice()
    try:
        assert [e["outcome"] for e in progcache.log] == ["hit"] * 3 and [
            e["key"] for e in progcache.log
        ] == keys
        assert len(set(keys)) == 3 and len(store) == 4  # and the initial values' program
        assert b.run(x=[[0.5]] * 5).output.shape == (5, 1)
        assert not isinstance(a.graph, tg.Graph) and isinstance(a.traced(), tg.Graph)
        assert tg.export_page(a, tmp_path / "sin.html")["bytes"] > 0  # traces again for its CPU-class Program
        # outside a keyed() scope nothing is looked up
        progcache.log.clear()
        tr.attach(sin.forward, inputs=sin.EVAL_INPUTS)
        assert not progcache.log
    finally:
        tr.close()


def test_damaged_entry_is_rebuilt(store):
    losses = _run("damaged")[1]
    key = next(k for k, text in store.items() if '"updates":[]' not in text)  # the trainer's
    text = store[key]
    store[key] = text[:-50] + ("1" if text[-50] != "1" else "2") + text[-49:]
    outcome, again, *_ = _run("damaged")
    assert outcome == "corrupt: checksum mismatch" and again == losses
    assert _run("damaged")[0] == "hit"
    # a damaged inference entry likewise
    key = next(k for k, text in store.items() if '"updates":[]' in text)
    store[key] = store[key][:-10]
    got = _run("damaged")
    assert got[2] == "corrupt: checksum mismatch" and got[3] == _run("damaged")[3]
    assert progcache.log[-1]["outcome"] == "hit"


def test_what_is_not_cached(store):
    assert _run("reference", backend="reference", steps=1)[0] is None  # it runs the graph
    from tgweb import torch

    model = sin.Model()
    opt = torch.optim.SGD(list(model.parameters()), lr=0.01)
    with progcache.keyed("torch optimizer"):
        tg.compile(model, sin.loss_fn, inputs=sin.INPUTS, optimizer=opt).close()
    assert not store and not progcache.last  # its build() keeps host state
    with pytest.raises(TypeError, match="source must be the code's text"):
        with progcache.keyed(b"bytes"):
            pass
