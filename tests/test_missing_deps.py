"""A backend whose package is missing says what to install and names the backend that was
asked for or chosen, never a bare ImportError from deep inside: real tgweb in a fresh
interpreter whose imports of NumPy and/or wgpu-py fail, blocked by a sitecustomize before
anything is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# sitecustomize.py of the child: the top-level packages in TGWEB_TEST_BLOCK fail to import
# as a missing package does
BLOCKER = """
import os, sys

BLOCKED = set(os.environ["TGWEB_TEST_BLOCK"].split(","))


class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Blocked())
"""

# compiles sin (and differentiates a layer) each way a user may; prints, per call,
# [exception type, is an ImportError, message] or null when it worked
CALLS = """
import importlib, json, os, sys
import tgweb as tg
from tgweb import samples

for m in os.environ["TGWEB_TEST_BLOCK"].split(","):
    try:
        importlib.import_module(m)
        sys.exit(f"{m} was importable")
    except ImportError:
        pass

def steps(backend=None):
    s = samples.get("sin")
    t = samples.compile("sin", backend=backend)
    losses = [float(t.step(**s.batch(i)).loss) for i in range(2)]
    return [t.backend, losses]

calls = {
    "default": steps,
    "reference": lambda: steps("reference"),
    "native": lambda: steps("native"),
    "value_and_grad": lambda: tg.value_and_grad(lambda m, x: m(x).sum(), tg.nn.Linear(1, 2), x=[[1.0]])[0],
}
out = {}
for name, call in calls.items():
    try:
        out[name] = ["ok", call()]
    except Exception as e:
        out[name] = [type(e).__name__, isinstance(e, ImportError), str(e)]
print(json.dumps(out, default=float))
"""


def run_blocked(tmp_path, blocked: list[str], args: list[str]) -> subprocess.CompletedProcess:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]), TGWEB_TEST_BLOCK=",".join(blocked)
    )
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def calls_without(tmp_path, blocked: list[str]) -> dict:
    r = run_blocked(tmp_path, blocked, ["-c", CALLS])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def assert_missing(result, backend: str, install: str, *more: str) -> str:
    """The call failed with MissingDependency (an ImportError) naming `backend` and the pip
    command; returns the message."""
    kind, is_import_error, msg = result
    assert (kind, is_import_error) == ("MissingDependency", True), result
    assert f"the {backend} backend needs" in msg and install in msg, msg
    for text in more:
        assert text in msg, msg
    return msg


def test_without_numpy_and_wgpu(tmp_path):
    out = calls_without(tmp_path, ["numpy", "wgpu"])
    # the default: the reference backend, chosen because wgpu-py is missing too
    assert_missing(
        out["default"],
        "reference",
        "pip install numpy",
        "tgweb chose the reference backend because the native one is unavailable",
        "pip install wgpu",
    )
    msg = assert_missing(out["reference"], "reference", "pip install numpy")
    assert "chose" not in msg and "wgpu" not in msg  # asked for: no word on the native backend
    assert_missing(out["native"], "native", "pip install wgpu")
    assert_missing(out["value_and_grad"], "reference", "pip install numpy", "tg.value_and_grad")


def test_without_numpy_the_native_backend_still_trains(tmp_path, native_adapter):
    out = calls_without(tmp_path, ["numpy"])
    assert_missing(out["reference"], "reference", "pip install numpy")
    assert_missing(out["value_and_grad"], "reference", "pip install numpy", "tg.value_and_grad")
    if native_adapter:  # the native backend runs on array.array: NumPy is not needed
        for name in ("default", "native"):
            status, (backend, losses) = out[name]
            assert status == "ok" and backend == "native" and len(losses) == 2, out[name]
    else:  # the default falls back to the reference backend and says why
        assert_missing(out["default"], "reference", "pip install numpy", "no WebGPU adapter")


def test_without_wgpu_the_reference_backend_is_chosen(tmp_path):
    out = calls_without(tmp_path, ["wgpu"])
    assert_missing(out["native"], "native", "pip install wgpu")
    for name in ("default", "reference"):
        status, (backend, losses) = out[name]
        assert status == "ok" and backend == "reference" and len(losses) == 2, out[name]
    assert out["value_and_grad"][0] == "ok"


def test_cli_says_what_to_install(tmp_path):
    r = run_blocked(tmp_path, ["numpy", "wgpu"], ["-m", "tgweb", "info"])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    ref = next(ln for ln in lines if ln.startswith("  reference "))
    native = next(ln for ln in lines if ln.startswith("  native "))
    assert " no " in ref and "needs NumPy" in ref and "pip install numpy" in ref, ref
    assert " no " in native and "needs wgpu-py" in native and "pip install wgpu" in native, native
    assert "default backend: reference" in lines and "adapters (wgpu-py): none found" in lines
    assert lines[0].startswith("tgweb ") and f"Python {sys.version.split()[0]}" in lines[0]

    r = run_blocked(tmp_path, ["numpy"], ["-m", "tgweb", "train", "sin", "--backend", "reference"])
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "reference backend needs NumPy" in r.stderr and "pip install numpy" in r.stderr, r.stderr
