"""Inference programs: forward-only programs that share a Trainer's parameters
(Trainer.attach). Inference has fixed input shapes; FreeInference has free (None) axes
and compiles one Inference per size it meets. Both have run(**batch) and close()."""

from __future__ import annotations

import array
import math
from typing import Any, Callable

from . import progcache
from .arrays import InputError
from .backends import kernel_asker, lowering_for, make_engine
from .ir import Graph, Tensor, TraceError, current_graph
from .lower import lower
from .ops.random import seed_word
from .step_data import check_inputs, index_bounds
from .trace import trace


class RunResult:
    """What Inference.run returns: .output (an array, or a dict of arrays when the
    forward function returned a dict) and .captures; unpacks as (output, captures)."""

    __slots__ = ("output", "captures")

    def __init__(self, output, captures) -> None:
        self.output, self.captures = output, captures

    def __iter__(self):
        return iter((self.output, self.captures))


CLOSED = "this inference program was closed (its close(), or its trainer's); attach a new one"


class Closed:
    """Stands in for the engine of a closed trainer or inference program: any use says so."""

    def __init__(self, message: str = CLOSED) -> None:
        self.message = message

    def __getattr__(self, name):
        raise RuntimeError(self.message)

    def close(self) -> None:  # closing again is harmless
        pass


class Inference:
    """A forward-only program sharing a Trainer's parameters. run(**batch) -> RunResult.
    Its Program comes from tgweb.progcache when the attach call's entry is there (graph is
    then a progcache.Skeleton: the leaves; traced() gives the whole graph)."""

    def __init__(self, trainer, forward_fn: Callable, inputs: dict[str, Any]) -> None:
        self.trainer, self._fn, self._inputs = trainer, forward_fn, inputs
        device = lowering_for(trainer.backend)
        cache = progcache.Lookup.attach(trainer, forward_fn, inputs, device)
        found = cache.load(device["target"]) if cache is not None else None
        if found is not None:
            graph, program = found
            self._single, self._bounds = graph.extra["single"], graph.bounds
        else:
            graph = self.traced()
            self._bounds = index_bounds(graph)
            ask = kernel_asker(trainer.backend)  # None but in the browser's worker
            program = None if device is None else lower(graph, name="forward", ask=ask, **device)
            if cache is not None:
                cache.save(graph, self._bounds, program, single=self._single)
        self.graph = graph
        self._engine = make_engine(graph, program, trainer.backend, trainer.precision, share=trainer.engine)
        self.runs = 0  # run() calls: the position of its random stream
        self.reset_state()

    def traced(self) -> Graph:
        """The forward graph (traced now unless it already was); sets whether the function
        returned one tensor or a dict of them."""
        if isinstance(getattr(self, "graph", None), Graph):
            return self.graph
        # the trainer's precision: a mixed trainer's products read f16 copies here too
        graph, out = trace(
            self._fn, self.trainer.model, self._inputs, Graph(precision=self.trainer.graph.precision)
        )
        buffers = sorted(n for n in graph.updates if n not in own_states(graph))
        if buffers:
            raise TraceError(
                f"the forward function updates the module buffers {buffers} (a BatchNorm "
                "in training mode): an inference program only reads them; call model.eval() first"
            )
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
        return graph

    @property
    def program(self):
        return self._engine.program

    def run(self, **batch) -> RunResult:
        return self.submit(**batch)()

    def submit(self, **batch) -> Callable[[], RunResult]:
        """Send one run to the device and return at once: a function that waits for its
        RunResult. Runs, training steps and writes reach the device in the order sent, so
        several runs may be sent before any is read (a page's evaluation batches between
        training steps, a sampler's tokens), and a run sees the parameters of every
        training step sent before it."""
        data = check_inputs(self.graph.inputs, batch, "run", self._bounds)
        outs, caps = list(self.graph.outputs), list(self.graph.captures)
        scalars = {}
        if "seed" in self.graph.scalars:  # random ops (sampling): new numbers each run
            scalars["seed"] = seed_word(self.trainer.seed, self.runs, stream=2)
        self.runs += 1
        pending = self._engine.submit(
            data, scalars, [("outputs", n) for n in outs] + [("captures", n) for n in caps]
        )

        def wait() -> RunResult:
            got = pending()
            o = {n: got[("outputs", n)] for n in outs}
            return RunResult(o["output"] if self._single else o, {n: got[("captures", n)] for n in caps})

        return wait

    def reset_state(self) -> None:
        """Set the program's own state (declared with `state` while tracing: a sampler's
        key/value cache) back to zeros, as it starts."""
        for n in own_states(self.graph):
            shape = self.graph.states[n].shape
            self._engine.write("states", n, array.array("f", bytes(4 * math.prod(shape))))

    def close(self) -> None:
        """Free this program's GPU buffers and pipelines; afterwards run() raises. Closing
        twice is harmless."""
        self._engine.close()
        self._engine = Closed()


