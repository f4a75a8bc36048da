"""Subgroup reductions in Chromium: SwiftShader offers the "subgroups" feature
(subgroups of 4). Programs compiled in CPython for a target with subgroups run through
web/gpu.mjs on the page's main thread and match the reference backend; a device made
without the feature refuses them by name; the worker's target sees the feature."""

from __future__ import annotations

import pytest
from test_kernels import build

import tgweb as tg
from tgweb import ops
from tgweb.codegen.target import Target
from tgweb.lower import lower

from .conftest import py, run_against_reference

# SwiftShader's subgroups: 4 invocations (subgroupMinSize = subgroupMaxSize = 4)
TARGETS = {
    "gpu": Target("gpu", "test", features=("subgroups",), subgroup_sizes=(4, 4)),
    "cpu": Target("cpu", "test", features=("subgroups",), subgroup_sizes=(4, 4)),
}
CASES = {
    "sum": (lambda x: ops.sum(x, axis=-1), {"x": ((3, 5000), "f32")}, "gpu"),
    "mean-axis0": (lambda x: ops.mean(x, axis=0), {"x": ((333, 5), "f32")}, "gpu"),
    "max": (lambda x: ops.amax(x, axis=-1), {"x": ((4, 301), "f32")}, "gpu"),
    "softmax": (lambda x: tg.softmax(x, axis=-1), {"x": ((3, 333), "f32")}, "gpu"),
    "causal": (lambda x: ops.causal_softmax(x), {"x": ((37, 37), "f32")}, "gpu"),
    "log_softmax-cpu": (lambda x: ops.log_softmax(x, axis=-1), {"x": ((2, 3000), "f32")}, "cpu"),
    "sum-i32": (lambda k: ops.sum(k, axis=-1), {"k": ((2, 1001), "i32")}, "gpu"),
}


@pytest.fixture(scope="module")
def subgroups(page):
    have = page.evaluate("async () => (await navigator.gpu.requestAdapter()).features.has('subgroups')")
    if not have:
        pytest.skip("this Chromium's adapter does not offer the subgroups feature")
    return have


@pytest.mark.parametrize("case", list(CASES))
def test_subgroup_program_runs_through_gpu_mjs(page, subgroups, case):
    fn, specs, cls = CASES[case]
    g = build(fn, specs, grad=True)
    prog = lower(g, target=TARGETS[cls])
    assert prog.meta["features"] == ["subgroups"]
    assert "subgroups" in run_against_reference(page, g, prog)


def test_device_without_subgroups_refuses_by_name(page, subgroups):
    g = build(lambda x: ops.sum(x, axis=-1), {"x": ((3, 5000), "f32")}, grad=False)
    prog = lower(g, target=TARGETS["gpu"])
    err = page.evaluate(
        """async (program) => {
        const adapter = await navigator.gpu.requestAdapter();
        const device = await adapter.requestDevice();  // no optional features
        try { await gpu.instantiate(device, JSON.parse(program)); return null; }
        catch (e) { return e.name + ": " + e.message; }
        finally { device.destroy(); }
    }""",
        prog.to_json(),
    )
    assert err and err.startswith("ProgramError") and "feature(s) subgroups" in err and "does not have" in err


def test_worker_target_has_subgroups(page, subgroups):
    info = py(
        page,
        """
from tgweb.backends import browser
t = browser.device_target()
[t.cls, list(t.features), list(t.subgroup_sizes), sorted(browser._hooks().device.features.to_py())]
""",
    )
    cls, features, sizes, device_features = info
    assert cls == "cpu" and features == ["subgroups"] and sizes[0] >= 4
    assert "subgroups" in device_features  # the worker's device was created with it
