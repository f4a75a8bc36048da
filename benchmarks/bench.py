#!/usr/bin/env python3
"""tgweb's benchmark (issue 7): sin and addition trained by tgweb in headless
Chromium (WebGPU on SwiftShader) and natively (wgpu-py), and by TensorFlow.js
(WebGPU backend) and jax-js (WebGPU, whole step under jit) in the same Chromium
run, on the same data and from the same initial weights.

    python3 build.py bench [--quick] [--rounds N] [--only sin|addition] [--no-native]

Writes benchmarks/results.json, benchmarks/bench.md (the report) and
benchmarks/bench.png (a chart drawn as SVG in Chromium and screenshotted), all
git-ignored; benchmarks/RESULTS.md is the curated record that figures are copied to
(a run never overwrites it).

Figures (per model and framework):
  cold start    page navigation -> first training step completed (loss read back);
                natively: process start -> first step completed
  compile       tgweb: tg.compile() wall time (trace, grad, passes, WGSL, buffers,
                pipelines ready); peers: their first step minus a steady step (their
                tracing and shader compilation happen in the first step)
  warm-up       every framework steps for at least 1 s (and 5 steps, 2 for slow peers)
                before its figures: a GPU idle through a compile stays at its lowest
                clock for a while after work resumes (H200: 345 against 1980 MHz)
  ms/step       median of >= 20 steps after warm-up, every step's loss read back (tgweb:
                each once it is back, as worker.metric("loss", r) in a page's loop takes
                it, since steps are pipelined, up to 8 unread: so the time of the whole
                loop, its last losses waited for, per step); tgweb also reading each loss
                before sending the next step; and with the loss read every 10th step
                (median over blocks of 10 steps; tgweb: the Program run by its engine)
  GPU clock     where nvidia-smi is found: the median SM clock (MHz) and mean reported
                utilisation while each figure was measured (a GPU left lightly loaded
                clocks itself down, which makes figures of one machine differ by 3x)
  dispatches    compute dispatches per step, counted in the page by wrapping
                GPUComputePassEncoder.dispatchWorkgroups (tgweb: the same Program
                replayed by gpu.mjs on the page, since its worker is not instrumented)
  pipelines     compute pipelines created (unique for tgweb: one per WGSL text)
  peak GPU      high-water mark of live GPUBuffer bytes (createBuffer - destroy)
  compile per pass  natively, tg.compile split into trace, autodiff, optimizer, each
                lowering stage, initial values, upload and pipelines, for sin, addition,
                shakespeare and its GPT at 1, 2, 6 and 12 layers (tools/compile_phases.py,
                in a process of its own; --quick: sin, addition, 1 and 2 layers)

This is not a test: it prints figures and never fails on a time. Ratios are
"peer / tgweb" from the same run (> 1: tgweb is faster).
"""

from __future__ import annotations

import argparse
import array
import contextlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEERS = HERE / "peers"
# where the peers' files come from (node_modules, or a copy of just their dist files)
NODE_MODULES = Path(os.environ.get("TGWEB_NODE_MODULES") or ROOT / "node_modules")


