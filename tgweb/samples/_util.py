"""Helpers shared by the sample modules (pure Python)."""

from __future__ import annotations

from importlib import resources

from .. import worker


def data_bytes(name: str) -> bytes:
    """A file of data/ (see data/README.md): from the package or, in the page, fetched from
    the site on first use (the site's wheel leaves big files out, since the first step of
    most samples needs none of them)."""
    try:
        return (resources.files(__package__) / "data" / name).read_bytes()
    except FileNotFoundError:
        if not worker.in_browser():
            raise FileNotFoundError(
                f"tgweb/samples/data/{name} is not in this installation: the wheel that the site "
                "bundles (build.py wheel) leaves the big data files out; install tgweb from a "
                "clone (pip install .) for every sample's data"
            ) from None
    return worker.fetch_data(name)


def flatten(x) -> list:
    """A flat list from a nested list, an array.array, a tgweb.Array or a NumPy array."""
    if hasattr(x, "tolist"):
        x = x.tolist()
    if not isinstance(x, (list, tuple)):
        return [x]
    out: list = []
    stack = [iter(x)]
    while stack:
        for v in stack[-1]:
            if isinstance(v, (list, tuple)):
                stack.append(iter(v))
                break
            out.append(v)
        else:
            stack.pop()
    return out


def make_rng(step: int, rng):
    """A random.Random for one step: rng itself, or seeded from (int rng, step)."""
    import random

    if isinstance(rng, random.Random):
        return rng
    if not isinstance(rng, int) or isinstance(rng, bool):
        raise TypeError(f"rng must be an int seed or a random.Random, got {type(rng).__name__}")
    return random.Random(((rng & 0xFFFFFFFF) << 32) | (step & 0xFFFFFFFF))


def success_bound(sample) -> tuple[str, float]:
    """("below" | "at_least", bound) from a sample's SUCCESS: a fixed "below" or
    "at_least", or "below_baseline" (the name of a function of the sample that
    computes the baseline, e.g. names.bigram_loss) minus "margin"."""
    s = sample.SUCCESS
    if "below" in s:
        return "below", float(s["below"])
    if "at_least" in s:
        return "at_least", float(s["at_least"])
    if "below_baseline" in s:
        return "below", float(getattr(sample, s["below_baseline"])()) - float(s.get("margin", 0.0))
    raise ValueError(f"SUCCESS {s!r} has no bound ('below', 'at_least' or 'below_baseline')")


def succeeded(sample, value: float) -> bool:
    """Whether a metric value meets the sample's SUCCESS bound (see success_bound)."""
    kind, bound = success_bound(sample)
    return value < bound if kind == "below" else value >= bound


# Adapters (by vendor, as adapter info names it) on which mixed precision measured slower
# than float32: NVIDIA's. shakespeare (10.7M) on an H100, 2026-12-05: 57.9 ms a step mixed
# against 48.9 float32 in Chromium, 53.3 against 51.6 natively (an H200 earlier: 56.8
# against 48 in Chromium); and on a first visit the driver took 4.4-5.1 s to compile the
# mixed kernels (subgroup-matrix products), 2.2-2.9 s the float32 ones.
MIXED_SLOWER = ("nvidia",)


def fastest_precision(target) -> str:
    """The precision a sample trains fastest in on an adapter (a tgweb.codegen.target.Target,
    or None for the reference backend, which has none): "mixed" (f16 products, f32 updates,
    loss scaling) on a GPU-class adapter that offers shader-f16, unless it is one on which
    mixed measured slower (MIXED_SLOWER: NVIDIA's, where f16 products do not pay yet);
    "float32" anywhere else. A CPU emulating WebGPU gains nothing from f16 and loses
    accuracy."""
    if target is None or target.cls != "gpu" or not target.has("shader-f16"):
        return "float32"
    if any(v in target.vendor.lower() for v in MIXED_SLOWER):
        return "float32"
    return "mixed"


def precision_for(backend: str | None = None) -> str:
    """fastest_precision of the adapter `backend` (None: tg.compile's default) runs on."""
    from ..backends import lowering_for, require
    from ..compile import BACKENDS, default_backend

    backend = backend or default_backend()
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    require(backend)  # a missing wgpu-py or NumPy said as tg.compile says it
    device = lowering_for(backend)
    return fastest_precision(device["target"] if device is not None else None)
