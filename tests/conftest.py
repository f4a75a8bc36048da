"""Shared test set-up: the one rule for tests that need a WebGPU adapter in CPython.

A test marked `native` (or asking for the `native_adapter` fixture) needs wgpu-py to
find an adapter (lavapipe on a CPU). Without one it is skipped -- unless
TGWEB_REQUIRE_GPU is set (to anything but "" or "0"), as `python3 build.py test` and
so CI do: then it fails with a message saying what is missing, so that a machine
without a Vulkan driver cannot pass the suite by skipping every kernel test.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import importlib.util
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REQUIRE_GPU = "TGWEB_REQUIRE_GPU"
NO_ADAPTER = (
    "no WebGPU adapter found; CI needs lavapipe (mesa-vulkan-drivers, which `python3 build.py "
    "setup` installs) so that the kernel tests run"
)


@functools.cache
def load_build():
    """build.py as a module (it is a script, not a package's)."""
    spec = importlib.util.spec_from_file_location("tgweb_build", ROOT / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@contextlib.contextmanager
def serving(site: Path):
    """build.py's server for site on a free port of 127.0.0.1, while the block runs: its port."""
    srv = load_build().make_server(site, 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


def http_get(port: int, path: str, method: str = "GET", **headers) -> tuple[int, dict, bytes]:
    """One request of that server: (status, headers by lower-case name, body)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(method, path, headers=headers)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def gpu_required() -> bool:
    return os.environ.get(REQUIRE_GPU, "") not in ("", "0")


@functools.cache
def _adapter_error() -> str | None:
    """None when wgpu-py opens an adapter, else why not (asked once per session)."""
    from tgweb.backends import native

    if native.available():
        return None
    try:  # the backend's own explanation, for the failure message
        native._device()
    except Exception as e:
        return str(e)
    return "wgpu-py found no adapter"


def need_adapter() -> bool:
    """True with an adapter. Without one: fail the test when TGWEB_REQUIRE_GPU is set,
    else return False (callers skip, or leave their native part out)."""
    why = _adapter_error()
    if why is None:
        return True
    if gpu_required():
        pytest.fail(f"{NO_ADAPTER} ({REQUIRE_GPU} is set). {why}", pytrace=False)
    return False


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("native") is not None and not need_adapter():
        pytest.skip(f"{NO_ADAPTER}; set {REQUIRE_GPU}=1 to make this a failure")


@pytest.fixture(autouse=True)
def _torch_init_stream_from_its_start():
    """tgweb.torch draws initial values from one host stream, as PyTorch does: each test
    starts it where a fresh process would (seed 0), so that no test's values depend on
    which tests ran before it in the same process."""
    host = sys.modules.get("tgweb.torch._host")
    if host is not None:
        host.GENERATOR.seed(0)


@pytest.fixture
def native_adapter() -> bool:
    """Whether the native backend has an adapter, for a test whose native part is optional;
    fails the test when TGWEB_REQUIRE_GPU is set and there is none."""
    return need_adapter()


def jitter_params(trainer, seed: int) -> None:
    """Move every parameter of a trainer by one float32 rounding step (a relative 2**-24,
    signs drawn from seed): a float32 run that differs from the plain one only in rounding,
    to measure how far rounding alone takes a trajectory (CONTRIBUTING: tests that hold
    on any CPU)."""
    import numpy as np

    signs = np.random.default_rng(seed)
    trainer.load_params(
        {
            k: np.float32(v) * (1 + signs.choice([-1, 1], size=np.shape(v)) * 2.0**-24).astype(np.float32)
            for k, v in trainer.params().items()
        }
    )


def train_to_success(
    name: str, eval_every: int, tmp_path, seed: int = 0, backend: str = "reference", trained: bool = False
):
    """`tgweb train NAME --until-success --check` in a child process (the CLI runs NumPy's
    BLAS on one thread: for these small products threads only contend on a busy machine).
    Asserts success within the sample's step budget and returns the CLI's JSON summary
    (with "line", a sentence of it) and, with trained=True, a fresh trainer holding the
    trained state (from the checkpoint the CLI saves), for checks of what training made."""
    from tgweb import samples

    root = Path(__file__).resolve().parents[1]
    summary, ck = tmp_path / f"{name}.json", tmp_path / f"{name}.ckpt"
    cmd = [sys.executable, "-m", "tgweb", "train", name, "--backend", backend, "--seed", str(seed)]
    cmd += ["--until-success", "--eval-every", str(eval_every), "--check", "--no-progress"]
    cmd += ["--json", str(summary)] + (["--checkpoint", str(ck)] if trained else [])
    p = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    s = json.loads(summary.read_text())
    mod = samples.get(name)
    assert s["success"] and s["steps"] <= mod.SUCCESS["within_steps"], s
    assert s["first_success_step"] == s["steps"] and samples.succeeded(mod, s["final_metric"]), s
    s["line"] = (
        f"{name} on {backend}, seed {seed}: {s['metric']} {s['final_metric']:.4g} (bound {s['bound']:.4g}) "
        f"at step {s['steps']}, training {s['train_s']:.1f} s, wall {s['wall_s']:.1f} s"
    )
    print(s["line"])
    if not trained:
        return s
    from tgweb.io import checkpoint

    trainer = samples.compile(name, backend=backend, seed=seed)
    checkpoint.load_file(trainer, str(ck))
    return s, trainer