def _build_module():
    spec = importlib.util.spec_from_file_location("tgweb_build", ROOT / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# as the tests launch it (build.chromium: a real GPU where ../shared/tools/gpu-chromium's
# launch.sh exported GPU_CHROMIUM and its flags; the report names the adapter each column
# really ran on), plus developer features so that timestamp queries are not quantized to 100 us
CHROMIUM, ARGS = _build_module().chromium()
ARGS = ARGS + ["--enable-webgpu-developer-features"]
MODELS = ("sin", "addition")
PEER_NAMES = {"tfjs": "TensorFlow.js 4.22.0 (webgpu)", "jaxjs": "jax-js 0.1.25 (webgpu, jit)"}
NBATCH = 8
TARGETS = {  # issue 7, this machine's Chromium
    ("sin", "ms_per_step_read_every"): 6.0,
    ("addition", "ms_per_step_read_every"): 400.0,
    ("addition", "compile_s"): 2.5,
    ("sin", "cold_start_s"): 8.0,
    ("addition", "cold_start_s"): 8.0,
    ("addition", "peak_gpu_bytes"): 12e6,
    ("sin", "dispatches_per_step"): 30,
    ("addition", "dispatches_per_step"): 250,
}

# --------------------------------------------------------------------------
# The measuring code, run unchanged in CPython (native) and in the tgweb worker
# (browser). Globals it expects: MODEL, NBATCH, B_<i>_<input> (the batches).

BENCH_PY = r"""
import time, statistics
import tgweb as tg
from tgweb import samples
from tgweb.inference import seed_word
from tgweb.pipeline import DEPTH
from tgweb.step_data import check_inputs

def _compile(model, backend=None):
    s = samples.get(model)
    kw = {"backend": backend} if backend else {}
    t0 = time.perf_counter()
    trainer = tg.compile(s.Model(), s.loss_fn, inputs=s.INPUTS, optimizer=s.OPTIMIZER, **kw)
    return trainer, time.perf_counter() - t0

def _scalars(trainer, applied, seed):
    # the Program's host scalars for a step after `applied` applied steps, none unread
    return trainer._step_scalars([trainer._host_scalars(applied)[0]] * (DEPTH + 1), seed)

def _raw_step(trainer, data, read):
    # Trainer.step without its readback: the same host scalars, reads only `read` (the
    # bench's batches are finite: the step is applied, and counted so)
    trainer._wait_in_flight()
    sc = _scalars(trainer, trainer._applied, seed_word(trainer.seed, trainer._calls))
    trainer._calls += 1
    trainer._applied += 1
    trainer._in_flight.applied_read += 1
    return trainer.engine.rt.run(data, sc, read)

def _program_stats(trainer):
    p = trainer.program
    keys = {("".join(b.access[0] for b in k.bindings), k.wgsl) for k in p.kernels}
    return {"dispatches_per_step": len(p.kernels), "unique_pipelines": len(keys),
            "program_bytes": sum(b.size for b in p.buffers), "memory": dict(p.meta.get("memory", {})),
            "precision": p.meta.get("precision", "float32")}

def bench_first(model, batches, backend=None):
    trainer, compile_s = _compile(model, backend)
    t = time.perf_counter()
    r = trainer.step(**batches[0])
    first = time.perf_counter() - t
    return trainer, {"compile_s": compile_s, "first_step_ms": 1000 * first, "first_loss": r.loss}

def bench_steps(trainer, batches, warmup, steps, blocks, warmup_s=0.0):
    # warm-up: `warmup` steps and at least warmup_s seconds of them (a GPU idle through
    # the compile runs at its lowest clock for a while: a figure should not measure that)
    warm, t_warm = [], time.perf_counter()
    while len(warm) < warmup or time.perf_counter() - t_warm < warmup_s:
        warm.append(trainer.step(**batches[(len(warm) + 1) % len(batches)]))
    losses = [r.loss for r in warm]
    warmup = len(warm)
    # every loss read, as a page's loop does (worker.metric("loss", r) each step): each
    # step's loss is taken once it is back, in order, without waiting for it; step()
    # itself waits once DEPTH steps are unread (pipelined steps)
    # (the figure: the whole loop, the last losses waited for, per step; a median of
    # single steps would count the first steps, which only fill the pipeline)
    windows = {}  # wall-clock spans of each measurement, for the GPU clock beside it
    t_span = time.time()
    per, unread = [], []
    t_all = time.perf_counter()
    for i in range(steps):
        b = batches[(warmup + 1 + i) % len(batches)]
        t = time.perf_counter()
        unread.append(trainer.step(**b))
        while unread and unread[0].ready:
            losses.append(unread.pop(0).loss)
        per.append(1000 * (time.perf_counter() - t))
    losses.extend(r.loss for r in unread)
    every = 1000 * (time.perf_counter() - t_all) / steps
    windows["read_every"] = [t_span, time.time()]
    datas = [check_inputs(trainer.graph.inputs, b, "bench") for b in batches]
    t_span = time.time()
    blk = []
    for j in range(blocks):
        t = time.perf_counter()
        for i in range(10):
            got = _raw_step(trainer, datas[i % len(datas)], [("outputs", "loss")] if i == 9 else [])
        blk.append(100 * (time.perf_counter() - t))
        losses.append(float(got[("outputs", "loss")][0]))
    windows["every10"] = [t_span, time.time()]
    t_span = time.time()
    # each loss read before the next step is sent: a full round trip per step (last, so
    # the loss trajectory above matches the peers' step for step)
    at_once = []
    for i in range(steps):
        t = time.perf_counter()
        trainer.step(**batches[i % len(batches)]).loss
        at_once.append(1000 * (time.perf_counter() - t))
    windows["at_once"] = [t_span, time.time()]
    out = {"windows": windows, "warmup_steps": warmup, "ms_per_step_read_every": every,
           "ms_per_step_read_at_once": statistics.median(at_once),
           "ms_per_step_read_every10": statistics.median(blk),
           "step_ms_all": per, "block_ms": blk, "losses": losses}
    out.update(_program_stats(trainer))
    return out

def bench_overhead(trainer, batches, n=10):
    # where the host time of a step goes: input checks/conversion, the step with one
    # read (loss) vs the three Trainer.step reads, and the full Trainer.step
    med = lambda f: statistics.median(f(i) for i in range(n))
    def timed(fn):
        t = time.perf_counter(); fn(); return 1000 * (time.perf_counter() - t)
    datas = [check_inputs(trainer.graph.inputs, b, "bench") for b in batches]
    L = [("outputs", "loss")]
    L3 = [("outputs", "loss"), ("outputs", "ok"), ("outputs", "grad_norm")]
    def check(i):
        return timed(lambda: check_inputs(trainer.graph.inputs, batches[i % len(batches)], "x"))
    return {
        "check_inputs_ms": med(check),
        "raw_step_no_read_ms": med(lambda i: timed(lambda: _raw_step(trainer, datas[i % len(datas)], []))),
        "raw_step_read_loss_ms": med(lambda i: timed(lambda: _raw_step(trainer, datas[i % len(datas)], L))),
        "raw_step_read_3_ms": med(lambda i: timed(lambda: _raw_step(trainer, datas[i % len(datas)], L3))),
        "trainer_step_ms": med(lambda i: timed(lambda: trainer.step(**batches[i % len(batches)]))),
    }

def replica_args(trainer, step=10):
    # what the page needs to replay the Program with gpu.mjs alone
    return {"program": trainer.program.to_json(), "scalars": _scalars(trainer, step, 12345)}

def batches_from_globals(g, model):
    s = samples.get(model)
    return [{n: g[f"B_{i}_{n}"] for n in s.INPUTS} for i in range(g["NBATCH"])]
"""

BROWSER_COLD_PY = (
    BENCH_PY
    + r"""
BATCHES = batches_from_globals(globals(), MODEL)
TRAINER, FIRST = bench_first(MODEL, BATCHES)
FIRST
"""
)


# --------------------------------------------------------------------------
# Data and initial weights, shared by every framework


def _samples():
    sys.path.insert(0, str(ROOT))
    from tgweb import samples

    return samples


def make_batches(model: str) -> list[dict[str, list]]:
    s = _samples().get(model)
    return [{k: list(v) for k, v in s.batch(step).items()} for step in range(NBATCH)]


def initial_params(model: str, seed: int = 0) -> dict[str, dict]:
    """tgweb's initial weights for seed 0 (as Trainer.reset draws them), with shapes and
    whether weight decay applies, for the peers."""
    from tgweb.compile import decays
    from tgweb.nn.module import param_rng

    m = _samples().get(model).Model()
    out = {}
    for n, p in m.named_parameters():
        data = p.init(p.shape, param_rng(seed, n))
        out[n] = {"shape": list(p.shape), "data": [float(x) for x in data], "decay": decays(p)}
    return out


# --------------------------------------------------------------------------
# The server: the bundled site, plus node_modules at /nm/ and benchmarks/peers at /peers/


def serve_bench_site():
    """The bundled site (bundled first where it is missing) and the peers' files, served
    from a thread on a free port of 127.0.0.1: (server, its URL)."""
    build = _build_module()
    if not (build.SITE / "manifest.json").exists():
        build.bundle_site()
    srv = make_server(build, build.SITE)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def make_server(build, site: Path):
    import http.server

    mounts = {"/nm/": NODE_MODULES, "/peers/": PEERS}

    class Handler(http.server.SimpleHTTPRequestHandler):
        extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, **build.MIME}

        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(site), **kw)

        def translate_path(self, path):
            clean = path.split("?", 1)[0].split("#", 1)[0]
            for prefix, root in mounts.items():
                if clean.startswith(prefix):
                    rel = Path(clean[len(prefix) :])
                    target = (root / rel).resolve()
                    if root.resolve() in target.parents or target == root.resolve():
                        return str(target)
                    return str(root / "__nope__")
            return super().translate_path(path)

        def end_headers(self):
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Cross-Origin-Opener-Policy", "same-origin")
            self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
            self.send_header("Cross-Origin-Resource-Policy", "same-origin")
            super().end_headers()

        def log_message(self, fmt, *args):
            pass

    http.server.ThreadingHTTPServer.daemon_threads = True
    return http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)


