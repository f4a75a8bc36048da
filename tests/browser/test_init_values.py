"""Initial values in the browser (Pyodide, no NumPy: drawn by web/bulk.mjs through the
worker's hooks, or on the GPU by a trainer) equal CPython's bit for bit: for every init
kind called with a generator (left where CPython leaves it), every sample's parameters
from the counter-based stream, and the values a trainer draws on the device; the finite
check of loaded values runs there too."""

from __future__ import annotations

import textwrap

from .conftest import py

# run in CPython and in the worker: name -> sha256 of the f32 values, of the generator's
# state after the draw and of the next gauss values it gives (as f32), and its random() after
DRAWS = textwrap.dedent("""
    import array, hashlib, random
    import tgweb.torch
    from tgweb.nn import init
    from tgweb.torch.nn import init as tinit

    def _digest(b):
        return hashlib.sha256(b).hexdigest()

    # shapes of odd sizes, on no boundary of a chunk or a pair; (1, 301) has fan_in 301
    SHAPES = [(37, 29), (3, 5, 7, 11), (1, 301), (2, 129)]
    KINDS = {
        "normal": init.normal(0.02), "normal(0.5, mean=-1.25)": init.normal(0.5, -1.25),
        "uniform": init.uniform(), "uniform(-0.3, 2.1)": init.uniform(-0.3, 2.1),
        "kaiming": init.kaiming(), "xavier": init.xavier(1.5), "fan_in_uniform": init.fan_in_uniform(),
        "zeros": init.zeros(), "ones": init.ones(), "constant": init.constant(0.75),
    }
    TORCH = {
        "normal_": lambda p: tinit.normal_(p, 0.1, 0.3), "uniform_": lambda p: tinit.uniform_(p, -2.0, 0.5),
        "xavier_uniform_": tinit.xavier_uniform_, "xavier_normal_": tinit.xavier_normal_,
        "kaiming_uniform_": tinit.kaiming_uniform_, "kaiming_normal_": tinit.kaiming_normal_,
    }

    def _after(rng):
        state = _digest(repr(rng.getstate()).encode())
        # gauss's doubles may differ in the last bit between Pyodide's libm and CPython's;
        # as f32, as parameters hold them, they agree
        later = array.array("f", [rng.gauss(0.0, 1.0) for _ in range(3)])
        return [state, _digest(later.tobytes()), rng.random()]

    def draws():
        out = {}
        for shape in SHAPES:
            for pending in (False, True):
                for name, kind in KINDS.items():
                    rng = random.Random(f"{name}{shape}")
                    if pending:
                        rng.gauss()  # the second of a pair waits in the generator
                    v = kind(shape, rng)
                    out[f"{name} {shape} {pending}"] = [_digest(v.tobytes())] + _after(rng)
            for name, fn in TORCH.items():
                tgweb.torch.manual_seed(len(name))
                p = fn(tgweb.torch.nn.Parameter(tgweb.torch.zeros(*shape)))
                rng = tgweb.torch._host.GENERATOR
                out[f"torch {name} {shape}"] = [_digest(p.value.tobytes())] + _after(rng)
        return out

    def samples():
        from tgweb.nn.init import initial_values
        from tgweb.samples import SAMPLES

        out = {}
        for sample, mod in SAMPLES.items():
            tgweb.torch.manual_seed(5)
            for name, p in mod.Model().named_parameters():
                out[f"{sample}/{name}"] = _digest(initial_values(p.init, p.shape, 5, name).tobytes())
        return out

    def compiled(backend=None):
        # drawn on the device by the trainer (the reference backend in CPython)
        import tgweb as tg
        from tgweb.samples import addition, kan, sin

        out = {}
        for sample, mod in (("sin", sin), ("addition", addition), ("kan", kan)):
            tr = tg.compile(mod.Model(), mod.loss_fn, mod.INPUTS, mod.OPTIMIZER, backend=backend, seed=5)
            for name, v in tr.params().items():
                out[f"{sample}/{name}"] = _digest(bytes(v.data))  # NumPy's or tg.Array's f32 bytes
            tr.close()
        return out
""")


def _same_as_cpython(page, fn: str) -> None:
    """DRAWS's fn() gives the same in the worker as in this CPython process."""
    scope: dict = {}
    exec(DRAWS, scope)
    want = scope[fn]()
    got = py(page, DRAWS + f"\n{fn}()")
    assert sorted(got) == sorted(want)
    differ = [k for k in want if got[k] != want[k]]
    assert not differ, f"the browser's initial values or generator state differ for {differ}"


def test_the_browser_draws_in_bulk_with_javascript(page):
    got = py(
        page,
        "import random\nfrom tgweb.nn import init\ntype(init._bulk(random.Random(0), 'gauss', 300)).__name__",
    )
    assert got == "_JsDraw"


def test_every_init_kind_as_in_cpython(page):
    """Values, the generator's state after, and its next draws, for every init and
    torch.nn.init kind, on odd shapes, with and without a gauss value pending."""
    _same_as_cpython(page, "draws")


def test_every_sample_parameter_as_in_cpython(page):
    """All of every sample's initial values (shakespeare's 10,745,088 among them)."""
    _same_as_cpython(page, "samples")


def test_a_trainer_draws_on_the_gpu_as_cpython_draws(page):
    """Parameters drawn by the trainer's program on WebGPU (sin, addition, and kan, whose
    normal(mean != 0)-free and uniform draws mix with host ones) equal CPython's."""
    scope: dict = {}
    exec(DRAWS, scope)
    want = scope["compiled"]("reference")
    got = py(page, DRAWS + "\ncompiled()")
    assert sorted(got) == sorted(want) and len(want) > 50
    differ = [k for k in want if got[k] != want[k]]
    assert not differ, f"the GPU's initial values differ from CPython's for {differ}"


def test_first_nonfinite_in_the_browser(page):
    got = py(
        page,
        textwrap.dedent("""
            import array
            from tgweb.trainer import first_nonfinite
            a = array.array("f", [0.5]) * 100003
            out = [first_nonfinite(a), first_nonfinite(array.array("f"))]
            for i, v in ((99999, float("inf")), (4097, float("nan")), (0, float("-inf"))):
                a[i] = v
                out.append(first_nonfinite(a))
            out
        """),
    )
    assert got == [None, None, 99999, 4097, 0]
