"""precision="mixed": f16 storage kernels against the reference (which rounds the same
values to binary16), forward and backward, on lavapipe in both adapter classes; mixed
training against fp32; dynamic loss scaling; resume; adapters without shader-f16."""

from __future__ import annotations

import array
import importlib

import numpy as np
import pytest
from test_kernels import CASES, f, run_case

import tgweb as tg
from tgweb import nn
from tgweb.backends import native
from tgweb.codegen.target import Target
from tgweb.io import checkpoint
from tgweb.ir import Graph, make, tracing
from tgweb.lower import lower

tg_compile = importlib.import_module("tgweb.compile")  # the module (tg.compile is the function)
pytestmark = pytest.mark.native  # tests/conftest.py: skipped without an adapter, fails in CI

GPU16 = Target("gpu", "test", "the GPU class's kernels with f16, run on lavapipe", features=("shader-f16",))


def h(x):
    return make("to_f16", (x,))


# test_kernels' cases of the kind, then products the GPU class tiles (vec4 loads of f16)
F16_CASES = [(fn, specs) for fn, specs, _ in CASES["to_f16"]] + [
    (lambda a, b: h(a) @ h(b), {"a": f(300, 70), "b": f(70, 257)}),
    (lambda a, b: h(a).T @ h(b), {"a": f(260, 36), "b": f(260, 64)}),  # A read transposed
]


# the big products in the GPU class only (lavapipe's time)
RUNS = [(j, "cpu") for j in range(3)] + [(j, "gpu") for j in range(len(F16_CASES))]


@pytest.mark.parametrize("j,cls", RUNS, ids=[f"{j}-{c}" for j, c in RUNS])
def test_f16_products_match_reference(j, cls):
    fn, specs = F16_CASES[j]
    target = GPU16 if cls == "gpu" else None
    prog = run_case(fn, specs, target=target, rtol=1e-4)
    assert prog.meta["features"] == ["shader-f16"]
    f16_kernels = [k for k in prog.kernels if "to_f16" in k.ops]
    assert f16_kernels and all(k.wgsl.startswith("enable f16;") for k in f16_kernels)


def _sdpa(**kw):
    return lambda q, k, v: tg.scaled_dot_product_attention(q, k, v, **kw)


# attention in a mixed graph: q, k, v and dO read from f16 copies, statistics in f32; odd
# lengths and head dims (an f16 row then starts mid-word), causal with dropout, a float mask
ATTN_CASES = [
    (_sdpa(), {"q": f(2, 3, 19, 8), "k": f(2, 3, 23, 8), "v": f(2, 3, 23, 7)}),
    (_sdpa(is_causal=True, dropout_p=0.2), {"q": f(2, 37, 5), "k": f(2, 37, 5), "v": f(2, 37, 6)}),
    (
        lambda q, k, v, m: tg.scaled_dot_product_attention(q, k, v, m),
        {"q": f(3, 17, 6), "k": f(1, 21, 6), "v": f(3, 21, 5), "m": f(17, 21)},
    ),
]
ATTN_RUNS = [(j, c) for j in range(len(ATTN_CASES)) for c in ("cpu", "gpu")]


@pytest.mark.parametrize("j,cls", ATTN_RUNS, ids=[f"{j}-{c}" for j, c in ATTN_RUNS])
def test_mixed_attention_matches_reference(j, cls):
    """Forward and both backward kernels against the reference, which rounds the same
    operands to binary16 (the GPU class stages the f16 rows in workgroup memory). The
    backward reads O's f16 copy, which may round the other way after a sum in another
    order (one ulp, 2^-11, times dO in delta): rtol 1e-3, atol 1e-4 of the largest value."""
    fn, specs = ATTN_CASES[j]
    target = GPU16 if cls == "gpu" else None
    prog = run_case(fn, specs, target=target, precision="mixed", rtol=1e-3, atol=1e-4)
    attn = [k for k in prog.kernels if any(o.startswith("sdpa") for o in k.ops)]
    assert len(attn) == 3 and all(k.wgsl.startswith("enable f16;") for k in attn)


def _mlp(x, w1, w2):
    return tg.relu(x @ w1) @ w2


def _gelu_mlp(x, w1, w2):
    return tg.gelu(x @ w1) @ w2