# --------------------------------------------------------------------------
# Browser runs


@contextlib.contextmanager
def tgweb_page():
    """A page of the bundled site in Chromium, launched as the bench launches it, with
    tgweb started as window.tg: yields (page, adapter info). For the probes beside this
    file (samples_bench.py, step_profile.py)."""
    from playwright.sync_api import sync_playwright

    build = _build_module()
    if not (build.SITE / "manifest.json").exists():
        build.bundle_site()
    srv = build.make_server(build.SITE, 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{srv.server_address[1]}/examples/")
                adapter = page.evaluate("""async () => {
                    const { start } = await import("../tgweb.mjs");
                    window.tg = await start();
                    return window.tg.info.adapter;
                }""")
                yield page, adapter
            finally:
                browser.close()
    finally:
        srv.shutdown()


def page_target(page):
    """What the kernels are tuned for on the bench page's adapter, as the worker tunes them
    (its class, and its optional features such as subgroups)."""
    from tgweb.codegen.target import classify

    return classify(page.evaluate("() => harness.adapterInfo()"))


def _new_page(browser, url):
    ctx = browser.new_context()
    page = ctx.new_page()
    page.add_init_script(path=str(PEERS / "instrument.js"))
    logs: list[str] = []
    page.on(
        "console", lambda m: logs.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None
    )
    page.on("pageerror", lambda e: logs.append(f"pageerror: {e}"))
    page.goto(f"{url}/peers/bench.html")
    page.wait_for_function("window.benchReady === true", timeout=30000)
    return ctx, page, logs


def run_tgweb_browser(browser, url, model, batches, cfg) -> dict:
    ctx, page, logs = _new_page(browser, url)
    try:
        page.set_default_timeout(600_000)
        cold = page.evaluate(
            "([m, b, src]) => harness.tgwebCold(m, b, src)", [model, batches, BROWSER_COLD_PY]
        )
        steps = page.evaluate(
            "([src]) => harness.tgwebRun(src)",
            [
                f"bench_steps(TRAINER, BATCHES, {cfg['warmup']}, {cfg['steps']}, "
                f"{cfg['blocks'][model]}, {cfg['warmup_s']})"
            ],
        )
        steps["host_breakdown"] = page.evaluate("() => harness.tgwebRun('bench_overhead(TRAINER, BATCHES)')")
        rep = page.evaluate("() => harness.tgwebRun('replica_args(TRAINER)')")
        params = {n: v["data"] for n, v in initial_params(model).items()}  # = the trainer's seed-0 init
        t_span = time.time()
        replica = page.evaluate(
            "([p, prm, sc, b, o]) => harness.tgwebReplica(p, prm, sc, b, o)",
            [
                rep["program"],
                params,
                rep["scalars"],
                batches,
                {
                    "warmup": cfg["warmup"],
                    "warmupMs": 1000 * cfg["warmup_s"],
                    "steps": cfg["steps"],
                    "blocks": cfg["blocks"][model],
                },
            ],
        )
        replica["windows"] = {"steps": [t_span, time.time()]}
        out = {"fw": "tgweb", "where": "browser", **cold, **steps, "replica": replica}
        out["cold_start_s"] = out["cold_start_ms"] / 1000
        out["peak_gpu_bytes"] = replica["peak_gpu_bytes"]
        out["dispatches_measured"] = replica["dispatches_per_step"]
        return out
    except Exception as e:  # reported in the table, never a fake number
        return {"fw": "tgweb", "where": "browser", "error": _short(e), "logs": logs[-10:]}
    finally:
        ctx.close()


def profile(browser, url, model, cfg) -> None:
    """Print ms/step and per-kernel GPU times of tgweb's step for `model`, the Program
    compiled in this process (no Pyodide) and replayed by gpu.mjs in the page."""
    sys.path.insert(0, str(ROOT))
    from tgweb.lower import lower

    ns: dict = {}
    exec(BENCH_PY, ns)
    ctx, page, logs = _new_page(browser, url)
    t = time.perf_counter()
    trainer, _ = ns["_compile"](model, "reference")
    trainer.engine._program = lower(trainer.graph, target=page_target(page))
    compile_s = time.perf_counter() - t
    rep = ns["replica_args"](trainer)
    params = {n: v["data"] for n, v in initial_params(model).items()}
    try:
        page.set_default_timeout(600_000)
        r = page.evaluate(
            "([p, prm, sc, b, o]) => harness.tgwebReplica(p, prm, sc, b, o)",
            [
                rep["program"],
                params,
                rep["scalars"],
                make_batches(model),
                {"warmup": cfg["warmup"], "steps": cfg["steps"], "blocks": 1},
            ],
        )
    finally:
        ctx.close()
    ks = r["kernels"]
    tot = sum(k.get("ts_ms") or 0 for k in ks)
    print(
        f"[{model}] CPython compile {compile_s:.2f} s; "
        f"gpu.mjs: {r['shim_ms_per_step_read_every']:.2f} ms/step "
        f"(loss read every step), {r['shim_ms_per_step_read_every10']:.2f} ms/step (every 10th); "
        f"GPU {r.get('ts_step_ms') or 0:.2f} ms as one pass, kernels sum {tot:.2f} ms; "
        f"{r['dispatches_per_step']:.0f} dispatches, {r['unique_pipelines']} pipelines, "
        f"instantiate {r['instantiate_ms']:.0f} ms, peak {r['peak_gpu_bytes'] / 1e6:.2f} MB; "
        f"loss {r['last_loss']:.5f}"
    )
    fam: dict[str, list] = {}
    for k in ks:
        e = fam.setdefault(_family(k), [0, 0.0])
        e[0] += 1
        e[1] += k.get("ts_ms") or 0
    print(
        "  by family: "
        + ", ".join(f"{f} {n}x {ms:.1f} ms" for f, (n, ms) in sorted(fam.items(), key=lambda x: -x[1][1]))
    )
    for k in sorted(ks, key=lambda k: -(k.get("ts_ms") or 0))[:25]:
        print(f"  {k.get('ts_ms') or 0:7.3f} ms  #{k['i']:<3} {str(k['dispatch']):14} {k['kernel'][:60]}")
    Path(f"/tmp/tgweb-profile-{model}.json").write_text(json.dumps({"replica": r, "program": rep["program"]}))


def run_peer(browser, url, fw, model, init, batches, cfg) -> dict:
    ctx, page, logs = _new_page(browser, url)
    try:
        page.set_default_timeout(600_000)
        t_span = time.time()
        r = page.evaluate(
            "([fw, m, init, b, o]) => harness.peer(fw, m, init, b, o)",
            [
                fw,
                model,
                init,
                batches,
                {
                    "warmup": cfg["peer_warmup"][model],
                    "warmupMs": 1000 * cfg["warmup_s"],
                    "steps": cfg["steps"],
                    "blocks": cfg["blocks"][model],
                    "budgetMs": cfg["budget_ms"],
                },
            ],
        )
        r["windows"] = {"steps": [t_span, time.time()]}  # its load, compile and steps
        r["cold_start_s"] = r["cold_start_ms"] / 1000
        r["compile_s"] = max(0.0, r["first_step_ms"] - r["ms_per_step_read_every"]) / 1000
        r["logs"] = logs[-5:]
        return r
    except Exception as e:
        return {"fw": fw, "model": model, "error": _short(e), "logs": logs[-10:]}
    finally:
        ctx.close()


def _short(e) -> str:
    s = " ".join(str(e).split())
    return s if len(s) <= 600 else s[:150] + " … " + s[-450:]


# --------------------------------------------------------------------------
# The GPU's clock while figures are measured (NVIDIA: nvidia-smi)


class GpuClocks:
    """Samples the SM clock and utilisation every 100 ms through nvidia-smi, when there
    is one, for the whole run; window(t0, t1) summarises a wall-clock span."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []  # (time.time(), MHz, util %)
        self._proc = None
        if shutil.which("nvidia-smi"):
            cmd = ["nvidia-smi", "--query-gpu=clocks.sm,utilization.gpu", "--format=csv,noheader,nounits"]
            self._proc = subprocess.Popen(cmd + ["-lms", "100"], stdout=subprocess.PIPE, text=True)
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self._proc.stdout:
            try:
                mhz, util = (float(x) for x in line.split(",")[:2])
            except ValueError:
                continue
            self.samples.append((time.time(), mhz, util))

    def window(self, span) -> dict | None:
        """{"sm_mhz": median, "util": mean %} over the span [t0, t1], widened by a sample
        period on each side: a figure of 20 short steps may fall between two samples."""
        if not span:
            return None
        got = [(m, u) for t, m, u in self.samples if span[0] - 0.15 <= t <= span[1] + 0.15]
        if not got:
            return None
        mhz = sorted(m for m, _ in got)
        return {"sm_mhz": mhz[len(mhz) // 2], "util": round(sum(u for _, u in got) / len(got), 1)}

    def close(self) -> None:
        if self._proc is not None:
            self._proc.terminate()


def add_clocks(r: dict | None, clocks: GpuClocks) -> None:
    """r["clocks"]: the GPU clock in each of r's measurement windows, when known."""
    if not r or "error" in r:
        return
    got = {k: clocks.window(span) for k, span in (r.get("windows") or {}).items()}
    got = {k: v for k, v in got.items() if v}
    if got:
        r["clocks"] = got


# --------------------------------------------------------------------------
# Native (wgpu-py in this CPython)


def run_native(model, cfg) -> dict:
    """tgweb natively (wgpu-py), in a process of its own: a wgpu device left alive in this
    process slowed the next Chromium runs' steps on the H200 (addition 4.7 against 2.3 ms)."""
    try:
        out = _child_json([str(Path(__file__)), "--native-run", model, json.dumps(cfg)], "RESULT")
        if "error" in out:
            return out
        cold = subprocess.run(
            [sys.executable, str(Path(__file__)), "--native-cold", model],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
            env=_child_env(),
        )
        lines = [ln for ln in cold.stdout.splitlines() if ln.startswith("COLD ")]
        out["cold_start_s"] = float(lines[-1].split()[1]) if lines else None
        return out
    except Exception as e:
        return {"fw": "tgweb", "where": "native", "error": _short(e)}


def _compile_phases_module():
    spec = importlib.util.spec_from_file_location("compile_phases", ROOT / "tools" / "compile_phases.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_compile_phases(quick: bool) -> dict:
    """tools/compile_phases.py's per-pass table, natively, in a process of its own (as
    run_native, for the same reason)."""
    names = ["sin", "addition", "gpt 1L", "gpt 2L"] if quick else list(_compile_phases_module().MODELS)
    script = str(ROOT / "tools" / "compile_phases.py")
    try:
        return _child_json([script, "--json", "--models", ",".join(names)], "PHASES")
    except Exception as e:
        return {"error": _short(e)}


def _child_json(args: list[str], tag: str) -> dict:
    """Runs a Python script in a process of its own; the JSON of its last stdout line
    starting with `tag`."""
    p = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=1200, cwd=ROOT, env=_child_env()
    )
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(tag + " ")]
    if not lines:
        tail = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        raise RuntimeError(f"{Path(args[0]).name} printed no {tag} line: {tail}")
    return json.loads(lines[-1][len(tag) + 1 :])


