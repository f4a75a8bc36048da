"""Strict step inputs (issue 14, item 1): every hostile value is refused with a
tgweb.InputError that names the input, what was expected and what came, and
changes nothing (parameters, optimizer state, step and call counts). Integer
inputs that feed an index op are range-checked against the size they index;
indices computed inside the graph follow the documented rule (zeros)."""

from __future__ import annotations

import array
import fractions
import re
import sys

import numpy as np
import pytest

import tgweb as tg
from tgweb import nn
from tgweb.arrays import from_user
from tgweb.step_data import index_bounds


class M(nn.Module):
    def __init__(self):
        self.emb = nn.Embedding(5, 4)
        self.fc = nn.Linear(4, 3)

    def forward(self, tok):
        return self.fc(self.emb(tok))


def loss_fn(m, tok, tgt, x, mask, sel):
    logits = m(tok) + (x * 0.1).sum(-1, keepdims=True)  # [6, 3]
    ce = tg.cross_entropy(logits[:4], tgt[:4], reduction="none")  # only a slice reaches the op
    oh = tg.one_hot(sel, 3)
    picked = tg.take_along_axis(logits, tg.unsqueeze(sel, -1), -1)
    return tg.where(mask[:4], ce, 0.0).mean() + (oh * logits).mean() + picked.mean()


INPUTS = {
    "tok": ((6,), "i32"),
    "tgt": ((6,), "i32"),
    "x": (6, 4),
    "mask": ((6,), "bool"),
    "sel": ((6,), "i32"),
}


def good():
    return {
        "tok": np.array([0, 1, 2, 3, 4, 0], np.int32),
        "tgt": np.array([0, 1, 2, 0, 1, 2], np.int32),
        "x": np.linspace(-1, 1, 24, dtype=np.float32).reshape(6, 4),
        "mask": np.array([1, 1, 0, 1, 1, 1], bool),
        "sel": np.array([2, 1, 0, 2, 1, 0], np.int32),
    }


@pytest.fixture(scope="module")
def tr():
    t = tg.compile(M(), loss_fn, INPUTS, tg.optim.AdamW(1e-2), backend="reference")
    assert t.step(**good()).ok
    return t


def snapshot(t):
    return (
        {k: v.tobytes() for k, v in t.params().items()},
        {k: v.tobytes() for k, v in t.states().items()},
        t.steps,
        t.calls,
    )


def _deep(n):
    x: list = [1.0]
    for _ in range(n):
        x = [x]
    return x


class Weird:
    def __float__(self):
        raise RuntimeError("no")


def _strided():
    return memoryview(np.zeros((6, 8), np.float32)[:, ::2])


def _mv(values, fmt, shape=None):
    mv = memoryview(array.array(fmt, values)).cast("B").cast(fmt)
    return mv.cast("B").cast(fmt, shape) if shape else mv


def _raw_i32(values):
    return array.array("i", values).tobytes()


