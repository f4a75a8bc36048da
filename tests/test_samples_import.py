"""A sample is imported when first asked for: the page's first step of sin imports sin,
not the other thirteen samples (a third of the start-up's imports in Pyodide)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from tgweb import samples
from tgweb.samples import sin
before = sorted(m for m in sys.modules if m.startswith("tgweb.samples."))
names = list(samples.SAMPLES)
got = samples.get("names")
print(before, names == sorted(names) and len(names) == len(samples.SAMPLES), got.__name__)
"""


def test_importing_one_sample_imports_no_other():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    assert out.split() == [
        "['tgweb.samples._util',",
        "'tgweb.samples.sin']",
        "True",
        "tgweb.samples.names",
    ], out


PRELOAD = """
import sys
import tgweb.worker
from tgweb import progcache, samples, worker
worker.preload()
print(all(f"tgweb.samples.{n}" in sys.modules for n in samples.SAMPLES), "tgweb.io.checkpoint" in sys.modules,
      progcache.build_id.cache_info().currsize, worker.hooks.cache_info().currsize)
"""


def test_preload_does_what_a_snapshot_holds_and_asks_for_no_hooks():
    """tgweb.worker.preload (run before a Pyodide memory snapshot is taken) imports every
    sample and the page's modules and hashes the build id, and never asks for the worker's
    hooks: hooks() keeps its first answer, which in the snapshot's Pyodide would be none."""
    out = subprocess.run([sys.executable, "-c", PRELOAD], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True", "1", "0"]