# saved activations: ReLU and GELU read their input's f16 copy (forward and backward); where
# C's rows are even, the product stores that copy from its epilogue, two values a word
# (ReLU's gradient times dO @ w2^T too, stored as f16 for the next products); odd rows
# (45, 7) store the copy from a kernel of its own. GELU (erf: too heavy for a product's
# epilogue, passes/fusion.py's HEAVY) and its gradient run in elementwise kernels of their
# own, which store the f16 copies
SAVED_CASES = [
    (lambda a, b: tg.relu(a @ b), {"a": f(37, 20), "b": f(20, 46)}, 1),  # dy * ReLU' there too
    (lambda a, b: tg.relu(a @ b), {"a": f(37, 20), "b": f(20, 45)}, 0),
    (_mlp, {"x": f(3, 23, 13), "w1": f(13, 30), "w2": f(30, 7)}, 1),
    (_mlp, {"x": f(150, 40), "w1": f(40, 132), "w2": f(132, 36)}, 1),  # tiled on the GPU
    (lambda a, b: tg.gelu(a @ b), {"a": f(37, 20), "b": f(20, 46)}, 0),
    (_gelu_mlp, {"x": f(150, 40), "w1": f(40, 132), "w2": f(132, 36)}, 0),
]
SAVED_RUNS = [(j, c) for j in range(len(SAVED_CASES)) for c in ("cpu", "gpu")]


@pytest.mark.parametrize("j,cls", SAVED_RUNS, ids=[f"{j}-{c}" for j, c in SAVED_RUNS])
def test_saved_activations_and_pair_epilogues_match_reference(j, cls):
    """Forward and backward against the reference, which rounds the same activations;
    the products whose epilogue stores f16 pairs counted. rtol: an f16 rounding may
    fall the other way after a sum in another order (one ulp, 2^-11)."""
    fn, specs, paired = SAVED_CASES[j]
    prog = run_case(fn, specs, target=GPU16 if cls == "gpu" else None, precision="mixed", rtol=1e-3)
    pairs = [k for k in prog.kernels if "matmul" in k.ops and "to_f16" in k.ops]
    assert len(pairs) == paired and all(k.wgsl.startswith("enable f16;") for k in pairs)


def _ln_between(a, w1, g, w2):
    return tg.layer_norm(a @ w1, g) @ w2


# a layer norm whose output a product reads: its f16 copy is stored by the normalize
# kernel's epilogue, two values a word, where the rows are even (40: a workgroup a row in
# the GPU class, one invocation a row in the CPU class); its gradient's copy, which the
# backward's product reads, likewise by normalize_grad; odd rows (15) from a kernel of its own
LN_CASES = [
    (
        _ln_between,
        {"a": f(6, 12), "w1": f(12, 40), "g": f(40), "w2": f(40, 5)},
        {"normalize", "normalize_grad"},
    ),
    (_ln_between, {"a": f(6, 12), "w1": f(12, 15), "g": f(15), "w2": f(15, 5)}, set()),
]
LN_RUNS = [(j, c) for j in range(len(LN_CASES)) for c in ("cpu", "gpu")]


@pytest.mark.parametrize("j,cls", LN_RUNS, ids=[f"{j}-{c}" for j, c in LN_RUNS])
def test_layer_norm_stores_its_f16_copy_in_pairs(j, cls):
    fn, specs, paired = LN_CASES[j]
    prog = run_case(fn, specs, target=GPU16 if cls == "gpu" else None, precision="mixed", rtol=1e-3)
    hosts = {
        op for k in prog.kernels if "to_f16" in k.ops for op in ("normalize", "normalize_grad") if op in k.ops
    }
    assert hosts == paired, [k.ops for k in prog.kernels]


def _dropout_residual(x, w, r):
    return tg.dropout(x @ w, 0.25) + r


@pytest.mark.parametrize("cls", ["cpu", "gpu"])
def test_epilogues_fuse_as_in_float32(cls):
    """A dropout after a product reads the product's f32 value (the mask's gradient, the
    only one that would read it, is not wanted), so the product hosts the dropout and the
    residual add as in float32; a layer norm's f16 copy, the gain's product read through
    it and that product's own copy are one epilogue of normalize. Forward and backward
    against the reference."""
    target = GPU16 if cls == "gpu" else None
    specs = {"x": f(24, 16), "w": f(16, 40), "r": f(24, 40)}
    prog = run_case(_dropout_residual, specs, target=target, precision="mixed", rtol=1e-3)
    assert any({"matmul", "rand", "add"} <= set(k.ops) for k in prog.kernels), [k.ops for k in prog.kernels]
    fn, specs, _ = LN_CASES[0]
    prog = run_case(fn, specs, target=target, precision="mixed", rtol=1e-3)
    assert any({"normalize", "mul", "to_f16"} <= set(k.ops) for k in prog.kernels), [
        k.ops for k in prog.kernels
    ]
    assert not any(set(k.ops) == {"mul", "to_f16"} for k in prog.kernels)


def _run(prog, graph, feeds):
    rt = native.Runtime(prog)
    try:
        host = {n: array.array("f", v.ravel().tolist()) for n, v in feeds.items()}
        got = rt.run(host, {}, [("outputs", n) for n in graph.outputs])
    finally:
        rt.close()
    return {n: np.array(got[("outputs", n)], np.float32) for n in graph.outputs}


