"""tg.to_torch: a tgweb model and function as a torch.nn.Module, for training under
PyTorch (CUDA, DistributedDataParallel) and coming back.

The function is traced once, as tg.compile traces it; the module's forward replays
the graph with one PyTorch operation per node, each from its op kind's registry
entry (OpDef.torch: fn(tc, args, node) -> tensor, given to register()). Its
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
from .trace import input_spec, trace


def to_torch(model, fn: Callable, inputs: dict[str, Any]):
    """A torch.nn.Module whose forward(**inputs) computes fn(model, **inputs) with
    PyTorch, holding the model's parameters (their current values: see load_params)
    under the same dotted names. inputs: name -> shape or (shape, dtype), as for
    tg.compile; an axis given as None is free (each new size is traced once)."""
    import torch

    from .nn.init import initial_values

    specs = {n: _spec(n, s) for n, s in inputs.items()}
    graph, out = _traced(
        fn, model, {n: (tuple(2 if d is None else d for d in sh), dt) for n, (sh, dt) in specs.items()}
    )
    module = _Module(graph, out)
    module._retrace = (fn, model, specs)
    for name, p in model.named_parameters():
        if name in graph.params:
            # the model's current values (loaded or initialised), else the seed-0 draw
            value = p.value if p.value is not None else initial_values(p.init, p.shape, 0, name)
            module.set(name, torch.tensor(_floats(value), dtype=torch.float32).reshape(p.shape))
    return module


def _spec(name: str, spec) -> tuple[tuple, str]:
    """(shape with None on free axes, dtype), checked as tg.compile checks its inputs."""
    pair = isinstance(spec, (tuple, list)) and len(spec) == 2 and isinstance(spec[1], str)
    raw = tuple(spec[0] if pair else spec)
    concrete = tuple(1 if d is None else d for d in raw)
    shape, dtype = input_spec(name, (concrete, spec[1]) if pair else concrete)
    return tuple(None if r is None else d for r, d in zip(raw, shape)), dtype


def _traced(fn, model, specs):
    graph, out = trace(fn, model, specs)
    missing = sorted(
        {t.kind for t in graph.tensors if REGISTRY[t.kind].role != "leaf" and REGISTRY[t.kind].torch is None}
    )
    if missing:
        raise TraceError(f"to_torch: op kinds with no PyTorch mapping yet: {missing}")
    if graph.states:  # module buffers as graph state (BatchNorm's running statistics)
        raise TraceError(
            f"to_torch: the forward reads module buffers {sorted(graph.states)} as graph state, "
            "which the module tg.to_torch makes does not carry yet; train such a model with "
            "tg.compile (trainer.buffers() holds them), or use PyTorch's own layer for it"
        )
    return graph, out


def _floats(value) -> list[float]:
    return list(value.reshape(-1)) if hasattr(value, "reshape") else list(value)


def _module_class():
    import torch

    class TgwebModule(torch.nn.Module):
        """A traced tgweb graph replayed with PyTorch operations."""

        def __init__(self, graph: Graph, out) -> None:
            super().__init__()
            self._graph, self._graphs = graph, {}
            # the PRNG seed scalar's value: random ops (dropout, randn) draw tgweb's numbers
            # for it; set a new one before each training step for fresh ones, as tgweb does
            self.rng_seed = 0
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
            """Set parameters from tgweb (Trainer.params(), safetensors): name -> array, in the
            module's float type (a float64 trainer's values reach a .double() module unrounded)."""
            own = dict(self.named_parameters())
            for name, value in params.items():
                t = self._graph.params[name]
                self.set(name, torch.tensor(_floats(value), dtype=own[name].dtype).reshape(t.shape))

        def _graph_for(self, inputs) -> tuple[Graph, Any]:
            """The graph traced for these inputs' sizes on the free (None) axes."""
            fn, model, specs = self._retrace
            shapes = {}
            for n, (sh, dt) in specs.items():
                if n not in inputs:
                    raise TraceError(f"forward: missing input {n!r} (inputs: {sorted(specs)})")
                got = tuple(inputs[n].shape)
                if len(got) != len(sh) or any(d is not None and d != e for d, e in zip(sh, got)):
                    raise TraceError(f"forward: input {n!r} has shape {got}, expected {sh}")
                shapes[n] = (got, dt)
            key = tuple(sorted((n, s) for n, (s, _) in shapes.items()))
            if key not in self._graphs:
                self._graphs[key] = _traced(fn, model, shapes)
            return self._graphs[key]

        def forward(self, **inputs):
            g, out = self._graph_for(inputs)
            first = next(self.parameters(), None)
            dev = first.device if first is not None else torch.device("cpu")
            # f32 tensors follow the module's float type (module.double() runs in float64)
            flt = first.dtype if first is not None else torch.float32
            tc = SimpleNamespace(torch=torch, F=torch.nn.functional, device=dev, float=flt)
            vals: dict[int, Any] = {}
            for n, t in g.inputs.items():
                vals[t.id] = torch.as_tensor(inputs[n], dtype=torch_dtype(tc, t.dtype), device=dev)
            params = dict(self.named_parameters())
            for n, t in g.params.items():
                vals[t.id] = params[n]
            for t in g.tensors:
                if t.id in vals or t.kind == "param":
                    continue
                if t.kind == "scalar":  # only the PRNG seed can appear in a forward graph
                    vals[t.id] = torch.tensor(self.rng_seed, dtype=torch.int32, device=dev)
                    continue
                vals[t.id] = REGISTRY[t.kind].torch(tc, [vals[i.id] for i in t.inputs], t)
            return _unpack(out, vals)

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


