"""Initial values drawn in bulk with NumPy equal, bit for bit, those of the pure-Python
loops: of the counter-based stream (a module's parameters) for every parameter of every
sample, and of random.Random (initialisers called with a generator, tgweb.torch's) with
the generator left where the loop would leave it, for the edge cases of gauss's pairs."""

from __future__ import annotations

import array
import json
import random

import pytest
from test_no_numpy import run_without_numpy

from tgweb.nn import init

# every parameter of every sample with the trainer's draw: name -> sha256 of its f32 bytes
DIGESTS = """
    import hashlib, json, math
    import tgweb.torch
    from tgweb.nn.init import initial_values
    from tgweb.samples import SAMPLES

    def digests(seed):
        out = {}
        for sample, mod in SAMPLES.items():
            # a tgweb.torch model draws at construction from the shared generator, which
            # earlier tests in the same process have moved on: seed it as PyTorch users do
            tgweb.torch.manual_seed(seed)
            for name, p in mod.Model().named_parameters():
                if math.prod(p.shape) > 20000:  # the loop takes ~10 us a value (a browser has bulk.mjs)
                    continue
                v = initial_values(p.init, p.shape, seed, name)
                out[f"{sample}/{name}"] = hashlib.sha256(v.tobytes()).hexdigest()
        return out
"""


def test_every_sample_parameter_as_without_numpy():
    scope: dict = {}
    exec(DIGESTS.replace("\n    ", "\n"), scope)
    bulk = scope["digests"](5)
    loop = json.loads(run_without_numpy(DIGESTS + "\nprint(json.dumps(digests(5)))\n"))
    assert sorted(bulk) == sorted(loop)
    differ = [k for k in bulk if bulk[k] != loop[k]]
    assert not differ, f"bulk and loop initial values differ for {differ}"
    assert len(bulk) > 200  # all but shakespeare's larger ones
    # the comparison covers the bulk path: the big parameters took it
    assert init._bulk(random.Random(0), "gauss", 10**6) is not None


def _loop(rng, n, kind, a, b):
    if kind == "normal":
        return array.array("f", [rng.gauss(a, b) for _ in range(n)])
    return array.array("f", [a + (b - a) * rng.random() for _ in range(n)])


@pytest.mark.parametrize("kind", ["normal", "uniform"])
@pytest.mark.parametrize("pending", [False, True])
def test_same_values_and_state_as_the_loop(kind, pending):
    """Odd and even counts, either side of the bulk threshold and past one chunk, with a
    gauss value pending (the second of a pair, as torch.manual_seed's shared generator can
    hold), a non-zero mean; then the generators go on alike."""
    draw = init.draw_normal if kind == "normal" else init.draw_uniform
    for n in (1, 2, 255, 256, 257, 1001, init._CHUNK + 3):
        bulk, loop = random.Random(n), random.Random(n)
        if pending:
            bulk.gauss(), loop.gauss()
        assert draw(bulk, n, 0.25, 0.75) == _loop(loop, n, kind, 0.25, 0.75), n
        assert bulk.getstate() == loop.getstate(), n
        assert bulk.gauss() == loop.gauss() and bulk.random() == loop.random()


def test_a_subclass_generator_is_drawn_by_its_own_methods():
    class Fixed(random.Random):
        def gauss(self, mu=0.0, sigma=1.0):
            return 3.0

    assert init.draw_normal(Fixed(0), 1000, 0.0, 1.0) == array.array("f", [3.0]) * 1000
    assert init.draw_uniform(random.SystemRandom(), 1000, 0.0, 1.0) != array.array("f", [0.0]) * 1000


def test_a_libm_off_in_the_last_bits_still_gives_gauss_values(monkeypatch):
    """NumPy's (and JavaScript's) sin/cos/log may differ from the libm random.gauss uses in
    the last bits of a double, which moves an f32 value whose double lies that close to a
    rounding boundary; such values are recomputed with `math`. Shown with a NumPy whose sin
    and cos are off by 2**-38 relative (about 16,000 units in the last place), which without
    that step moves dozens of this million values."""
    import numpy

    class Skewed:
        def __getattr__(self, name):
            return getattr(numpy, name)

        def cos(self, x):
            return numpy.cos(x) * (1 + 2.0**-38)

        def sin(self, x):
            return numpy.sin(x) * (1 - 2.0**-38)

    n = 1 << 20
    loop, bulk = random.Random(3), random.Random(3)
    want = array.array("f", [loop.gauss(0.0, 0.02) for _ in range(n)])
    monkeypatch.setattr(init, "_bulk", lambda *args: init._NumpyDraw(Skewed()))
    assert init.draw_normal(bulk, n, 0.0, 0.02).tobytes() == want.tobytes()
    assert bulk.getstate() == loop.getstate()
