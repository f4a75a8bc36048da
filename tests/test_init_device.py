"""Initial values drawn on the device (tgweb/initial.py, ops/random.py's init_draw): the
kernels give the host's values bit for bit (native and reference), a reset draws them
again and zeroes the optimizer state, the draws have the distribution asked for, and
what is not drawn there (a shift, a custom initialiser, constants) is still right."""

from __future__ import annotations

import array
import math

import numpy as np
import pytest

import tgweb as tg
from tgweb import initial, nn
from tgweb.nn import init
from tgweb.ops.random import init_ints


class Net(nn.Module):
    """Every built-in initialiser, the device's and the host's kinds side by side."""

    def __init__(self):
        self.a = self.param((37, 29), init.normal(0.02))
        self.b = self.param((3, 5, 7), init.kaiming())
        self.c = self.param((41, 13), init.xavier(1.5))
        self.d = self.param((301,), init.uniform(-0.3, 0.3))
        self.e = self.param((5, 9), init.fan_in_uniform())
        self.f = self.param((17,), init.normal(0.5, mean=-1.25))  # a shift: drawn on the host
        self.g = self.param((11,), init.uniform(-0.3, 2.1))  # asymmetric: the host
        self.h = self.param((6,), init.constant(0.75))
        self.i = self.param((4, 4), Custom())

    def forward(self, x):
        s = sum(tg.sum(p) for p in (self.a, self.b, self.c, self.d, self.e, self.f, self.g, self.h, self.i))
        return tg.sum(x) * s


class Custom(init.Init):
    """A user's initialiser: called with the parameter's rng, never drawn on the device."""

    def __call__(self, shape, rng):
        return array.array("f", [rng.random() for _ in range(math.prod(shape))])


def loss_fn(m, x):
    return m(x) ** 2 * 1e-6


INPUTS = {"x": (2, 3)}


def _host(seed: int) -> dict:
    m = Net()
    m.init_params(seed)
    return {n: np.frombuffer(p.value.tobytes(), np.float32).reshape(p.shape) for n, p in m.named_parameters()}


def _bits(d: dict) -> dict:
    return {k: np.asarray(v, np.float32).tobytes() for k, v in d.items()}


@pytest.mark.parametrize("backend", ["reference", pytest.param("native", marks=pytest.mark.native)])
def test_a_trainer_draws_what_the_host_draws_and_a_reset_draws_again(backend):
    tr = tg.compile(Net(), loss_fn, INPUTS, tg.optim.Adam(0.1), backend=backend, seed=7)
    draws, fills, host = initial.split(tr.model, {n: () for n in tr.params()}, {})
    assert sorted(draws) == ["a", "b", "c", "d", "e"] and [n for n, _ in host] == ["f", "g", "i"]
    assert sorted(n for _, n in fills) == ["h"]
    want = _bits(_host(7))
    assert _bits(tr.params()) == want
    assert all(not np.any(v) for v in tr.states().values())
    x = np.ones((2, 3), np.float32)
    for _ in range(3):
        assert tr.step(x=x).ok
    assert _bits(tr.params()) != want and any(np.any(v) for v in tr.states().values())
    tr.reset()
    assert _bits(tr.params()) == want
    assert all(not np.any(v) for v in tr.states().values())
    tr.close()


def test_seeds_and_names_give_other_values_and_a_new_layer_changes_no_other():
    a, b = _host(1), _host(2)
    assert all(not np.array_equal(a[n], b[n]) for n in "abcdefgi")
    # a parameter's stream is its name's: renaming one draws other values, the rest stay
    m = Net()
    m.extra = m.param((37, 29), init.normal(0.02))
    m.init_params(1)
    got = dict(m.named_parameters())
    assert all(
        np.array_equal(np.frombuffer(got[n].value.tobytes(), np.float32).reshape(a[n].shape), a[n]) for n in a
    )
    assert not np.array_equal(np.frombuffer(got["extra"].value.tobytes(), np.float32).reshape(37, 29), a["a"])


@pytest.mark.parametrize("dist", ["normal", "uniform"])
def test_the_draws_have_the_moments_and_range_asked_for(dist):
    n = 200_000
    d = init.Draw.normal(0.0, 0.3) if dist == "normal" else init.Draw.uniform(-0.5, 0.5)
    v = np.frombuffer(init.counter_values(d, n, 3, "w").tobytes(), np.float32).astype(np.float64)
    sd = 0.3 if dist == "normal" else 0.5 / math.sqrt(3)
    assert abs(v.mean()) < 4 * sd / math.sqrt(n)
    assert v.std() == pytest.approx(sd, rel=0.01)
    if dist == "uniform":
        assert -0.5 < v.min() < -0.4999 and 0.4999 < v.max() < 0.5
        assert np.histogram(v, 10, (-0.5, 0.5))[0].min() > n / 10 * 0.97
    else:
        # the sum of twelve: within 6 sd, a normal's tails to 3 sd, its kurtosis 2.9
        assert np.abs(v).max() <= 6 * 0.3
        for k, p in ((1, 0.6827), (2, 0.9545), (3, 0.9973)):
            assert np.mean(np.abs(v) < k * 0.3) == pytest.approx(p, abs=0.004)
        assert ((v / 0.3) ** 4).mean() == pytest.approx(2.9, abs=0.05)


@pytest.mark.parametrize("dist", ["normal", "uniform"])
def test_the_pure_python_integers_equal_numpys(dist, monkeypatch):
    fast = init_ints(12345, 678, dist, 3001).tolist()
    monkeypatch.setattr("tgweb.arrays._numpy", lambda: None)
    assert init_ints(12345, 678, dist, 3001) == fast


@pytest.mark.native
@pytest.mark.parametrize("dist", ["normal", "uniform"])
def test_the_kernel_equals_the_reference_bit_for_bit(dist):
    """The init_draw kernel alone, on odd sizes (a partial last workgroup), two streams
    sharing one pipeline."""
    from tgweb.backends import lowering_for, make_engine
    from tgweb.lower import lower
    from tgweb.step_data import check_inputs

    draws = {f"p{i}": ((n,), init.Draw(dist, 2.0**-20)) for i, n in enumerate((1, 257, 4099, 4099))}
    graph = initial.graph_of(draws, {})
    program = lower(graph, name="init", **lowering_for("native"))
    # the two of one size fuse into one kernel
    assert len(program.kernels) == 3 and all(k.ops == ["init_draw"] * len(k.ops) for k in program.kernels)
    got = {}
    for backend, prog in (("native", program), ("reference", None)):
        eng = make_engine(graph, prog, backend, "float32")
        eng.run(check_inputs({}, {}, "inputs"), {"seed": 0x7FFFFFFE}, [])
        got[backend] = {n: np.asarray(eng.read("params", n), np.float32).tobytes() for n in draws}
        eng.close()
    assert got["native"] == got["reference"]