# (input, bad value, regex the message must match)
BAD = [
    # --- x: f32 (6, 4)
    ("x", "1.5", r"input 'x'.*string"),
    ("x", [["1"] * 4] * 6, r"input 'x'.*string '1'"),
    ("x", [[b"1"] * 4] * 6, r"input 'x'.*string"),
    ("x", b"\0" * 5, r"input 'x'.*24 values of 4 bytes.*got 5 bytes"),
    ("x", bytearray(7), r"input 'x'.*got 7 bytes"),
    ("x", _mv([0.0] * 24, "f", (4, 6)), r"input 'x'.*shape \(6, 4\).*memoryview of shape \(4, 6\)"),
    ("x", _strided(), r"input 'x'.*not C-contiguous"),
    ("x", memoryview(b"\0" * 96), r"input 'x'.*memoryview of shape \(96,\)"),
    ("x", memoryview(np.zeros((6, 4), np.complex64)), r"input 'x'.*format"),
    ("x", _deep(10_000), r"input 'x'.*expected shape \(6, 4\)"),
    ("x", _deep(50), r"input 'x'.*expected shape \(6, 4\)"),
    ("x", [[10**400] * 4] * 6, r"input 'x'.*beyond the largest finite f32"),
    ("x", [[1e39] * 4] * 6, r"input 'x'.*1e\+39.*beyond the largest finite f32"),
    ("x", np.full((6, 4), 1e39), r"input 'x'.*beyond the largest finite f32"),
    ("x", object(), r"input 'x'.*got object"),
    ("x", None, r"input 'x'.*got NoneType"),
    ("x", {"a": 1}, r"input 'x'.*got dict"),
    ("x", {1.0, 2.0}, r"input 'x'.*got set"),
    ("x", [[fractions.Fraction(1, 2)] * 4] * 6, r"input 'x'.*numbers.*Fraction"),
    ("x", [[Weird()] * 4] * 6, r"input 'x'.*numbers.*Weird"),
    ("x", [[complex(1, 1)] * 4] * 6, r"input 'x'.*numbers.*complex"),
    ("x", np.zeros((6, 4), np.complex64), r"input 'x'.*dtype complex64"),
    ("x", np.array([["a"] * 4] * 6), r"input 'x'.*dtype <U1"),
    ("x", np.empty((6, 4), object), r"input 'x'.*dtype object"),
    ("x", np.zeros((6, 4), "datetime64[s]"), r"input 'x'.*dtype datetime64"),
    ("x", [[1.0] * 4] * 5 + [[1.0] * 3], r"input 'x'.*length 3 at depth 1.*ragged"),
    ("x", [[1.0] * 4] * 5, r"input 'x'.*length 5 at depth 0"),
    ("x", [[[1.0]] * 4] * 6, r"input 'x'.*nested deeper than 2"),
    ("x", array.array("d", [0.0] * 23), r"input 'x'.*24 values.*got 23"),
    ("x", array.array("u", "a" * 24), r"input 'x'.*format 'u'"),
    ("x", np.zeros((4, 6), np.float32), r"input 'x'.*shape \(6, 4\), got \(4, 6\)"),
    ("x", [[True] * 4] * 6, r"input 'x'.*f32.*bool"),
    ("x", np.ones((6, 4), bool), r"input 'x'.*f32.*bools"),
    ("x", 1.0, r"input 'x'.*shape \(6, 4\), got nested lists of shape \(\)"),
    ("x", tg.Array(array.array("f", [0.0] * 24), (4, 6), "f32"), r"input 'x'.*shape \(6, 4\), got \(4, 6\)"),
    ("x", tg.Array([0.0] * 24, (6, 4), "f32"), r"input 'x'.*tgweb.Array whose data is a list"),
    # --- tok: i32 (6,), indexes an embedding of 5 rows
    ("tok", np.array([2**32 + 3] + [0] * 5, np.int64), r"input 'tok'.*4294967299.*does not fit i32"),
    ("tok", [2**32 + 3] + [0] * 5, r"input 'tok'.*4294967299 at flat index 0.*does not fit i32"),
    ("tok", [0] * 5 + [-(2**31) - 1], r"input 'tok'.*-2147483649 at flat index 5.*does not fit i32"),
    ("tok", [10**400] + [0] * 5, r"input 'tok'.*does not fit i32"),
    ("tok", array.array("q", [2**40] + [0] * 5), r"input 'tok'.*1099511627776.*does not fit i32"),
    ("tok", _mv([2**40] + [0] * 5, "q"), r"input 'tok'.*does not fit i32"),
    ("tok", np.array([2**31] + [0] * 5, np.uint32), r"input 'tok'.*2147483648.*does not fit i32"),
    ("tok", [1.0] * 6, r"input 'tok'.*i32.*float 1.0"),
    ("tok", np.zeros(6, np.float32), r"input 'tok'.*i32.*floats"),
    ("tok", _mv([0.0] * 6, "f"), r"input 'tok'.*i32.*floats"),
    ("tok", array.array("f", [0.0] * 6), r"input 'tok'.*i32.*floats"),
    ("tok", [0, 1, 2, 3, 4, 5], r"input 'tok' holds 5 at flat index 5, outside \[0, 5\).*embedding"),
    ("tok", [0, -1, 2, 3, 4, 0], r"input 'tok' holds -1 at flat index 1, outside \[0, 5\).*embedding"),
    ("tok", _raw_i32([7, 0, 0, 0, 0, 0]), r"input 'tok' holds 7 .*embedding"),
    ("tok", ["0"] * 6, r"input 'tok'.*string '0'"),
    # --- tgt: cross_entropy targets over 3 classes; only tgt[:4] reaches the op, checked whole
    ("tgt", [0, 1, 2, 3, 0, 0], r"input 'tgt' holds 3 at flat index 3, outside \[0, 3\).*take_along_axis"),
    ("tgt", [0, 1, 2, 0, 0, 9], r"input 'tgt' holds 9 at flat index 5, outside \[0, 3\)"),
    ("tgt", np.array([-5, 0, 0, 0, 0, 0], np.int16), r"input 'tgt' holds -5"),
    # --- sel: one_hot(3) and take_along_axis over 3
    ("sel", [0, 0, 0, 0, 0, 3], r"input 'sel' holds 3 at flat index 5, outside \[0, 3\)"),
    ("sel", [0, 0, 0, 0, 0, 2**31 - 1], r"input 'sel' holds 2147483647"),
    # --- mask: bool (6,)
    ("mask", [2, 1, 0, 0, 0, 0], r"input 'mask'.*2 at flat index 0.*does not fit bool \(0 or 1\)"),
    ("mask", np.array([0, 0, 0, 0, 0, 2], np.int32), r"input 'mask'.*flat index 5.*0 or 1"),
    ("mask", [0.0] * 6, r"input 'mask'.*bool.*float"),
    ("mask", np.zeros(6, np.float32), r"input 'mask'.*bool.*floats"),
    ("mask", _raw_i32([0, 0, 2, 0, 0, 0]), r"input 'mask'.*flat index 2.*0 or 1"),
    ("mask", "yes", r"input 'mask'.*string"),
]


