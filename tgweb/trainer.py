"""The Trainer: one compiled training step (tgweb.compile) and the state it trains.

It holds the parameters and optimizer state on its engine (tgweb.backends), counts
applied steps, drives the learning-rate schedule, and writes and reads checkpoints.
step() is pipelined (tgweb.pipeline): it returns at once, and a StepResult is read
back from the GPU when first used.

Every method is a plain synchronous call, in CPython and in the browser worker
alike: there the browser backend waits for GPU readbacks with Pyodide's run_sync
(JSPI), so one user script runs unchanged everywhere. Bad inputs raise
tgweb.InputError naming the input, before anything changes (tgweb.step_data).
"""

from __future__ import annotations

import array
import json
import math
from typing import Any, Callable

from . import initial, jsbridge
from .arrays import F32_MAX, InputError, from_user
from .backends import make_engine, prewarm
from .backends.base import DeviceLost
from .inference import Closed, FreeInference, Inference, spec_shape
from .ir import Graph, TraceError, prod
from .nn.init import initial_values
from .nn.module import Module
from .ops.random import seed_word
from .optim.optimizers import Optimizer
from .optim.schedules import Schedule
from .optim.schedules import from_spec as _schedule_from_spec
from .pipeline import DEPTH, OPTIMIZER_SCALARS, InFlight, is_host_scalar, step_scalars, wait
from .program import Program, memory_text
from .step_data import check_inputs, index_bounds

# what a Pyodide without JSPI awaits instead of a step that would wait (tgweb.jsbridge)
_STEP_ASYNC = "`r = await trainer.step_async(**batch)`"
_CALL_ASYNC = "`await tgweb.jsbridge.call(trainer.<method>, ...)`"


