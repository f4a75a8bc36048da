"""torch.nn.Module over tgweb.nn.Module: buffers, Parameter(data), the module tree
(apply, modules, children, train/eval), state_dict with buffers and tied names.
Parameters get their values when made (PyTorch's eager initialisation, from the
generator torch.manual_seed seeds); tg.compile starts from those values."""

from __future__ import annotations

import array
from typing import Any

from ... import nn as _nn
from ...arrays import TYPECODE, InputError, from_user, to_user
from ...ir import TraceError, current_graph, user_site
from ...nn import init as _init
from .._host import GENERATOR, HostTensor, cast_values, flatten_data


class _Current(_init.Init):
    """The parameter's own current values: tg.compile and Trainer.reset start from them."""

    kind = "fixed"

    def __init__(self, p: "Parameter") -> None:
        self.p = p

    def __call__(self, shape, rng):
        return array.array("f", self.p.value)

    def __repr__(self) -> str:
        return "current values"


class Parameter(_nn.Parameter):
    """nn.Parameter(data, requires_grad=True): a trainable f32 tensor with data's values."""

    def __init__(self, data=None, requires_grad: bool = True) -> None:
        if data is None:
            raise TypeError("Parameter needs data, e.g. nn.Parameter(torch.zeros(n))")
        values, shape = flatten_data(data)
        super().__init__(shape, _Current(self), True)
        self.value = array.array("f", cast_values(values, "f32"))
        self.requires_grad = bool(requires_grad)

    @property
    def data(self) -> "Parameter":
        return self

    def __repr__(self) -> str:
        return f"Parameter(shape={self.shape})"


class Module(_nn.Module):
    """torch.nn.Module: subclasses call super().__init__() and define forward."""

    def __init__(self) -> None:
        vars(self).setdefault("_buffers", {})
        vars(self).setdefault("_transient", set())
        vars(self).setdefault("training", True)

    def __getattr__(self, name: str):  # only reached when normal lookup fails
        buffers = vars(self).get("_buffers", {})
        if name in buffers:
            return buffers[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def param(self, shape, init=None, decay=None) -> Parameter:
        """A parameter drawn now from init (the tgweb layers' constructors call this)."""
        if current_graph() is not None:
            raise TraceError(
                "a parameter was created inside forward; create parameters in __init__", user_site()
            )
        p = Parameter(HostTensor([0.0], (1,), "f32", None))
        p.shape = tuple(shape) if not isinstance(shape, int) else (shape,)
        p.value = (init or _init.normal(1.0))(p.shape, GENERATOR)
        return p

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        Module.__init__(self)
        if tensor is not None and not isinstance(tensor, HostTensor):
            values, shape = flatten_data(tensor)
            tensor = HostTensor(values, shape, "f32", None)
        self._buffers[name] = tensor
        (self._transient.discard if persistent else self._transient.add)(name)

    def register_state(self, name: str, tensor) -> None:
        """A persistent buffer that the forward updates (update_buffer): graph state that
        the step writes, kept by the Trainer under its dotted name (Trainer.buffers())."""
        self.register_buffer(name, tensor)
        vars(self).setdefault("_updated", set()).add(name)

    def state_buffers(self):
        out = []
        for m_name, m in self.named_modules():
            pre, updated = f"{m_name}." if m_name else "", vars(m).get("_updated", ())
            out += [(pre + k, b) for k, b in vars(m).get("_buffers", {}).items() if k in updated]
        return out

    def register_parameter(self, name: str, param) -> None:
        setattr(self, name, param)

    def add_module(self, name: str, module) -> None:
        setattr(self, name, module)

    def named_children(self):
        return [(k, v) for k, v in vars(self).items() if isinstance(v, _nn.Module)]

    def children(self):
        return [m for _, m in self.named_children()]

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        memo = set() if memo is None else memo
        if remove_duplicate and id(self) in memo:
            return []
        memo.add(id(self))
        out = [(prefix, self)]
        for k, m in self.named_children():
            sub = f"{prefix}.{k}" if prefix else k
            if isinstance(m, Module):
                out += m.named_modules(memo, sub, remove_duplicate)
            elif not (remove_duplicate and id(m) in memo):
                memo.add(id(m))
                out.append((sub, m))
        return out

    def modules(self):
        return [m for _, m in self.named_modules()]

    def apply(self, fn) -> "Module":
        for m in self.children():
            m.apply(fn) if isinstance(m, Module) else fn(m)
        fn(self)
        return self

    def train(self, mode: bool = True) -> "Module":
        for m in self.modules():
            m.training = bool(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def _own_entries(self, kind):
        for m_name, m in self.named_modules(remove_duplicate=False):
            pre = f"{m_name}." if m_name else ""
            if kind == "params":
                yield from ((pre + k, v) for k, v in vars(m).items() if isinstance(v, _nn.Parameter))
            else:
                bufs = vars(m).get("_buffers", {})
                skip = vars(m).get("_transient", set())
                yield from ((pre + k, v) for k, v in bufs.items() if v is not None and k not in skip)

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        if remove_duplicate:
            out = super().named_parameters()
        else:
            out = list(self._own_entries("params"))
        return [(f"{prefix}.{n}" if prefix else n, p) for n, p in out]

    def named_buffers(self):
        return list(self._own_entries("buffers"))

    def buffers(self):
        return [b for _, b in self.named_buffers()]

    def state_dict(self) -> dict[str, Any]:
        """Parameters (tied ones under every name) and persistent buffers, as PyTorch."""
        out = {n: to_user(p.value, p.shape, "f32") for n, p in self._own_entries("params")}
        for n, b in self.named_buffers():
            out[n] = to_user(array.array(TYPECODE[b.dtype], b.values), b.shape, b.dtype)
        return out

    def load_state_dict(self, d: dict[str, Any], strict: bool = True):
        """Set parameters and buffers by name (names and shapes exact when strict); on
        any error nothing changes."""
        params = dict(self._own_entries("params"))
        buffers = dict(self.named_buffers())
        known = set(params) | set(buffers)
        missing, extra = sorted(known - set(d)), sorted(set(d) - known)
        if strict and (missing or extra):
            raise InputError(f"load_state_dict: missing {missing}, unexpected {extra}")
        new_p = {n: from_user(d[n], p.shape, "f32", f"parameter {n!r}") for n, p in params.items() if n in d}
        new_b = {}
        for n, b in buffers.items():
            if n in d:
                values, shape = flatten_data(d[n])
                if shape != b.shape:
                    raise InputError(f"load_state_dict: buffer {n!r} has shape {shape}, expected {b.shape}")
                new_b[n] = cast_values(values, b.dtype)
        for n, v in new_p.items():
            params[n].value = v
        for n, v in new_b.items():
            if v != buffers[n].values:  # no longer what its recipe builds
                buffers[n].values, buffers[n].recipe = v, None
        return _Keys(missing, extra)

    def zero_grad(self, set_to_none: bool = True) -> None:
        pass  # gradients live inside the compiled step

    def to(self, *args, **kwargs) -> "Module":
        return self

    cpu = cuda = float = to


class _Keys(tuple):
    missing_keys = property(lambda self: self[0])
    unexpected_keys = property(lambda self: self[1])

    def __new__(cls, missing, extra):
        return super().__new__(cls, (missing, extra))