def compile_phases_report(phases: dict) -> list[str]:
    """The per-pass section of the report (and of the console output)."""
    L = ["\n## Compile time per pass (tgweb native)\n"]
    if "error" in phases:
        return L + [f"ERROR {phases['error']}"]
    cols = phases["cols"]
    L.append(
        "`tg.compile` natively (wgpu-py), seconds, one compile each with an empty pipeline "
        "cache; `gpt NL`: shakespeare's GPT at full width with N layers. First device "
        f"creation of the process: {phases['first_device_s']:.2f} s.\n"
    )
    L += ["```", _compile_phases_module().table(cols), "```"]
    cp = _compile_phases_module()
    if all(c in cols for c in cp.DEPTH):
        L += ["", "```", cp.depth_table(cols), "```"]
    return L


def _child_env() -> dict:
    """This process's environment, with the checkout first on the import path (tgweb
    need not be installed: on the H200 it is not)."""
    path = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def native_run(model: str, cfg: dict) -> None:
    """The native measurement of run_native, printed as one line "RESULT <json>"."""
    try:
        ns: dict = {}
        exec(compile(BENCH_PY, "bench_native.py", "exec"), ns)
        bs = [
            {k: array.array("i" if k in ("tokens", "targets") else "f", v) for k, v in b.items()}
            for b in make_batches(model)
        ]
        trainer, first = ns["bench_first"](model, bs, "native")
        steps = ns["bench_steps"](
            trainer, bs, cfg["warmup"], cfg["steps"], cfg["blocks"][model], cfg["warmup_s"]
        )
        steps["host_breakdown"] = ns["bench_overhead"](trainer, bs)
        out = {"fw": "tgweb", "where": "native", **first, **steps}
        out["peak_gpu_bytes"] = steps["program_bytes"]
        try:
            import wgpu

            from tgweb.backends import native

            out["adapter"] = native.adapter_info()
            out["wgpu"] = wgpu.__version__
        except Exception:
            pass
    except Exception as e:
        out = {"fw": "tgweb", "where": "native", "error": _short(e)}
    print("RESULT " + json.dumps(out, default=str), flush=True)


