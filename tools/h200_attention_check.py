"""Attention on subgroup matrices, checked and timed in Chromium on a machine where
playwright cannot travel (the H200 with ../shared/tools/gpu-chromium's .gpuchrome):

    # here: the programs, compiled for the H200's adapter (Chromium 156, f16 on), their
    # inputs and the reference's outputs
    .venv/bin/python tools/h200_attention_check.py prepare tools/h200_attn.json
    # there, stdlib only (cdp.py), after `GPU_CHROMIUM_F16=1 . .gpuchrome/launch.sh`:
    python3 tools/h200_attention_check.py run tools/h200_attn.json

`run` serves web/ (gpu.mjs) and the data, and prints for each case the largest error of
each output relative to its largest value, then the GPU time of each attention kernel
(plain mixed and on matrices) at shakespeare's shape (B 64, H 6, T 256, D 64, causal).
If the adapter lacks chromium-experimental-subgroup-matrix or shader-f16 it says so."""

from __future__ import annotations

import functools
import http.server
import json
import os
import shlex
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MATRIX = "chromium-experimental-subgroup-matrix"
H200 = {  # adapter info of the H200 in Chromium 156 with vulkan_enable_f16_on_nvidia
    "vendor": "nvidia",
    "description": "NVIDIA H200",
    "subgroupMinSize": 32,
    "subgroupMaxSize": 32,
    "features": ["shader-f16", "subgroups", "timestamp-query", MATRIX],
    "subgroupMatrixConfigs": [
        {"componentType": "f16", "resultComponentType": "f32", "M": 16, "N": 16, "K": 16},
        {"componentType": "f16", "resultComponentType": "f32", "M": 16, "N": 8, "K": 16},
    ],
}


def _b64(a) -> str:
    import base64

    import numpy as np

    return base64.b64encode(np.ascontiguousarray(a, np.float32).tobytes()).decode()


def prepare(out: str) -> None:
    import dataclasses

    import numpy as np

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from attention_browser import graph

    import tgweb as tg
    from tgweb.backends.reference import Context, evaluate
    from tgweb.codegen.target import MATRIX_FEATURE, classify
    from tgweb.grad import append_grad
    from tgweb.ir import Graph, tracing
    from tgweb.lower import lower
    from tgweb.ops.half import copy_early

    target = classify(H200)
    plain = dataclasses.replace(target, features=tuple(f for f in target.features if f != MATRIX_FEATURE))

    def masked(B, H, T, D):  # an additive mask, not causal, odd T
        g = Graph(precision="mixed")
        with tracing(g):
            ins = [g.input(n, (B, H, T, D)) for n in "qkv"]
            m = g.input("m", (T, T))
            g.on_add = copy_early
            o = tg.scaled_dot_product_attention(*ins, m)
            g.on_add = None
            g.outputs["o"] = o
            grads = append_grad(g, tg.ops.sum(o * g.input("cot", o.shape)), ins)
            for n, x in zip("qkv", ins):
                g.outputs["g_" + n] = grads[x.id]
        return g

    cases = []
    rng = np.random.default_rng(0)
    for name, g in (
        ("causal 1x1x200x64", graph(1, 1, 200, 64, True, 0.0)),
        ("masked 1x2x70x128", masked(1, 2, 70, 128)),
        ("causal 2x3x45x16 dropout", graph(2, 3, 45, 16, True, 0.2)),
    ):
        feeds = {n: rng.standard_normal(x.shape).astype(np.float32) for n, x in g.inputs.items()}
        cx = Context()
        cx.scalars = {n: 1234567 for n in g.scalars}
        want = evaluate(g, list(g.outputs.values()), {g.inputs[n].id: v for n, v in feeds.items()}, cx)
        programs = {}
        for label, t in (("plain", plain), ("matrices", target)):
            prog = lower(g, target=t)
            mx = any("sdpa" in k.ops and "subgroupMatrix" in k.wgsl for k in prog.kernels)
            assert mx == (label == "matrices"), (name, label)
            programs[label] = prog.to_json()
        cases.append(
            {
                "name": name,
                "programs": programs,
                "inputs": {n: _b64(v) for n, v in feeds.items()},
                "scalars": {s.name: 1234567 for s in prog.scalars},
                "want": {n: _b64(w) for n, w in zip(g.outputs, want)},
            }
        )
    timing = []
    for label, t in (("plain", plain), ("matrices", target)):
        prog = lower(graph(64, 6, 256, 64, True, 0.0), target=t)
        timing.append({"name": label, "program": prog.to_json()})
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps({"cases": cases, "timing": timing}))
    print(f"wrote {out} ({Path(out).stat().st_size / 1e6:.1f} MB)")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path != "/blank.html":
            return super().do_GET()
        body = b"<!doctype html><title>h200 attention</title>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def run(data: str) -> int:
    sys.path[:0] = [str(ROOT / ".gpuchrome"), str(ROOT.parents[1] / "shared/tools/gpu-chromium")]
    import cdp

    handler = functools.partial(_Quiet, directory=str(ROOT))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    args = shlex.split(os.environ.get("GPU_CHROMIUM_FLAGS", ""))
    with cdp.Browser(os.environ["GPU_CHROMIUM"], args) as b:
        page = b.new_page()
        page.goto(url + "/blank.html")
        js = (ROOT / "tools" / "h200_attention_check.mjs").read_text()
        expr = f"{js}({json.dumps('/' + str(Path(data).resolve().relative_to(ROOT)))})"
        print(page.evaluate(expr, timeout=540))
    srv.shutdown()
    return 0


if __name__ == "__main__":
    cmd, path = sys.argv[1:3]
    sys.exit(prepare(path) if cmd == "prepare" else run(path))
