"""Training on the native backend (wgpu-py; lavapipe in CI) against the reference
backend: the same steps, losses, flags, captures and parameters."""

import numpy as np
import pytest
from conftest import jitter_params

import tgweb as tg
from tgweb import nn, samples
from tgweb.samples import get

pytestmark = pytest.mark.native  # tests/conftest.py: skipped without an adapter, fails in CI


class MLP(nn.Module):
    def __init__(self):
        self.l1 = nn.Linear(3, 16)
        self.norm = nn.LayerNorm(16)
        self.l2 = nn.Linear(16, 2)

    def forward(self, x):
        h = tg.tanh(self.l1(x))
        tg.capture("h", h)
        return self.l2(self.norm(h))


def loss_fn(m, x, y):
    return ((m(x) - y) ** 2).mean()


def test_native_matches_reference_20_steps():
    kw = dict(
        inputs={"x": (16, 3), "y": (16, 2)},
        clip_grad_norm=0.5,
        seed=1,
        optimizer=tg.optim.AdamW(tg.optim.Warmup(5, tg.optim.Cosine(1e-2, 15)), weight_decay=0.1),
    )
    ref = tg.compile(MLP(), loss_fn, backend="reference", **kw)
    gpu = tg.compile(MLP(), loss_fn, backend="native", **kw)
    assert gpu.program.kernels and gpu.program.meta["memory"]["total_bytes"] > 0
    for k, v in ref.params().items():
        assert np.array_equal(gpu.params()[k], v)
    rng = np.random.default_rng(0)
    for s in range(20):
        x = rng.normal(size=(16, 3)).astype(np.float32)
        y = np.stack([np.sin(x[:, 0]), x[:, 1] * x[:, 2]], 1).astype(np.float32)
        if s == 10:  # a non-finite batch is skipped on both, bitwise
            bad = x.copy()
            bad[0, 0] = np.inf
            before = {k: v.tobytes() for k, v in gpu.params().items()}
            sb = {k: v.tobytes() for k, v in gpu.states().items()}
            rr, rg = ref.step(x=bad, y=y), gpu.step(x=bad, y=y)
            assert not rr.ok and not rg.ok and rg.reason
            assert {k: v.tobytes() for k, v in gpu.params().items()} == before
            assert {k: v.tobytes() for k, v in gpu.states().items()} == sb
        rr, rg = ref.step(x=x, y=y), gpu.step(x=x, y=y)
        assert rr.ok and rg.ok and rr.lr == rg.lr
        assert rg.loss == pytest.approx(rr.loss, rel=1e-4, abs=1e-6)
        assert rg.grad_norm == pytest.approx(rr.grad_norm, rel=1e-4, abs=1e-6)
        np.testing.assert_allclose(rg.captures["h"], rr.captures["h"], rtol=1e-4, atol=1e-5)
    for k, v in ref.params().items():
        np.testing.assert_allclose(gpu.params()[k], v, rtol=1e-4, atol=1e-5)
    for k, v in ref.states().items():
        np.testing.assert_allclose(gpu.states()[k], v, rtol=1e-3, atol=1e-7)
    # inference shares the trained parameters
    fr = ref.attach(lambda m, x: m(x), inputs={"x": (16, 3)})
    fg = gpu.attach(lambda m, x: m(x), inputs={"x": (16, 3)})
    np.testing.assert_allclose(fg.run(x=x).output, fr.run(x=x).output, rtol=1e-4, atol=1e-5)
    # load_params reaches the GPU buffers
    new = {k: v * 0.5 for k, v in ref.params().items()}
    gpu.load_params(new)
    ref.load_params(new)
    np.testing.assert_allclose(fg.run(x=x).output, fr.run(x=x).output, rtol=1e-4, atol=1e-5)


