"""tg.compile: a model and a loss become one training graph and a Trainer.

The training graph is built once: the forward pass and loss are traced; the
gradient of every parameter is appended (graph.grads); one `global_sumsq`
reduction over all gradients gives the global norm, which decides in the graph
whether the step is applied (`ok`: the loss and every gradient are finite),
and serves clipping; the optimizer's update is appended, each new param/state
value wrapped in `where(ok, new, old)` and recorded in graph.updates (written in
place on the GPU, so a skipped step leaves every byte as it was). The outputs
are "loss" (f32 scalar), "ok" (bool scalar) and "grad_norm" (f32 scalar, the
unclipped global norm); the host reads the three back with the loss, so no
extra round trip is needed to learn whether the step was applied.

Per-step host scalars (see tgweb.optim.optimizers): "lr", and for Adam/AdamW
"step_size" and "bc2_sqrt" (f32), each also as "<name>@<j>" with "applied_seen" for
pipelined steps (tgweb.program, Trainer.step), plus "seed" (a u32 word) when a random
op asks for it. The
optimizer's step counter and the schedule advance only on applied steps.

Backends: "reference" runs the graph with the NumPy interpreter
(tgweb.backends.reference), optionally in float64 (precision="float64"), and
writes the updates back on the host. "native" (wgpu-py) and "browser" (gpu.mjs
through Pyodide) lower the graph to a Program (tgweb.lower) and drive a
tgweb.backends.base.Runtime. The default is "browser" under Pyodide, else
"native" when tgweb.backends.native.available() says a GPU adapter exists,
else "reference".

Every method is a plain synchronous call, in CPython and in the browser worker
alike: there the browser backend waits for GPU readbacks with Pyodide's
run_sync (JSPI), so one user script runs unchanged everywhere. Bad inputs raise
tgweb.InputError naming the input, before anything changes (tgweb.inputs).
"""

from __future__ import annotations

import array
import collections
import functools
import importlib
import json
import math
import sys
from typing import Any, Callable

from . import ops
from .backends import make_engine
from .backends.base import DeviceLost
from .grad import append_grad
from .host import F32_MAX, InputError, first_nonfinite, from_user
from .inputs import check_inputs, index_bounds
from .ir import REGISTRY, Graph, Tensor, TraceError, prod, root, tracing, user_site
from .nn.module import Module, param_rng
from .optim import clip as _clip
from .optim.optimizers import Optimizer, ParamInfo
from .optim.optimizers import from_spec as _optimizer_from_spec
from .optim.schedules import Schedule
from .optim.schedules import from_spec as _schedule_from_spec
from .program import DEPTH, SEEN, outcome
from .trace import scalar_loss, trace

BACKENDS = ("reference", "native", "browser")
_NO_DECAY_INITS = ("zeros", "ones", "constant")


class StepResult:
    """What one training step returns: loss, ok, reason, grad_norm, lr, step (the applied
    steps after it) and captures. ok is False when the step was skipped because the loss,
    a gradient or the update was not finite; reason says which. Parameters and optimizer
    state are then exactly as before the step.

    The fields are read back from the GPU when first used (Trainer.step says when that
    costs a wait); `ready` tells whether they are in already."""

    __slots__ = ("_loss", "_ok", "_reason", "_captures", "_grad_norm", "_lr", "_step", "_fill")

    def __init__(self, loss, ok, reason, captures, grad_norm, lr, step) -> None:
        self._loss, self._ok, self._reason, self._captures = loss, ok, reason, captures
        self._grad_norm, self._lr, self._step = grad_norm, lr, step
        self._fill = None  # set while the step's results are still on the GPU

    @property
    def ready(self) -> bool:
        return self._fill is None

    def _get(self, value):
        if self._fill is not None:
            self._fill()
        return getattr(self, value)

    loss = property(lambda self: self._get("_loss"), doc="the loss (float)")
    ok = property(lambda self: self._get("_ok"), doc="whether the step was applied")
    reason = property(lambda self: self._get("_reason"), doc="why it was skipped (None if applied)")
    captures = property(lambda self: self._get("_captures"), doc="captured tensors by name")
    grad_norm = property(lambda self: self._get("_grad_norm"), doc="global gradient norm before clipping")
    lr = property(lambda self: self._get("_lr"), doc="the learning rate the step used")
    step = property(lambda self: self._get("_step"), doc="applied steps after this one")

    def __repr__(self) -> str:
        s = f"StepResult(loss={self.loss:.6g}, ok={self.ok}, step={self.step}, lr={self.lr:.3g}"
        return s + (f", reason={self.reason!r})" if self.reason else ")")