def test_f16_rounding_is_numpys_bit_for_bit():
    """Every stored f16 value is NumPy's float16 of the f32 value: ties to even, subnormals,
    overflow to inf past 65504 (65520 and up), NaN, signed zeros; read back exactly through
    a product with [[1.0]]."""
    halves = np.arange(0x10000, dtype=np.uint16).view(np.float16).astype(np.float32)
    finite = halves[np.isfinite(halves)]
    nxt = np.nextafter(finite, np.float32(np.inf))
    ties = (finite[:-1].astype(np.float64) + finite[1:]) / 2  # some are not f32-exact: fine
    rng = np.random.default_rng(0)
    rand = rng.integers(0, 2**32, 20001, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = np.array(
        [65504, 65519.99, 65520, 65536, 1e30, np.inf, -np.inf, np.nan, -0.0, 2**-25, 2**-24, 1e-45]
    )
    x = np.concatenate([finite, nxt, ties.astype(np.float32), rand, special.astype(np.float32)])
    x = x[: len(x) // 2 * 2 + 1]  # odd: the last word's upper half is padding
    g = Graph()
    with tracing(g):
        xs, one = g.input("x", (len(x), 1)), g.input("one", (1, 1))
        g.outputs["y"] = make("matmul", (h(xs), one), ta=False, tb=False)
    got = _run(lower(g), g, {"x": x, "one": np.ones(1, np.float32)})["y"]
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))


class MLP(nn.Module):
    def __init__(self):
        self.l1 = nn.Linear(5, 33)
        self.l2 = nn.Linear(33, 3)

    def forward(self, x):
        return self.l2(tg.gelu(self.l1(x)))


def loss_fn(m, x, y):
    return ((m(x) - y) ** 2).mean()


INPUTS = {"x": (17, 5), "y": (17, 3)}


def _data(step, big=1.0):
    rng = np.random.default_rng(step)
    x = rng.normal(size=(17, 5)).astype(np.float32)
    return {"x": x * big, "y": np.sin(x[:, :3]).astype(np.float32)}


def _trainer(backend, precision, **kw):
    return tg.compile(MLP(), loss_fn, INPUTS, tg.optim.Adam(1e-2), backend=backend, precision=precision, **kw)


def _losses(t, steps: int = 30):
    return np.array([float(t.step(**_data(s)).loss) for s in range(steps)])


def test_mixed_training_follows_fp32_and_the_reference():
    """Native mixed follows the reference's mixed run: arithmetic to 1e-4 over the first
    10 steps; over 30, to 1e-3: an f32 sum in another order may move an f16 rounding by
    one ulp, which Adam then carries (1.1e-4 seen on an AVX-512 CPU; how far depends on
    the CPU's BLAS kernels and on chance, and the one-ulp jitter of tests/conftest.py
    does not reach f16's roundings, so it cannot measure this stray)."""
    runs = {}
    for backend in ("reference", "native"):
        for precision in ("float32", "mixed"):
            t = _trainer(backend, precision)
            runs[backend, precision] = _losses(t)
            if precision == "mixed" and backend == "native":
                assert t.program.meta["precision"] == "mixed"
                mem = t.program.meta["memory"]
    ref, gpu = runs["reference", "mixed"], runs["native", "mixed"]
    np.testing.assert_allclose(gpu[:10], ref[:10], rtol=1e-4)
    np.testing.assert_allclose(gpu, ref, rtol=1e-3)
    fp32 = runs["native", "float32"]
    assert fp32[-1] < 0.5 * fp32[0]  # it learns ...
    np.testing.assert_allclose(gpu, fp32, rtol=0.02)  # ... and mixed follows it closely
    assert mem["total_bytes"] > 0


def _fields(t):
    return t.params(), t.states(), t.steps


def test_overflow_skips_the_step_and_halves_the_scale():
    """Inputs of a few hundred keep the loss finite, but its gradient times 2^16 passes
    f16's 65504 in the backward products' f16 copies: the step is skipped, the scale
    halves, and nothing else changes; a clean step then counts towards growth."""
    for backend in ("reference", "native"):
        t = _trainer(backend, "mixed")
        t.step(**_data(0))
        params, states, steps = _fields(t)
        assert float(states["loss_scale"]) == 2.0**16 and float(states["loss_scale_clean_steps"]) == 1
        r = t.step(**_data(1, big=300.0))
        assert np.isfinite(r.loss) and not r.ok, backend
        p2, s2, steps2 = _fields(t)
        assert steps2 == steps
        for n in params:
            assert np.array_equal(np.asarray(p2[n]), np.asarray(params[n])), n
        for n in states:
            if n not in tg_compile.SCALE_STATES:
                assert np.array_equal(np.asarray(s2[n]), np.asarray(states[n])), n
        assert float(s2["loss_scale"]) == 2.0**15 and float(s2["loss_scale_clean_steps"]) == 0
        assert t.step(**_data(2)).ok
        assert float(t.states()["loss_scale"]) == 2.0**15
        assert float(t.states()["loss_scale_clean_steps"]) == 1