def state(name: str, shape) -> Tensor:
    """While tracing an attached forward function: an f32 tensor of `shape` that persists on
    the device from one run() to the next (zeros at first and after reset_state()); the run
    writes it with `assign`. A sampler keeps its keys and values here, so a token's run
    reads the earlier tokens' work instead of redoing it."""
    graph = current_graph()
    if graph is None:
        raise TraceError("inference.state is declared while tracing an attached forward function")
    if not isinstance(name, str) or not name.startswith(STATE_PREFIX):
        name = STATE_PREFIX + str(name)
    return graph.state(name, tuple(shape))


def assign(target: Tensor, value) -> None:
    """The run writes value (broadcast to target's shape) into target, a `state` tensor; a
    later run reads it. Reads of target in this run see the old value."""
    from . import ops
    from .ops.base import as_tensor

    name = target.attrs.get("name", "") if target.kind == "state" else ""
    if not name.startswith(STATE_PREFIX):
        raise TraceError(f"assign writes a tensor made by inference.state, got a {target.kind} tensor")
    value = ops.broadcast_to(as_tensor(value), target.shape)
    if value.dtype != "f32":
        raise TraceError(f"assign: state {name!r} holds f32 values, got {value.dtype}")
    target.graph.updates[name] = value


# an attached program's own states are named apart from the trainer's module buffers
# (dotted attribute paths, which never hold "@")
STATE_PREFIX = "@run."


def own_states(graph) -> list[str]:
    """The states an attached program declared itself (`state`), not the trainer's buffers."""
    return [n for n in graph.states if n.startswith(STATE_PREFIX)]


def spec_shape(spec) -> tuple:
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

    def __init__(self, trainer, forward_fn: Callable, inputs: dict[str, Any]) -> None:
        self.trainer, self._fn, self._specs = trainer, forward_fn, dict(inputs)
        self._compiled: dict[tuple, Inference] = {}
        self._closed = False

    def _inference_for(self, batch: dict) -> Inference:
        """The Inference of the batch's sizes (compiled now if it is not kept)."""
        concrete = {}
        for n, spec in self._specs.items():
            want = spec_shape(spec)
            if n not in batch:
                raise InputError(f"run: missing input(s) [{n!r}]")
            got = _shape_of(batch[n], n) if None in want else want
            if len(got) != len(want) or any(w is not None and w != g for w, g in zip(want, got)):
                raise InputError(f"run: input {n!r} has shape {got}, expected {want}")
            shape = tuple(got)
            concrete[n] = (shape, spec[1]) if spec_shape(spec) != tuple(spec) else shape
        key = tuple(sorted((n, c if isinstance(c[0], int) else c[0]) for n, c in concrete.items()))
        inf = self._compiled.pop(key, None) or Inference(self.trainer, self._fn, concrete)
        self._compiled[key] = inf  # most recently used last
        while len(self._compiled) > self.KEEP:
            self._compiled.pop(next(iter(self._compiled))).close()
        return inf

    def run(self, **batch) -> RunResult:
        if self._closed:
            raise RuntimeError(CLOSED)
        return self._inference_for(batch).run(**batch)

    def reset_state(self) -> None:
        """Inference.reset_state of every compiled size (each keeps its own state)."""
        for inf in self._compiled.values():
            inf.reset_state()

    def submit(self, **batch) -> Callable[[], RunResult]:
        """Inference.submit of the batch's size."""
        if self._closed:
            raise RuntimeError(CLOSED)
        return self._inference_for(batch).submit(**batch)

    def close(self) -> None:
        """Free every compiled size; afterwards run() raises. Closing twice is harmless."""
        for inf in self._compiled.values():
            inf.close()
        self._compiled = {}
        self._closed = True