class RunResult:
    """What Inference.run returns: .output (an array, or a dict of arrays when the
    forward function returned a dict) and .captures; unpacks as (output, captures)."""

    __slots__ = ("output", "captures")

    def __init__(self, output, captures) -> None:
        self.output, self.captures = output, captures

    def __iter__(self):
        return iter((self.output, self.captures))


def default_backend() -> str:
    if sys.platform == "emscripten":
        return "browser"
    try:
        native = importlib.import_module("tgweb.backends.native")
    except Exception:
        return "reference"
    available = getattr(native, "available", None)  # hook: native.available() -> bool
    if available is None:
        return "reference"
    try:
        return "native" if available() else "reference"
    except Exception:
        return "reference"


def compile(
    model: Module,
    loss_fn: Callable,
    inputs: dict[str, Any],
    optimizer: Any,
    *,
    backend: str | None = None,
    seed: int = 0,
    clip_grad_norm: float | None = None,
    normalize_grads: Any = None,
    precision: str = "float32",
    recover_every: int | None = None,
) -> "Trainer":
    """Trace loss_fn(model, **inputs), append gradients and the optimizer update, and
    return a Trainer.

    inputs: name -> shape tuple (f32) or (shape, dtype), e.g. ((128, 8), "i32").
    optimizer: a tg.optim optimizer, or plain data {"name": "adamw", "lr": ..., "clip": ...}.
    clip_grad_norm: clip the global L2 norm of all gradients to this value.
    normalize_grads: True, a glob pattern, a list of patterns or a callable name -> bool:
      divide those parameters' gradients by their own L2 norm (after clipping).
    Parameters start from values drawn from `seed` (as reset() does); load others with
    Trainer.load_params. precision="float64" is for the reference backend only.
    recover_every: keep a host copy of the whole state every that many applied steps;
      when the GPU device is lost, step() continues on a new device from that copy
      (at most that many steps lost) and says so in its result. None: a lost device
      raises backends.base.DeviceLost.
    """
    if not isinstance(model, Module):
        raise TypeError(f"compile: model must be a tgweb.nn.Module, got {type(model).__name__}")
    if not isinstance(inputs, dict):
        raise TypeError(f"compile: inputs must be a dict of name -> shape, got {type(inputs).__name__}")
    opt, spec_clip = _optimizer_from_spec(optimizer)
    if clip_grad_norm is None:
        clip_grad_norm = spec_clip
    if clip_grad_norm is not None:
        if (
            isinstance(clip_grad_norm, bool)
            or not isinstance(clip_grad_norm, (int, float))
            or not clip_grad_norm > 0
            or clip_grad_norm == float("inf")
        ):
            raise ValueError(f"clip_grad_norm must be a finite number > 0, got {clip_grad_norm!r}")
        clip_grad_norm = float(clip_grad_norm)
    which = _clip.name_filter(normalize_grads) if normalize_grads not in (None, False) else None
    backend = backend or default_backend()
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if precision not in ("float32", "float64"):
        raise ValueError(f"precision must be 'float32' or 'float64', got {precision!r}")
    if precision != "float32" and backend != "reference":
        raise ValueError(f"precision={precision!r} is only available on the reference backend")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r}")
    if recover_every is not None and (
        isinstance(recover_every, bool) or not isinstance(recover_every, int) or recover_every < 1
    ):
        raise ValueError(f"recover_every must be an int >= 1 or None, got {recover_every!r}")
    graph = build_training_graph(model, loss_fn, inputs, opt, clip_grad_norm, which)
    trainer = Trainer(model, graph, opt, backend, seed, precision, clip_grad_norm)
    trainer.recover_every = recover_every
    trainer._keep_host_copy()
    return trainer


def decays(p) -> bool:
    """Whether weight decay applies to a Parameter: its own `decay` when set, else
    not for zeros/ones/constant-initialised ones (biases, norm gains)."""
    if p.decay is not None:
        return bool(p.decay)
    return getattr(p.init, "kind", "random") not in _NO_DECAY_INITS


