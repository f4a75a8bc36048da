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
import itertools
import json
import os
import platform
import signal
import sys
import threading
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


def _show(name: str, mod, predict, seed: int, trainer) -> list[str]:
    """A few lines of the sample's own view of the trained model."""
    if name == "shakespeare":
        sampler = trainer.attach(mod.next_token, inputs=mod.TOKEN_INPUTS)  # keys and values cached
        return ["sampled text:", "".join(itertools.islice(mod.stream_cached(sampler), 300))]
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
    resume: str | None = None,
    checkpoint_path: str | None = None,
    checkpoint_every: int | None = None,
    small: bool = False,
) -> dict[str, Any]:
    """Train sample `name` up to `steps` steps and return the summary that `tgweb train`
    prints. resume: a checkpoint file (tgweb.io.checkpoint, or the page's download) to
    continue from: its step count, seed and batches carry on, so the run ends as one that
    never stopped. checkpoint_path: where to save the checkpoint (atomically) every
    `checkpoint_every` steps, at the end, and on Ctrl-C. small: the sample's scaled-down
    size (samples that have one, such as shakespeare)."""
    from .compile import default_backend
    from .io import safetensors

    mod = _samples.get(name)
    if small:
        if not hasattr(mod, "sized"):
            raise ValueError(f"sample {name!r} has no small size")
        mod = mod.sized("small")
    run = _Run(name, mod, backend or default_backend(), seed, out or sys.stdout)
    if resume:
        with open(resume, "rb") as f:
            tensors, meta = safetensors.load(f.read())
        if meta.get("sample", name) != name:  # before restore, whose error would list every name
            raise CliError(f"{resume} is a checkpoint of the sample {meta['sample']!r}, not {name!r}")
        run.trainer.restore(tensors, meta)
        run.resumed()
    saver = _Saver(run.trainer, checkpoint_path, checkpoint_every, name) if checkpoint_path else None
    steps = mod.STEPS if steps is None else steps
    run.loop(steps, eval_every or max(1, mod.STEPS // 10), until_success, progress, saver)
    if saver and not run.hard_stop:  # a second Ctrl-C may have hit mid-step: keep the last save
        saver.save(run.done)
    summary = run.summary()
    run.report(summary, saver)
    return summary


class CliError(Exception):
    """A mistake in what the command was asked to do (exit status 2)."""


class _Saver:
    """Saves the run's checkpoint to path (tgweb.io.checkpoint.save_file: atomic) every
    `every` steps, and remembers the last save for the progress bar."""

    def __init__(self, trainer, path: str, every: int | None, name: str) -> None:
        self.trainer, self.path, self.every, self.name = trainer, path, every, name
        self.step: int | None = None
        self.at = 0.0

    def due(self, done: int) -> bool:
        return bool(self.every) and done % self.every == 0 and done != self.step

    def save(self, done: int) -> None:
        from .io import checkpoint

        checkpoint.save_file(self.trainer, self.path, metadata={"sample": self.name})
        self.step, self.at = done, time.monotonic()

    def last(self) -> str:
        """When the last save happened, for the progress bar."""
        if self.step is None:
            return "not yet"
        return f"step {self.step}, {time.monotonic() - self.at:.0f} s ago"


class _Run:
    """One training run of a sample: the trainer, its evaluations and timings."""

    def __init__(self, name: str, mod, backend: str, seed: int, out) -> None:
        self.name, self.mod, self.backend, self.seed, self.out = name, mod, backend, seed, out
        self.kind, self.bound = _samples.success_bound(mod)
        self.t0 = time.perf_counter()
        self.trainer = _samples.compile(mod, backend=backend, seed=seed)
        self.inference = self.trainer.attach(mod.forward, inputs=mod.EVAL_INPUTS)
        self.compile_s = time.perf_counter() - self.t0
        self.n_params = sum(
            len(v.reshape(-1)) if hasattr(v, "reshape") else len(_samples.flatten(v))
            for v in self.trainer.params().values()
        )
        self.history: list[tuple[int, float]] = []
        self.first_success: tuple[int, float] | None = None
        self.train_s = self.eval_s = 0.0
        self.last_loss = float("nan")
        self.skipped = self.done = 0
        self.interrupted = self.hard_stop = self.stop_asked = False
        self.bar = self.saver = None
        print(
            f"{name}: backend {backend}, seed {seed}, {self.n_params:,} parameters, compiled in "
            f"{self.compile_s:.2f} s; success: {_bound_text(mod)}",
            file=out,
            flush=True,
        )

    def resumed(self) -> None:
        """After a checkpoint was loaded: count on from its step() calls (the batch index)
        with its seed (the batches' stream), as the run that saved it would have."""
        self.done = self.trainer.calls
        self.seed = self.trainer.seed
        self.note(f"resumed at step {self.done} (seed {self.seed})")

    def met(self, v: float) -> bool:
        return v < self.bound if self.kind == "below" else v >= self.bound

    def predict(self, batch):
        return self.inference.run(**batch).output

    def note(self, msg: str) -> None:
        if self.bar is not None:
            self.bar.write(msg, file=self.out)
        else:
            print(msg, file=self.out, flush=True)

    def evaluate(self) -> float:
        t = time.perf_counter()
        v = float(self.mod.metric(self.predict))
        self.eval_s += time.perf_counter() - t
        self.history.append((self.done, v))
        if self.first_success is None and self.met(v):
            self.first_success = (self.done, self.train_s)
        self.note(
            f"step {self.done}: loss {_fmt(self.last_loss)}, {self.mod.SUCCESS['metric']} {_fmt(v)}"
            + (" (success)" if self.met(v) else "")
        )
        return v

    def loop(self, steps: int, eval_every: int, until_success: bool, progress: bool, saver=None) -> None:
        """Step until `steps` steps in all. Ctrl-C ends the loop between two steps (so the
        state is whole for the last save); a second Ctrl-C interrupts at once."""
        self.saver = saver
        if progress:
            try:
                from tqdm import tqdm

                self.bar = tqdm(
                    total=steps,
                    initial=min(self.done, steps),
                    desc=self.name,
                    unit="step",
                    dynamic_ncols=True,
                    file=sys.stderr,
                )
            except ImportError:  # pragma: no cover - tqdm is a CLI convenience
                self.bar = None
        old = _on_sigint(self.ask_stop)
        try:
            while self.done < steps and not self.stop_asked:
                self.step(self.batch(self.done))  # batch i is step() call i: the stream resumes
                if saver and saver.due(self.done):
                    saver.save(self.done)
                if self.done % eval_every == 0 and self.done < steps:
                    if self.met(self.evaluate()) and until_success:
                        break
        except KeyboardInterrupt:
            self.interrupted = self.hard_stop = True
        finally:
            _on_sigint(old)
            if self.bar is not None:
                self.bar.close()
        self.interrupted |= self.stop_asked
        if not self.history or self.history[-1][0] != self.done:
            self.evaluate()

    def ask_stop(self, signum=None, frame=None) -> None:
        if self.stop_asked:  # the second Ctrl-C: the user wants out now
            raise KeyboardInterrupt
        self.stop_asked = True
        self.note("Ctrl-C: stopping after this step" + (" and saving" if self.saver else ""))

    def batch(self, i: int):
        """The sample's batch of step i. A sample whose batches depend on the model being
        trained (BATCH_NEEDS_POLICY: reinforcement learning) gets predict as its policy."""
        if getattr(self.mod, "BATCH_NEEDS_POLICY", False):
            return self.mod.batch(i, self.seed, policy=self.predict)
        return self.mod.batch(i, self.seed)

    def step(self, batch) -> None:
        t = time.perf_counter()
        r = self.trainer.step(**batch)
        self.train_s += time.perf_counter() - t
        self.done += 1
        self.last_loss = r.loss
        self.skipped += 0 if r.ok else 1
        if self.bar is not None:
            post = {"loss": f"{r.loss:.4f}"}
            if self.history:
                post[self.mod.SUCCESS["metric"]] = _fmt(self.history[-1][1])
            if self.saver:
                post["saved"] = self.saver.last()
            self.bar.set_postfix(post, refresh=False)
            self.bar.update(1)

    def summary(self) -> dict[str, Any]:
        final, mod, first = self.history[-1][1], self.mod, self.first_success
        return {
            "sample": self.name,
            "backend": self.backend,
            "seed": self.seed,
            "steps": self.done,
            "skipped_steps": self.skipped,
            "final_loss": self.last_loss,
            "metric": mod.SUCCESS["metric"],
            "final_metric": final,
            "bound": self.bound,
            "bound_kind": self.kind,
            "within_steps": mod.SUCCESS["within_steps"],
            "success": self.met(final) and self.done <= mod.SUCCESS["within_steps"],
            "first_success_step": first[0] if first else None,
            "first_success_train_s": first[1] if first else None,
            "parameters": self.n_params,
            "compile_s": self.compile_s,
            "train_s": self.train_s,
            "eval_s": self.eval_s,
            "wall_s": time.perf_counter() - self.t0,
            "steps_per_s": self.done / self.train_s if self.train_s > 0 else None,
            "history": self.history,
            "interrupted": self.interrupted,
        }

    def report(self, s: dict[str, Any], saver=None) -> None:
        out, mod = self.out, self.mod
        for line in _show(self.name, mod, self.predict, self.seed, self.trainer):
            print(line, file=out)
        skipped = f", {s['skipped_steps']} skipped" if s["skipped_steps"] else ""
        print(
            f"final {s['metric']}: {_fmt(s['final_metric'])} after {s['steps']} steps "
            f"(loss {_fmt(s['final_loss'])}{skipped})",
            file=out,
        )
        if s["first_success_step"] is not None:
            when = (
                f"first met at step {s['first_success_step']} after "
                f"{s['first_success_train_s']:.1f} s of training"
            )
        else:
            when = "not met at any evaluation"
        print(f"SUCCESS {'met' if s['success'] else 'NOT met'}: {_bound_text(mod)}; {when}", file=out)
        print(
            f"steps: {s['steps']}, wall time {s['wall_s']:.1f} s (compile {s['compile_s']:.1f} s, training "
            f"{s['train_s']:.1f} s = {s['steps_per_s'] or 0:.1f} steps/s, evaluation {s['eval_s']:.1f} s)"
            + (" — interrupted" if s["interrupted"] else ""),
            file=out,
            flush=True,
        )
        if saver and saver.step is not None:
            print(f"checkpoint: {saver.path} (step {saver.step})", file=out, flush=True)


def _backends() -> dict[str, dict]:
    """{backend: {"available", "detail"}}: the detail of an unavailable backend says why,
    and what to install where a package is missing."""
    import importlib

    from . import backends

    found: dict[str, dict] = {}
    try:
        numpy = importlib.import_module("numpy")
        found["reference"] = {"available": True, "detail": f"NumPy {numpy.__version__}"}
    except ImportError as e:
        found["reference"] = {"available": False, "detail": backends.missing_message("reference", e)}
    why = backends.why_not_native()
    if why:
        found["native"] = {"available": False, "detail": why}
    else:
        import wgpu

        from .backends import native

        ai = native.adapter_info()
        found["native"] = {
            "available": True,
            "detail": f"wgpu-py {wgpu.__version__} on {ai.get('device', '?')} "
            f"({ai.get('adapter_type', '?')}, {ai.get('backend_type', '?')})",
        }
    found["browser"] = {
        "available": sys.platform == "emscripten",
        "detail": "WebGPU through Pyodide in the page's worker",
    }
    return found


def _adapters() -> tuple[list[dict], str]:
    """(every adapter wgpu-py lists, the error listing them raised or ""); none without wgpu-py."""
    try:
        import wgpu

        listed = wgpu.gpu.enumerate_adapters_sync()
    except ImportError:
        return [], ""
    except Exception as e:  # pragma: no cover - depends on the machine
        return [], str(e)
    out = []
    for a in listed:
        i = dict(a.info)
        out.append(
            {
                "summary": a.summary,
                "vendor": i.get("vendor", ""),
                "device": i.get("device", ""),
                "description": i.get("description", ""),
                "type": i.get("adapter_type", ""),
                "backend": i.get("backend_type", ""),
            }
        )
    return out, ""


def info(out=None) -> dict[str, Any]:
    """Print and return tgweb's and Python's versions, the backends (why one is
    unavailable), the default one and the adapters wgpu-py finds."""
    from . import __version__
    from .compile import default_backend

    out = out or sys.stdout
    adapters, adapter_error = _adapters()
    found: dict[str, Any] = {
        "version": __version__,
        "python": platform.python_version(),
        "backends": _backends(),
        "adapters": adapters,
        "default": default_backend(),
        "samples": list(_samples.SAMPLES),
        **({"adapter_error": adapter_error} if adapter_error else {}),
    }
    print(
        f"tgweb {found['version']} (Python {found['python']}, {platform.system()} {platform.machine()})",
        file=out,
    )
    print("backends:", file=out)
    for b, d in found["backends"].items():
        mark = "yes" if d["available"] else "no "
        print(f"  {b:<10} {mark}  {d['detail']}", file=out)
    print(f"default backend: {found['default']}", file=out)
    listed = "none found" + (f" ({adapter_error})" if adapter_error else "")
    print(f"adapters (wgpu-py): {'' if adapters else listed}".rstrip(), file=out)
    for a in found["adapters"]:
        print(f"  - {a['summary']}  [{a['description']}]", file=out)
    print("samples: " + ", ".join(found["samples"]), file=out, flush=True)
    return found


def _on_sigint(handler):
    """Install handler for SIGINT (Ctrl-C); returns the previous one. Outside the main
    thread (where Python allows no handlers) it does nothing."""
    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, handler)


def _one_blas_thread() -> None:
    """The samples' matrices are small: BLAS threads only contend (matmuls ran 15x slower
    on a busy 2-core machine), so the reference backend's NumPy gets one thread unless the
    user set otherwise. Only effective before NumPy is first imported."""
    if "numpy" not in sys.modules:
        for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, "1")