def native_cold(model: str) -> None:
    """Process start (as close as Python sees it) -> compiled -> first step done."""
    t0 = time.time()
    try:
        import psutil  # noqa: F401  (not required)
    except ImportError:
        pass
    start = _process_start_time() or t0
    ns: dict = {}
    exec(compile(BENCH_PY, "bench_native.py", "exec"), ns)
    b = make_batches(model)[:1]
    bs = [{k: array.array("i" if k in ("tokens", "targets") else "f", v) for k, v in x.items()} for x in b]
    ns["bench_first"](model, bs, "native")
    print(f"COLD {time.time() - start:.3f}", flush=True)


def _process_start_time() -> float | None:
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - uptime + start_ticks / ticks
    except Exception:
        return None


# --------------------------------------------------------------------------
# Report


def _fmt_clocks(c) -> str:
    """'1980 (12 %)' per window, read every / every 10th / at once where measured."""
    if not c:
        return ""
    order = ["read_every", "every10", "at_once", "steps"]
    return " / ".join(f"{c[k]['sm_mhz']:.0f} ({c[k]['util']:.0f} %)" for k in order if k in c)


def _fmt_ms(x):
    return "—" if x is None else (f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}")


def _fmt_s(x):
    return "—" if x is None else f"{x:.2f}"


def _fmt_bytes(x):
    return "—" if x is None else f"{x / 1e6:.2f} MB"


def _ratio(peer, ours):
    if peer is None or ours in (None, 0):
        return "—"
    return f"{peer / ours:.2f}×"