def build_training_graph(
    model: Module,
    loss_fn: Callable,
    inputs: dict,
    opt: Optimizer,
    clip_grad_norm: float | None = None,
    normalize: Callable[[str], bool] | None = None,
) -> Graph:
    """The one graph a training step runs: forward, loss, gradients, checks, update."""
    site = user_site()
    graph, out = trace(loss_fn, model, inputs)
    loss = scalar_loss(out)
    names = list(graph.params)
    pobj = dict(model.named_parameters())
    grads = append_grad(graph, loss, [graph.params[n] for n in names])
    with tracing(graph), graph.site_override(site):
        gs = _owned({n: grads[graph.params[n].id] for n in names})
        graph.grads.update(gs)
        norm = _clip.global_sumsq([gs[n] for n in names], root=True) if names else ops.full((), 0.0)
        grad_ok = _clip.finite_flag(norm, loss)
        if clip_grad_norm is not None:
            gs = _clip.clip_by_global_norm(gs, norm, clip_grad_norm)
        if normalize is not None:
            gs = _clip.normalize(gs, normalize)
        infos = [ParamInfo(n, graph.params[n], gs[n], decays(pobj[n])) for n in names]
        new = opt.build(graph, infos)
        # the update itself must be finite: a bound from scalars (no pass over the
        # parameters); processed gradient elements are at most the clipped global
        # norm, or 1 for normalised ones
        gmax = norm if clip_grad_norm is None else ops.minimum(norm, clip_grad_norm)
        gmax = gmax if normalize is None else ops.maximum(gmax, 1.0)
        upd_ok = opt.update_ok(graph, gmax) if names else None
        ok = grad_ok if upd_ok is None else ops.logical_and(grad_ok, upd_ok)
        for n, v in new["params"].items():
            graph.updates[n] = ops.where(ok, v, graph.params[n])
        for n, v in new["states"].items():
            graph.updates[n] = ops.where(ok, v, graph.states[n])
    graph.outputs["loss"] = loss
    graph.outputs["ok"] = ok
    graph.outputs["grad_norm"] = norm
    # pipelined steps (Trainer.step): each optimizer scalar also comes in a version for
    # each number of unread steps before it that turn out applied; the Program's first
    # kernel picks the version by the ok outputs of the runs so far (tgweb.program,
    # tgweb.lower), so a step can be sent before those before it are read back
    optimizer_scalars = [k for k in graph.scalars if k != "seed"]
    for k in optimizer_scalars:
        for j in range(1, DEPTH + 1):
            graph.scalar(outcome(k, j))
    if optimizer_scalars:
        graph.scalar(SEEN, "i32")
    return graph


def _owned(grads: dict[str, Tensor]) -> dict[str, Tensor]:
    """Each gradient must be its own computed tensor so it gets its own range of the
    grad arena: a gradient that is a leaf, a view of one, or shared with another
    parameter's gradient is copied."""
    seen: set[int] = set()
    out = {}
    for n, g in grads.items():
        r = root(g)
        if REGISTRY[r.kind].role == "leaf" or r.id in seen:
            g = g * 1.0
            r = g
        seen.add(r.id)
        out[n] = g
    return out


_OPTIMIZER_SCALARS = ("lr", "step_size", "bc2_sqrt")
_HOST_SCALARS = (
    "seed",
    SEEN,
    *_OPTIMIZER_SCALARS,
    *(outcome(k, j) for k in _OPTIMIZER_SCALARS for j in range(1, DEPTH + 1)),
)
STATE_PREFIX = "optimizer."  # optimizer state tensors in a checkpoint (the page's files too)


def _count(x: Any, what: str) -> int | None:
    if x is not None and (isinstance(x, bool) or not isinstance(x, int) or x < 0):
        raise InputError(f"{what} must be an int >= 0, got {x!r}")
    return x


def _meta_int(meta: dict[str, str], key: str, default: int) -> int:
    if key not in meta:
        return default
    v = meta[key].strip()
    if not (v.isascii() and v.isdigit()) or len(v) > 18:
        raise InputError(f"restore: metadata {key!r} must be an int >= 0, got {meta[key]!r}")
    return int(v)


