"""Endurance in the browser: many steps make no new GPU buffers or pipelines and do not
grow Python's (WebAssembly) memory. The suite runs a few hundred steps; run
ENDURANCE_STEPS=2000 ENDURANCE_SAMPLE=addition for the long run."""

from __future__ import annotations

import os

from .conftest import py

STEPS = int(os.environ.get("ENDURANCE_STEPS", "300"))
SAMPLE = os.environ.get("ENDURANCE_SAMPLE", "sin")

SOURCE = """
import js
import pyodide_js
import tgweb as tg
from tgweb import samples

# count what the device creates and destroys, from here on
js.eval('''(() => {
  const P = GPUDevice.prototype, B = GPUBuffer.prototype;
  if (self.tgCounts) return;
  self.tgCounts = { buffers: 0, destroyed: 0, pipelines: 0 };
  const wrap = (o, k, f) => { const g = o[k]; o[k] = function (...a) { f(); return g.apply(this, a); }; };
  wrap(P, "createBuffer", () => self.tgCounts.buffers++);
  wrap(B, "destroy", () => self.tgCounts.destroyed++);
  wrap(P, "createComputePipeline", () => self.tgCounts.pipelines++);
  wrap(P, "createComputePipelineAsync", () => self.tgCounts.pipelines++);
})()''')

def counts():
    c = js.self.tgCounts
    return {"live_buffers": c.buffers - c.destroyed, "pipelines": c.pipelines,
            "wasm_bytes": pyodide_js._module.HEAP8.length}

s = samples.get(SAMPLE)
tr = tg.compile(s.Model(), s.loss_fn, inputs=s.INPUTS, optimizer=s.OPTIMIZER)
batches = [s.batch(i) for i in range(16)]
for i in range(20):
    tr.step(**batches[i % 16])
before = counts()
losses = [tr.step(**batches[i % 16]).loss for i in range(STEPS)]
after = counts()
{"before": before, "after": after, "last": losses[-1]}
"""


def test_steps_make_no_new_buffers_pipelines_or_memory(page):
    page.set_default_timeout(max(120_000, STEPS * 1_000))  # the long run: about 0.3 s a step here
    try:
        out = py(page, SOURCE.replace("SAMPLE", repr(SAMPLE)).replace("STEPS", str(STEPS)))
    finally:
        page.set_default_timeout(120_000)
    print(f"\nendurance, {SAMPLE} x {STEPS} steps:", out)
    before, after = out["before"], out["after"]
    assert after["live_buffers"] == before["live_buffers"]
    assert after["pipelines"] == before["pipelines"]
    assert after["wasm_bytes"] <= before["wasm_bytes"] + (1 << 20)  # no growth beyond one MiB
    assert out["last"] == out["last"]  # finite (not NaN)