def _get(r, k):
    return None if r is None or "error" in r else r.get(k)


def _adapter_name(info) -> str:
    """The adapter a column ran on, as its info names it (SwiftShader, llvmpipe, NVIDIA H200)."""
    if not isinstance(info, dict):
        return "adapter unknown"
    for key in ("description", "device", "architecture", "vendor"):
        v = str(info.get(key) or "")
        if v and not v.startswith("0x"):
            return v
    return "adapter unknown"


# the matrix-product path each precision runs (no subgroup-matrix kernel exists yet)
MATMUL_PATH = {"float32": "f32 matmul", "mixed": "f16-storage matmul, f32 accumulation"}


def _what_ran(col) -> str:
    """A column's precision and matrix-product path, from its Program's stats."""
    prec = _get(col, "precision")
    return f"{prec}, {MATMUL_PATH.get(prec, '?')}" if prec else "precision unknown"


def write_report(results: dict, cmd: str) -> str:
    L = []
    env = results["env"]
    L.append("# tgweb benchmark results\n")
    L.append(
        f"Command: `{cmd}` — {env['date']}, {env['cpus']} CPUs, {env['chromium']}; "
        f"adapter: {env.get('adapter', '?')}. Generated by benchmarks/bench.py; "
        "figures are medians from one run, ratios are peer ÷ tgweb from the same run "
        "(> 1 means tgweb is faster).\n"
    )
    for model in results["models"]:
        R = results["models"][model]
        tb, nat = R.get("tgweb"), R.get("native")
        L.append(f"\n## {model}\n")
        L.append(
            f"| | tgweb (Chromium, {_adapter_name(_get(tb, 'info') and tb['info'].get('adapter'))}; "
            f"{_what_ran(tb)}) "
            "| tgweb shim only (gpu.mjs, no Python) "
            f"| tgweb native (wgpu-py, {_adapter_name(_get(nat, 'adapter'))}; {_what_ran(nat)}) | "
            + " | ".join(PEER_NAMES[p] for p in results["peers"])
            + " |"
        )
        L.append("|---" * (4 + len(results["peers"])) + "|")
        rep = _get(tb, "replica") or {}

        def row(label, key, fmt, native_key=None, replica_key=None, ratio=True):
            ours = _get(tb, key)
            cells = [
                fmt(ours),
                fmt(rep.get(replica_key)) if replica_key else "",
                fmt(_get(nat, native_key or key)) if native_key != "" else "",
            ]
            for p in results["peers"]:
                pr = R.get(p)
                if pr is None:
                    cells.append("not run")
                elif "error" in pr:
                    cells.append("error")
                else:
                    v = pr.get(key)
                    cells.append(fmt(v) + (f" ({_ratio(v, ours)})" if ratio and v is not None else ""))
            L.append(f"| {label} | " + " | ".join(cells) + " |")

        row("cold start, s (page load → first step done)", "cold_start_s", _fmt_s)
        row("compile, s", "compile_s", _fmt_s)
        row(
            "ms/step, loss read every step",
            "ms_per_step_read_every",
            _fmt_ms,
            replica_key="shim_ms_per_step_read_every",
        )
        row(
            "ms/step, loss read every step before the next is sent",
            "ms_per_step_read_at_once",
            _fmt_ms,
            native_key="ms_per_step_read_at_once",
            ratio=False,
        )
        row(
            "ms/step, loss read every 10th step",
            "ms_per_step_read_every10",
            _fmt_ms,
            replica_key="shim_ms_per_step_read_every10",
        )
        row(
            "dispatches per step",
            "dispatches_per_step",
            lambda v: "—" if v is None else f"{v:g}",
            replica_key="dispatches_per_step",
            ratio=False,
        )
        row(
            "compute pipelines (unique)",
            "unique_pipelines",
            lambda v: "—" if v is None else f"{v:g}",
            replica_key="unique_pipelines",
            ratio=False,
        )
        row("peak GPU bytes", "peak_gpu_bytes", _fmt_bytes, replica_key="peak_gpu_bytes", ratio=False)
        if any(_get(r, "clocks") for r in [tb, nat, rep] + [R.get(p) for p in results["peers"]]):
            cells = [
                _fmt_clocks(_get(tb, "clocks")),
                _fmt_clocks(rep.get("clocks")),
                _fmt_clocks(_get(nat, "clocks")),
            ]
            cells += [_fmt_clocks(_get(R.get(p), "clocks")) for p in results["peers"]]
            L.append("| GPU SM clock, MHz (utilisation) while measured | " + " | ".join(cells) + " |")
        first = [f"tgweb {(_get(tb, 'losses') or [None])[0]}" if tb and "error" not in tb else ""]
        L.append("")
        ls = []
        for name, r in [("tgweb", tb), ("native", nat)] + [(p, R.get(p)) for p in results["peers"]]:
            if r and "error" not in r:
                fl = r.get("first_loss", (r.get("losses") or [None])[0])
                last = (r.get("losses") or [None])[-1]
                n = len(r.get("losses") or [])
                ls.append(
                    f"{name} {fl:.4f} → {last:.4f} ({n} steps)"
                    if fl is not None and last is not None
                    else name
                )
        L.append(
            "Loss at the first step → the last timed step (same data and initial weights everywhere; "
            "the warm-up lasts at least as long for each, so the step counts differ): "
            + "; ".join(ls)
            + ".\n"
        )
        del first
        errs = [
            (n, r)
            for n, r in [("tgweb", tb), ("native", nat)] + [(p, R.get(p)) for p in results["peers"]]
            if r and "error" in r
        ]
        for n, r in errs:
            L.append(
                f"- **{n} failed**: `{r['error']}`" + (f" (console: {r['logs']})" if r.get("logs") else "")
            )
        if errs:
            L.append("")
    L.append("\n## Targets (issue 7)\n")
    L.append("| target | measured | met |")
    L.append("|---|---|---|")
    for (model, key), limit in TARGETS.items():
        v = _get(results["models"].get(model, {}).get("tgweb"), key)
        if key == "peak_gpu_bytes":
            shown, lim = _fmt_bytes(v), _fmt_bytes(limit)
        elif key.startswith("ms"):
            shown, lim = f"{_fmt_ms(v)} ms", f"{limit:g} ms"
        elif key.endswith("_s"):
            shown, lim = f"{_fmt_s(v)} s", f"{limit:g} s"
        else:
            shown, lim = f"{v}", f"{limit:g}"
        met = "—" if v is None else ("yes" if v <= limit else "**no**")
        L.append(f"| {model} {key} ≤ {lim} | {shown} | {met} |")
    for model in results["models"]:
        for p in results["peers"]:
            ours = _get(results["models"][model].get("tgweb"), "ms_per_step_read_every")
            theirs = _get(results["models"][model].get(p), "ms_per_step_read_every")
            met = "—" if ours is None or theirs is None else ("yes" if ours < theirs else "**no**")
            L.append(
                f"| {model}: faster than {PEER_NAMES[p]} (loss read every step) | "
                f"{_fmt_ms(ours)} vs {_fmt_ms(theirs)} ms | {met} |"
            )
    if "compile_phases" in results:
        L += compile_phases_report(results["compile_phases"])
    # per-kernel breakdown
    for model in results["models"]:
        rep = _get(results["models"][model].get("tgweb"), "replica")
        if not rep or not rep.get("kernels"):
            continue
        ks = rep["kernels"]
        key = "ts_ms" if rep.get("timestamp_query") else "host_ms"
        tot = sum(k.get(key) or 0 for k in ks)
        L.append(f"\n## {model}: where the GPU time goes (tgweb)\n")
        L.append(
            f"GPU time per kernel from timestamp queries (each kernel in its own compute pass, median of "
            f"5 replays; sum {tot:.1f} ms; the whole step as one pass: {_fmt_ms(rep.get('ts_step_ms'))} ms). "
            "Host column: gpu.mjs profile(), one submit per kernel, timed on the host.\n"
        )
        fam: dict[str, list] = {}
        for k in ks:
            f = _family(k)
            fam.setdefault(f, [0, 0.0, 0.0])
            fam[f][0] += 1
            fam[f][1] += k.get(key) or 0
            fam[f][2] += k.get("host_ms") or 0
        L.append("| kernel family | kernels | GPU ms | share | host ms |")
        L.append("|---|---|---|---|---|")
        for f, (n, ms, host) in sorted(fam.items(), key=lambda x: -x[1][1]):
            L.append(f"| {f} | {n} | {ms:.2f} | {100 * ms / tot if tot else 0:.0f} % | {host:.2f} |")
        L.append("\nSlowest kernels:\n")
        L.append("| # | kernel | ops | dispatch | GPU ms | host ms |")
        L.append("|---|---|---|---|---|---|")
        for k in sorted(ks, key=lambda k: -(k.get(key) or 0))[:15]:
            L.append(
                f"| {k['i']} | {k['kernel']} | "
                f"{', '.join(k['ops'][:6])}{' …' if len(k['ops']) > 6 else ''} | "
                f"{k['dispatch']} | {k.get(key) or 0:.2f} | {k.get('host_ms') or 0:.2f} |"
            )
    return "\n".join(L) + "\n"


