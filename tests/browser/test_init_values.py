"""Initial values in the browser (Pyodide, no NumPy: drawn by web/bulk.mjs through the
worker's hooks) equal CPython's bit for bit, for every init kind and every sample's
parameters, and leave the generator where CPython leaves it; the finite check of loaded
values runs there too."""

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
        from tgweb.nn.module import param_rng
        from tgweb.samples import SAMPLES

        out = {}
        for sample, mod in SAMPLES.items():
            tgweb.torch.manual_seed(5)
            for name, p in mod.Model().named_parameters():
                out[f"{sample}/{name}"] = _digest(p.init(p.shape, param_rng(5, name)).tobytes())
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