@pytest.mark.parametrize("name, value, match", BAD, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD)])
def test_bad_input_is_refused_and_changes_nothing(tr, name, value, match):
    before = snapshot(tr)
    with pytest.raises(tg.InputError, match=match):
        tr.step(**{**good(), name: value})
    assert snapshot(tr) == before


def test_no_other_exception_type_escapes():
    """Odd objects of every kind give InputError, never TypeError/RecursionError/OverflowError."""
    odd = [
        _deep(sys.getrecursionlimit() * 3),
        [[float("nan")] * 4] * 5 + [None],
        [[[]] * 4] * 6,
        [],
        (),
        [[1.0] * 4] * 6 + [[1.0] * 4],
        iter([1.0] * 24),
        lambda: 0,
        NotImplemented,
        Ellipsis,
        type,
        array.array("b", [1] * 24),  # fine for f32: ints
    ]
    refused = 0
    for v in odd:
        try:
            from_user(v, (6, 4), "f32", "x")
        except tg.InputError:
            refused += 1
    assert refused == len(odd) - 1


def test_good_inputs_in_every_form_give_the_same_step(tr):
    g = good()
    forms = {
        "x": [
            g["x"].tolist(),
            memoryview(g["x"]),  # shape (6, 4), format 'f'
            memoryview(array.array("f", g["x"].ravel())),  # flat
            g["x"].astype(np.float64),
            g["x"].tobytes(),
            [[np.float32(v) for v in row] for row in g["x"]],
            tg.Array(array.array("f", g["x"].ravel()), (6, 4), "f32"),
        ],
        "tok": [
            g["tok"].astype(np.int64),
            array.array("q", g["tok"].tolist()),
            _mv(g["tok"].tolist(), "b"),
            [np.int64(v) for v in g["tok"]],
            g["tok"].astype(np.uint8),
        ],
        "mask": [
            g["mask"].astype(np.int32),
            [int(v) for v in g["mask"]],
            [bool(v) for v in g["mask"]],
            _mv([int(v) for v in g["mask"]], "B"),
            memoryview(np.ascontiguousarray(g["mask"])),  # format "?"
        ],
    }
    want = {n: from_user(g[n], t.shape, t.dtype, n) for n, t in tr.graph.inputs.items()}
    for name, vals in forms.items():
        t = tr.graph.inputs[name]
        for v in vals:
            assert from_user(v, t.shape, t.dtype, name) == want[name], (name, type(v))


def test_index_bounds_come_from_the_registry(tr):
    b = index_bounds(tr.graph)
    assert {n: v[0] for n, v in b.items()} == {"tok": 5, "tgt": 3, "sel": 3}
    assert "embedding" in b["tok"][1] and "test_inputs_strict.py" in b["tok"][1]


def test_inference_run_checks_indices_too(tr):
    inf = tr.attach(lambda m, tok: m(tok), {"tok": ((6,), "i32")})
    assert inf.run(tok=[0, 1, 2, 3, 4, 4]).output.shape == (6, 3)
    with pytest.raises(tg.InputError, match=r"run: input 'tok' holds 5 .*\[0, 5\)"):
        inf.run(tok=[0, 1, 2, 3, 4, 5])


def _computed_index_loss(m, tok):
    # the index is computed inside the graph: not checked on the host
    return (tg.embedding(m.emb, tok + 3) ** 2).sum() + (tg.one_hot(tok * 2, 3)).sum() * 0.0