def _family(k) -> str:
    ops = k.get("ops") or []
    name = k.get("kernel", "")
    for key in (
        "matmul",
        "softmax",
        "cross_entropy",
        "embedding",
        "layer_norm",
        "sumsq",
        "global",
        "adam",
        "where",
    ):
        if any(key in o for o in ops) or key in name:
            return key
    return (ops[0] if ops else name.split("_")[0]) or "?"


def draw_chart(browser, results: dict, path: Path) -> None:
    """Bars of ms/step (loss read every step), one panel per model, as SVG in a page."""
    fws = [("tgweb", "tgweb"), ("native", "tgweb native")] + [
        (p, PEER_NAMES[p].split(" (")[0]) for p in results["peers"]
    ]
    colors = {"tgweb": "#2b6cb0", "native": "#90cdf4", "tfjs": "#ed8936", "jaxjs": "#48bb78"}
    panels = []
    x0 = 0
    for model, R in results["models"].items():
        vals = [(k, lab, _get(R.get(k), "ms_per_step_read_every")) for k, lab in fws]
        top = max([v for _, _, v in vals if v] or [1])
        bars = []
        for i, (k, lab, v) in enumerate(vals):
            h = 0 if not v else 220 * v / top
            x = x0 + 40 + i * 90
            bars.append(
                f'<rect x="{x}" y="{260 - h}" width="60" height="{h}" fill="{colors.get(k, "#999")}"/>'
                f'<text x="{x + 30}" y="{252 - h}" font-size="12" text-anchor="middle">'
                f"{'error' if v is None else _fmt_ms(v)}</text>"
                f'<text x="{x + 30}" y="278" font-size="11" text-anchor="middle">{lab}</text>'
            )
        panels.append(
            f'<text x="{x0 + 40}" y="22" font-size="15" font-weight="bold">{model}: ms per step '
            f"(loss read every step; lower is better)</text>" + "".join(bars)
        )
        x0 += 40 + 90 * len(fws) + 40
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{x0}" height="300" font-family="sans-serif">'
        f'<rect width="100%" height="100%" fill="white"/>{"".join(panels)}</svg>'
    )
    page = browser.new_page(viewport={"width": x0, "height": 300})
    page.set_content(f"<html><body style='margin:0'>{svg}</body></html>")
    page.screenshot(path=str(path))
    page.close()


