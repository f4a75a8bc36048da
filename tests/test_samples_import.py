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