# the torch.optim class and the hyper-parameters (tgweb's attribute names are torch's)
# of each optimizer; weight_decay is set per group
_TORCH_OPTIMIZERS = {
    "sgd": ("SGD", ("momentum", "nesterov")),
    "adam": ("Adam", ("betas", "eps")),
    "adamw": ("AdamW", ("betas", "eps")),
    "adadelta": ("Adadelta", ("rho", "eps")),
    "adagrad": ("Adagrad", ("lr_decay", "eps", "initial_accumulator_value")),
    "rmsprop": ("RMSprop", ("alpha", "eps", "momentum", "centered")),
}


def to_torch_optimizer(trainer, module):
    """(optimizer, scheduler) for training `module` (from to_torch) under PyTorch as
    `trainer` trains: the same torch.optim optimizer and hyper-parameters (SGD, Adam,
    AdamW, Adadelta, Adagrad, RMSprop; tgweb's weight-decay rule as two parameter groups,
    a tgweb.torch optimizer's own parameter groups as they are), its state and step count
    loaded from the trainer, and a LambdaLR giving the trainer's schedule from its
    current step on (a tgweb.torch scheduler's from its current count). Call
    scheduler.step() after each optimizer.step() (or as that tgweb.torch scheduler was
    stepped). Gradient clipping (trainer.clip_grad_norm) is
    torch.nn.utils.clip_grad_norm_ before the step. load_from_torch brings the run back."""
    import torch

    opt, t = trainer.optimizer, trainer.steps
    if opt.name not in _TORCH_OPTIMIZERS:
        raise ValueError(f"to_torch_optimizer: no PyTorch optimizer for {opt.name!r}")
    cls, keys = _TORCH_OPTIMIZERS[opt.name]
    named = dict(module.named_parameters())
    groups = [
        {
            "params": [named[n] for n in names],
            **{k: getattr(core, k) for k in keys},
            "weight_decay": wd,
            "lr": r,
        }
        for names, core, wd, r in _groups(trainer, named)
        if names
    ]
    topt = getattr(torch.optim, cls)(groups)
    states = trainer.states()
    for n, p in named.items():
        st = {k.rsplit(".", 1)[1]: v for k, v in states.items() if k.rsplit(".", 1)[0] == n}
        if not st:
            continue
        state = {
            k: torch.tensor(_floats(v), dtype=p.dtype, device=p.device).reshape(p.shape)
            for k, v in st.items()
        }
        if opt.name != "sgd":
            state["step"] = torch.tensor(float(t))
        topt.state[p] = state
    return topt, torch.optim.lr_scheduler.LambdaLR(topt, _lr_from(trainer))


def _groups(trainer, named):
    """(parameter names, optimizer, weight decay, lr share) per PyTorch parameter group."""
    from .compile import decays

    opt = trainer.optimizer
    cores = getattr(opt, "_cores", None)
    if cores is None:  # a tgweb optimizer: tgweb's decay rule
        decay = {n for n, p in trainer.model.named_parameters() if n in named and decays(p)}
        wd = getattr(opt, "weight_decay", 0.0)
        return [
            ([n for n in named if n in decay], opt, wd, 1.0),
            ([n for n in named if n not in decay], opt, 0.0, 1.0),
        ]
    name_of = {id(p): n for n, p in trainer.model.named_parameters() if n in named}
    return [
        ([name_of[id(p)] for p in g["params"] if id(p) in name_of], core, core.weight_decay, r)
        for g, core, r in zip(opt.param_groups, cores, opt.shares(opt._lrs())[1])
    ]


def _host(t):
    """A PyTorch tensor as a NumPy array: float64 stays float64 (a float64 trainer takes it
    unrounded; a float32 one rounds it on loading), every other float type becomes float32."""
    import torch

    t = t.detach().cpu()
    return (t if t.dtype == torch.float64 else t.float()).numpy()


def _lr_from(trainer):
    """lr(k): the trainer's lr k steps on (k scheduler.step() calls on, for a tgweb.torch
    scheduler), as a LambdaLR factor of each group's lr share."""
    schedule, origin, t = trainer.schedule, trainer.schedule_origin, trainer.steps
    follow = getattr(schedule, "scheduler", None)
    if follow is not None:
        return lambda k: follow.schedule(follow.last_epoch + k)
    return lambda k: schedule(t + k - origin)


def load_from_torch(trainer, module, optimizer, scheduler) -> None:
    """Bring a run back from PyTorch: the module's parameters, the optimizer's state, and
    the step count (the trainer's, plus the scheduler's steps since to_torch_optimizer)
    into `trainer`. Everything is validated before anything changes."""
    names = {id(p): n for n, p in module.named_parameters()}
    states = {}
    for p, st in optimizer.state.items():
        for k, v in st.items():
            if k != "step":
                states[f"{names[id(p)]}.{k}"] = _host(v)
    params = {n: _host(p) for n, p in module.named_parameters()}
    trainer.check_params(params, "load_from_torch")  # before either write
    trainer.load_states(states, steps=trainer.steps + scheduler.last_epoch)
    trainer.load_params(params)
    follow = getattr(trainer.schedule, "scheduler", None)
    if follow is not None:  # a tgweb.torch scheduler goes on from where PyTorch's stopped
        follow.step(follow.last_epoch + scheduler.last_epoch)
