"""A trained model as one small HTML file that runs without Python.

export_page() writes the inference Program (plain data), the trained weights and the
shim (web/device.mjs and web/gpu.mjs, as one module script) into one page: it opens
from disk (file:// is a secure context, so WebGPU is there) or from any static host,
takes its inputs from a form, and runs the model on the device's GPU. No Pyodide, no
compiler, no network.
"""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path
from typing import Any

from .arrays import from_user
from .ir import prod

_STYLE = """body{font:15px/1.45 system-ui,sans-serif;max-width:56rem;margin:2rem auto;padding:0 1rem}
textarea{width:100%;font:13px ui-monospace,monospace}pre{background:#f4f4f4;padding:.6rem;overflow:auto}
button{font-size:15px;padding:.3rem 1rem}.err{color:#b00}"""

# the page's own code: load the weights, run the Program on the form's inputs
_GLUE = """
const program = JSON.parse(document.getElementById("tg-program").textContent);
const weights = JSON.parse(document.getElementById("tg-weights").textContent);
const status = document.getElementById("tg-status"), out = document.getElementById("tg-out");
const TYPED = { f32: Float32Array, i32: Int32Array, bool: Uint32Array };
const bytes = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)).buffer;
try {
  const t0 = performance.now();
  const device = await requestDevice({ program });
  const rt = await instantiate(device, program);
  for (const [name, b64] of Object.entries(weights)) rt.write("params", name, bytes(b64));
  const scalars = Object.fromEntries((program.scalars || []).map((s) => [s.name, 0]));
  const names = Object.keys(program.outputs);
  async function run() {
    const inputs = {};
    for (const el of document.querySelectorAll("textarea[data-input]")) {
      const slot = program.inputs[el.dataset.input];
      const values = el.value.split(/[\\s,]+/).filter(Boolean).map(Number);
      if (values.some((v) => Number.isNaN(v))) {
        throw new Error(`input "${el.dataset.input}": not a list of numbers`);
      }
      inputs[el.dataset.input] = new TYPED[slot.dtype](values);
    }
    const got = await rt.run(inputs, scalars, names.map((n) => ["outputs", n]));
    const result = {};
    names.forEach((n, i) => (result[n] = Array.from(new TYPED[program.outputs[n].dtype](got[i]))));
    const show = (n) => `${n} [${program.outputs[n].shape}]: ` +
      result[n].map((v) => +v.toPrecision(6)).join(", ");
    out.textContent = names.map(show).join("\\n");
    window.tgResult = result;
    return result;
  }
  const button = document.getElementById("tg-run");
  button.onclick = () => run().catch((e) => { status.textContent = e.message; status.className = "err"; });
  await run();
  status.textContent = `ready in ${(performance.now() - t0).toFixed(0)} ms`;
  window.tgReady = { ms: performance.now() - t0 };
} catch (e) {
  status.textContent = e.message;
  status.className = "err";
  window.tgError = e.message;
}
"""


def export_page(
    inference,
    path: str | Path | None = None,
    *,
    title: str = "A tgweb model",
    example: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write one HTML file that runs `inference` (from Trainer.attach) with the trainer's
    current weights through the shim alone (web/device.mjs and web/gpu.mjs). `example`:
    input name -> values the form starts with (default zeros). The kernels are the CPU
    class's, which run on any adapter. Returns {"path", "bytes", "html"}; path=None only
    returns the text."""
    from .lower import lower

    graph = inference.traced()  # the whole graph, also where the Program came from the cache
    program = lower(graph, name="forward")
    example = dict(example or {})
    unknown = sorted(set(example) - set(graph.inputs))
    if unknown:
        raise ValueError(f"export_page: example has inputs the model does not take: {unknown}")
    program_data = json.loads(program.to_json())
    params = inference.trainer.params()
    weights = {
        n: base64.b64encode(_f32_bytes(params[n], slot.shape)).decode() for n, slot in program.params.items()
    }
    fields = []
    for n, t in graph.inputs.items():
        values = (
            from_user(example[n], t.shape, t.dtype, f"input {n!r}") if n in example else [0] * prod(t.shape)
        )
        text = ", ".join(repr(v) for v in values)
        fields.append(
            f'<label>{html.escape(n)} {list(t.shape)} {t.dtype}<textarea data-input="{html.escape(n)}" '
            f'rows="3">{html.escape(text)}</textarea></label>'
        )
    page = "\n".join(
        [
            "<!doctype html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>",
            "<p>A model trained with tgweb, running on this device's GPU through WebGPU: "
            "no Python, no compiler.</p>",
            *fields,
            '<p><button id="tg-run">Run</button> <span id="tg-status">starting the GPU…</span></p>',
            '<pre id="tg-out"></pre>',
            f'<script id="tg-program" type="application/json">{_json(program_data)}</script>',
            f'<script id="tg-weights" type="application/json">{_json(weights)}</script>',
            '<script type="module">',
            _gpu_source(),
            _GLUE,
            "</script></body></html>",
        ]
    )
    if path is not None:
        Path(path).write_text(page, encoding="utf-8")
    return {"path": str(path) if path is not None else None, "bytes": len(page.encode()), "html": page}


def _json(value) -> str:
    # inside <script>: no "</" may close the element early
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/")


def _f32_bytes(value, shape) -> bytes:
    return from_user(value, tuple(shape), "f32", "parameter").tobytes()


# the shim's files, in the order the page's one script holds them (gpu.mjs imports
# device.mjs); build.py packages each into the wheel as tgweb/_<name>
SHIM = ("device.mjs", "gpu.mjs")
# gpu.mjs's imports of device.mjs, and its re-exports of it: one script needs neither
_IMPORTS = re.compile(r'^(?:import|export) \{[^}]*\} from "\./device\.mjs";\n', re.M)


def js_files(names: tuple[str, ...]) -> list[Path]:
    """The package's JavaScript files web/<name>: the source checkout's when all are there,
    else the copies setup.py packages into the wheel (tgweb/_<name>)."""
    here = Path(__file__)
    for files in (
        [here.resolve().parents[1] / "web" / n for n in names],
        [here.with_name("_" + n) for n in names],
    ):
        if all(p.exists() for p in files):
            return files
    raise FileNotFoundError(
        f"web/{' and web/'.join(names)} are not in this installation of tgweb "
        "(a wheel built with setup.py carries them)"
    )


def _gpu_source() -> str:
    """web/device.mjs and web/gpu.mjs as one module's text (js_files)."""
    return "\n".join(_IMPORTS.sub("", p.read_text(encoding="utf-8")) for p in js_files(SHIM))
