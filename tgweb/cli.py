"""The command line: ``python -m tgweb train <sample>`` and ``python -m tgweb info``.

train compiles a sample of tgweb.samples (its Model, loss_fn, INPUTS and the
OPTIMIZER dict, which tg.compile turns into optimizer objects through
tg.optim.from_spec), attaches its forward function for evaluation, runs the
steps with a tqdm progress bar (the loss in the postfix), evaluates the
sample's metric every --eval-every steps and at the end, and prints the final
metric, whether SUCCESS was met (and at which step first), the steps and the
wall time. info lists the backends and the GPU adapters wgpu-py finds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any

from . import samples as _samples


def _fmt(v: float) -> str:
    return f"{v:.4g}" if abs(v) < 1e-2 else f"{v:.4f}"


def _bound_text(mod) -> str:
    kind, bound = _samples.success_bound(mod)
    s = mod.SUCCESS
    text = f"{s['metric']} {'<' if kind == 'below' else '>='} {_fmt(bound)}"
    if "below_baseline" in s:
        text += f" ({s['below_baseline']}() - {s.get('margin', 0.0)})"
    return text + f" within {s['within_steps']} steps"


def _show(name: str, mod, predict, seed: int) -> list[str]:
    """A few lines of the sample's own view of the trained model."""
    if name == "names":
        return ["sampled names: " + ", ".join(mod.sample_names(predict, 12, seed))]
    if name == "digits":
        idx = list(mod.TEST_INDICES[:20])
        pred = mod.predictions(predict, idx)
        return [
            "test images (predicted/true): " + " ".join(f"{p}/{t}" for p, t in zip(pred, mod.labels(idx)))
        ]
    if name == "addition":
        pairs = list(mod.TEST_PAIRS[:6])
        ans = mod.greedy_answers(predict, pairs)
        return [
            "held-out sums: "
            + ", ".join(f"{a}+{c}={d[2] * 100 + d[1] * 10 + d[0]}" for (a, c), d in zip(pairs, ans))
        ]
    return []


