"""Parameter discovery (issue 14, item 5): every parameter reachable from the model is
a parameter whatever its name (`_` names included, as in PyTorch); colliding dotted
names are an error naming both paths, before anything is compiled."""

from __future__ import annotations

import numpy as np
import pytest

import tgweb as tg
from tgweb import nn


class Private(nn.Module):
    def __init__(self):
        self._hidden = nn.Linear(2, 3)
        self._scale = self.param((3,), nn.init.ones())
        self.__mangled = self.param((1,), nn.init.zeros())  # stored as _Private__mangled

    def forward(self, x):
        return self._hidden(x) * self._scale + self.__mangled


def test_underscore_names_are_parameters_and_train():
    m = Private()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["_hidden.weight", "_hidden.bias", "_scale", "_Private__mangled"]
    tr = tg.compile(m, lambda m, x: (m(x) ** 2).mean(), {"x": (4, 2)}, tg.optim.SGD(0.1), backend="reference")
    assert set(tr.params()) == set(names)
    before = tr.params()
    tr.step(x=np.ones((4, 2), np.float32))
    after = tr.params()
    assert all(not np.array_equal(before[n], after[n]) for n in names)


class Collide(nn.Module):
    def __init__(self):
        self.a = nn.Linear(2, 2)
        setattr(self, "a.weight", self.param((2, 2)))

    def forward(self, x):
        return self.a(x)


class CollideListDict(nn.Module):
    def __init__(self):
        self.h = {0: nn.Linear(2, 2), "0": nn.Linear(2, 2)}

    def forward(self, x):
        return x


@pytest.mark.parametrize(
    "cls, match",
    [
        (Collide, r"'a.weight': model.a.weight and getattr\(model, 'a.weight'\)"),
        (CollideListDict, r"'h.0.weight': model.h\[0\].weight and model.h\['0'\].weight"),
    ],
)
def test_colliding_dotted_names_name_both_paths(cls, match):
    m = cls()
    with pytest.raises(tg.TraceError, match=match):
        m.named_parameters()
    with pytest.raises(tg.TraceError, match=match):
        tg.compile(m, lambda m, x: m(x).sum(), {"x": (1, 2)}, tg.optim.SGD(0.1), backend="reference")


def test_shared_parameters_keep_their_first_name_and_cycles_end():
    class Tied(nn.Module):
        def __init__(self):
            self.emb = nn.Embedding(4, 2)
            self.head = self.emb  # the same module twice
            self._self = self  # a cycle
            self.w = [self.emb.weight]  # the same parameter again

    assert [n for n, _ in Tied().named_parameters()] == ["emb.weight"]


def test_deep_containers_do_not_recurse():
    x: list = [nn.Linear(1, 1)]
    for _ in range(5000):
        x = [x]

    class Deep(nn.Module):
        def __init__(self):
            self.x = x

    names = [n for n, _ in Deep().named_parameters()]
    assert names == ["x" + ".0" * 5001 + ".weight", "x" + ".0" * 5001 + ".bias"]


class Surrogate(nn.Module):
    def __init__(self):
        self.ok = self.param((2,))
        setattr(self, "w\ud800", self.param((2,)))

    def forward(self, x):
        return x * getattr(self, "w\ud800") + self.ok


class Plain(nn.Module):
    def forward(self, x):
        return x


def test_names_that_are_not_utf8_text_are_named():
    """A lone surrogate has no UTF-8 form (no JSON header, WebGPU label or file can hold
    it): the parameter, input or tensor holding one is named where it is collected."""
    from tgweb.io import safetensors

    with pytest.raises(tg.TraceError, match=r"parameter at getattr\(model, 'w\\ud800'\).*not valid UTF-8"):
        tg.compile(Surrogate(), lambda m, x: m(x).sum(), {"x": (2,)}, tg.optim.SGD(0.1), backend="reference")
    with pytest.raises(tg.TraceError, match=r"input name 'x\\udc00' is not valid UTF-8"):
        tg.compile(Plain(), lambda m, **kw: m(kw["x\udc00"]).sum(), {"x\udc00": (2,)}, tg.optim.SGD(0.1))
    with pytest.raises(safetensors.SafetensorsError, match=r"tensor name 'a\\ud800' is not valid UTF-8"):
        safetensors.save({"ok": [1.0], "a\ud800": [1.0]})
    with pytest.raises(safetensors.SafetensorsError, match=r"metadata 'v\\ud800' is not valid UTF-8"):
        safetensors.save({"ok": [1.0]}, {"k": "v\ud800"})
    # a header may escape one in JSON; loading refuses it
    header = b'{"w\\ud800":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    header += b" " * (-len(header) % 8)
    blob = len(header).to_bytes(8, "little") + header + bytes(4)
    with pytest.raises(safetensors.SafetensorsError, match=r"tensor name 'w\\ud800' is not valid UTF-8"):
        safetensors.load(blob)