@pytest.mark.parametrize("backend", ["reference", pytest.param("native", marks=pytest.mark.native)])
def test_computed_indices_out_of_range_follow_the_rule(backend):
    """The documented rule: an index computed in the graph that falls outside [0, size)
    gives a zero row (embedding, one_hot) or 0 (take_along_axis), and no gradient."""

    def fwd(m, tok):
        i = tok + 3  # 0..4 -> 3..7: rows 5, 6, 7 do not exist
        e = tg.embedding(m.emb, i)
        oh = tg.one_hot(tok - 1, 3)  # -1 -> a zero row
        logits = m.fc(e)
        t = tg.take_along_axis(logits, tg.unsqueeze(tok * 1, -1), -1)  # computed: 3, 4 out of range
        return {"e": e, "oh": oh, "t": t, "logits": logits}

    tr = tg.compile(M(), _computed_index_loss, {"tok": ((5,), "i32")}, tg.optim.SGD(0.1), backend=backend)
    inf = tr.attach(fwd, {"tok": ((5,), "i32")})
    out = inf.run(tok=[0, 1, 2, 3, 4]).output
    w = np.asarray(tr.params()["emb.weight"])
    np.testing.assert_array_equal(out["e"][:2], w[3:5])
    assert not out["e"][2:].any()
    np.testing.assert_array_equal(out["oh"], [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0]])
    np.testing.assert_allclose(out["t"][:3, 0], out["logits"][[0, 1, 2], [0, 1, 2]], rtol=1e-6)
    assert not out["t"][3:].any()
    # the gradient skips the rows that do not exist: only rows 3 and 4 move
    before = w.copy()
    assert tr.step(tok=[0, 1, 2, 3, 4]).ok
    after = np.asarray(tr.params()["emb.weight"])
    np.testing.assert_array_equal(after[:3], before[:3])
    assert (after[3:] != before[3:]).all()


def test_a_loss_ignore_index_target_is_accepted_and_other_values_are_not():
    """cross_entropy's ignore_index (-100 by default) is a target the loss handles itself:
    the trainer's range check lets exactly that value through, on every backend."""
    import torch

    class Lin(tg.nn.Module):
        def __init__(self):
            self.l = tg.nn.Linear(4, 5)

        def forward(self, x):
            return self.l(x)

    tr = tg.compile(
        Lin(),
        lambda m, x, y: tg.cross_entropy(m(x), y),
        inputs={"x": (6, 4), "y": ((6,), "i32")},
        optimizer=tg.optim.SGD(0.1),
        backend="reference",
    )
    x = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    y = np.array([1, -100, 3, 4, -100, 0], np.int32)
    p = tr.params()
    logits = torch.from_numpy(x) @ torch.from_numpy(np.asarray(p["l.weight"])).T + torch.from_numpy(
        np.asarray(p["l.bias"])
    )
    assert tr.step(x=x, y=y).loss == pytest.approx(
        float(torch.nn.functional.cross_entropy(logits, torch.from_numpy(y).long())), rel=1e-6
    )
    before = tr.params()
    with pytest.raises(tg.InputError, match=r"holds -99 at flat index 1, outside \[0, 5\) \(or \[-100\]\)"):
        tr.step(x=x, y=np.array([1, -99, 3, 4, -100, 0], np.int32))
    assert all(np.array_equal(before[n], v) for n, v in tr.params().items())


@pytest.mark.native
def test_a_runtime_checks_a_plain_dict_as_a_step_is_checked():
    """A Runtime sends a StepData (check_inputs's, checked once) as it is; a plain dict it
    checks with that same function first: a bad one raises InputError naming the input,
    and the buffers keep what the last good step wrote."""
    from tgweb.backends import native
    from tgweb.lower import lower
    from tgweb.step_data import StepData, check_inputs
    from tgweb.trace import trace

    graph, out = trace(lambda x: x * 2.0, None, {"x": (5,)})
    graph.outputs["y"] = out
    prog = lower(graph)
    rt = native.Runtime(prog)
    try:
        good = check_inputs(prog.inputs, {"x": [1, 2, 3, 4, 5]}, "run")
        assert type(good) is StepData and good.given == {"x": [1, 2, 3, 4, 5]}
        assert rt.run(good, {}, [("outputs", "y")])[("outputs", "y")].tolist() == [2, 4, 6, 8, 10]
        for bad, says in [
            ({"x": array.array("f", [1, 2, 3])}, "input 'x': expected 5 values for shape (5,), got 3"),
            ({"x": [1, 2, 3, 4, float("1e39")]}, "beyond the largest finite f32"),
            ({"x": [1] * 5, "z": [0]}, "unexpected input(s) ['z']"),
        ]:
            with pytest.raises(tg.InputError, match=re.escape(says)):
                rt.run(bad, {}, [])
        assert rt.read("inputs", "x").tolist() == [1, 2, 3, 4, 5]
    finally:
        rt.close()
