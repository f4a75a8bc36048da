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
pipelined steps (tgweb.pipeline), plus "seed" (a u32 word) when a random op asks for
it. The optimizer's step counter and the schedule advance only on applied steps.

Backends: "reference" runs the graph with the NumPy interpreter
(tgweb.backends.reference), optionally in float64 (precision="float64"), and
writes the updates back on the host. For "native" (wgpu-py) and "browser" (gpu.mjs
through Pyodide), compile() lowers the graph to a Program (tgweb.lower) for the
backend's device, which a tgweb.backends.base.Runtime runs. The default is "browser"
under Pyodide, else "native" when tgweb.backends.native.available() says a GPU
adapter exists, else "reference". The Trainer (tgweb.trainer) holds the state and
runs the steps.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable

from . import ops, progcache
from .backends import chosen_reason, kernel_asker, lowering_for, planned, require, reserver
from .grad import append_grad
from .ir import PRECISIONS, REGISTRY, Graph, Tensor, gc_paused, root, tracing, user_site
from .lower import lower
from .nn.module import Module
from .ops.half import copy_early
from .optim import clip as _clip
from .optim.optimizers import Optimizer, ParamInfo
from .optim.optimizers import from_spec as _optimizer_from_spec
from .pipeline import declare_scalars
from .step_data import index_bounds
from .trace import scalar_loss, trace
from .trainer import Trainer

BACKENDS = ("reference", "native", "browser")
_NO_DECAY_INITS = ("zeros", "ones", "constant")


def default_backend() -> str:
    if sys.platform == "emscripten" or planned.active():  # planned: as the browser would
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


def _backend(asked: str | None) -> str:
    """The backend compile runs on: the one asked for, else the default; a missing NumPy
    or wgpu-py is said (what to install, why that backend) before anything is traced."""
    backend = asked or default_backend()
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    require(backend, "" if asked else chosen_reason)
    return backend


@gc_paused
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
    cache_key: str | None = None,
    max_memory: int | float | None = None,
) -> "Trainer":
    """Trace loss_fn(model, **inputs), append gradients and the optimizer update, and
    return a Trainer.

    inputs: name -> shape tuple (f32) or (shape, dtype), e.g. ((128, 8), "i32").
    optimizer: a tg.optim optimizer, or plain data {"name": "adamw", "lr": ..., "clip": ...}.
    clip_grad_norm: clip the global L2 norm of all gradients to this value.
    normalize_grads: True, a glob pattern, a list of patterns or a callable name -> bool:
      divide those parameters' gradients by their own L2 norm (after clipping).
    Parameters start from values drawn from `seed` (as reset() does); load others with
    Trainer.load_params. precision: "float32"; "mixed" (matmul operands and the activations
      the backward pass reads stored as f16, f32 everywhere else, dynamic loss scaling:
      tgweb.ops.half, loss_scaling below; GPU backends need the adapter feature
      shader-f16, and without it compile raises PrecisionError naming it); "float64" (the
      reference backend only).
    recover_every: keep a host copy of the whole state every that many applied steps;
      when the GPU device is lost, step() continues on a new device from that copy
      (at most that many steps lost) and says so in its result. None: a lost device
      raises backends.base.DeviceLost.
    cache_key: the code that builds this trainer (its source text, say): the compiled
      Program is cached under it (tgweb.progcache; None: the key of progcache.keyed()
      around this call, if any), and a later compile of the same code, tgweb and adapter
      class skips tracing and lowering.
    max_memory: the most bytes the step's GPU buffers may hold together. A plan over it
      recomputes values in the backward pass instead of keeping them from the forward
      (matmul products included; the cheapest arithmetic per byte freed first; the same
      values bit for bit), and compile raises TraceError, saying what it tried, when
      that is not enough. Trainer.memory_text() lists what was recomputed. None: no bound.
    """
    opt, clip_grad_norm, which, backend = _checked(
        model, inputs, optimizer, clip_grad_norm, normalize_grads, backend, precision, seed
    )
    _check_limits(recover_every, max_memory)
    device = lowering_for(backend)
    if precision == "mixed" and device is not None:
        _check_f16(device["target"], backend)
    budget = None if max_memory is None else int(max_memory)
    options = {"optimizer": opt, "inputs": inputs, "loss_fn": loss_fn, "clip": clip_grad_norm}
    options.update(normalize=normalize_grads, backend=backend, precision=precision, max_memory=budget)
    cache = progcache.Lookup.start(cache_key, device, model, options)
    found = cache.load(device["target"]) if cache is not None else None
    if found is not None:
        graph, program = found
        bounds = graph.bounds
    else:
        graph = build_training_graph(model, loss_fn, inputs, opt, clip_grad_norm, which, precision)
        program, bounds = _planned(graph, device, budget, backend)
        if cache is not None:
            cache.save(graph, bounds, program)
    key = cache.key if cache is not None else None
    trainer = Trainer(
        model, graph, program, opt, backend, seed, precision, clip_grad_norm, bounds, key, fresh=found is None
    )
    trainer.recover_every = recover_every
    trainer.keep_host_copy()
    return trainer


