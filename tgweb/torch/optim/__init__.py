"""torch.optim over tgweb's optimizers (graph transformations): PyTorch's parameter
groups, each with its own lr, weight_decay and other settings, and PyTorch's rule that
every parameter passed is decayed unless its group says otherwise. A parameter in no
group is not updated. Hand the optimizer to tg.compile."""

from __future__ import annotations

from ... import optim as _core
from ...arrays import F32_MAX, InputError
from ...ir import TraceError
from ...optim import schedules as _s
from ...optim.optimizers import Optimizer as _CoreOptimizer
from ...optim.optimizers import ParamInfo
from ...pipeline import for_group
from . import lr_scheduler  # noqa: F401

_PER_GROUP = ("lr", "step_size")  # the host scalars proportional to a group's lr


class _Group:
    """The graph as group i's optimizer sees it: its own lr-derived host scalars."""

    def __init__(self, graph, i: int) -> None:
        self._graph, self._i = graph, i

    def scalar(self, name, dtype="f32"):
        return self._graph.scalar(for_group(name, self._i) if name in _PER_GROUP else name, dtype)

    def __getattr__(self, name):
        return getattr(self._graph, name)


class _GroupLR(_s.Schedule):
    """The trainer's lr: the largest param_groups[i]["lr"] when the step is sent, so that
    `g["lr"] = x` before trainer.step() counts, as before optimizer.step() in PyTorch
    (lr schedulers write the groups' lr too). Each group's own lr follows from its share
    of it (Optimizer.host_scalars). Not plain data: a checkpoint keeps the trainer's own."""

    kind = "torch_param_groups"

    def __init__(self, optimizer) -> None:
        self.optimizer = optimizer
        self.scheduler = None  # the last lr_scheduler made on it (to_torch_optimizer follows it)

    def __call__(self, t: int) -> float:
        return max(self.optimizer._lrs())

    def to_dict(self) -> dict:
        raise TypeError("the lr of torch parameter groups is not plain data")

    def __repr__(self) -> str:
        return f"param_groups lr {self.optimizer._lrs()}"


class Optimizer(_CoreOptimizer):
    core = _CoreOptimizer
    shared = ()  # settings every group must share (they feed host scalars)
    cacheable = False  # build() records the groups it was built with (tgweb.progcache)

    def __init__(self, params, **defaults) -> None:
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.defaults = defaults
        self.param_groups = [{**defaults, **g, "params": list(g["params"])} for g in groups]
        self.name = self.core.name
        self.lr = _GroupLR(self)
        self._built = None  # the groups' settings tg.compile built the update with
        self._built_params: list = []  # which parameters each group held then
        self._cores = self._make_cores()

    def _make_cores(self) -> list:
        """One core optimizer per group, from the groups' settings now."""
        for k in self.shared:
            if len({repr(g[k]) for g in self.param_groups}) > 1:
                raise ValueError(
                    f"{type(self).__name__}: parameter groups with different {k} are not supported: "
                    f"the step's {k}-derived scalars are computed on the host once for every group; "
                    f"give every group the same {k}"
                )
        self._lrs()
        return [self.core(**{k: g[k] for k in self.defaults}) for g in self.param_groups]

    def _settings(self) -> list[dict]:
        """What the compiled update holds fixed: every setting but the lr (a group's keys of
        the user's own, such as an lr_scale, are not settings)."""
        return [{k: g[k] for k in self.defaults if k != "lr"} for g in self.param_groups]

    def _membership(self) -> list[tuple[int, ...]]:
        """Which parameters each group holds (by identity)."""
        return [tuple(id(p) for p in g["params"]) for g in self.param_groups]

    def add_param_group(self, param_group: dict) -> None:
        """PyTorch's add_param_group: a group of more parameters, with the defaults for the
        settings it does not give. Before tg.compile only: the compiled step updates the
        parameters it was built with, so a later call is refused."""
        if self._built is not None:
            raise InputError(
                f"{type(self).__name__}.add_param_group after tg.compile: the compiled step updates "
                "the parameters it was built with; add the group before tg.compile, or compile "
                "again; nothing changed"
            )
        if not isinstance(param_group, dict) or "params" not in param_group:
            raise ValueError(f"{type(self).__name__}.add_param_group: expected a dict with 'params'")
        params = param_group["params"]
        params = [params] if hasattr(params, "shape") else list(params)
        self.param_groups.append({**self.defaults, **param_group, "params": params})
        self._cores = self._make_cores()

    def _lrs(self) -> list[float]:
        """Every group's lr; InputError naming the group when one is not a number >= 0."""
        out = []
        for i, g in enumerate(self.param_groups):
            v = g.get("lr")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= F32_MAX:
                raise InputError(
                    f'{type(self).__name__}.param_groups[{i}]["lr"] = {v!r}: '
                    "the lr must be a finite number >= 0; nothing changed"
                )
            out.append(float(v))
        return out

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
        self._cores = self._make_cores()
        self._built = self._settings()
        self._built_params = self._membership()
        out = {"params": {}, "states": {}}
        for i, core in enumerate(self._cores):
            infos = [ParamInfo(p.name, p.value, p.grad, True) for p in params if by_name.get(p.name) == i]
            if infos:
                res = core.build(_Group(graph, i), infos)
                out["params"].update(res["params"])
                out["states"].update(res["states"])
        return out

    @staticmethod
    def shares(lrs: list[float]) -> tuple[float, list[float]]:
        """The largest of the groups' lrs, and each one over it (all 0 when it is 0)."""
        top = max(lrs)
        return top, [v / top if top else 0.0 for v in lrs]

    def host_state(self) -> tuple:
        """The groups' lrs, after checking that no other setting changed since compiling."""
        if self._built is not None:
            if self._membership() != self._built_params:
                raise InputError(
                    f"{type(self).__name__}.param_groups changed after tg.compile (a group added or "
                    "removed, or its 'params' list changed): the compiled step updates the parameters "
                    "it was built with; set the groups up before tg.compile, or compile again; "
                    "nothing changed"
                )
            for i, (was, now) in enumerate(zip(self._built, self._settings())):
                for k in was:
                    if repr(was[k]) != repr(now[k]):
                        raise InputError(
                            f'{type(self).__name__}.param_groups[{i}]["{k}"] changed from '
                            f"{was[k]!r} to {now[k]!r} after tg.compile: the compiled update "
                            f'holds it fixed (only "lr" may change between steps); set it before '
                            "tg.compile, or compile again; nothing changed"
                        )
        return tuple(self._lrs())

    def host_scalars(self, t, lr):
        """Group 0's scalars under their plain names, each other group's lr-derived ones
        under its own (tgweb.pipeline.for_group): lr times the group's share."""
        out = {}
        for i, (core, share) in enumerate(zip(self._cores, self.shares(self._lrs())[1])):
            s = core.host_scalars(t, lr * share)
            out.update(s if i == 0 else {for_group(k, i): v for k, v in s.items() if k in _PER_GROUP})
        return out

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
