"""Where tg.compile's time goes, pass by pass: the samples sin, addition and shakespeare, and
the shakespeare GPT at 1, 2, 6 and 12 layers, on the native backend (wgpu-py) unless told,
each compiled as the page compiles it (tgweb.samples.compile: its MAX_MEMORY, its precision).

    .venv/bin/python tools/compile_phases.py [--backend native|reference] [--repeat N]
        [--models sin,addition,...] [--json] [--depth]

Prints a table, one column per model, in seconds (each the minimum over N compiles):
trace, autodiff, optimizer (the rest of the training graph: clipping, the update),
lowering's stages (computed_nodes, schedule, place_updates, assign_buffers, fit_memory: the
same planned again within the sample's MAX_MEMORY, emit, pack, and the rest of lower:
validation), the initial values (a reset: drawn by the GPU, lowered and run as a program of
their own, or drawn on the host where that cannot be; all of it counted there), their upload,
pipeline creation (the native backend's cache emptied before each compile, as on a first
start) and the rest of the engine's set-up (bind groups; the buffers, which the native
device creates on a thread while the kernels are emitted: native.reserve). The first device
creation of the process is timed once, apart. The reference backend does not lower.
Indented rows are passes inside the stage above them (fusion and rematerialization in
schedule, the planner in assign_buffers). set-up: the total less the initial values and
their upload; program JSON: Program.to_json() timed apart, after the compile (what the
browser's worker passes to JavaScript and the program cache keeps). Under the table: each
model's distinct WGSL texts (the pipelines a first start creates).
--json prints one line "PHASES <json>" instead (what `build.py bench` reads).
--depth: the GPT at 6 and 12 layers side by side with their ratio (issue 38's target:
12 layers' set-up within 1.3x of 6 layers'), and what a layer costs against what the target
allows one, given the fixed part (the totals taken as fixed + layers x a layer's cost).
--pipelines: each model's pipelines (native), one distinct WGSL text at a time on one
thread, slowest first, then all of them again on threads as a compile makes them: which
kernels the driver takes longest over. Run it with the driver's disk cache off (NVIDIA:
__GL_SHADER_DISK_CACHE=0) for a first start's figures.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STAGES = ("computed_nodes", "schedule", "place_updates", "assign_buffers", "fit_memory", "emit", "pack")
# passes inside a stage (indented in the table, not added again): lower's own names for them
INNER = {"  fuse": "fuse", "  remat": "rematerialize", "  plan": "plan"}
ROWS = ("trace", "autodiff", "optimizer", "computed_nodes", "schedule", "  fuse", "  remat", "place_updates")
ROWS += ("assign_buffers", "  plan", "fit_memory", "emit", "pack", "lower (rest)", "initial values", "upload")
ROWS += ("pipelines",)
ROWS += ("engine (rest)", "other", "total")
ROWS += ("set-up", "program JSON")  # set-up: total less initial values and upload; JSON: apart


class Clock:
    """Inclusive times of wrapped functions, by label, summed over calls. What runs inside
    an ALONE label counts in that row only: fit_memory (the schedule, updates and storage
    planned again under the sample's MAX_MEMORY) and reset (the initial values: their own
    Program lowered and run), but for the upload inside reset."""

    # labels whose inner calls count in their row only, but for the labels named with them
    ALONE = {"fit_memory": (), "reset": ("upload",)}

    def __init__(self) -> None:
        self.t: dict[str, float] = defaultdict(float)
        self.inside: list[str] = []  # the ALONE labels being timed, innermost last

    @contextlib.contextmanager
    def wrapped(self, targets: list[tuple[object, str, str]]):
        """Replaces each (owner, attribute) by a timed call of itself while inside."""
        saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in targets]
        for (owner, attr, label), (_, _, fn) in zip(targets, saved):
            setattr(owner, attr, self._timed(fn, label))
        try:
            yield
        finally:
            for owner, attr, fn in saved:
                setattr(owner, attr, fn)

    def _timed(self, fn, label: str):
        def timed(*args, **kwargs):
            if self.inside and label not in self.ALONE[self.inside[-1]]:
                return fn(*args, **kwargs)  # counted in the enclosing ALONE row
            t0 = time.perf_counter()
            if label in self.ALONE:
                self.inside.append(label)
            try:
                return fn(*args, **kwargs)
            finally:
                if label in self.ALONE:
                    self.inside.pop()
                self.t[label] += time.perf_counter() - t0

        return timed


def _targets(backend: str) -> list[tuple[object, str, str]]:
    # the modules, not the functions tgweb exports under the same names
    compile, lower, trainer, backends = (
        importlib.import_module(f"tgweb.{m}") for m in ("compile", "lower", "trainer", "backends")
    )

    got = [
        (compile, "compile", "total"),
        (compile, "build_training_graph", "graph"),
        (compile, "trace", "trace"),
        (compile, "append_grad", "autodiff"),
        (compile, "lower", "lower"),
        (lower, "select_kernels", "emit"),
        (trainer.Trainer, "reset", "reset"),
        (trainer, "make_engine", "engine"),
        (backends.RuntimeEngine, "write", "upload"),
    ]
    got += [(lower, s, s) for s in STAGES] + [(lower, fn, row) for row, fn in INNER.items()]
    if backend == "reference":
        from tgweb.backends import reference

        got.append((reference.Engine, "write", "upload"))
    if backend == "native":
        from tgweb.backends import native

        got.append((native, "create_pipelines", "pipelines"))
    return got


def _compile(sample, backend: str):
    """The sample's trainer as the page and `tgweb train` compile it (tgweb.samples.compile:
    its MAX_MEMORY, which may have the planner recompute activations, and its precision)."""
    from tgweb import samples

    return samples.compile(sample, backend=backend)


def phases(sample, backend: str) -> dict[str, float]:
    """One compile of a sample (a module or a shakespeare.Sample), split into ROWS."""
    if backend == "native":
        importlib.import_module("tgweb.backends.native")._PIPELINES.clear()
    clock = Clock()
    with clock.wrapped(_targets(backend)):
        trainer = _compile(sample, backend)
    program = getattr(trainer, "program", None)
    texts = len({k.wgsl for k in program.kernels}) if program is not None else 0
    t0 = time.perf_counter()
    if program is not None:  # what the browser's worker hands to JavaScript, and the cache keeps
        program.to_json()
    json_s = time.perf_counter() - t0
    trainer.close()
    t = clock.t
    row = {k: t[k] for k in ("trace", "autodiff", *STAGES, *INNER, "upload", "pipelines", "total")}
    row["texts"] = texts
    row["program JSON"] = json_s
    row["optimizer"] = t["graph"] - t["trace"] - t["autodiff"]
    row["lower (rest)"] = t["lower"] - sum(t[s] for s in STAGES)
    row["initial values"] = t["reset"] - t["upload"]
    row["engine (rest)"] = t["engine"] - t["pipelines"]
    row["other"] = t["total"] - t["graph"] - t["lower"] - t["reset"] - t["engine"]
    row["set-up"] = t["total"] - t["reset"]
    return row


MODELS = ("sin", "addition", "shakespeare", "gpt 1L", "gpt 2L", "gpt 6L", "gpt 12L")


def model(name: str):
    """A sample's module, or the shakespeare GPT at full width with the layers named and no
    memory bound (12 layers do not fit the sample's 1.5 GB)."""
    from tgweb import samples
    from tgweb.samples import shakespeare

    if name.startswith("gpt "):
        layers = int(name[4:].rstrip("L"))
        return shakespeare.Sample(dataclasses.replace(shakespeare.FULL, layers=layers, max_memory=None))
    return samples.get(name)


def table(cols: dict[str, dict[str, float]]) -> str:
    lines = [f"{'seconds':16s}" + "".join(f"{c:>12s}" for c in cols)]
    for r in ROWS:
        lines.append(f"{r:16s}" + "".join(f"{cols[c][r]:12.3f}" for c in cols))
    lines.append(f"{'WGSL texts':16s}" + "".join(f"{cols[c].get('texts', 0):12d}" for c in cols))
    return "\n".join(lines)


DEPTH = ("gpt 6L", "gpt 12L")  # issue 38: the 12-layer GPT's set-up within 1.3x the 6-layer one's
DEPTH_TARGET = 1.3


def depth_table(cols: dict[str, dict[str, float]]) -> str:
    """Each row at 6 and 12 layers and their ratio: what still grows with depth."""
    a, b = (cols[c] for c in DEPTH)
    lines = [f"{'seconds':16s}{DEPTH[0]:>10s}{DEPTH[1]:>10s}{'ratio':>8s}"]
    for r in ROWS:
        ratio = f"{b[r] / a[r]:8.2f}" if a[r] > 0.0005 else f"{'':8s}"
        lines.append(f"{r:16s}{a[r]:10.3f}{b[r]:10.3f}{ratio}")
    lines.append(
        f"12L / 6L: total {b['total'] / a['total']:.2f}x, set-up without the initial values "
        f"{b['set-up'] / a['set-up']:.2f}x (target <= {DEPTH_TARGET}x)"
    )
    # total = fixed + layers x per-layer: what a layer costs, and what the target allows one
    n6, n12 = (int(c[4:].rstrip("L")) for c in DEPTH)
    per = (b["total"] - a["total"]) / (n12 - n6)
    fixed = a["total"] - n6 * per
    allowed = (DEPTH_TARGET - 1) * fixed / (n12 - DEPTH_TARGET * n6)
    lines.append(
        f"a layer costs {per * 1000:.1f} ms over {fixed * 1000:.0f} ms fixed; "
        f"the target allows {allowed * 1000:.1f} ms a layer"
    )
    return "\n".join(lines)


def measure(names, backend: str = "native", repeat: int = 1) -> dict:
    """{"first_device_s": the process's first device creation (native), "cols": model ->
    row (each time the minimum over `repeat` compiles)}."""
    out: dict = {"first_device_s": None, "cols": {}}
    if backend == "native":
        from tgweb.backends import native

        t0 = time.perf_counter()
        native.device_limits()
        out["first_device_s"] = time.perf_counter() - t0
    for name in names:
        sample = model(name)
        runs = [phases(sample, backend) for _ in range(repeat)]
        out["cols"][name] = {r: min(run[r] for run in runs) for r in (*ROWS, "texts")}
        print(f"{name}: {out['cols'][name]['total']:.2f} s", file=sys.stderr)
    return out


def pipeline_times(name: str, top: int = 12) -> str:
    """The native pipelines of a model's Programs, one text at a time and then on threads."""
    from tgweb.backends import native

    trainer = _compile(model(name), "native")
    kernels = list({k.wgsl: k for k in trainer.program.kernels}.values())
    trainer.close()
    native._PIPELINES.clear()
    each = []
    for k in kernels:
        t0 = time.perf_counter()
        native.pipeline_for(k)
        each.append((time.perf_counter() - t0, k))
    native._PIPELINES.clear()
    t0 = time.perf_counter()
    native.create_pipelines(kernels)
    threads = time.perf_counter() - t0
    native._PIPELINES.clear()
    each.sort(key=lambda e: -e[0])
    lines = [
        f"{name}: {len(kernels)} distinct WGSL texts; one at a time {sum(e[0] for e in each):.3f} s, "
        f"on threads {threads:.3f} s; slowest:"
    ]
    for sec, k in each[:top]:
        ops = ",".join(dict.fromkeys(k.ops or ()))
        lines.append(f"  {sec * 1000:8.1f} ms  {k.name:40s} {len(k.wgsl):7d} chars  {ops[:60]}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="native", choices=("native", "reference"))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--depth", action="store_true", help="the GPT at 6 and 12 layers, side by side")
    ap.add_argument("--pipelines", action="store_true", help="each model's pipeline creation, slowest first")
    a = ap.parse_args()
    if a.pipelines:
        for name in a.models.split(","):
            print(pipeline_times(name))
        return
    got = measure(list(DEPTH) if a.depth else a.models.split(","), a.backend, a.repeat)
    if a.json:
        print("PHASES " + json.dumps(got))
        return
    if got["first_device_s"] is not None:
        print(f"first device creation: {got['first_device_s']:.2f} s (once per process)")
    print(table(got["cols"]) if not a.depth else depth_table(got["cols"]))


if __name__ == "__main__":
    main()