def test_raw_recording_matches_wgpu_py_methods(monkeypatch):
    """A step's dispatches and the bind groups go straight to wgpu-native's C functions
    (the pinned wgpu-py exposes them); bound and recorded through wgpu-py's methods
    instead, training is bit-identical. A bad binding still raises wgpu's error."""
    from tgweb.backends import native

    assert native._raw_recorder() is not None, "the pinned wgpu-py's C library moved"
    make = native._raw_bind_group()
    assert make is not None, "the pinned wgpu-py's C library moved"
    kw = dict(inputs={"x": (16, 3), "y": (16, 2)}, seed=3, optimizer=tg.optim.Adam(1e-2))
    raw = tg.compile(MLP(), loss_fn, backend="native", **kw)
    monkeypatch.setattr(native, "_raw_bind_group", lambda: None)
    slow = tg.compile(MLP(), loss_fn, backend="native", **kw)
    rt = slow.engine.rt
    assert rt._record is not native._method_recorder
    rt._record = native._method_recorder
    rt._steps = [(p, g, *k.dispatch) for k, p, g in zip(rt.program.kernels, rt.pipes, rt.groups)]
    # a range past its buffer's end: refused by wgpu's validation, through either path
    k = max(range(len(rt.program.kernels)), key=lambda i: len(rt.program.kernels[i].bindings))
    kernel, layout = rt.program.kernels[k], native.pipeline_for(rt.program.kernels[k])[1]
    ranges = [(rt.buffers[b.buffer], 0, rt.buffers[b.buffer].size) for b in kernel.bindings]
    if kernel.offsets:
        ranges.append((rt._uniform, rt.program.layout.uniform[k][0], rt.program.layout.uniform[k][1]))
    assert make(rt.device, layout, ranges) is not None
    buf = ranges[0][0]
    ranges[0] = (buf, 0, buf.size + 256)
    import wgpu

    for maker in (make, native._method_bind_group):
        with pytest.raises(wgpu.GPUValidationError, match="would overflow buffer size"):
            maker(rt.device, layout, ranges)
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = rng.normal(size=(16, 3)).astype(np.float32)
        y = np.stack([np.sin(x[:, 0]), x[:, 1] * x[:, 2]], 1).astype(np.float32)
        a, b = raw.step(x=x, y=y), slow.step(x=x, y=y)
        assert a.loss == b.loss and a.loss > 0
    for k, v in raw.params().items():
        assert v.tobytes() == slow.params()[k].tobytes(), k


def test_the_buffers_created_while_lowering_are_the_runtimes(monkeypatch):
    """compile's lowering hands the step's planned buffers to the native device, which
    creates them on a thread while the kernels are emitted (native.reserve); the Runtime
    takes those very buffers, and Python's thread switch interval is as it was after."""
    import sys

    from tgweb.backends import native

    before = sys.getswitchinterval()
    seen = []
    reserve = native.reserve

    def spy(buffers):
        reserve(buffers)
        seen.append(native._RESERVED[-1][::2])  # (buffers, future)

    monkeypatch.setattr(native, "reserve", spy)
    kw = dict(inputs={"x": (16, 3), "y": (16, 2)}, seed=3, optimizer=tg.optim.Adam(1e-2))
    tr = tg.compile(MLP(), loss_fn, backend="native", **kw)
    [(listed, future)] = seen  # the step's, not the initial values' (which share the parameters)
    rt = tr.engine.rt
    made = future.result()
    assert listed is rt.program.buffers and len(made) == len(listed)
    assert all(rt.buffers[b.id] is made[b.id] for b in rt.program.buffers)
    assert not native._RESERVED and sys.getswitchinterval() == before
    ref = tg.compile(MLP(), loss_fn, backend="reference", **kw)
    x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(16, 3)
    y = np.stack([np.sin(x[:, 0]), x[:, 1] * x[:, 2]], 1).astype(np.float32)
    for _ in range(3):
        a, b = tr.step(x=x, y=y), ref.step(x=x, y=y)
        assert abs(a.loss - b.loss) <= 1e-5 * abs(b.loss) and a.loss > 0
    # buffers reserved for a Program never instantiated go when another is reserved
    for _ in range(3):
        native.reserve(list(rt.program.buffers))
    [(_, _, last)] = native._RESERVED
    buf = next(iter(last.result().values()))
    native._device().queue.write_buffer(buf, 0, b"\0" * 4)  # a live buffer takes a write
    native.cancel_reserved()
    assert not native._RESERVED
    import wgpu

    with pytest.raises(wgpu.GPUValidationError, match="(?i)destroyed"):
        native._device().queue.write_buffer(buf, 0, b"\0" * 4)


def test_a_lowering_that_fails_lets_its_reserved_buffers_go(monkeypatch):
    """The buffers reserved as a step was planned go when its kernels then fail to be
    emitted: compile raises the error and nothing stays reserved."""
    import importlib

    from tgweb.backends import native

    lower_mod = importlib.import_module("tgweb.lower")

    def broken(*a, **k):
        raise RuntimeError("no kernels today")

    monkeypatch.setattr(lower_mod, "select_kernels", broken)
    kw = dict(inputs={"x": (16, 3), "y": (16, 2)}, seed=3, optimizer=tg.optim.Adam(1e-2))
    with pytest.raises(RuntimeError, match="no kernels today"):
        tg.compile(MLP(), loss_fn, backend="native", **kw)
    assert not native._RESERVED