def _parser() -> argparse.ArgumentParser:
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
    t.add_argument(
        "--resume",
        metavar="PATH",
        help="continue from a checkpoint file (safetensors) up to --steps in all, as if never stopped",
    )
    t.add_argument(
        "--checkpoint",
        metavar="PATH",
        help="save a checkpoint (safetensors, atomically) at the end and on Ctrl-C",
    )
    t.add_argument(
        "--checkpoint-every", type=int, metavar="N", help="with --checkpoint: also save every N steps"
    )
    t.add_argument("--small", action="store_true", help="the sample's scaled-down size (shakespeare)")
    i = sub.add_parser("info", help="list backends and GPU adapters")
    i.add_argument("--json", action="store_true", help="print as JSON")
    return ap


def main(argv: list[str] | None = None) -> int:
    _one_blas_thread()
    ap = _parser()
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
    if args.small and not hasattr(_samples.get(args.sample), "sized"):
        ap.error(f"--small: sample {args.sample} has no small size")
    if args.checkpoint_every is not None and (args.checkpoint_every < 1 or not args.checkpoint):
        ap.error("--checkpoint-every N needs N >= 1 and --checkpoint PATH")
    try:
        summary = train(
            args.sample,
            args.backend,
            args.steps,
            args.seed,
            args.eval_every,
            args.until_success,
            progress=not args.no_progress,
            resume=args.resume,
            checkpoint_path=args.checkpoint,
            checkpoint_every=args.checkpoint_every,
            small=args.small,
        )
    except (CliError, OSError) as e:  # OSError: a checkpoint path that cannot be read or written
        print(f"tgweb train {args.sample}: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        if type(e).__name__ not in (
            "NativeError",
            "KernelCompileError",
            "InputError",
            "SafetensorsError",
            "MissingDependency",
        ):
            raise
        print(f"tgweb train {args.sample}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if args.json == "-":
        print(json.dumps(summary))
    elif args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0 if summary["success"] or not args.check else 1
