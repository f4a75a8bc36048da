"""Tracing a user's function into a Graph, and value_and_grad for users and tests."""

from __future__ import annotations

from typing import Any, Callable

from .ir import DTYPES, Graph, Tensor, TensorOps, TraceError, dtype_name, tracing


def input_spec(name: str, spec: Any) -> tuple[tuple[int, ...], str]:
    """A shape tuple (f32) or a (shape, dtype) pair, checked."""
    if (
        isinstance(spec, (tuple, list))
        and len(spec) == 2
        and not isinstance(spec[1], (int, tuple, list))  # a dtype: "i32", "int32", numpy.int32, ...
        and isinstance(spec[0], (tuple, list))
    ):
        shape, dtype = tuple(spec[0]), spec[1]
    elif isinstance(spec, (tuple, list)):
        shape, dtype = tuple(spec), "f32"
    else:
        raise TraceError(f"input {name!r}: expected a shape tuple or a (shape, dtype) pair, got {spec!r}")
    dtype = dtype_name(dtype)
    if dtype not in DTYPES:
        raise TraceError(f"input {name!r}: dtype must be one of {DTYPES}, got {dtype!r}")
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape):
        raise TraceError(f"input {name!r}: shape must be a tuple of positive ints, got {shape!r}")
    return shape, dtype


def trace(fn: Callable, model, inputs: dict[str, Any], graph: Graph | None = None) -> tuple[Graph, Any]:
    """Run fn(model, **input tensors) while recording; returns (graph, fn's result as tensors).

    Every parameter of model gets a node first, so unused ones still exist (and get
    zero gradients); so does every buffer its forward updates (model.state_buffers()),
    as graph state under the buffer's dotted name."""
    graph = graph or Graph()
    with tracing(graph):
        if model is not None and not graph.params:
            for name, p in model.named_parameters():
                graph.param_tensors[id(p)] = graph.param(name, p.shape)
            for name, b in model.state_buffers():
                graph.buffer_tensors[id(b)] = graph.state(name, b.shape, buffer=True)
        feeds = {}
        for name, spec in inputs.items():
            shape, dtype = input_spec(name, spec)
            feeds[name] = graph.input(name, shape, dtype)
        out = fn(model, **feeds) if model is not None else fn(**feeds)
    return graph, _as_tensors(out)


def _as_tensors(out):
    if isinstance(out, TensorOps) and not isinstance(out, Tensor):
        return out._t()
    if isinstance(out, (tuple, list)):
        return type(out)(_as_tensors(o) for o in out)
    if isinstance(out, dict):
        return {k: _as_tensors(v) for k, v in out.items()}
    return out


def scalar_loss(out: Any) -> Tensor:
    if not isinstance(out, Tensor):
        raise TraceError(f"the loss function must return a tensor, got {type(out).__name__}")
    if out.shape != () or out.dtype != "f32":
        raise TraceError(
            f"the loss must be a float scalar, got {out.dtype} of shape {out.shape} "
            "(reduce it, e.g. with .mean())",
            out.site,
        )
    return out


def value_and_grad(loss_fn: Callable, model, *, precision: str = "float32", **inputs):
    """(loss, {parameter name: gradient array}) for loss_fn(model, **inputs), evaluated by the
    reference backend. Float arrays become f32 inputs, integer arrays i32."""
    from .backends import require

    require("reference", "tg.value_and_grad computes on the reference backend")
    import numpy as np

    from .backends.reference import Context, evaluate
    from .grad import append_grad

    arrays = {k: np.asarray(v) for k, v in inputs.items()}
    specs = {}
    for k, a in arrays.items():
        kind = {"f": "f32", "i": "i32", "u": "i32", "b": "bool"}.get(a.dtype.kind)
        if kind is None:
            raise TraceError(f"input {k!r}: unsupported dtype {a.dtype}")
        specs[k] = (tuple(a.shape), kind)
    graph, out = trace(loss_fn, model, specs)
    loss = scalar_loss(out)
    names = list(graph.params)
    grads = append_grad(graph, loss, [graph.params[n] for n in names])
    model.init_params(0, only_missing=True)
    feeds = {graph.inputs[k].id: arrays[k] for k in graph.inputs}
    params = dict(model.named_parameters())
    for n in names:
        feeds[graph.params[n].id] = np.frombuffer(params[n].value, np.float32).reshape(params[n].shape)
    for n, b in model.state_buffers():
        feeds[graph.states[n].id] = np.array(b.values, np.float32).reshape(b.shape)
    ctx = Context(precision)
    ctx.scalars.setdefault("seed", ctx.seed)  # stochastic ops (dropout, rand) read it
    vals = evaluate(graph, [loss] + [grads[graph.params[n].id] for n in names], feeds, ctx)
    return vals[0][()], dict(zip(names, vals[1:]))
