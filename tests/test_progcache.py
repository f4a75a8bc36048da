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
    with progcache.keyed(source, "sin"):
        tr = tg.compile(sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER, backend=backend)
    outcome = progcache.last.get("outcome")
    try:
        if backend == "native":  # an inference program attached to a cached trainer
            tr.attach(sin.forward, inputs=sin.EVAL_INPUTS).run(**sin.grid())
        return outcome, [tr.step(**sin.batch(i)).loss for i in range(steps)]
    finally:
        tr.close()


def test_hit_trains_exactly_as_a_compile_and_an_edit_misses(store):
    first = _run("source")
    assert first[0] == "miss" and len(store) == 1
    assert _run("source") == ("hit", first[1])
    assert _run("source # edited")[0] == "miss" and len(store) == 2


def test_damaged_entry_is_rebuilt(store):
    losses = _run("damaged")[1]
    (key,) = store
    text = store[key]
    store[key] = text[:-50] + ("1" if text[-50] != "1" else "2") + text[-49:]
    outcome, again = _run("damaged")
    assert outcome == "corrupt: checksum mismatch" and again == losses
    assert _run("damaged")[0] == "hit"


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
