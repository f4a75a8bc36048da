"""The wheel that `build.py wheel` hands out and the site bundles: its name, contents and
declared dependencies, and a fresh virtual environment where pip installs it and the
README's short example and a few steps of `sin` run from the installed package.

The fresh environment has no network: the wheel's dependencies (and theirs) are linked
from this environment into a folder that a .pth file puts on its path, and pip installs
the wheel with --no-index, so its resolver still checks the declared requirements
against what is there."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from conftest import load_build
from packaging.requirements import Requirement

from tgweb import export

ROOT = Path(__file__).resolve().parents[1]
PYODIDE_ENV = {"sys_platform": "emscripten", "platform_system": "Emscripten"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return load_build().wheel(tmp_path_factory.mktemp("dist"))


def _metadata(whl: Path):
    with zipfile.ZipFile(whl) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(z.read(name).decode())


def _required(whl: Path, env: dict | None = None, extra: str = "") -> dict[str, Requirement]:
    """The wheel's requirements that apply in env (None: this interpreter's), by name."""
    out = {}
    for line in _metadata(whl).get_all("Requires-Dist") or []:
        r = Requirement(line)
        if r.marker is None or r.marker.evaluate({**(env or {}), "extra": extra}):
            out[r.name] = r
    return out


def test_wheel_name_contents_and_version(wheel):
    import tgweb

    build = load_build()
    version = build._tgweb_version()
    assert version == tgweb.__version__
    assert wheel.name == f"tgweb-{version}-py3-none-any.whl"  # pure Python: pip and micropip alike
    info = f"tgweb-{version}.dist-info/"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        shim = {n: z.read(f"tgweb/_{n}") for n in ("device.mjs", "gpu.mjs", "bulk.mjs")}
        tag = z.read(info + "WHEEL").decode()
    assert "Tag: py3-none-any" in tag and "Root-Is-Purelib: true" in tag
    assert _metadata(wheel)["Version"] == version
    # the package's modules and data, and the shim (export_page writes it into pages) with
    # bulk.mjs (tgweb.jsbridge loads them in any Pyodide);
    # not the big data files the site serves beside the wheel, nor tests or the site's files
    data = ROOT / "tgweb" / "samples" / "data"
    want = {f.relative_to(ROOT).as_posix() for f in (ROOT / "tgweb").rglob("*.py")}
    want |= {f"tgweb/samples/data/{f.name}" for f in data.iterdir() if f.name not in build.LAZY_DATA}
    want |= {"tgweb/_device.mjs", "tgweb/_gpu.mjs", "tgweb/_bulk.mjs"}
    assert {n for n in names if not n.startswith(info)} == want
    assert all(text == (ROOT / "web" / n).read_bytes() for n, text in shim.items())
    assert not [
        n for n in names if re.match(r"(tests|web|site|node_modules|build)/", n) or "__pycache__" in n
    ]
    assert len(build.LAZY_DATA) > 0 and (data / build.LAZY_DATA[0]).exists()


def test_wheel_declares_dependencies_per_platform(wheel):
    cpython = _required(wheel)
    assert set(cpython) == {"numpy", "wgpu"}
    # the lower bounds hold the versions the tests run on here
    for name, req in cpython.items():
        assert req.specifier.contains(importlib.metadata.version(name), prereleases=True), req
        assert str(req.marker) == 'sys_platform != "emscripten"', req
    # Pyodide's micropip installs the wheel alone
    assert _required(wheel, PYODIDE_ENV) == {}
    assert set(_required(wheel, extra="torch")) == {"numpy", "wgpu", "torch"}
    assert set(_required(wheel, PYODIDE_ENV, extra="native")) == set()


def _link_dependencies(whl: Path, into: Path) -> list[str]:
    """Link every distribution the wheel needs here (with their own requirements) from
    this environment into `into`; returns their names."""
    into.mkdir()
    todo, done = list(_required(whl).values()), set()
    while todo:
        req = todo.pop()
        name = req.name.lower().replace("_", "-")
        if name in done:
            continue
        done.add(name)
        dist = importlib.metadata.distribution(req.name)
        tops = {Path(str(f)).parts[0] for f in dist.files or []} - {".."}
        for top in tops:
            src = Path(dist.locate_file(top))
            if src.exists() and not (into / top).exists():
                (into / top).symlink_to(src)
        for line in dist.requires or []:
            r = Requirement(line)
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                todo.append(r)
    return sorted(done)


# the few steps of `sin`, run by the installed package from a folder outside the checkout
SIN = """
import json, os, sys
import tgweb
from tgweb import export, samples

s = samples.get("sin")
t = samples.compile("sin", seed=0)
losses = [float(t.step(**s.batch(i)).loss) for i in range(8)]
try:  # left out of the wheel: the site serves it beside
    samples.get("shakespeare").text()
    missing = None
except FileNotFoundError as e:
    missing = str(e)
print(json.dumps({"file": tgweb.__file__, "backend": t.backend, "losses": losses,
                  "shim": export._gpu_source(), "missing": missing}))
"""


def _readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"## A short example\n+```python\n(.*?)```", text, re.S)
    assert m, "README.md has no python block under '## A short example'"
    return m.group(1)


def test_wheel_installs_into_a_fresh_venv_and_trains(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=60)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    linked = _link_dependencies(wheel, tmp_path / "deps")
    assert {"numpy", "wgpu"} <= set(linked)
    (Path(purelib) / "tgweb_test_deps.pth").write_text(f"{tmp_path / 'deps'}\n")
    # this pip, run for the venv's interpreter: no index, so the requirements must be met
    pip = [sys.executable, "-m", "pip", "--python", py, "install", "--no-index", "--no-cache-dir", "-q"]
    r = subprocess.run([*pip, wheel], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    run = lambda *args: subprocess.run(
        [py, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    r = run("-c", _readme_example())
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[-2:] == ["(64,", "1)"], r.stdout

    r = run("-c", SIN)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert Path(out["file"]).is_relative_to(purelib), out["file"]  # the installed copy ran
    # the installed copies of the shim, inlined as the checkout's would be
    assert out["shim"] == export._gpu_source()
    assert "tinyshakespeare.txt" in out["missing"] and "pip install ." in out["missing"], out["missing"]
    losses = out["losses"]
    assert all(v == v and v < 10 for v in losses) and losses[-1] < losses[0], losses

    r = run("-m", "tgweb", "info")
    assert r.returncode == 0, r.stderr[-3000:]
    import tgweb

    assert r.stdout.startswith(f"tgweb {tgweb.__version__} (Python ")
    assert f"default backend: {out['backend']}" in r.stdout


def test_the_wheels_build_id_is_the_checkouts(wheel, tmp_path):
    # the Programs a site ships are keyed in the checkout (tools/ship_programs.py) and looked
    # up by the wheel's tgweb in the page: both must hash the same files the same way
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path)
    code = "from tgweb import progcache; print(progcache.__file__); print(progcache.build_id())"
    got = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    from tgweb import progcache

    assert (tmp_path / "tgweb" / "_gpu.mjs").exists() and not (tmp_path / "web").exists()
    where, built = got.stdout.split()
    assert Path(where).is_relative_to(tmp_path) and built == progcache.build_id()
