"""torch.optim over tgweb's optimizers (graph transformations): PyTorch's parameter
groups, each with its own lr, weight_decay and other settings, and PyTorch's rule that
every parameter passed is decayed unless its group says otherwise. A parameter in no
group is not updated. Hand the optimizer to tg.compile."""

from __future__ import annotations

from ... import optim as _core
from ...ir import TraceError
from ...optim.optimizers import Optimizer as _CoreOptimizer
from ...optim.optimizers import ParamInfo
from . import lr_scheduler  # noqa: F401


class _Scaled:
    """The graph as one group's optimizer sees it: the lr-carrying scalars times the
    group's lr over the base lr (the one host scalar the schedule drives)."""

    def __init__(self, graph, ratio: float) -> None:
        self._graph, self._ratio = graph, ratio

    def scalar(self, name, dtype="f32"):
        s = self._graph.scalar(name, dtype)
        return s * self._ratio if name in ("lr", "step_size") and self._ratio != 1.0 else s

    def __getattr__(self, name):
        return getattr(self._graph, name)


class Optimizer(_CoreOptimizer):
    core = _CoreOptimizer
    shared = ()  # settings every group must share (they feed host scalars)

    def __init__(self, params, **defaults) -> None:
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.defaults = defaults
        self.param_groups = [{**defaults, **g, "params": list(g["params"])} for g in groups]
        self.name = self.core.name
        base = max(g["lr"] for g in self.param_groups) or defaults["lr"] or 1.0
        self.lr = _core.schedules.from_spec(base)
        self._base = float(base)
        # each group's lr over the base, fixed now: schedulers rewrite g["lr"] as PyTorch's do
        self._ratios = [g["lr"] / self._base for g in self.param_groups]
        self._built = False  # tg.compile built the update: a scheduler made now would not count
        self._cores = [self.core(**{k: v for k, v in g.items() if k != "params"}) for g in self.param_groups]
        for k in self.shared:
            if len({repr(g[k]) for g in self.param_groups}) > 1:
                raise ValueError(
                    f"{type(self).__name__}: parameter groups with different {k} are not supported: "
                    f"the step's {k}-derived scalars are computed on the host once for every group; "
                    f"give every group the same {k}"
                )

    def build(self, graph, params):
        group_of = {
            id(p): i
            for i, g in enumerate(self.param_groups)
            for p in g["params"]
            if getattr(p, "requires_grad", True)
        }
        by_name = {
            t.attrs["name"]: group_of[pid] for pid, t in graph.param_tensors.items() if pid in group_of
        }
        out = {"params": {}, "states": {}}
        self._built = True
        for i, (ratio, core) in enumerate(zip(self._ratios, self._cores)):
            infos = [ParamInfo(p.name, p.value, p.grad, True) for p in params if by_name.get(p.name) == i]
            if infos:
                res = core.build(_Scaled(graph, ratio), infos)
                out["params"].update(res["params"])
                out["states"].update(res["states"])
        return out

    def host_scalars(self, t, lr):
        return self._cores[0].host_scalars(t, lr)

    def update_ok(self, graph, gmax):
        return None  # each group's own bound would need its lr; the gradients are checked

    def zero_grad(self, set_to_none: bool = True) -> None:
        pass

    def step(self, closure=None):
        raise TraceError(
            "optimizer.step() outside tg.compile: the update is part of the compiled step; "
            "pass this optimizer to tg.compile(model, loss_fn, inputs, optimizer=...) "
            "and call trainer.step(**batch)"
        )


def _optimizer(core, defaults, shared=()):
    def __init__(self, params, **kwargs):
        unknown = sorted(set(kwargs) - set(defaults))
        if unknown:
            raise TypeError(f"{core.__name__}: unsupported argument(s) {unknown}")
        Optimizer.__init__(self, params, **{**defaults, **kwargs})

    return type(core.__name__, (Optimizer,), {"core": core, "shared": shared, "__init__": __init__})


SGD = _optimizer(_core.SGD, {"lr": 1e-3, "momentum": 0.0, "nesterov": False, "weight_decay": 0.0})
Adam = _optimizer(
    _core.Adam, {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}, ("betas",)
)
AdamW = _optimizer(
    _core.AdamW, {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}, ("betas",)
)
Adadelta = _optimizer(_core.Adadelta, {"lr": 1.0, "rho": 0.9, "eps": 1e-6, "weight_decay": 0.0})
Adagrad = _optimizer(
    _core.Adagrad,
    {"lr": 0.01, "lr_decay": 0.0, "weight_decay": 0.0, "initial_accumulator_value": 0.0, "eps": 1e-10},
    ("lr_decay",),
)  # noqa: E501
RMSprop = _optimizer(
    _core.RMSprop,
    {"lr": 0.01, "alpha": 0.99, "eps": 1e-8, "weight_decay": 0.0, "momentum": 0.0, "centered": False},
)  # noqa: E501