def _checked(model, inputs, optimizer, clip_grad_norm, normalize_grads, backend, precision, seed):
    """compile's arguments checked, each error naming the argument: (the optimizer,
    the clipping norm (given, or the optimizer spec's), the parameters whose gradients
    are normalized (a name filter or None), the backend)."""
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
    backend = _backend(backend)
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "float64" and backend != "reference":
        raise ValueError(f"precision={precision!r} is only available on the reference backend")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r}")
    return opt, clip_grad_norm, which, backend


def _check_limits(recover_every, max_memory) -> None:
    if recover_every is not None and (
        isinstance(recover_every, bool) or not isinstance(recover_every, int) or recover_every < 1
    ):
        raise ValueError(f"recover_every must be an int >= 1 or None, got {recover_every!r}")
    if max_memory is not None and (
        isinstance(max_memory, bool) or not isinstance(max_memory, (int, float)) or not 0 < max_memory < 2**63
    ):
        raise ValueError(f"max_memory must be a number of bytes > 0 or None, got {max_memory!r}")


def _planned(graph: Graph, device: dict | None, budget: int | None, backend: str):
    """(the Program of a new training graph, or None, and its inputs' index bounds): the
    reference backend runs the graph itself, and plans only to hold a budget to account.
    The native device creates the buffers while the kernels are emitted (reserver); the
    browser's compiles each kernel's pipeline as it is emitted (kernel_asker)."""
    plans = device is not None or budget is not None
    if not plans:
        return None, index_bounds(graph)
    reserve, cancel = reserver(backend) if device is not None else (None, None)
    ask = kernel_asker(backend)  # None but in the browser's worker
    try:
        program = lower(graph, name="step", max_memory=budget, reserve=reserve, ask=ask, **(device or {}))
    except BaseException:
        if cancel is not None:
            cancel()
        raise
    return program, index_bounds(graph)


class PrecisionError(ValueError):
    """precision="mixed" asked of a device that cannot store f16 values."""


def _check_f16(target, backend: str) -> None:
    """Mixed precision runs f16 kernels or nothing: never silently in f32."""
    if not target.has("shader-f16"):
        adapter = target.description or target.vendor or "this adapter"
        raise PrecisionError(
            f"precision='mixed' needs the WebGPU feature 'shader-f16', which the {backend} "
            f"backend's device ({adapter}) does not have; compile with precision='float32', or "
            "use an adapter that offers it (in Chromium on NVIDIA under Linux: launch with "
            "--enable-dawn-features=vulkan_enable_f16_on_nvidia)"
        )


# dynamic loss scaling (precision="mixed"), PyTorch GradScaler's defaults
SCALE_INIT = 2.0**16
SCALE_GROWTH_INTERVAL = 2000  # clean steps in a row before the scale doubles
SCALE_STATES = ("loss_scale", "loss_scale_clean_steps")


def loss_scaling(graph: Graph, ok: Tensor) -> None:
    """The loss scale's next value, whatever the step did: halved after a step that
    overflowed (which changed nothing else), doubled after SCALE_GROWTH_INTERVAL clean
    steps in a row. Both are trainer state, so checkpoints carry them."""
    scale, clean = (graph.states[n] for n in SCALE_STATES)
    grown = clean + 1.0
    grow = grown >= float(SCALE_GROWTH_INTERVAL)
    graph.updates[SCALE_STATES[0]] = ops.where(ok, ops.where(grow, scale * 2.0, scale), scale * 0.5)
    graph.updates[SCALE_STATES[1]] = ops.where(ok, ops.where(grow, 0.0, grown), 0.0)


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
    precision: str = "float32",
) -> Graph:
    """The one graph a training step runs: forward, loss, gradients, checks, update.
    Mixed precision back-propagates loss x scale (the state loss_scale) and divides the
    gradients by it again before anything reads them."""
    site = user_site()
    graph = Graph(precision=precision)
    if precision == "mixed":  # the activations' f16 copies, for the backward (ops/half.py)
        graph.on_add = copy_early
    graph, out = trace(loss_fn, model, inputs, graph)
    graph.on_add = None
    buffers = dict(graph.updates)  # the forward's own updates (module buffers), applied with the step
    loss = scalar_loss(out)
    names = list(graph.params)
    pobj = dict(model.named_parameters())
    scale = None
    if precision == "mixed":
        with graph.site_override(site):
            scale, _ = (graph.state(n, (), init) for n, init in zip(SCALE_STATES, (SCALE_INIT, 0.0)))
    grads = append_grad(graph, loss, [graph.params[n] for n in names], seed=scale)
    with tracing(graph), graph.site_override(site):
        gs = {n: grads[graph.params[n].id] for n in names}
        if scale is not None:
            inv = 1.0 / scale
            gs = {n: g * inv for n, g in gs.items()}
        gs = _owned(gs)
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
        for n, v in (*new["states"].items(), *buffers.items()):
            graph.updates[n] = ops.where(ok, v, graph.states[n])
        if scale is not None:
            loss_scaling(graph, ok)
    graph.outputs["loss"] = loss
    graph.outputs["ok"] = ok
    graph.outputs["grad_norm"] = norm
    declare_scalars(graph)  # pipelined steps (tgweb.pipeline)
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
