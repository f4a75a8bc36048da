"""The shakespeare page's fast paths: the precision chosen from the adapter, text drawn one
token at a time with a key/value cache kept on the device (against the full-window
forward, token for token, through a cache refill), runs sent before any is read
(Inference.submit), and evaluation sent without waiting (metric_later)."""

from __future__ import annotations

import array
import itertools

import numpy as np
import pytest

import tgweb as tg
from tgweb import inference, samples
from tgweb.backends import native
from tgweb.codegen.target import classify
from tgweb.ir import TraceError
from tgweb.samples import shakespeare as sh
from tgweb.samples._util import fastest_precision

# adapter descriptions as the backends hand them to classify: wgpu-py's adapter.info for
# lavapipe, an NVIDIA GPU and an AMD one, Chromium's GPUAdapterInfo for an H200 with and
# without Dawn's f16 on NVIDIA, for an Apple GPU, and SwiftShader's
LAVAPIPE = {"vendor": "llvmpipe", "description": "Mesa 22.3.6", "adapter_type": "CPU"}
NVIDIA_NATIVE = {"vendor": "NVIDIA", "device": "NVIDIA H200", "adapter_type": "DiscreteGPU"}
AMD_NATIVE = {"vendor": "AMD", "device": "AMD Radeon RX 7900 XTX", "adapter_type": "DiscreteGPU"}
CHROMIUM_H200 = {"vendor": "nvidia", "architecture": "hopper", "isFallbackAdapter": False}
CHROMIUM_APPLE = {"vendor": "apple", "architecture": "metal-3", "isFallbackAdapter": False}
SWIFTSHADER = {"vendor": "google", "architecture": "swiftshader", "isFallbackAdapter": True}
F16 = ["shader-f16", "subgroups"]


@pytest.mark.parametrize(
    "info,want",
    [
        (dict(AMD_NATIVE, features=F16), "mixed"),
        (dict(CHROMIUM_APPLE, features=F16), "mixed"),
        (dict(NVIDIA_NATIVE, features=F16), "float32"),  # mixed measured slower on NVIDIA
        (dict(CHROMIUM_H200, features=F16), "float32"),
        (dict(CHROMIUM_H200, features=["subgroups"]), "float32"),  # Chromium without Dawn's f16 flag
        (dict(NVIDIA_NATIVE, features=[]), "float32"),
        (dict(LAVAPIPE, features=F16), "float32"),  # f16 on a CPU: no faster, less exact
        (dict(SWIFTSHADER, features=F16), "float32"),
        (dict(SWIFTSHADER, features=[]), "float32"),
    ],
)
def test_the_fastest_precision_is_mixed_only_on_a_gpu_with_shader_f16_where_it_pays(info, want):
    assert fastest_precision(classify(info)) == want


def test_the_reference_backend_trains_in_float32():
    assert fastest_precision(None) == "float32"
    assert samples.precision_for("reference") == "float32"
    assert samples.compile(sh.sized("small"), backend="reference").precision == "float32"
    with pytest.raises(ValueError, match="backend must be one of"):
        samples.precision_for("webgl")


@pytest.mark.native
def test_samples_compile_takes_the_adapters_choice(monkeypatch):
    """lavapipe offers shader-f16 but is a CPU: float32. Described as a GPU (an AMD
    adapter's info with lavapipe's features), the same device compiles and steps the
    sample in mixed precision, and its sampler draws; an explicit precision wins."""
    assert native.device_target().cls == "cpu"
    small = sh.sized("small")
    tr = samples.compile(small, backend="native")
    assert tr.precision == "float32" and small.choose_precision("native") == "float32"
    tr.close()
    gpu = classify(dict(AMD_NATIVE, features=sorted(native.device_features())))
    monkeypatch.setattr(native, "device_target", lambda: gpu)
    assert gpu.cls == "gpu" and gpu.has("shader-f16") and small.choose_precision("native") == "mixed"
    tr = samples.compile(small, backend="native")
    assert tr.precision == "mixed" and tr.program.meta["target"]["class"] == "gpu"
    assert np.isfinite(float(tr.step(**small.batch(0)).loss))
    sampler = tr.attach(small.next_token, inputs=small.TOKEN_INPUTS)
    text = "".join(itertools.islice(small.stream_cached(sampler, top_k=5), 40))
    assert len(text) == 40 and set(text) <= set(sh.chars())
    tr.close()
    assert samples.compile(small, backend="native", precision="float32").precision == "float32"