class Trainer:
    """One compiled training step and the state it trains. See the module docstring."""

    def __init__(
        self,
        model: Module,
        graph: Graph,
        optimizer: Optimizer,
        backend: str,
        seed: int,
        precision: str,
        clip_grad_norm: float | None,
    ) -> None:
        self.model, self.graph, self.optimizer = model, graph, optimizer
        self.backend, self.seed, self.precision = backend, seed, precision
        self.clip_grad_norm = clip_grad_norm
        unknown = sorted(set(graph.scalars) - set(_HOST_SCALARS))
        if unknown:
            raise TraceError(
                f"the graph uses host scalars {unknown} that the trainer does not "
                f"provide (known: {list(_HOST_SCALARS)})"
            )
        self._pshape = {n: t.shape for n, t in graph.params.items()}
        self._sshape = {n: t.shape for n, t in graph.states.items()}
        self._schedule: Schedule = optimizer.lr
        self._origin = 0  # applied-step count at which the schedule started
        self._t = 0  # applied steps
        self._calls = 0  # step() calls, applied or not (drives the seed scalar)
        self._bounds = index_bounds(graph)
        self._engine = make_engine(graph, backend, precision)
        self.recover_every: int | None = None  # see compile()
        self._host_copy = None  # (tensors, metadata) from checkpoint(), for a lost device
        self._unread: collections.deque[StepResult] = collections.deque()  # sent, not read back
        self._seen = 0  # applied steps read back from this engine (the Program counts them too)
        self._memo: dict[int, tuple[dict, float]] = {}  # applied steps -> _host_scalars
        self._memo_for: tuple = (None, None)  # the (schedule, origin) the memo is of
        self.reset()

    # ---------------------------------------------------------------- state

    @property
    def program(self):
        """The Program the GPU backends run (on the reference backend: the same plan and
        kernels, which it does not run, for the memory report)."""
        return self._engine.program

    @property
    def steps(self) -> int:
        """Applied (finite) steps so far; Adam's bias correction uses steps + 1 next."""
        self._settle()
        return self._t

    @property
    def lr(self) -> float:
        """The learning rate the next step will use."""
        self._settle()
        return self._schedule(self._t - self._origin)

    def reset(self) -> None:
        """Parameters drawn again from the seed, optimizer state to its initial values,
        step count and schedule back to zero."""
        self._settle()
        for n, p in self.model.named_parameters():
            if n in self._pshape:
                self._engine.write("params", n, p.init(p.shape, param_rng(self.seed, n)))
        for n, t in self.graph.states.items():
            self._engine.write("states", n, array.array("f", [t.attrs["init"]]) * prod(t.shape))
        self._t = self._origin = self._calls = 0

    def params(self) -> dict[str, Any]:
        """Parameter arrays by name (copies)."""
        self._settle()
        return {n: self._engine.read("params", n) for n in self._pshape}

    def states(self) -> dict[str, Any]:
        """Optimizer state arrays by name (e.g. 'fc.weight.exp_avg'); copies."""
        self._settle()
        return {n: self._engine.read("states", n) for n in self._sshape}

    @property
    def calls(self) -> int:
        """step() calls so far, applied or not: the position of the random stream."""
        return self._calls

    def load_params(self, d: dict[str, Any]) -> None:
        """Set every parameter; strict (every name, exact shapes, finite values). On error
        nothing changes."""
        self._settle()
        self._write(self._checked("params", d, self._pshape, "load_params", "parameter"))

    def load_states(self, d: dict[str, Any], steps: int | None = None) -> None:
        """Set every optimizer state (strict, finite), and optionally the applied-step
        count. On error nothing changes."""
        self._settle()
        steps = _count(steps, "load_states: steps")
        new = self._checked("states", d, self._sshape, "load_states", "state")
        self._write(new)
        if steps is not None:
            self._t = steps
            self._origin = min(self._origin, steps)

    def checkpoint(self) -> tuple[dict[str, Any], dict[str, str]]:
        """Everything the next step depends on, as (tensors, metadata) for
        tgweb.io.safetensors: the parameters by name, the optimizer state as
        "optimizer.<name>", and metadata (strings) with the applied steps, the step()
        calls (the random stream's position), the seed, and the learning-rate schedule
        in force with the step it started at. restore() takes it back exactly."""
        self._settle()
        tensors = dict(self.params())
        tensors.update({STATE_PREFIX + k: v for k, v in self.states().items()})
        meta = {
            "format": "tgweb",
            "steps": str(self._t),
            "calls": str(self._calls),
            "seed": str(self.seed),
            "schedule_origin": str(self._origin),
        }
        try:
            spec = self._schedule.to_dict()
            if _schedule_from_spec(spec) == self._schedule:  # a schedule that round-trips
                meta["schedule"] = json.dumps(spec)
        except (TypeError, ValueError):
            pass  # a custom schedule: restore keeps the trainer's own
        return tensors, meta

    def restore(self, tensors: dict[str, Any], metadata: dict[str, str] | None = None) -> None:
        """Set parameters, optimizer state, step and call counts and the schedule from a
        checkpoint() (or a page/CLI safetensors file: parameters, "optimizer.<name>"
        states, metadata "steps", "calls", "seed", "schedule", "schedule_origin"). Everything is
        validated before anything is replaced: on error nothing changes. A file without
        optimizer state restarts the optimizer (state at its initial values, step 0); one
        without schedule metadata (an older file) uses the optimizer's own schedule from
        step 0."""
        self._settle()
        if not isinstance(tensors, dict):
            raise InputError(f"restore: expected a dict of name -> array, got {type(tensors).__name__}")
        meta = dict(metadata or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            raise InputError("restore: metadata must map strings to strings")
        params = {k: v for k, v in tensors.items() if not str(k).startswith(STATE_PREFIX)}
        states = {k[len(STATE_PREFIX) :]: v for k, v in tensors.items() if str(k).startswith(STATE_PREFIX)}
        new_p = self._checked("params", params, self._pshape, "restore", "parameter")
        if states or not self._sshape:
            new_s = self._checked("states", states, self._sshape, "restore", "state")
            steps = _meta_int(meta, "steps", 0)
        else:
            new_s = {
                n: ("states", array.array("f", [t.attrs["init"]]) * prod(t.shape), None)
                for n, t in self.graph.states.items()
            }
            steps = 0
        calls = _meta_int(meta, "calls", steps)
        seed = _meta_int(meta, "seed", self.seed)
        origin = _meta_int(meta, "schedule_origin", 0)
        if origin > steps:
            raise InputError(f"restore: schedule_origin {origin} is after the checkpoint's step {steps}")
        schedule = self._schedule
        if "schedule" in meta:
            try:
                schedule = _schedule_from_spec(json.loads(meta["schedule"]))
            except (ValueError, RecursionError) as e:  # JSON errors and bad schedules
                raise InputError(f"restore: metadata 'schedule' is not a schedule ({e})") from None
        elif "schedule_origin" not in meta:
            # an older file: the optimizer's own schedule, counted from step 0
            schedule, origin = self.optimizer.lr, 0
        self._write({**new_p, **new_s})
        self._t, self._calls, self._schedule, self._origin = steps, calls, schedule, origin
        self.seed = seed  # with calls: the random stream's position

    def _checked(self, kind, d, shapes, what, noun) -> dict[str, tuple[str, array.array, Any]]:
        """Every name present, nothing extra, each value of the right shape and finite:
        name -> (kind, data, raw); InputError naming the value otherwise."""
        if not isinstance(d, dict):
            raise InputError(f"{what}: expected a dict of name -> array, got {type(d).__name__}")
        missing = sorted(set(shapes) - set(d))
        extra = sorted(map(str, set(d) - set(shapes)))
        if missing or extra:
            raise InputError(
                f"{what}: "
                + "; ".join(
                    ([f"missing {noun}s {missing}"] if missing else [])
                    + ([f"unexpected {extra}"] if extra else [])
                )
            )
        out = {}
        for n in shapes:
            data = from_user(d[n], shapes[n], "f32", f"{what}: {noun} {n!r}")
            bad = first_nonfinite(data)
            if bad is not None:
                raise InputError(
                    f"{what}: {noun} {n!r} holds {data[bad]} at flat index {bad}; "
                    "parameters and optimizer state must be finite"
                )
            out[n] = (kind, data, d[n])
        return out

    def _write(self, new: dict[str, tuple[str, array.array, Any]]) -> None:
        for n, (kind, data, raw) in new.items():
            self._engine.write(kind, n, data, raw)

    def set_lr(self, lr_or_schedule: Any) -> None:
        """A number or a schedule (tg.optim.schedules, or its dict form); it starts at t = 0
        on the next step. InputError (nothing changed) for a negative, non-finite or
        over-f32 lr, or a schedule whose first lr is one."""
        self._settle()
        try:
            sched = _schedule_from_spec(lr_or_schedule)
        except InputError:
            raise
        except ValueError as e:
            raise InputError(f"set_lr: {e}") from None
        first = sched(0)
        if isinstance(first, bool) or not isinstance(first, (int, float)) or not 0 <= first <= F32_MAX:
            raise InputError(f"set_lr: {sched!r} gives lr {first!r} at t=0; it must be a finite number >= 0")
        self._schedule = sched
        self._origin = self._t

    # ---------------------------------------------------------------- steps

    def step(self, **batch) -> StepResult:
        """One training step on the batch (every input by name).

        Pipelined: the step is sent to the GPU and its StepResult returned at once; its
        loss and flags are read back while the caller goes on, and up to DEPTH (8) more
        steps go out before step() waits for the oldest. The applied/skipped outcome
        stays exact: each step carries the optimizer scalars (t, lr) for every number of
        the unread steps before it that may turn out applied, and the GPU picks by the
        flags those steps computed. Reading a field of a result waits for that step;
        trainer.steps, lr, params(), checkpoint() and the other methods wait for every
        step in flight first. An error of a step (a lost device) surfaces when it is
        read back: at the latest DEPTH steps later, or at the next call that waits.
        With recover_every set, every step is read back before step() returns."""
        data = check_inputs(self.graph, batch, "step", self._bounds)
        prevs = tuple(self._unread)
        try:
            # the optimizer scalars and lr should j of the unread steps turn out applied
            sets = [self._host_scalars(self._t + j) for j in range(len(prevs) + 1)]
        except InputError:
            if not prevs:
                raise
            self._settle()  # an lr only some outcomes give: decide exactly
            return self.step(**batch)
        sets += [sets[-1]] * (DEPTH + 1 - len(sets))  # outcomes that cannot happen
        scalars = self._step_scalars([sc for sc, _ in sets], seed_word(self.seed, self._calls))
        self._calls += 1
        caps = list(self.graph.captures)
        read = [("outputs", "loss"), ("outputs", "ok"), ("outputs", "grad_norm")]
        try:
            wait = self._engine.submit(data, batch, scalars, read + [("captures", n) for n in caps])
        except DeviceLost as e:
            if self._host_copy is None:
                raise
            return self._recover(e)
        result = StepResult(None, None, None, None, None, None, None)
        lrs, seen = [lr for _, lr in sets], self._seen
        result._fill = lambda: self._finish(result, wait, caps, prevs, seen, lrs)
        self._unread.append(result)  # tracked before any is read: an error there loses no step
        if len(self._unread) > DEPTH:
            self._unread[0]._fill()  # on the GPU it ran DEPTH steps before this one
        if self.recover_every:  # a lost device must be seen at the step it hit
            try:
                result._fill()
            except DeviceLost as e:
                if self._host_copy is None:
                    raise
                return self._recover(e)
        return result

    def _step_scalars(self, sets: list[dict], seed: int) -> dict:
        """The Program's host scalars for a step: sets[j], j = 0..DEPTH, the optimizer
        scalars should j of the unread steps before it turn out applied."""
        scalars = dict(sets[0])
        for j in range(1, DEPTH + 1):
            for k, v in sets[j].items():
                scalars[outcome(k, j)] = v
        scalars[SEEN] = self._seen
        scalars["seed"] = seed
        return {k: scalars[k] for k in self.graph.scalars}

    def _host_scalars(self, applied: int) -> tuple[dict, float]:
        """The optimizer scalars and lr of a step that follows `applied` applied steps
        (remembered: a pipelined step asks for up to DEPTH + 1 of them; do not change)."""
        if self._memo_for[0] is not self._schedule or self._memo_for[1] != self._origin:
            self._memo, self._memo_for = {}, (self._schedule, self._origin)
        hit = self._memo.get(applied)
        if hit is None:
            lr = self._schedule(applied - self._origin)
            scalars = _checked_scalars(
                self.optimizer, applied + 1, lr, self._schedule, applied - self._origin
            )
            if len(self._memo) > 4 * DEPTH:
                self._memo = {t: v for t, v in self._memo.items() if t >= self._t}
            hit = self._memo[applied] = (scalars, lr)
        return hit

    def _settle(self) -> None:
        """Wait for every step in flight (their results then hold their values)."""
        if self._unread:
            self._unread[-1]._fill()

    def _finish(self, r: StepResult, wait, caps, prevs: tuple, seen: int, lrs: list) -> None:
        """Read back step r's results and count it if it was applied. prevs: the steps
        still unread when r was sent, which are read first, in order; seen: the applied
        steps read back then (r's lr is lrs[j] for the j of prevs that were applied)."""
        try:
            self._unread.remove(r)
        except ValueError:
            pass
        try:
            for p in prevs:
                if not p.ready:
                    p._fill()  # in order (its own error, if any, comes again here)
            r._lr = lrs[self._seen - seen]
            r._fill = None
            got = wait()
        except Exception as e:
            r._fill = functools.partial(_raise, e)  # every later read of this result says why
            raise
        loss = float(_first(got[("outputs", "loss")]))
        ok = bool(_first(got[("outputs", "ok")]))
        norm = float(_first(got[("outputs", "grad_norm")]))
        reason = None
        if ok:
            self._t += 1
            self._seen += 1
            if self.recover_every and self._t % self.recover_every == 0:
                self._keep_host_copy()
        elif not math.isfinite(loss):
            reason = f"non-finite loss ({loss}); step skipped, parameters unchanged"
        elif not math.isfinite(norm):
            reason = f"non-finite gradient (global norm {norm}); step skipped, parameters unchanged"
        else:
            reason = (
                f"non-finite update (a new parameter or optimizer state could overflow f32 at "
                f"lr {r._lr:.6g}, global gradient norm {norm:.6g}); step skipped, parameters unchanged"
            )
        r._loss, r._ok, r._reason, r._grad_norm, r._step = loss, ok, reason, norm, self._t
        r._captures = {n: got[("captures", n)] for n in caps}

    def _keep_host_copy(self) -> None:
        if self.recover_every:
            self._host_copy = self.checkpoint()

    def _recover(self, e: Exception) -> StepResult:
        """Continue on a new device from the last host copy (the step that failed, and
        those since the copy, are lost). Inference programs attached before stay on
        the old device: attach them again."""
        tensors, meta = self._host_copy
        lost = self._t - int(meta["steps"])
        self._unread.clear()  # steps sent to the lost device: gone with it
        self._engine = make_engine(self.graph, self.backend, self.precision)
        self._seen = 0  # the new Program has counted no runs
        self.restore(tensors, meta)
        reason = (
            f"{e}; training continues on a new device from step {self._t} "
            f"({lost} applied step(s) since the last host copy lost)"
        )
        nan = float("nan")
        return StepResult(nan, False, reason, {}, nan, self.lr, self._t)

    def attach(self, forward_fn: Callable, inputs: dict[str, Any]) -> "Inference":
        """An inference program for forward_fn(model, **inputs) that shares this trainer's
        parameters (it sees every update). An axis given as None is free: each new size
        compiles once, and the FreeInference.KEEP most recently used sizes stay compiled."""
        if any(d is None for spec in inputs.values() for d in _spec_shape(spec)):
            inf = FreeInference(self, forward_fn, inputs)
        else:
            inf = Inference(self, forward_fn, inputs)
        self.__dict__.setdefault("_attached", []).append(inf)  # close() frees it too
        return inf

    def close(self) -> None:
        """Free the GPU buffers and pipelines of this trainer and of the inference programs
        attached to it. Afterwards every call on them raises; closing twice is harmless."""
        try:
            self._settle()
        except Exception:  # a step that failed in flight: closing is still wanted
            pass
        for owner in self.__dict__.pop("_attached", []) + [self]:
            close = getattr(owner._engine, "close", None)  # the reference engine holds no GPU memory
            if close is not None:
                close()
            owner._engine = _Closed()

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def memory_report(self) -> dict:
        """Planned GPU bytes by buffer kind, the total with and without pooling of
        intermediates, and the peak of live bytes (Program.meta["memory"])."""
        return dict(self.program.meta.get("memory", {}))


class _Closed:
    """Stands in for the engine of a closed trainer: any use says so."""

    def __getattr__(self, name):
        raise RuntimeError("this trainer was closed (trainer.close()); compile a new one")

    def close(self) -> None:  # closing again is harmless
        pass


class Inference:
    """A forward-only program sharing a Trainer's parameters. run(**batch) -> RunResult."""

    def __init__(self, trainer: Trainer, forward_fn: Callable, inputs: dict[str, Any]) -> None:
        self.trainer = trainer
        graph, out = trace(forward_fn, trainer.model, inputs)
        if isinstance(out, Tensor):
            graph.outputs["output"] = out
            self._single = True
        elif isinstance(out, dict) and out and all(isinstance(v, Tensor) for v in out.values()):
            graph.outputs.update(out)
            self._single = False
        else:
            raise TraceError(
                f"the forward function must return a tensor or a dict of tensors, got {type(out).__name__}"
            )
        self.graph = graph
        self._bounds = index_bounds(graph)
        self._engine = make_engine(graph, trainer.backend, trainer.precision, share=trainer._engine)
        self.runs = 0  # run() calls: the position of its random stream

    @property
    def program(self):
        return self._engine.program

    def run(self, **batch) -> RunResult:
        data = check_inputs(self.graph, batch, "run", self._bounds)
        outs, caps = list(self.graph.outputs), list(self.graph.captures)
        scalars = {}
        if "seed" in self.graph.scalars:  # random ops (sampling): new numbers each run
            scalars["seed"] = seed_word(self.trainer.seed, self.runs, stream=2)
        self.runs += 1
        got = self._engine.run(
            data, batch, scalars, [("outputs", n) for n in outs] + [("captures", n) for n in caps]
        )
        o = {n: got[("outputs", n)] for n in outs}
        return RunResult(o["output"] if self._single else o, {n: got[("captures", n)] for n in caps})


def _spec_shape(spec) -> tuple:
    """The shape part of an input spec (a shape, or a (shape, dtype) pair)."""
    pair = isinstance(spec, (tuple, list)) and len(spec) == 2 and not isinstance(spec[1], int)
    pair = pair and not (spec[1] is None or isinstance(spec[1], (tuple, list)))
    return tuple(spec[0]) if pair else tuple(spec)


def _shape_of(value, name: str) -> tuple[int, ...]:
    """The shape of an input given for a free axis: an array's, or a nested list's."""
    if hasattr(value, "shape"):
        return tuple(int(d) for d in value.shape)
    shape, v = [], value
    while isinstance(v, (list, tuple)):
        shape.append(len(v))
        v = v[0] if v else None
    if not shape:
        raise InputError(f"run: input {name!r} has a free axis, so it must be an array or a nested list")
    return tuple(shape)


class FreeInference:
    """attach() with free (None) axes: one Inference per size seen, compiled on first use;
    the KEEP most recently used stay compiled (older ones are closed)."""

    KEEP = 8

    def __init__(self, trainer: Trainer, forward_fn: Callable, inputs: dict[str, Any]) -> None:
        self.trainer, self._fn, self._specs = trainer, forward_fn, dict(inputs)
        self._compiled: dict[tuple, Inference] = {}

    def _for(self, batch: dict) -> Inference:
        concrete = {}
        for n, spec in self._specs.items():
            want = _spec_shape(spec)
            if n not in batch:
                raise InputError(f"run: missing input(s) [{n!r}]")
            got = _shape_of(batch[n], n) if None in want else want
            if len(got) != len(want) or any(w is not None and w != g for w, g in zip(want, got)):
                raise InputError(f"run: input {n!r} has shape {got}, expected {want}")
            shape = tuple(got)
            concrete[n] = (shape, spec[1]) if _spec_shape(spec) != tuple(spec) else shape
        key = tuple(sorted((n, c if isinstance(c[0], int) else c[0]) for n, c in concrete.items()))
        inf = self._compiled.pop(key, None) or Inference(self.trainer, self._fn, concrete)
        self._compiled[key] = inf  # most recently used last
        while len(self._compiled) > self.KEEP:
            old = self._compiled.pop(next(iter(self._compiled)))
            close = getattr(old._engine, "close", None)
            if close is not None:
                close()
        return inf

    @property
    def _engine(self):  # for Trainer.close(): the engines of every compiled size
        return _Many([inf._engine for inf in self._compiled.values()])

    @_engine.setter
    def _engine(self, value) -> None:  # Trainer.close() marks it closed
        self._compiled = {}
        self._closed = value

    def run(self, **batch) -> RunResult:
        if hasattr(self, "_closed"):
            raise RuntimeError("this trainer was closed (trainer.close()); compile a new one")
        return self._for(batch).run(**batch)


class _Many:
    """Closes several engines as one."""

    def __init__(self, engines) -> None:
        self.engines = engines

    def close(self) -> None:
        for e in self.engines:
            close = getattr(e, "close", None)
            if close is not None:
                close()


def _checked_scalars(opt: Optimizer, t: int, lr: Any, schedule: Schedule, at: int) -> dict:
    """The optimizer's host scalars for the t-th applied step; InputError (nothing run,
    nothing changed) when the schedule's lr is not a finite f32 >= 0 or a scalar
    derived from it does not fit f32."""
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 <= lr <= F32_MAX:
        raise InputError(
            f"step: the learning rate schedule {schedule!r} gave lr {lr!r} at t={at}; "
            f"it must be a finite number in [0, {F32_MAX:.7g}]; nothing changed"
        )
    scalars = opt.host_scalars(t, lr)
    for k, v in scalars.items():
        if not abs(v) <= F32_MAX:
            raise InputError(f"step: {k} = {v!r} (from lr {lr!r}) does not fit f32; nothing changed")
    return scalars


def seed_word(seed: int, n: int, stream: int = 1) -> int:
    """The PRNG seed scalar of the n-th run of a stream (1: training steps, 2: inference
    runs) for a trainer's seed: every run draws new random numbers."""
    return (seed * 0x9E3779B1 + n * 0x85EBCA6B + stream) & 0x7FFFFFFF


def _raise(e: Exception):
    raise e


def _first(x):
    return x.reshape(-1)[0] if hasattr(x, "reshape") else (x.data[0] if hasattr(x, "data") else x[0])
