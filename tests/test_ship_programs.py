"""The Programs a served site ships (tools/ship_programs.py): planned in CPython by
tgweb.backends.planned for an adapter described as tools/adapters.json records one.

(tests/browser/test_shipped_programs.py checks, in Chromium, that such entries are the
browser's own byte for byte and that a first visit trains from them.)"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tgweb import progcache
from tgweb.backends import lowering_for, planned
from tgweb.compile import default_backend
from tgweb.program import Program

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = json.loads((ROOT / "tools" / "adapters.json").read_text())


def _tool():
    spec = importlib.util.spec_from_file_location("tgweb_ship_programs", ROOT / "tools" / "ship_programs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_recorded_adapters_are_well_formed():
    assert ADAPTERS, "tools/adapters.json ships for no adapter"
    for a in ADAPTERS:
        assert a["name"] and planned.check(a)["limits"] == {n: a["limits"][n] for n in planned.LIMITS}


@pytest.mark.parametrize(
    "bad, says",
    [
        ({"limits": {}}, "is described as"),
        ({"info": {}, "limits": 3}, "'limits' must be a dict"),
        ({"info": {}, "limits": {"maxBufferSize": 4}}, "lack"),
    ],
)
def test_a_bad_adapter_description_is_refused_naming_what(bad, says):
    with pytest.raises(ValueError, match=says):
        with planned.planning(bad):
            pass
    assert not planned.active()


def test_every_sample_is_planned_for_every_recorded_adapter():
    tool = _tool()
    samples = sorted(p.stem for p in tool.SAMPLES.glob("*.py"))
    for a in ADAPTERS:
        got, labels, failed = tool.planned_entries(a, samples)
        assert failed == {}, failed
        # every sample whose trainer the cache keeps (torchgpt's optimizer keeps host state)
        assert set(labels) == set(samples) - {"torchgpt"} and sum(map(len, labels.values())) == len(got)


def test_samples_are_planned_for_the_adapter_and_nothing_stays_planned():
    nvidia = ADAPTERS[0]
    got = _tool().entries(nvidia, ["sin"])
    assert not planned.active() and default_backend() != "browser"
    kinds = set()
    for key, text in got.items():
        head, digest, body = text.split("\n", 2)
        assert head == progcache.FORMAT and json.loads(body)["key"] == key
        program = Program.from_json(json.loads(body)["program"])  # validated as it loads
        kinds.add(program.meta["name"])
        target = program.meta["target"]
        assert target["class"] == "gpu" and "subgroups" in target["features"], target
        assert program.meta["limits"]["maxComputeInvocationsPerWorkgroup"] <= 1024
    assert kinds == {"step", "initial values", "forward"}
    # planned again: the same keys and texts (the site's build is reproducible)
    assert _tool().entries(nvidia, ["sin"]) == got


def test_inside_planning_the_browser_backend_is_the_described_adapter():
    a = ADAPTERS[0]
    with planned.planning(a):
        assert default_backend() == "browser"
        device = lowering_for("browser")
        assert device["limits"] == planned.check(a)["limits"] and device["target"].cls == "gpu"
        assert device["target"].subgroup_sizes == (32, 32)


def test_a_planned_runtime_keeps_its_program_and_runs_nothing():
    import array

    from tgweb.samples import sin

    with planned.planning(ADAPTERS[0]):
        tr = sin_trainer(sin)
        rt = tr.engine.rt
        assert isinstance(rt, planned.Runtime) and rt.program is tr.program
        name, slot = next(iter(tr.program.params.items()))
        n = 1
        for d in slot.shape:
            n *= d
        with pytest.raises(ValueError, match=f"params {name!r}: {n + 1} values for a slot of {n}"):
            rt.write("params", name, array.array("f", [0.0] * (n + 1)))
        assert rt.read("params", name) == array.array("f", [0.0] * n)  # nothing ran: zeros


def sin_trainer(sin):
    import tgweb as tg

    return tg.compile(sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER)