def _train(name: str, backend: str, steps: int, jitter: int | None = None):
    """Losses and final parameters (float64) of `steps` steps. jitter=k first moves every
    initial parameter by one float32 rounding step (a relative 2**-24, signs drawn from
    seed k): a float32 run that differs from the plain one only in rounding."""
    s = get(name)
    prec = "float64" if backend == "reference64" else "float32"
    tr = tg.compile(
        s.Model(),
        s.loss_fn,
        s.INPUTS,
        s.OPTIMIZER,
        seed=0,
        precision=prec,
        backend="reference" if backend == "reference64" else backend,
    )
    if jitter is not None:
        jitter_params(tr, jitter)
    losses = np.array([float(tr.step(**s.batch(i)).loss) for i in range(steps)])
    return tr, losses, {k: np.asarray(v, np.float64) for k, v in tr.params().items()}


def test_sin_20_steps_native_equals_reference():
    _, l_ref, p_ref = _train("sin", "reference", 20)
    tr, l_nat, p_nat = _train("sin", "native", 20)
    np.testing.assert_allclose(l_nat, l_ref, rtol=1e-4)
    for k in p_ref:
        np.testing.assert_allclose(p_nat[k], p_ref[k], rtol=1e-4, atol=1e-6, err_msg=k)
    meta = tr.program.meta
    assert meta["copied_updates"] == 0 and meta["inplace_updates"] == 2 * len(p_ref) + len(p_ref)


def test_addition_20_steps_native_equals_reference():
    """addition's trajectory amplifies float32 rounding (Adam divides a gradient that is
    rounding noise by its own size, so such entries move by up to lr a step, whatever the
    precision of the rest): after step 8 two float32 runs that differ only in rounding (NumPy
    with another BLAS kernel, or one ulp in the initial values) stray from the float64 run by
    1e-5 to 7e-4 in the loss and 0.01 to 0.25 in the parameters, by CPU, by initial values
    and by chance. So:
    the first 8 steps, before that, are arithmetic and agree to 1e-4; over 20 steps native
    must stay within twice the largest stray of four float32 NumPy runs measured here, or
    within 1e-4 of the loss and 0.02 of the parameters where those strays are small."""
    _, l_64, p_64 = _train("addition", "reference64", 20)
    _, l_nat, p_nat = _train("addition", "native", 20)
    np.testing.assert_allclose(l_nat[:8], l_64[:8], rtol=1e-4)

    def stray(losses, params):
        far = float(np.sqrt(sum(((params[k] - p_64[k]) ** 2).sum() for k in p_64)))
        return float(np.abs(losses / l_64 - 1).max()), far

    spread = [stray(*_train("addition", "reference", 20, jitter)[1:]) for jitter in (None, 1, 2, 3)]
    loss_spread, param_spread = (max(s[i] for s in spread) for i in (0, 1))
    got = stray(l_nat, p_nat)
    # a floor where rounding alone strays little (1e-5 in the loss, 0.01 in the parameters
    # from the counter stream's initial values): native's own sum orders are as far again
    assert got[0] <= max(2 * loss_spread, 1e-4), (got, spread)
    assert got[1] <= max(2 * param_spread, 0.02), (got, spread)


def test_sin_trains_natively_to_success():
    s = get("sin")
    tr = samples.compile(s, backend="native", seed=0)
    inf = tr.attach(s.forward, s.EVAL_INPUTS)

    def predict(batch):
        return inf.run(**batch).output

    mse = None
    for i in range(s.STEPS):
        tr.step(**s.batch(i))
        if (i + 1) % 100 == 0:
            mse = s.metric(predict)
            if mse < 1e-3:
                break
    assert mse is not None and mse < 1e-3, f"mse {mse} after {i + 1} steps"


def test_native_device_has_the_adapters_largest_limits():
    """Issue 30: the device is asked for the adapter's own maxima (a 10M-parameter GPT
    needs bindings past WebGPU's 128 MiB default), and lower() plans within them."""
    from tgweb.backends import lowering_for, native
    from tgweb.program import LIMITS, wgpu_limit_name

    native.device_limits()  # opens the device
    adapter = native._ADAPTER.limits
    got = lowering_for("native")["limits"]
    asked = [k for k in LIMITS if wgpu_limit_name(k) in adapter]
    assert "maxStorageBufferBindingSize" in asked
    assert {k: got[k] for k in asked} == {k: adapter[wgpu_limit_name(k)] for k in asked}
