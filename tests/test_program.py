"""Program.to_json() / from_json() round trip."""

import json

import pytest

import tgweb as tg
from tgweb import nn
from tgweb.pipeline import APPLIED_READ, DEPTH, if_applied
from tgweb.program import VERSION, Binding, Kernel, Program


class MLP(nn.Module):
    def __init__(self):
        self.l1 = nn.Linear(2, 8)
        self.l2 = nn.Linear(8, 1)

    def forward(self, x):
        h = tg.tanh(self.l1(x))
        tg.capture("h", h)
        return self.l2(h)


def _program(optimizer, **kw):
    """The training step's Program of MLP on a batch of 4."""
    return tg.compile(
        MLP(),
        lambda m, x, y: ((m(x) - y) ** 2).mean(),
        inputs={"x": (4, 2), "y": (4, 1)},
        optimizer=optimizer,
        backend="reference",
        **kw,
    ).program


def test_program_json_round_trip():
    prog = _program(tg.optim.AdamW(1e-3), clip_grad_norm=1.0)
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
    opt = ("lr", "step_size", "bc2_sqrt")
    assert {s.name: s.type for s in again.scalars} == {
        **{k: "f32" for k in opt},
        **{if_applied(k, j): "f32" for k in opt for j in range(1, DEPTH + 1)},
        APPLIED_READ: "u32",
    }
    assert again.bytes_by_kind() == prog.bytes_by_kind()

    d = json.loads(text)
    d["version"] = VERSION + 1
    with pytest.raises(ValueError, match="version"):
        Program.from_json(json.dumps(d))


def test_the_json_holds_each_kernel_text_once():
    """Kernels of repeated layers share their texts: the JSON keeps each distinct text once
    ("texts"; a kernel's "wgsl" is its index), and a JSON written with a text in each kernel
    (before) still loads, to the same Program."""
    prog = _program(tg.optim.AdamW(1e-3))
    twin = Kernel("twin", prog.kernels[0].wgsl, prog.kernels[0].bindings, prog.kernels[0].dispatch, [], "")
    prog.kernels.append(twin)  # the same text as kernel 0
    d = json.loads(prog.to_json())
    assert d["texts"] == list(dict.fromkeys(k.wgsl for k in prog.kernels))
    assert [k["wgsl"] for k in d["kernels"]] == [d["texts"].index(k.wgsl) for k in prog.kernels]
    assert d["kernels"][-1]["wgsl"] == d["kernels"][0]["wgsl"] == 0
    older = dict(d, kernels=[dict(k, wgsl=d["texts"][k["wgsl"]]) for k in d["kernels"]])
    del older["texts"]
    assert Program.from_json(json.dumps(older)) == prog == Program.from_json(json.dumps(d))


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda d: d["kernels"][0]["bindings"].append({"buffer": 999, "access": "read"}), "names buffer 999"),
        (lambda d: d["kernels"][0].update(dispatch=[0, 1, 1]), "dispatch"),
        (lambda d: d["buffers"][0].update(size=6), "not a multiple of 4"),
        (lambda d: d["params"]["l1.weight"].update(offset=1 << 30), "do not fit buffer"),
        (lambda d: d["scalars"].append({"name": "x", "type": "f64"}), "scalar types"),
        (lambda d: d.pop("kernels"), "not a tgweb Program"),
        (lambda d: d["layout"]["inputs"][1].__setitem__(1, 36), "layout does not match"),
        (lambda d: d["layout"].pop("bytes"), "not a step layout"),
        (lambda d: d["kernels"][0].update(wgsl=len(d["texts"])), "kernel 0: wgsl .* is not an index into"),
        (lambda d: d["kernels"][0].update(wgsl="0"), "kernel 0: wgsl '0' is not an index into"),
        (lambda d: d.update(texts="@compute"), "texts: expected a list of WGSL strings"),
    ],
    ids=["binding", "dispatch", "size", "slot", "scalar", "structure", "layout", "layout-shape"]
    + ["text-index", "text-name", "texts"],
)
def test_a_bad_program_is_refused_where_it_is_loaded(edit, message):
    """gpu.mjs trusts the Program's structure: Python validates it once, where a Program is
    made (lower) or loaded (from_json)."""
    from tgweb.program import ProgramError

    d = json.loads(_program(tg.optim.SGD(0.1)).to_json())
    edit(d)
    with pytest.raises(ProgramError, match=message):
        Program.from_json(json.dumps(d))


def test_the_program_carries_its_step_layout():
    """Where a step's host data and the kernels' offsets go is laid out once, in Python:
    the JSON carries it for gpu.mjs, and a Program saved without it loads with it."""
    prog = _program(tg.optim.AdamW(1e-3))
    lay = prog.layout
    assert lay.inputs == [("x", 0, 32), ("y", 32, 16)]
    assert lay.scalars == 48 and lay.bytes == 48 + 4 * len(prog.scalars)
    assert any(k.offsets for k in prog.kernels)
    end = 0
    for k, (at, size) in zip(prog.kernels, lay.uniform):
        assert size == 16 * -(-len(k.offsets) // 4)  # whole vec4<u32>s
        if size:  # aligned for any device, after the slice before it
            assert at % 256 == 0 and at >= end
            end = at + size
    assert lay.uniform_bytes >= end
    d = json.loads(prog.to_json())
    assert d["layout"]["inputs"] == [["x", 0, 32], ["y", 32, 16]]
    del d["layout"]  # as saved before Programs carried it
    assert Program.from_json(json.dumps(d)).layout == lay


def test_workgroup_bytes_counts_the_declared_arrays():
    from tgweb.program import workgroup_bytes

    text = (
        "var<workgroup> As: array<array<array<vec4<f32>, 32>, 8>, 2>;\n"
        "var<workgroup> Bs: array<f16, 10240>;\n"
        "var<workgroup> sh: array<u32, 256>;\n"
        "var<storage, read> b0: array<u32>;\n"
    )
    assert workgroup_bytes(text) == 2 * 8 * 32 * 16 + 10240 * 2 + 256 * 4
    assert workgroup_bytes("fn main() {}") == 0
    with pytest.raises(ValueError, match="unknown WGSL type"):
        workgroup_bytes("var<workgroup> m: mat4x4<f32>;")