def _trainer(backend: str):
    """The small size with parameters far from the initial ones (N(0, 0.3)): logits well
    apart, so greedy choices are decided by more than rounding."""
    s = sh.sized("small")
    tr = tg.compile(s.Model(), s.loss_fn, inputs=s.INPUTS, optimizer=s.OPTIMIZER, seed=0, backend=backend)
    rng = np.random.default_rng(0)
    shapes = {n: np.asarray(v).shape for n, v in tr.params().items()}
    tr.load_params({n: rng.normal(0.0, 0.3, shape).astype(np.float32) for n, shape in shapes.items()})
    return s, tr


def _full_window(s, tr, prompt: str, length: int, top: int = 1):
    """What the cached sampler must draw, from the whole-window forward (sample_probs):
    for each character, the `top` most likely next ones given the context so far, which
    restarts from its last BLOCK // 2 characters past BLOCK as stream_cached's does;
    `choose` picks the one taken (the drawn one, or the most likely)."""
    full = tr.attach(s.sample_probs, inputs=s.SAMPLE_INPUTS)
    block, ctx, tops = s.config.block, sh.encode(prompt), []

    def step(choose):
        nonlocal ctx
        tokens = array.array("i", ctx + [0] * (block - len(ctx)))
        p = np.asarray(full.run(tokens=tokens, temperature=array.array("f", [1.0])).output)
        row = p.reshape(block, -1)[len(ctx) - 1]
        order = np.argsort(-row, kind="stable")
        tops.append((order[:top], row[order[0]] - row[order[1]]))
        ctx.append(choose(order[0]))
        if len(ctx) > block:
            ctx = ctx[-(block // 2) :]

    return step, tops


@pytest.mark.parametrize("backend", ["reference", pytest.param("native", marks=pytest.mark.native)])
def test_the_cached_sampler_draws_what_the_full_window_forward_would(backend):
    """Greedy (top_k=1), 70 characters from block 32: the first fill, one refill from the
    last 16 characters and a second, the same characters as the full-window forward."""
    s, tr = _trainer(backend)
    sampler = tr.attach(s.next_token, inputs=s.TOKEN_INPUTS)
    got = [sh.encode(c)[0] for c in itertools.islice(s.stream_cached(sampler, "ROMEO:", top_k=1), 70)]
    step, tops = _full_window(s, tr, "ROMEO:", 70)
    for _ in range(70):
        step(lambda best: best)
    assert got == [int(t[0][0]) for t in tops]
    assert min(gap for _, gap in tops) > 1e-5  # no near-tie (within rounding) decided it
    # a second stream starts from an emptied cache: the same text again
    again = "".join(itertools.islice(s.stream_cached(sampler, "ROMEO:", top_k=1), 20))
    assert again == sh.decode(got[:20])
    tr.close()


@pytest.mark.native
def test_drawn_characters_are_among_the_top_k_and_the_same_on_both_backends():
    """Sampling at temperature 0.8 among the 4 most likely: the draws' random numbers are
    the same on the device and the reference (the run's seed word), so are the characters;
    each is one of the 4 most likely after the context (the full-window forward's)."""
    texts = {}
    for backend in ("reference", "native"):
        s, tr = _trainer(backend)
        sampler = tr.attach(s.next_token, inputs=s.TOKEN_INPUTS)
        texts[backend] = "".join(itertools.islice(s.stream_cached(sampler, "\n", 0.8, top_k=4), 50))
        drawn = iter(sh.encode(texts[backend]))
        step, tops = _full_window(s, tr, "\n", 50, top=4)
        for _ in range(50):
            step(lambda _best: next(drawn))
        assert all(t in top for t, (top, _) in zip(sh.encode(texts[backend]), tops)), backend
        tr.close()
    assert texts["native"] == texts["reference"]
    assert len(set(texts["native"])) > 4  # it drew, not always the most likely


def test_stream_cached_checks_its_arguments():
    s, tr = _trainer("reference")
    sampler = tr.attach(s.next_token, inputs=s.TOKEN_INPUTS)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        next(s.stream_cached(sampler, temperature=0))
    with pytest.raises(ValueError, match="top_k must be an int >= 0"):
        next(s.stream_cached(sampler, top_k=-1))
    with pytest.raises(ValueError, match="ahead must be an int >= 1"):
        s.stream_cached(sampler, ahead=0)


def test_the_runs_are_sent_before_any_character_is_read():
    """The prompt's runs and `ahead` chained ones go out at once; each character read sends
    one more, until the cache's positions are spoken for (block 32)."""
    s, tr = _trainer("reference")
    sampler = tr.attach(s.next_token, inputs=s.TOKEN_INPUTS)
    text = s.stream_cached(sampler, "ROMEO:", ahead=10)
    assert sampler.runs == 6 + 9  # the prompt's last run draws the first character
    next(text)
    assert sampler.runs == 6 + 10
    s.stream_cached(sampler, "ROMEO:", ahead=100)
    assert sampler.runs == 16 + 6 + (32 - 6)  # a run for each position left


def test_state_and_assign_are_for_attached_forward_functions():
    with pytest.raises(TraceError, match="while tracing an attached forward"):
        inference.state("cache", (2,))
    s, tr = _trainer("reference")

    def bad(model, x):
        inference.assign(x, x)
        return x

    with pytest.raises(TraceError, match="assign writes a tensor made by inference.state"):
        tr.attach(bad, inputs={"x": (2,)})


@pytest.mark.parametrize("backend", ["reference", pytest.param("native", marks=pytest.mark.native)])
def test_evaluation_sent_between_steps_sees_the_parameters_of_the_steps_before(backend):
    """metric_later sends every evaluation batch at once; steps sent after it do not change
    what it measures, and it equals metric's value at that point."""
    s, tr = _trainer(backend)
    evaluate = tr.attach(s.forward, inputs=s.EVAL_INPUTS)
    tr.step(**s.batch(0))
    later = s.metric_later(evaluate.submit)
    for i in range(1, 4):
        tr.step(**s.batch(i))
    sent_then = later()
    tr2 = _trainer(backend)[1]
    tr2.step(**s.batch(0))
    ev2 = tr2.attach(s.forward, inputs=s.EVAL_INPUTS)
    now = s.metric(lambda b: ev2.run(**b).output)
    assert sent_then == pytest.approx(now, rel=1e-6)
    assert s.metric(lambda b: evaluate.run(**b).output) != pytest.approx(sent_then, rel=1e-6)


@pytest.mark.native
def test_the_page_source_reports_between_steps_and_streams_its_text(monkeypatch):
    """web/page/samples/shakespeare.py at the small size, natively, through the page's
    harness: an evaluation step sends its report and train() shows it DEPTH steps later,
    as the steps go on (reading it waits for nothing: it ran before the step read last);
    the harness's show() after train() streams LENGTH characters from the last step's
    model; the figures name the precision chosen."""
    import importlib.util
    import pathlib

    from tgweb import pipeline, worker

    root = pathlib.Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("page_harness", root / "web/page/harness.py")
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    source = (root / "web/page/samples/shakespeare.py").read_text()
    assert source.count('.sized("full")') == 1
    source = source.replace('.sized("full")', '.sized("small")')
    source = source.replace("EVAL_EVERY = 250", "EVAL_EVERY = 10")
    views = []
    monkeypatch.setattr(worker, "_handler", None)

    def on(event, data):
        if event == "view":
            views.append((data, harness._spaces["shakespeare"]["trainer"].calls))

    worker.set_handler(on)
    harness.page_exec("shakespeare", source, "shakespeare.py", show=False)
    out = harness.page_train("shakespeare", 22)
    assert out["steps"] == 22 and not out["stopped"]
    shown = {v["shakespeare"]["step"]: (v, calls) for v, calls in views if v["shakespeare"]["done"]}
    # the step-1 view (harness), step 10's report shown after step 10 + DEPTH, step 20's
    # dropped (the harness's show() after train() draws from the newer model), then step 22's
    assert sorted(shown) == [1, 10, 22], sorted(shown)
    assert shown[10][1] == 10 + pipeline.DEPTH + 1
    for v, _ in shown.values():
        text = v["shakespeare"]["text"]
        assert len(text) == 240 and set(text) <= set(sh.chars())
        assert v["figures"]["precision"] == "float32" == v["shakespeare"]["precision"]
        assert 3.0 < v["figures"]["validation loss"] < 4.5  # near ln 65 = 4.17 this early
    harness._spaces.clear()


@pytest.mark.native
def test_a_cached_sampler_program_keeps_its_own_state():
    """A repeat visit's sampler comes from the compiled-Program cache (progcache): its
    Program and the graph's leaves, no graph; its cache state is still its own and
    emptied, so it draws the same text as the compiled one."""
    from tgweb import progcache

    store = progcache.MemoryStore()
    progcache.use(store)
    try:
        texts, outcomes = [], []
        for _ in range(2):
            with progcache.keyed("sampler source", "shakespeare"):
                s, tr = _trainer("native")
                sampler = tr.attach(s.next_token, inputs=s.TOKEN_INPUTS)
            outcomes.append([e["outcome"] for e in progcache.log])
            texts.append("".join(itertools.islice(s.stream_cached(sampler, "ROMEO:", top_k=1), 40)))
            assert sorted(tr.buffers()) == [] and "@run.h0.k" in sampler.program.states
            tr.close()
    finally:
        progcache.use(None)
    assert outcomes == [["miss", "miss"], ["hit", "hit"]] and texts[0] == texts[1]