def train(
    name: str,
    backend: str | None = None,
    steps: int | None = None,
    seed: int = 0,
    eval_every: int | None = None,
    until_success: bool = False,
    progress: bool = True,
    out=None,
) -> dict[str, Any]:
    """Train sample `name` and return the summary that `tgweb train` prints."""
    from .compile import compile as tg_compile
    from .compile import default_backend

    out = out or sys.stdout
    mod = _samples.get(name)
    steps = mod.STEPS if steps is None else steps
    backend = backend or default_backend()
    if eval_every is None:
        eval_every = max(1, mod.STEPS // 10)
    kind, bound = _samples.success_bound(mod)

    def met(v: float) -> bool:
        return v < bound if kind == "below" else v >= bound

    t0 = time.perf_counter()
    trainer = tg_compile(
        mod.Model(), mod.loss_fn, inputs=mod.INPUTS, optimizer=mod.OPTIMIZER, backend=backend, seed=seed
    )
    inference = trainer.attach(mod.forward, inputs=mod.EVAL_INPUTS)
    compile_s = time.perf_counter() - t0
    n_params = sum(
        len(v.reshape(-1)) if hasattr(v, "reshape") else len(_samples.flatten(v))
        for v in trainer.params().values()
    )

    def predict(batch):
        return inference.run(**batch).output

    print(
        f"{name}: backend {backend}, seed {seed}, {n_params:,} parameters, compiled in "
        f"{compile_s:.2f} s; success: {_bound_text(mod)}",
        file=out,
        flush=True,
    )

    history: list[tuple[int, float]] = []
    first_success: tuple[int, float] | None = None
    train_s = eval_s = 0.0
    last_loss = float("nan")
    skipped = 0
    done = 0
    interrupted = False
    bar = None
    if progress:
        try:
            from tqdm import tqdm

            bar = tqdm(total=steps, desc=name, unit="step", dynamic_ncols=True, file=sys.stderr)
        except ImportError:  # pragma: no cover - tqdm is a CLI convenience
            bar = None

    def note(msg: str) -> None:
        if bar is not None:
            bar.write(msg, file=out)
        else:
            print(msg, file=out, flush=True)

    def evaluate() -> float:
        nonlocal eval_s, first_success
        t = time.perf_counter()
        v = float(mod.metric(predict))
        eval_s += time.perf_counter() - t
        history.append((done, v))
        if first_success is None and met(v):
            first_success = (done, train_s)
        note(
            f"step {done}: loss {_fmt(last_loss)}, {mod.SUCCESS['metric']} {_fmt(v)}"
            + (" (success)" if met(v) else "")
        )
        return v

    try:
        for i in range(steps):
            batch = mod.batch(i, seed)
            t = time.perf_counter()
            r = trainer.step(**batch)
            train_s += time.perf_counter() - t
            done = i + 1
            last_loss = r.loss
            if not r.ok:
                skipped += 1
            if bar is not None:
                post = {"loss": f"{r.loss:.4f}"}
                if history:
                    post[mod.SUCCESS["metric"]] = _fmt(history[-1][1])
                bar.set_postfix(post, refresh=False)
                bar.update(1)
            if done % eval_every == 0 and done < steps:
                if met(evaluate()) and until_success:
                    break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if bar is not None:
            bar.close()
    if not history or history[-1][0] != done:
        evaluate()
    final = history[-1][1]
    wall = time.perf_counter() - t0
    success = met(final) and done <= mod.SUCCESS["within_steps"]
    summary = {
        "sample": name,
        "backend": backend,
        "seed": seed,
        "steps": done,
        "skipped_steps": skipped,
        "final_loss": last_loss,
        "metric": mod.SUCCESS["metric"],
        "final_metric": final,
        "bound": bound,
        "bound_kind": kind,
        "within_steps": mod.SUCCESS["within_steps"],
        "success": success,
        "first_success_step": first_success[0] if first_success else None,
        "first_success_train_s": first_success[1] if first_success else None,
        "parameters": n_params,
        "compile_s": compile_s,
        "train_s": train_s,
        "eval_s": eval_s,
        "wall_s": wall,
        "steps_per_s": done / train_s if train_s > 0 else None,
        "history": history,
        "interrupted": interrupted,
    }
    for line in _show(name, mod, predict, seed):
        print(line, file=out)
    print(
        f"final {mod.SUCCESS['metric']}: {_fmt(final)} after {done} steps "
        f"(loss {_fmt(last_loss)}{f', {skipped} skipped' if skipped else ''})",
        file=out,
    )
    if first_success:
        when = f"first met at step {first_success[0]} after {first_success[1]:.1f} s of training"
    else:
        when = "not met at any evaluation"
    print(f"SUCCESS {'met' if success else 'NOT met'}: {_bound_text(mod)}; {when}", file=out)
    print(
        f"steps: {done}, wall time {wall:.1f} s (compile {compile_s:.1f} s, training "
        f"{train_s:.1f} s = {summary['steps_per_s'] or 0:.1f} steps/s, evaluation {eval_s:.1f} s)"
        + (" — interrupted" if interrupted else ""),
        file=out,
        flush=True,
    )
    return summary


def info(out=None) -> dict[str, Any]:
    """Print and return the backends and adapters found."""
    from . import __version__
    from .compile import default_backend

    out = out or sys.stdout
    found: dict[str, Any] = {
        "version": __version__,
        "python": platform.python_version(),
        "backends": {},
        "adapters": [],
    }
    try:
        import numpy

        found["backends"]["reference"] = {"available": True, "detail": f"NumPy {numpy.__version__}"}
    except ImportError:
        found["backends"]["reference"] = {"available": False, "detail": "needs NumPy"}
    try:
        import wgpu
    except ImportError as e:
        wgpu = None
        found["backends"]["native"] = {"available": False, "detail": f"needs wgpu-py ({e})"}
    if wgpu is not None:
        try:
            adapters = wgpu.gpu.enumerate_adapters_sync()
        except Exception as e:  # pragma: no cover - depends on the machine
            adapters = []
            found["adapter_error"] = str(e)
        for a in adapters:
            i = dict(a.info)
            found["adapters"].append(
                {
                    "summary": a.summary,
                    "vendor": i.get("vendor", ""),
                    "device": i.get("device", ""),
                    "description": i.get("description", ""),
                    "type": i.get("adapter_type", ""),
                    "backend": i.get("backend_type", ""),
                }
            )
        try:
            from .backends import native

            ok = native.available()
            ai = native.adapter_info() if ok else {}
            detail = (
                f"wgpu-py {wgpu.__version__} on {ai.get('device', '?')} "
                f"({ai.get('adapter_type', '?')}, {ai.get('backend_type', '?')})"
                if ok
                else "no WebGPU adapter could be opened"
            )
        except Exception as e:  # the backend module itself failed
            ok, detail = False, f"{type(e).__name__}: {e}"
        found["backends"]["native"] = {"available": ok, "detail": detail}
    found["backends"]["browser"] = {
        "available": sys.platform == "emscripten",
        "detail": "WebGPU through Pyodide in the page's worker",
    }
    found["default"] = default_backend()
    found["samples"] = list(_samples.SAMPLES)

    print(
        f"tgweb {found['version']} (Python {found['python']}, {platform.system()} {platform.machine()})",
        file=out,
    )
    print("backends:", file=out)
    for b, d in found["backends"].items():
        mark = "yes" if d["available"] else "no "
        print(f"  {b:<10} {mark}  {d['detail']}", file=out)
    print(f"default backend: {found['default']}", file=out)
    print("adapters (wgpu-py):" if found["adapters"] else "adapters (wgpu-py): none found", file=out)
    for a in found["adapters"]:
        print(f"  - {a['summary']}  [{a['description']}]", file=out)
    print("samples: " + ", ".join(found["samples"]), file=out, flush=True)
    return found


def _one_blas_thread() -> None:
    """The samples' matrices are small: BLAS threads only contend (matmuls ran 15x slower
    on a busy 2-core machine), so the reference backend's NumPy gets one thread unless the
    user set otherwise. Only effective before NumPy is first imported."""
    if "numpy" not in sys.modules:
        for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, "1")


