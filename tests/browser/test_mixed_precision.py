"""precision="mixed" in Chromium: where the adapter offers shader-f16, the f16 kernels of
both adapter classes run through web/gpu.mjs against the reference; where it does not
(SwiftShader here), gpu.mjs refuses a mixed Program and tg.compile in Pyodide raises
PrecisionError, both naming the missing feature: never a silent f32 run."""

from __future__ import annotations

from test_kernels import build
from test_mixed_precision import F16_CASES, GPU16

from tgweb.codegen.target import Target
from tgweb.lower import lower

from .conftest import run_against_reference, run_py

COMPILE_MIXED = """
import tgweb as tg
from tgweb.samples import sin
tg.compile(sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER, precision="mixed")
"""


def _adapter_has_f16(page) -> bool:
    return page.evaluate("async () => (await navigator.gpu.requestAdapter()).features.has('shader-f16')")


def test_mixed_precision_in_chromium(page):
    programs = []
    for j, (fn, specs) in enumerate(F16_CASES):  # the big products in the GPU class only
        g = build(fn, specs)
        programs.append((g, lower(g, target=GPU16 if j >= 3 else Target(features=("shader-f16",)))))
    if _adapter_has_f16(page):
        for g, prog in programs:
            assert "shader-f16" in run_against_reference(page, g, prog)
        status, value = run_py(page, COMPILE_MIXED + "'compiled'")
        assert (status, value) == ("ok", "compiled"), value
        return
    why = page.evaluate(
        """async (program) => {
        try { await gpu.requestDevice({program: JSON.parse(program)}); return "no error"; }
        catch (e) { return e.message; }
    }""",
        programs[0][1].to_json(),
    )
    assert "shader-f16" in why, why
    status, value = run_py(page, COMPILE_MIXED)
    assert status == "error" and value["pyType"] == "PrecisionError", value
    assert "'shader-f16'" in value["message"] and "browser" in value["message"]
