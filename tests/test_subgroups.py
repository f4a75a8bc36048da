"""Reductions folded by subgroup operations (codegen/reduce.py's subgroup_total), run
natively on lavapipe (subgroups of 8 invocations) and compared with the reference
backend forward and backward (test_kernels.run_case); the target's features, and the
refusal of a Program that needs subgroups by a device without them."""

from __future__ import annotations

import json

import pytest
from test_kernels import GPU, build, f, i, run_case

import tgweb as tg
from tgweb import ops
from tgweb.backends import native
from tgweb.codegen.reduce import subgroup_levels
from tgweb.codegen.target import Target, classify
from tgweb.lower import lower
from tgweb.program import Program, ProgramError

pytestmark = pytest.mark.native

# subgroup size bounds as lavapipe reports them (4..128: four levels for 256 invocations),
# as it runs them (8: three), and an exact 32 as on NVIDIA (two). A bound above the real
# size would be a lie the kernels believe, so none is tried here.
SIZES = [(4, 128), (8, 8), (4, 4)]
TARGETS = [Target("gpu", "test", tuning=GPU.tuning, features=("subgroups",), subgroup_sizes=s) for s in SIZES]
# the CPU class keeps serial loops up to 1024 and trees beyond: subgroups only for longer rows
CPU_SG = Target("cpu", "test", features=("subgroups",), subgroup_sizes=(4, 128))


def _logsumexp(x):
    m = ops.amax(x, axis=-1, keepdims=True)
    return m + tg.log(ops.sum(tg.exp(x - m), axis=-1, keepdims=True))


def _emb(w, k):
    return ops.embedding(w, k)


# (fn, input specs, domains, what the kernels must fold): rows just over the GPU class's
# serial_max (17), rows that are no multiple of any subgroup size, rows longer than the
# workgroup (64 invocations below 2048, 256 from there), reductions over a strided axis
CASES = {
    "sum-17": (lambda x: ops.sum(x, axis=1), {"x": f(6, 17)}, None, "subgroupAdd"),
    "sum-300": (lambda x: ops.sum(x, axis=1), {"x": f(5, 300)}, None, "subgroupAdd"),
    "sum-axis0": (lambda x: ops.sum(x, axis=0), {"x": f(333, 7)}, None, "subgroupAdd"),
    "sum-i32": (lambda k: ops.sum(k, axis=-1), {"k": i(3, 1001)}, None, "subgroupAdd"),
    "max-i32": (lambda k: ops.amax(k, axis=-1), {"k": i(3, 999)}, {"k": (-1000, 1000)}, "subgroupMax"),
    "sum-5000": (lambda x: ops.sum(x, axis=-1), {"x": f(2, 5000)}, None, "subgroupAdd"),
    "global-sum": (lambda x: ops.sum(x), {"x": f(150_000)}, None, "subgroupAdd"),
    "max": (lambda x: ops.amax(x, axis=-1), {"x": f(4, 700)}, {"x": "distinct"}, "subgroupMax"),
    "min": (lambda x: ops.amin(x, axis=0), {"x": f(301, 3)}, {"x": "distinct"}, "subgroupMin"),
    "mean": (lambda x: ops.mean(x * x, axis=-1), {"x": f(7, 2049)}, None, "subgroupAdd"),
    "softmax": (lambda x: tg.softmax(x, axis=-1), {"x": f(4, 333)}, None, "subgroupMax"),
    "softmax-axis0": (lambda x: tg.softmax(x, axis=0), {"x": f(70, 3)}, None, "subgroupAdd"),
    "log_softmax": (lambda x: ops.log_softmax(x, axis=-1), {"x": f(3, 2100)}, None, "subgroupAdd"),
    "causal_softmax": (lambda x: ops.causal_softmax(x), {"x": f(2, 37, 37)}, None, "subgroupMax"),
    "logsumexp": (_logsumexp, {"x": f(5, 1000)}, {"x": "distinct"}, "subgroupMax"),
    "embedding-grad": (_emb, {"w": f(5, 2), "k": i(17000)}, {"k": (0, 5)}, "subgroupAdd"),
}


@pytest.mark.parametrize("sizes", SIZES, ids=[f"{a}-{b}" for a, b in SIZES])
@pytest.mark.parametrize("case", list(CASES))
def test_subgroup_reductions_match_reference(case, sizes):
    fn, specs, doms, op = CASES[case]
    target = TARGETS[SIZES.index(sizes)]
    prog = run_case(fn, specs, grad=True, doms={k: doms for k in specs} if doms else None, target=target)
    wgsl = "".join(k.wgsl for k in prog.kernels)
    assert op in wgsl and "enable subgroups;" in wgsl
    assert prog.meta["features"] == ["subgroups"]
    assert prog.meta["target"]["features"] == ["subgroups"]
    assert prog.meta["target"]["subgroup_sizes"] == list(sizes)


