"""The native backend without an adapter: a clear message, and the reference backend works."""

from __future__ import annotations

import os
import subprocess
import sys

CODE = r"""
import importlib
from tgweb.backends import native
assert not native.available()
assert native.adapter_info() == {}
try:
    native._device()
except native.NativeError as e:
    msg = str(e)
assert "no WebGPU adapter" in msg and "mesa-vulkan-drivers" in msg and "reference" in msg, msg
tgc = importlib.import_module("tgweb.compile")
assert tgc.default_backend() == "reference"
from tgweb.samples import get
s = get("sin")
tr = tgc.compile(s.Model(), s.loss_fn, s.INPUTS, s.OPTIMIZER, seed=0)
losses = [float(tr.step(**s.batch(i)).loss) for i in range(3)]
assert losses[-1] < losses[0], losses
print("ok")
"""


def test_no_adapter_clear_message_and_reference_still_works():
    env = dict(os.environ, VK_ICD_FILENAMES="/nonexistent/icd.json", WGPU_BACKEND_TYPE="Vulkan")
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]