def main(argv: list[str] | None = None) -> int:
    _one_blas_thread()
    ap = argparse.ArgumentParser(
        prog="python -m tgweb", description="tgweb: train neural networks on WebGPU from Python."
    )
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train one of the canonical samples")
    t.add_argument("sample", choices=list(_samples.SAMPLES))
    t.add_argument(
        "--backend",
        choices=["native", "reference"],
        default=None,
        help="default: native when a GPU adapter is found, else reference",
    )
    t.add_argument(
        "--steps",
        type=int,
        default=None,
        help="default: the sample's step budget (SUCCESS counts only within it)",
    )
    t.add_argument("--seed", type=int, default=0, help="parameter init and data order (default 0)")
    t.add_argument(
        "--eval-every",
        type=int,
        default=None,
        metavar="N",
        help="evaluate the metric every N steps (default: a tenth of the budget)",
    )
    t.add_argument(
        "--until-success", action="store_true", help="stop at the first evaluation that meets SUCCESS"
    )
    t.add_argument("--check", action="store_true", help="exit with status 1 unless SUCCESS was met")
    t.add_argument("--json", metavar="PATH", help="also write the summary as JSON to PATH ('-': stdout)")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    i = sub.add_parser("info", help="list backends and GPU adapters")
    i.add_argument("--json", action="store_true", help="print as JSON")
    args = ap.parse_args(argv)

    if args.command == "info":
        if args.json:
            import io

            found = info(out=io.StringIO())
            print(json.dumps(found, indent=2))
        else:
            info()
        return 0

    if args.steps is not None and args.steps < 1:
        ap.error("--steps must be >= 1")
    if args.eval_every is not None and args.eval_every < 1:
        ap.error("--eval-every must be >= 1")
    try:
        summary = train(
            args.sample,
            args.backend,
            args.steps,
            args.seed,
            args.eval_every,
            args.until_success,
            progress=not args.no_progress,
        )
    except Exception as e:
        if type(e).__name__ not in ("NativeError", "KernelCompileError", "InputError"):
            raise
        print(f"tgweb train {args.sample}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if args.json == "-":
        print(json.dumps(summary))
    elif args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0 if summary["success"] or not args.check else 1