# --------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=MODELS, action="append")
    ap.add_argument("--peers", default="tfjs,jaxjs", help="comma-separated: tfjs,jaxjs (empty: none)")
    ap.add_argument("--no-native", action="store_true")
    ap.add_argument("--quick", action="store_true", help="fewer steps (a smoke run; not for the table)")
    ap.add_argument("--native-cold", help=argparse.SUPPRESS)
    ap.add_argument("--native-run", nargs=2, help=argparse.SUPPRESS)  # MODEL CFG-JSON
    ap.add_argument("--out", default=str(HERE))
    ap.add_argument("--block", help=argparse.SUPPRESS)  # with --profile: matmul_browser.py's --block
    ap.add_argument(
        "--profile",
        action="store_true",
        help="only tgweb's Program, compiled here in CPython and replayed in Chromium by gpu.mjs: "
        "ms/step and GPU time per kernel (a quick loop for kernel work; writes only "
        "/tmp/tgweb-profile-MODEL.json, the Program and the timings)",
    )
    a = ap.parse_args(argv)
    if a.native_cold:
        native_cold(a.native_cold)
        return 0
    if a.native_run:
        native_run(a.native_run[0], json.loads(a.native_run[1]))
        return 0
    cmd = "python3 build.py bench" + (" " + " ".join(argv) if argv else "")
    models = a.only or list(MODELS)
    peers = [p for p in a.peers.split(",") if p]
    # peers that take seconds per step get fewer warm-up steps and a time budget per model
    cfg = {
        "warmup": 5,
        "warmup_s": 1.0,  # and at least this long (every framework)
        "steps": 20,
        "blocks": {"sin": 3, "addition": 2},
        "peer_warmup": {"sin": 5, "addition": 2},
        "budget_ms": 120_000,
    }
    if a.quick:
        cfg = {
            "warmup": 2,
            "warmup_s": 0.2,
            "steps": 5,
            "blocks": {"sin": 1, "addition": 1},
            "peer_warmup": {"sin": 2, "addition": 1},
            "budget_ms": 20_000,
        }

    build = _build_module()
    if not (build.SITE / "manifest.json").exists():
        build.bundle_site()
    # serve a snapshot: another `build.py test`/`bundle` may replace site/ during the run
    snap = ROOT / "build" / "bench-site"
    shutil.rmtree(snap, ignore_errors=True)
    shutil.copytree(build.SITE, snap)
    srv = make_server(build, snap)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    from playwright.sync_api import sync_playwright

    if a.profile:
        if a.block:
            from tgweb.codegen import matmul
            from tgweb.codegen.target import TUNING

            TUNING["cpu"]["direct_block"], matmul.DIRECT_U = (int(x) for x in a.block.split("x"))
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            for model in models:
                profile(browser, url, model, cfg)
            browser.close()
        srv.shutdown()
        return 0
    results: dict = {
        "env": {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "cfg": cfg,
        },
        "peers": peers,
        "models": {},
    }
    out = Path(a.out)
    clocks = GpuClocks()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        results["env"]["chromium"] = f"Chromium {browser.version}"
        for model in models:
            batches = make_batches(model)
            init = initial_params(model)
            R = results["models"].setdefault(model, {})
            # interleaved: tgweb, then each peer, in one browser
            print(f"[{model}] tgweb in Chromium ...", flush=True)
            R["tgweb"] = run_tgweb_browser(browser, url, model, batches, cfg)
            add_clocks(R["tgweb"], clocks)
            add_clocks(R["tgweb"].get("replica"), clocks)
            _say(model, "tgweb", R["tgweb"])
            if "info" in R["tgweb"]:
                results["env"]["adapter"] = R["tgweb"]["info"].get("adapter")
            for peer in peers:
                print(f"[{model}] {peer} ...", flush=True)
                R[peer] = run_peer(browser, url, peer, model, init, batches, cfg)
                add_clocks(R[peer], clocks)
                _say(model, peer, R[peer])
            if not a.no_native:
                print(f"[{model}] tgweb native ...", flush=True)
                R["native"] = run_native(model, cfg)
                add_clocks(R["native"], clocks)
                _say(model, "native", R["native"])
        if not a.no_native:
            print("[compile per pass] tgweb native ...", flush=True)
            results["compile_phases"] = run_compile_phases(a.quick)
            print("\n".join(compile_phases_report(results["compile_phases"])), flush=True)
        report = write_report(results, cmd)
        try:
            draw_chart(browser, results, out / "bench.png")
        except Exception as e:
            print("chart failed:", _short(e))
        browser.close()
    clocks.close()
    srv.shutdown()
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    (out / "bench.md").write_text(report)
    print(report)
    print(f"wrote {out / 'results.json'}, {out / 'bench.md'}, {out / 'bench.png'}")
    return 0


def _say(model, fw, r):
    if "error" in r:
        print(f"  {model}/{fw}: ERROR {r['error']}", flush=True)
        return
    print(
        f"  {model}/{fw}: cold {_fmt_s(r.get('cold_start_s'))} s, compile {_fmt_s(r.get('compile_s'))} s, "
        f"{_fmt_ms(r.get('ms_per_step_read_every'))} ms/step (read every), "
        f"{_fmt_ms(r.get('ms_per_step_read_every10'))} ms/step (every 10th), "
        f"dispatches {r.get('dispatches_per_step')}, peak {_fmt_bytes(r.get('peak_gpu_bytes'))}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
