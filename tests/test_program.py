"""Program.to_json() / from_json() round trip."""

import json

import pytest

import tgweb as tg
from tgweb import nn
from tgweb.program import VERSION, Binding, Kernel, Program


class MLP(nn.Module):
    def __init__(self):
        self.l1 = nn.Linear(2, 8)
        self.l2 = nn.Linear(8, 1)

    def forward(self, x):
        h = tg.tanh(self.l1(x))
        tg.capture("h", h)
        return self.l2(h)


def test_program_json_round_trip():
    tr = tg.compile(
        MLP(),
        lambda m, x, y: ((m(x) - y) ** 2).mean(),
        inputs={"x": (4, 2), "y": (4, 1)},
        optimizer=tg.optim.AdamW(1e-3),
        backend="reference",
        clip_grad_norm=1.0,
    )
    prog = tr.program
    prog.kernels.append(
        Kernel(
            "k0",
            "@compute @workgroup_size(64) fn main() {}",
            [Binding(0, "read"), Binding(1, "read_write")],
            (3, 1, 1),
            ["global_sumsq"],
            "train.py:12",
        )
    )
    text = prog.to_json()
    again = Program.from_json(text)
    assert again == prog
    assert again.to_json() == text
    assert isinstance(again.params["l1.weight"].shape, tuple)
    assert isinstance(again.kernels[0].dispatch, tuple)
    planned, allocated = again.meta["memory"]["total_bytes"], sum(b.size for b in again.buffers)
    assert planned <= allocated < planned + 16 * len(again.buffers)  # buffers in whole 16-byte units
    assert {s.name: s.type for s in again.scalars} == {"lr": "f32", "step_size": "f32", "bc2_sqrt": "f32"}
    assert again.bytes_by_kind() == prog.bytes_by_kind()

    d = json.loads(text)
    d["version"] = VERSION + 1
    with pytest.raises(ValueError, match="version"):
        Program.from_json(json.dumps(d))