def test_the_scale_doubles_after_clean_steps(monkeypatch):
    monkeypatch.setattr(tg_compile, "SCALE_GROWTH_INTERVAL", 3)
    t = _trainer("reference", "mixed")
    scales = []
    for s in range(7):
        assert t.step(**_data(s)).ok
        scales.append(float(t.states()["loss_scale"]))
    assert scales == [2.0**16] * 2 + [2.0**17] * 3 + [2.0**18] * 2


def test_resume_is_exact_with_the_scale():
    t = _trainer("native", "mixed")
    t.step(**_data(0))
    t.step(**_data(1, big=300.0))  # skipped: the scale is now 2^15
    blob = checkpoint.save(t)
    tail = [float(t.step(**_data(s)).loss) for s in range(2, 6)]
    u = _trainer("native", "mixed", seed=5)
    checkpoint.load(u, blob)
    assert float(u.states()["loss_scale"]) == 2.0**15
    assert [float(u.step(**_data(s)).loss) for s in range(2, 6)] == tail
    for n, v in t.states().items():
        assert np.array_equal(np.asarray(u.states()[n]), np.asarray(v)), n


def test_precision_is_checked():
    with pytest.raises(ValueError, match="precision must be one of"):
        _trainer("reference", "half")
    with pytest.raises(ValueError, match="only available on the reference backend"):
        _trainer("native", "float64")


def test_a_device_without_shader_f16_refuses_mixed(monkeypatch):
    """A native device really created without shader-f16: compiling for it is refused with
    an error naming the feature, and so is running a mixed Program made elsewhere."""
    made_elsewhere = lower(_trainer("reference", "mixed").graph, target=Target(features=("shader-f16",)))

    native.forget_device()  # the next use opens a new device, asking for native.FEATURES
    monkeypatch.setattr(native, "FEATURES", {"subgroups": ("subgroups", "subgroup")})
    try:
        assert "shader-f16" not in native.device_features()
        with pytest.raises(tg_compile.PrecisionError, match="'shader-f16'"):
            _trainer("native", "mixed")
        with pytest.raises(Exception, match="shader-f16"):
            native.Runtime(made_elsewhere)
        _trainer("native", "float32").step(**_data(0))  # fp32 is unaffected
    finally:
        monkeypatch.undo()
        native.forget_device()
    assert "shader-f16" in native.device_features()


def test_tiny_gpt_mixed_follows_fp32():
    """The shakespeare GPT scaled down (attention, layer norms, GELU, a tied head): mixed
    precision's losses stay within 2 % of float32's over a few steps on lavapipe."""
    import dataclasses

    from tgweb.samples import shakespeare as sh

    s = sh.Sample(dataclasses.replace(sh.SMALL, layers=1, heads=2, dim=32, block=15, batch=3, dropout=0.0))
    losses = {}
    for precision in ("float32", "mixed"):
        t = tg.compile(s.Model(), sh.loss_fn, s.INPUTS, s.OPTIMIZER, backend="native", precision=precision)
        losses[precision] = [float(t.step(**s.batch(i)).loss) for i in range(6)]
    assert losses["float32"][-1] < losses["float32"][0]
    np.testing.assert_allclose(losses["mixed"], losses["float32"], rtol=0.02)


def test_mixed_attention_backward_reads_its_own_lse_copy():
    """In a mixed graph the backward reads attention's log-sum-exp from a copy of its own
    column (graph.kept), not through a view of the f32 [O | lse] result, so that result
    dies in the forward pass: the sdpa value is read by no kernel after the forward's."""
    import dataclasses

    from tgweb.lower import computed_nodes
    from tgweb.samples import shakespeare as sh

    s = sh.Sample(dataclasses.replace(sh.SMALL, layers=1, heads=2, dim=32, block=16, batch=2, dropout=0.0))
    for precision, folded in (("float32", True), ("mixed", False)):
        t = tg.compile(s.Model(), sh.loss_fn, s.INPUTS, s.OPTIMIZER, backend="reference", precision=precision)
        nodes = computed_nodes(t.graph, GPU16)
        grads = [n for n in nodes if n.kind in ("sdpa_grad_q", "sdpa_grad_kv")]
        assert len(grads) == 2
        # input 3 is P: the sdpa result read through a folded column view, or its copy
        assert all((n.inputs[3].kind == "sdpa") == folded for n in grads), precision