def test_cpu_class_folds_only_rows_past_its_loops():
    prog = run_case(lambda x: ops.sum(x, axis=-1), {"x": f(3, 1000)}, target=CPU_SG)  # serial loops
    assert prog.meta["features"] == [] and "subgroup" not in "".join(k.wgsl for k in prog.kernels)
    prog = run_case(lambda x: tg.softmax(x, axis=-1), {"x": f(3, 3000)}, target=CPU_SG)
    assert prog.meta["features"] == ["subgroups"]


def test_argmax_keeps_its_tree():
    # (value, index) pairs with ties broken by index: still the workgroup-memory tree
    prog = run_case(
        lambda x: ops.argmax(x, axis=-1), {"x": f(3, 700)}, doms={"x": "distinct"}, target=TARGETS[0]
    )
    assert prog.meta["features"] == [] and "workgroupBarrier" in prog.kernels[0].wgsl


def test_levels_cover_the_least_subgroup():
    assert [subgroup_levels(256, s) for s in (4, 8, 16, 32, 64, 128, 256)] == [4, 3, 2, 2, 2, 2, 1]
    assert [subgroup_levels(64, s) for s in (4, 8, 16, 32, 64, 128)] == [3, 2, 2, 2, 1, 1]


def test_barriers_saved():
    # 256 invocations: the tree spends 9 barriers; subgroups of at least 32 spend one
    g = build(lambda x: ops.sum(x, axis=-1), {"x": f(4, 5000)}, grad=False)
    tree = lower(g, target=GPU).kernels[0].wgsl
    nv = Target("gpu", tuning=GPU.tuning, features=("subgroups",), subgroup_sizes=(32, 32))
    folds = lower(g, target=nv).kernels[0].wgsl
    assert tree.count("workgroupBarrier") == 9 and folds.count("workgroupBarrier") == 1


def test_targets_read_features_from_adapter_info():
    wgpu_py = {
        "vendor": "NVIDIA",
        "adapter_type": "DiscreteGPU",
        "stackgroup_min_size": 32,  # wgpu-py 0.2x's spelling
        "stackgroup_max_size": 32,
        "features": ["subgroups"],
    }
    chromium = {"vendor": "nvidia", "subgroupMinSize": 32, "subgroupMaxSize": 32, "features": ["subgroups"]}
    for info in (wgpu_py, chromium):
        t = classify(info)
        assert (t.cls, t.features, t.subgroup_sizes) == ("gpu", ("subgroups",), (32, 32))
        assert t.to_meta()["subgroup_sizes"] == [32, 32]
    spelled = classify({"vendor": "x", "features": ["subgroup"], "subgroup_min_size": 8})
    assert spelled.has("subgroups") and spelled.subgroup_sizes == (8, 128)
    bare = classify({"vendor": "nvidia", "subgroupMinSize": 32})
    assert bare.features == () and bare.to_meta()["features"] == [] and "subgroup_sizes" not in bare.to_meta()
    assert Target("gpu", features=("subgroups",)) != Target("gpu")
    with pytest.raises(ValueError, match="unknown target features"):
        Target("gpu", features=("subgroup",))


def test_native_device_offers_subgroups_where_lavapipe_has_them():
    native._device()
    if "subgroup" not in native._ADAPTER.features and "subgroups" not in native._ADAPTER.features:
        pytest.skip("this adapter has no subgroups")
    assert "subgroups" in native.device_features()  # the layout probe passed
    t = native.device_target()
    assert t.has("subgroups") and t.subgroup_sizes[0] >= 4


def test_device_without_subgroups_refuses_the_program(monkeypatch):
    g = build(lambda x: ops.sum(x, axis=-1), {"x": f(4, 5000)}, grad=False)
    prog = lower(g, target=TARGETS[0])
    monkeypatch.setattr(native, "_FEATURES", set())
    with pytest.raises(native.NativeError, match="WebGPU feature 'subgroups'.*does not have"):
        native.Runtime(prog)


def test_program_json_keeps_features_and_checks_them():
    g = build(lambda x: ops.sum(x, axis=-1), {"x": f(4, 5000)}, grad=False)
    prog = lower(g, target=TARGETS[0])
    again = Program.from_json(prog.to_json())
    assert again.meta["features"] == ["subgroups"]
    d = json.loads(prog.to_json())
    d["meta"]["features"] = []
    with pytest.raises(ProgramError, match="subgroups"):
        Program.from_json(json.dumps(d))
