"""Shared test set-up: the one rule for tests that need a WebGPU adapter in CPython.

A test marked `native` (or asking for the `native_adapter` fixture) needs wgpu-py to
find an adapter (lavapipe on a CPU). Without one it is skipped -- unless
TGWEB_REQUIRE_GPU is set (to anything but "" or "0"), as `python3 build.py test` and
so CI do: then it fails with a message saying what is missing, so that a machine
without a Vulkan driver cannot pass the suite by skipping every kernel test.
"""

from __future__ import annotations

import functools
import os

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
