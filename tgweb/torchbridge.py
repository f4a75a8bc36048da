"""tg.to_torch: a tgweb model and function as a torch.nn.Module, for training under
PyTorch (CUDA, DistributedDataParallel) and coming back.

The function is traced once, as tg.compile traces it; the module's forward replays
the graph with one PyTorch operation per node, each from its op kind's registry
entry (OpDef.torch: fn(tc, args, node) -> tensor, set beside the kind). Its
parameters are the model's, under the same dotted names (so state_dict() keys
match tgweb's and safetensors files move both ways), and PyTorch's autograd
differentiates it. torch is imported only here, when asked for.

Bitwise: the forward of float32 models agrees with tgweb's reference backend to
rounding (different summation orders), not bit for bit; in-graph randomness
(dropout, rand, randn) draws from PyTorch's generator, not tgweb's counter hash.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

from .ir import REGISTRY, Graph, Tensor, TraceError
from .ops.elementwise import torch_dtype
from .trace import trace


def to_torch(model, fn: Callable, inputs: dict[str, Any]):
    """A torch.nn.Module whose forward(**inputs) computes fn(model, **inputs) with
    PyTorch, holding the model's parameters (current initial values: see
    load_params) under the same dotted names. inputs: name -> shape or
    (shape, dtype), as for tg.compile."""
    import torch

    from .nn.module import param_rng

    graph, out = trace(fn, model, inputs)
    missing = sorted(
        {t.kind for t in graph.tensors if REGISTRY[t.kind].role != "leaf" and REGISTRY[t.kind].torch is None}
    )
    if missing:
        raise TraceError(f"to_torch: op kinds with no PyTorch mapping yet: {missing}")
    module = _Module(graph, out)
    for name, p in model.named_parameters():
        if name in graph.params:
            value = p.init(p.shape, param_rng(0, name))
            module.set(name, torch.tensor(_floats(value), dtype=torch.float32).reshape(p.shape))
    return module


def _floats(value) -> list[float]:
    return list(value.reshape(-1)) if hasattr(value, "reshape") else list(value)


def _module_class():
    import torch

    class TgwebModule(torch.nn.Module):
        """A traced tgweb graph replayed with PyTorch operations."""

        def __init__(self, graph: Graph, out) -> None:
            super().__init__()
            self._graph, self._out = graph, out
            for name, t in graph.params.items():
                parent, leaf = self._parent(name)
                parent.register_parameter(leaf, torch.nn.Parameter(torch.zeros(t.shape)))

        def _parent(self, dotted: str):
            """The submodule holding a dotted name's last part (made as needed), so that
            state_dict() keys are tgweb's dotted names."""
            *path, leaf = dotted.split(".")
            m = self
            for part in path:
                if not hasattr(m, part):
                    m.add_module(part, torch.nn.Module())
                m = getattr(m, part)
            return m, leaf

        def set(self, name: str, value) -> None:
            parent, leaf = self._parent(name)
            with torch.no_grad():
                getattr(parent, leaf).copy_(value)

        def load_params(self, params: dict[str, Any]) -> None:
            """Set parameters from tgweb (Trainer.params(), safetensors): name -> array."""
            for name, value in params.items():
                t = self._graph.params[name]
                self.set(name, torch.tensor(_floats(value), dtype=torch.float32).reshape(t.shape))

        def forward(self, **inputs):
            g = self._graph
            first = next(self.parameters(), None)
            dev = first.device if first is not None else torch.device("cpu")
            # f32 tensors follow the module's float type (module.double() runs in float64)
            flt = first.dtype if first is not None else torch.float32
            tc = SimpleNamespace(torch=torch, F=torch.nn.functional, device=dev, float=flt)
            vals: dict[int, Any] = {}
            for n, t in g.inputs.items():
                if n not in inputs:
                    raise TraceError(f"forward: missing input {n!r}")
                vals[t.id] = torch.as_tensor(inputs[n], dtype=torch_dtype(tc, t.dtype), device=dev)
            params = dict(self.named_parameters())
            for n, t in g.params.items():
                vals[t.id] = params[n]
            for t in g.tensors:
                if t.id in vals or t.kind == "param":
                    continue
                if t.kind == "scalar":  # only the PRNG seed can appear in a forward graph
                    vals[t.id] = torch.zeros((), dtype=torch.int32, device=dev)
                    continue
                vals[t.id] = REGISTRY[t.kind].torch(tc, [vals[i.id] for i in t.inputs], t)
            return _unpack(self._out, vals)

    return TgwebModule


def _unpack(out, vals):
    if isinstance(out, Tensor):
        return vals[out.id]
    if isinstance(out, dict):
        return {k: _unpack(v, vals) for k, v in out.items()}
    if isinstance(out, (tuple, list)):
        return type(out)(_unpack(v, vals) for v in out)
    return out


def _Module(graph, out):  # noqa: N802 - builds the class once torch is importable
    return _module_class()(graph, out)
