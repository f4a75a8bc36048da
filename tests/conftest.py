"""Shared test set-up: the one rule for tests that need a WebGPU adapter in CPython.

A test marked `native` (or asking for the `native_adapter` fixture) needs wgpu-py to
find an adapter (lavapipe on a CPU). Without one it is skipped -- unless
TGWEB_REQUIRE_GPU is set (to anything but "" or "0"), as `python3 build.py test` and
so CI do: then it fails with a message saying what is missing, so that a machine
without a Vulkan driver cannot pass the suite by skipping every kernel test.
"""

from __future__ import annotations

import functools
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REQUIRE_GPU = "TGWEB_REQUIRE_GPU"
NO_ADAPTER = (
    "no WebGPU adapter found; CI needs lavapipe (mesa-vulkan-drivers, which `python3 build.py "
    "setup` installs) so that the kernel tests run"
)


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


@pytest.fixture
def native_adapter() -> bool:
    """Whether the native backend has an adapter, for a test whose native part is optional;
    fails the test when TGWEB_REQUIRE_GPU is set and there is none."""
    return need_adapter()


def run_one_blas_thread(source: str, timeout: float = 600) -> dict:
    """Runs `source` in a child Python with NumPy's BLAS on one thread (for small
    products on a busy machine threads only contend; the CLI does the same) and returns
    the JSON its last line of output prints."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(root))
    out = subprocess.run(
        [sys.executable, "-c", source], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def train_to_success(name: str, eval_every: int, tmp_path, seed: int = 0):
    """The CLI's loop (`tgweb train NAME --until-success`) on the reference backend, in this
    process: asserts success within the sample's step budget and returns the summary and
    a fresh trainer holding the trained state (for checks of what training made)."""
    from tgweb import cli, samples
    from tgweb.io import checkpoint

    ck = tmp_path / f"{name}.ckpt"
    out = io.StringIO()
    s = cli.train(
        name,
        "reference",
        seed=seed,
        eval_every=eval_every,
        until_success=True,
        progress=False,
        out=out,
        checkpoint_path=str(ck),
    )
    print(f"{name}: {s['metric']} {s['final_metric']:.4g} (bound {s['bound']:.4g}) at step {s['steps']}")
    assert s["success"] and s["steps"] <= samples.get(name).SUCCESS["within_steps"], out.getvalue()[-2000:]
    trainer = samples.compile(name, backend="reference", seed=seed)
    checkpoint.load_file(trainer, str(ck))
    return s, trainer