class StepResult:
    """What one training step returns: loss, ok, reason, grad_norm, lr, step (the applied
    steps after it) and captures. ok is False when the step was skipped because the loss,
    a gradient or the update was not finite; reason says which. Parameters and optimizer
    state are then exactly as before the step.

    The fields are read back from the GPU when first used (Trainer.step says when that
    costs a wait); `ready` tells whether they are in already."""

    __slots__ = ("_loss", "_ok", "_reason", "_captures", "_grad_norm", "_lr", "_step", "_pending")

    def __init__(self, loss, ok, reason, captures, grad_norm, lr, step) -> None:
        self._loss, self._ok, self._reason, self._captures = loss, ok, reason, captures
        self._grad_norm, self._lr, self._step = grad_norm, lr, step
        self._pending = None  # reads the results back while they are still on the GPU

    @property
    def ready(self) -> bool:
        return self._pending is None

    def _get(self, value):
        if self._pending is not None:
            jsbridge.check("reading a step's result", "`await r.loss_async` (or `await r.wait_async()`)")
            wait(self)
        return getattr(self, value)

    async def wait_async(self) -> "StepResult":
        """Wait for this step's results without blocking (a Pyodide without JSPI; see
        tgweb.jsbridge); returns the result, whose fields are then in."""
        if self._pending is not None:
            await jsbridge.settle()
            wait(self)
        return self

    async def _get_async(self, value):
        return getattr(await self.wait_async(), value)

    loss_async = property(lambda self: self._get_async("_loss"), doc="await it: the loss, without blocking")

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
        program: Program | None,
        optimizer: Optimizer,
        backend: str,
        seed: int,
        precision: str,
        clip_grad_norm: float | None,
        bounds: dict | None = None,
        cache_key: str | None = None,
        fresh: bool = True,
    ) -> None:
        self.model, self.graph, self.optimizer = model, graph, optimizer
        self.backend, self.seed, self.precision = backend, seed, precision
        self.clip_grad_norm = clip_grad_norm
        unknown = sorted(n for n in graph.scalars if not is_host_scalar(n))
        if unknown:
            raise TraceError(
                f"the graph uses host scalars {unknown} that the trainer does not provide "
                f"(known: seed and the optimizer's {list(OPTIMIZER_SCALARS)}, per group)"
            )
        self._pshape = {n: t.shape for n, t in graph.params.items()}
        # module buffers the forward updates (BatchNorm's running statistics) are states
        # kept under their own names, beside the parameters; the rest is optimizer state
        self._bshape = {n: t.shape for n, t in graph.states.items() if t.attrs.get("buffer")}
        self._sshape = {n: t.shape for n, t in graph.states.items() if n not in self._bshape}
        self._schedule: Schedule = optimizer.lr
        self._origin = 0  # applied-step count at which the schedule started
        self._applied = 0  # applied steps
        self._calls = 0  # step() calls, applied or not (drives the seed scalar)
        self._bounds = index_bounds(graph) if bounds is None else bounds
        self._program = program  # None on the reference backend, unless planned under max_memory
        self.cache_key = cache_key  # its Program's tgweb.progcache key (from compile)
        self._initial = None  # the program drawing initial values on the device (reset)
        self._planned = None  # initial.plan's, made while the device compiled the step
        # a Program just lowered: the browser compiles its kernels meanwhile (a cached one's
        # were asked for as the page started: tgweb's worker prewarms the last visit's)
        if fresh and prewarm(program, backend):
            draws, fills, _ = self._initial_sets(True)
            if draws or fills:
                self._planned = initial.plan(self, draws, fills)
                prewarm(self._planned[1], backend)
        self._engine = make_engine(graph, program, backend, precision)
        self._attached: list = []  # inference programs: close() frees them too
        self.recover_every: int | None = None  # see compile()
        self._host_copy = None  # (tensors, metadata) from checkpoint(), for a lost device
        self._in_flight = InFlight()  # steps sent and not read back yet
        self._memo: dict[tuple, tuple[dict, float]] = {}  # (applied, lr, host_state) -> _host_scalars
        self.reset()

    # ---------------------------------------------------------------- state

    @property
    def program(self):
        """The Program the GPU backends run (on the reference backend: the same plan and
        kernels, which it does not run, for the memory report)."""
        return self._engine.program

    @property
    def engine(self):
        """The engine (tgweb.backends.make_engine) holding this trainer's parameters and
        optimizer state on its device; inference programs attached to the trainer share
        its parameters through it."""
        return self._engine

    @property
    def schedule(self) -> Schedule:
        """The learning-rate schedule in force: the optimizer's, set_lr's or a restored
        checkpoint's. The next step's lr is schedule(steps - schedule_origin)."""
        return self._schedule

    @property
    def schedule_origin(self) -> int:
        """The applied-step count at which the schedule in force started (see schedule)."""
        return self._origin

    @property
    def steps(self) -> int:
        """Applied (finite) steps so far; Adam's bias correction uses steps + 1 next."""
        self._wait_in_flight()
        return self._applied

    @property
    def lr(self) -> float:
        """The learning rate the next step will use."""
        self._wait_in_flight()
        return self._schedule(self._applied - self._origin)

    def _initial_sets(self, on_device: bool):
        """initial.split of this trainer's parameters and optimizer state: (draws, fills, host)."""
        states = {n: self.graph.states[n] for n in self._sshape}
        return initial.split(self.model, self._pshape, states, on_device)

    def reset(self) -> None:
        """Parameters drawn again from the seed, optimizer state to its initial values,
        step count and schedule back to zero."""
        self._wait_in_flight()
        # on the device, unless this Pyodide cannot wait for a new Program (no JSPI, outside
        # tgweb's worker): there the host's values, the same, are written as the Program comes
        on_device = self._engine.can_wait
        draws, fills, host = self._initial_sets(on_device)
        for n, p in host:
            self._engine.write("params", n, initial_values(p.init, p.shape, self.seed, n))
        if not on_device:
            for (kind, n), (shape, value) in fills.items():
                self._engine.write(kind, n, array.array("f", [value]) * prod(shape))
        elif draws or fills:
            if self._initial is None:  # made once: a reset draws with the seed it has then
                self._initial = initial.DeviceInit(self, draws, fills, self._planned)
                self._planned = None
            self._initial.draw(self.seed)
        for n, b in self.model.state_buffers():
            if n in self._bshape:
                self._engine.write("states", n, array.array("f", map(float, b.values)))
        self._applied = self._origin = self._calls = 0

    def params(self) -> dict[str, Any]:
        """Parameter arrays by name (copies)."""
        self._wait_in_flight()
        return {n: self._engine.read("params", n) for n in self._pshape}

    def states(self) -> dict[str, Any]:
        """Optimizer state arrays by name (e.g. 'fc.weight.exp_avg'); copies."""
        self._wait_in_flight()
        return {n: self._engine.read("states", n) for n in self._sshape}

    def buffers(self) -> dict[str, Any]:
        """The module buffers the step updates (BatchNorm's 'bn.running_mean', ...) by name;
        copies. A tgweb.torch module takes them back with load_state_dict, as params()."""
        self._wait_in_flight()
        return {n: self._engine.read("states", n) for n in self._bshape}

    @property
    def calls(self) -> int:
        """step() calls so far, applied or not: the position of the random stream."""
        return self._calls

    def load_params(self, d: dict[str, Any]) -> None:
        """Set every parameter; strict (every name, exact shapes, finite values). On error
        nothing changes."""
        self._wait_in_flight()
        self._write(self._checked("params", d, self._pshape, "load_params", "parameter"))

    def check_params(self, d: dict[str, Any], what: str = "check_params") -> None:
        """Raise InputError (naming `what`) where load_params(d) would: a missing or extra
        name, a wrong shape, a value that is not finite. Changes nothing: for a caller that
        must know every part of a change is good before it writes any."""
        self._checked("params", d, self._pshape, what, "parameter")

    def load_states(self, d: dict[str, Any], steps: int | None = None) -> None:
        """Set every optimizer state (strict, finite), and optionally the applied-step
        count. On error nothing changes."""
        self._wait_in_flight()
        steps = _count(steps, "load_states: steps")
        new = self._checked("states", d, self._sshape, "load_states", "state")
        self._write(new)
        if steps is not None:
            self._applied = steps
            self._origin = min(self._origin, steps)

    def checkpoint(self) -> tuple[dict[str, Any], dict[str, str]]:
        """Everything the next step depends on, as (tensors, metadata) for
        tgweb.io.safetensors: the parameters and the module buffers the step updates by
        name, the optimizer state as "optimizer.<name>", and metadata (strings) with the
        applied steps, the step() calls (the random stream's position), the seed, and the
        learning-rate schedule in force with the step it started at. restore() takes it back exactly."""
        self._wait_in_flight()
        tensors = dict(self.params())
        tensors.update(self.buffers())
        tensors.update({STATE_PREFIX + k: v for k, v in self.states().items()})
        meta = {
            "format": "tgweb",
            "steps": str(self._applied),
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
        self._wait_in_flight()
        if not isinstance(tensors, dict):
            raise InputError(f"restore: expected a dict of name -> array, got {type(tensors).__name__}")
        meta = dict(metadata or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            raise InputError("restore: metadata must map strings to strings")
        params = {k: v for k, v in tensors.items() if not str(k).startswith(STATE_PREFIX)}
        buffers = {k: params.pop(k) for k in self._bshape if k in params}
        states = {k[len(STATE_PREFIX) :]: v for k, v in tensors.items() if str(k).startswith(STATE_PREFIX)}
        new_p = self._checked("params", params, self._pshape, "restore", "parameter")
        new_p.update(self._checked("states", buffers, self._bshape, "restore", "buffer"))
        if states or not self._sshape:
            new_s = self._checked("states", states, self._sshape, "restore", "state")
            steps = _meta_int(meta, "steps", 0)
        else:
            new_s = {
                n: ("states", array.array("f", [t.attrs["init"]]) * prod(t.shape), None)
                for n, t in self.graph.states.items()
                if n in self._sshape
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
        self._applied, self._calls, self._schedule, self._origin = steps, calls, schedule, origin
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
        self._wait_in_flight()
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
        self._origin = self._applied

    # ---------------------------------------------------------------- steps

    def step(self, **batch) -> StepResult:
        """One training step on the batch (every input by name).

        Pipelined: the step is sent to the GPU and its StepResult returned at once; its
        loss and flags are read back while the caller goes on, and up to DEPTH (8) more
        steps go out before step() waits for the oldest. The applied/skipped outcome
        stays exact: each step carries the optimizer scalars (t, lr) for every number of
        the unread steps before it that may turn out applied, and the GPU picks by the
        flags those steps computed (tgweb.pipeline). Reading a field of a result waits
        for that step; trainer.steps, lr, params(), checkpoint() and the other methods
        wait for every step in flight first. An error of a step (a lost device) surfaces
        when it is read back: at the latest DEPTH steps later, or at the next call that
        waits. With recover_every set, every step is read back before step() returns."""
        jsbridge.check("trainer.step()", _STEP_ASYNC, for_step=True)  # before anything changes
        data = check_inputs(self.graph.inputs, batch, "step", self._bounds)
        try:
            sets = self._in_flight.outcome_sets(self._host_scalars, self._applied)
        except InputError:
            if not self._in_flight.unread:
                raise
            self._wait_in_flight()  # an lr only some outcomes give: decide exactly
            return self.step(**batch)
        scalars = self._step_scalars([sc for sc, _ in sets], seed_word(self.seed, self._calls))
        self._calls += 1
        caps = list(self.graph.captures)
        read = [("outputs", "loss"), ("outputs", "ok"), ("outputs", "grad_norm")]
        try:
            pending = self._engine.submit(data, scalars, read + [("captures", n) for n in caps])
        except DeviceLost as e:
            if self._host_copy is None:
                raise
            return self._recover(e)
        result = StepResult(None, None, None, None, None, None, None)
        lrs = [lr for _, lr in sets]
        self._in_flight.send(result, lambda j: self._read_back(result, pending(), caps, lrs[j]))
        if self.recover_every:  # a lost device must be seen at the step it hit
            try:
                wait(result)
            except DeviceLost as e:
                if self._host_copy is None:
                    raise
                return self._recover(e)
        return result

    async def step_async(self, **batch) -> StepResult:
        """step() without blocking, for a Pyodide that cannot wait for the GPU inside a
        synchronous call (no JSPI; tgweb.jsbridge): first awaits what step() would wait for
        (the Program's set-up, the oldest of DEPTH steps in flight). Anywhere else the same
        as step()."""
        await jsbridge.settle(for_step=True)
        return self.step(**batch)

    def _step_scalars(self, outcomes: list[dict], seed: int) -> dict:
        """The Program's host scalars for a step (tgweb.pipeline.step_scalars)."""
        return step_scalars(outcomes, self._in_flight.applied_read, seed, self.graph.scalars)

    def _host_scalars(self, applied: int) -> tuple[dict, float]:
        """The optimizer scalars and lr of a step that follows `applied` applied steps
        (remembered by (applied, lr, the optimizer's host_state): a pipelined step asks for
        up to DEPTH + 1 of them, and the lr may follow state of its own, as a torch
        optimizer's param_groups or lr_scheduler do)."""
        at = applied - self._origin
        lr = _checked_lr(self._schedule(at), self._schedule, at)
        key = (applied, lr, self.optimizer.host_state())
        hit = self._memo.get(key)
        if hit is None:
            scalars = _checked_scalars(self.optimizer, applied + 1, lr)
            if len(self._memo) > 4 * DEPTH:
                self._memo = {k: v for k, v in self._memo.items() if k[0] >= self._applied}
            hit = self._memo[key] = (scalars, lr)
        return hit

    def _wait_in_flight(self) -> None:
        """Wait for every step in flight (their results then hold their values)."""
        if self._in_flight.unread:
            jsbridge.check("this call", _CALL_ASYNC)
        self._in_flight.wait_all()

    def _read_back(self, r: StepResult, got: dict, caps: list, lr: float) -> bool:
        """Fill step r's result from what it read back (got), given the lr it used, and
        count it if it was applied; returns whether it was."""
        loss = float(_first(got[("outputs", "loss")]))
        ok = bool(_first(got[("outputs", "ok")]))
        norm = float(_first(got[("outputs", "grad_norm")]))
        reason = None
        if ok:
            self._applied += 1
            if self.recover_every and self._applied % self.recover_every == 0:
                self.keep_host_copy()
        elif not math.isfinite(loss):
            reason = f"non-finite loss ({loss}); step skipped, parameters unchanged"
        elif not math.isfinite(norm):
            reason = f"non-finite gradient (global norm {norm}); step skipped, parameters unchanged"
        else:
            reason = (
                f"non-finite update (a new parameter or optimizer state could overflow f32 at "
                f"lr {lr:.6g}, global gradient norm {norm:.6g}); step skipped, parameters unchanged"
            )
        r._loss, r._ok, r._reason, r._grad_norm, r._step, r._lr = loss, ok, reason, norm, self._applied, lr
        r._captures = {n: got[("captures", n)] for n in caps}
        return ok

    def keep_host_copy(self) -> None:
        """With recover_every set, take the host copy a lost device resumes from now
        (compile takes the first; step() one every recover_every applied steps)."""
        if self.recover_every:
            self._host_copy = self.checkpoint()

    def _recover(self, e: Exception) -> StepResult:
        """Continue on a new device from the last host copy (the step that failed, and
        those since the copy, are lost). Inference programs attached before stay on
        the old device: attach them again."""
        tensors, meta = self._host_copy
        lost = self._applied - int(meta["steps"])
        self._in_flight.lost()  # steps sent to the lost device: gone with it
        self._engine = make_engine(self.graph, self._program, self.backend, self.precision)
        self._initial = None  # it shared the lost device's buffers: made again when needed
        self.restore(tensors, meta)
        reason = (
            f"{e}; training continues on a new device from step {self._applied} "
            f"({lost} applied step(s) since the last host copy lost)"
        )
        nan = float("nan")
        return StepResult(nan, False, reason, {}, nan, self.lr, self._applied)

    def attach(self, forward_fn: Callable, inputs: dict[str, Any]) -> Inference | FreeInference:
        """An inference program for forward_fn(model, **inputs) that shares this trainer's
        parameters (it sees every update). An axis given as None is free: each new size
        compiles once, and the FreeInference.KEEP most recently used sizes stay compiled."""
        if any(d is None for spec in inputs.values() for d in spec_shape(spec)):
            inf = FreeInference(self, forward_fn, inputs)
        else:
            inf = Inference(self, forward_fn, inputs)
        self._attached.append(inf)  # close() frees it too
        return inf

    def close(self) -> None:
        """Free the GPU buffers and pipelines of this trainer and of the inference programs
        attached to it. Afterwards every call on them raises; closing twice is harmless."""
        try:
            self._wait_in_flight()
        except Exception:  # a step that failed in flight: closing is still wanted
            pass
        attached, self._attached = self._attached, []
        for inf in attached:
            inf.close()
        if self._initial is not None:
            self._initial.close()
            self._initial = None
        self._engine.close()
        self._engine = Closed("this trainer was closed (trainer.close()); compile a new one")

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def memory_report(self) -> dict:
        """Planned GPU bytes by buffer kind, the total with and without pooling of
        intermediates, and the peak of live bytes (Program.meta["memory"])."""
        return dict(self.program.meta.get("memory", {}))

    def memory_text(self) -> str:
        """memory_report() for people: bytes by kind, and at the peak of live
        intermediates the largest ones with the op and the line of yours that made each."""
        return memory_text(self.memory_report())


def _checked_lr(lr: Any, schedule: Schedule, at: int) -> float:
    """InputError (nothing run, nothing changed) when the schedule's lr is not a finite f32 >= 0."""
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 <= lr <= F32_MAX:
        raise InputError(
            f"step: the learning rate schedule {schedule!r} gave lr {lr!r} at t={at}; "
            f"it must be a finite number in [0, {F32_MAX:.7g}]; nothing changed"
        )
    return lr


def _checked_scalars(opt: Optimizer, t: int, lr: float) -> dict:
    """The optimizer's host scalars for the t-th applied step; InputError (nothing run,
    nothing changed) when a scalar derived from lr does not fit f32."""
    scalars = opt.host_scalars(t, lr)
    for k, v in scalars.items():
        if not abs(v) <= F32_MAX:
            raise InputError(f"step: {k} = {v!r} (from lr {lr!r}) does not fit f32; nothing changed")
    return scalars


def _first(x):
    return x.reshape(-1)[0] if hasattr(x, "reshape") else (x.data[0] if hasattr(x, "data") else x[0])


def first_nonfinite(data: array.array) -> int | None:
    """The flat index of the first NaN or infinity in f32 data, or None. One pass outside
    the Python loop: web/bulk.mjs in Pyodide, else sum() (finite f32 values cannot
    add up past a double's range), so only data that holds one is walked value by value."""
    js = getattr(jsbridge.made(), "bulk", None)
    if js is not None:
        from pyodide.ffi import to_js

        i = js.firstNonfinite(to_js(memoryview(data)))
        return None if i < 0 else i
    if math.isfinite(sum(data)):
        return None
    return next(i for i, v in enumerate(data) if not math.isfinite(v))
