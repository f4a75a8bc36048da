"""GPU time of attention's kernels in precision="mixed" in this machine's Chromium: the
forward (sdpa) and the two backward kernels (sdpa_grad_q, sdpa_grad_kv), through the
plain mixed kernels and, where the adapter offers chromium-experimental-subgroup-matrix
with an f16 -> f32 configuration, on subgroup matrices (codegen/attention_matrices.py: the forward up
to head dims of 128, the backward up to 64; else it says so and skips that column). Each kernel is timed alone
on the output of one run of the whole program (median of 5 passes of R dispatches,
timestamp queries), at shakespeare's shape by default (B 64, H 6, T 256, D 64,
causal). Then each variant is checked against the reference (NumPy) at batch 2 of the
same shape: the largest error of the output and of each gradient, relative to its
largest value.

    python3 benchmarks/attention_browser.py [--shape 64x6x256x64] [--not-causal] [--dropout 0.2]

On the H200, Chromium needs f16 turned on for the feature to appear:
`GPU_CHROMIUM_F16=1 . .gpuchrome/launch.sh` (../shared/tools/gpu-chromium).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

KINDS = ("sdpa", "sdpa_grad_q", "sdpa_grad_kv")
SEED = 1234567  # the dropout seed of the check

# runs a Program through web/gpu.mjs and reads every output back
_RUN = """async ([program, inputs, scalars]) => {
    const gpu = await import("/gpu.mjs");
    program = JSON.parse(program);
    const device = await gpu.requestDevice({program});
    const rt = await gpu.instantiate(device, program);
    const feeds = {};
    for (const [n, v] of Object.entries(inputs)) feeds[n] = new Float32Array(v);
    const names = Object.keys(program.outputs);
    const bufs = await rt.run(feeds, scalars, names.map((n) => ["outputs", n]));
    const out = {};
    names.forEach((n, i) => { out[n] = Array.from(new Float32Array(bufs[i])); });
    rt.destroy(); device.destroy();
    return out;
}"""


def graph(B: int, H: int, T: int, D: int, causal: bool, dropout: float):
    """q, k, v [B, H, T, D] (f32 inputs, read through their f16 copies), attention, and the
    gradients of sum(O * cot)."""
    import tgweb as tg
    from tgweb import ops
    from tgweb.grad import append_grad
    from tgweb.ir import Graph, tracing
    from tgweb.ops.half import copy_early

    g = Graph(precision="mixed")
    with tracing(g):
        ins = [g.input(n, (B, H, T, D)) for n in "qkv"]
        g.on_add = copy_early
        o = tg.scaled_dot_product_attention(*ins, is_causal=causal, dropout_p=dropout)
        g.on_add = None
        g.outputs["o"] = o
        loss = ops.sum(o * g.input("cot", o.shape))
        grads = append_grad(g, loss, ins)
        for n, x in zip("qkv", ins):
            g.outputs["g_" + n] = grads[x.id]
    return g


def variants(target):
    """(label, target) of each column: the plain mixed kernels, and the kernels on subgroup
    matrices where the target has them (else a line saying why not)."""
    from tgweb.codegen import sgmat
    from tgweb.codegen.target import MATRIX_FEATURE

    if not target.has("shader-f16"):
        print(
            f"SKIPPED: this adapter has no shader-f16, so no mixed precision and no subgroup matrices "
            f"(features {list(target.features)}); on the H200 source launch.sh with GPU_CHROMIUM_F16=1",
            flush=True,
        )
        return []
    plain = dataclasses.replace(target, features=tuple(f for f in target.features if f != MATRIX_FEATURE))
    out = [("plain mixed", plain)]
    if sgmat.config(target) is None:
        print(
            f"subgroup matrices: SKIPPED, this adapter does not offer {MATRIX_FEATURE} with an "
            f"f16 -> f32 configuration, shader-f16, subgroups and one subgroup size (features "
            f"{list(target.features)}, configurations {list(target.matrix_configs)}, subgroup sizes "
            f"{target.subgroup_sizes}); on the H200 source launch.sh with GPU_CHROMIUM_F16=1",
            flush=True,
        )
    else:
        out.append(("subgroup matrices", target))
    return out


def check(run, H: int, T: int, D: int, causal: bool, dropout: float, target) -> dict:
    """Each output's largest error against the reference at batch 2, relative to its
    largest value; run(prog, feeds as lists, seeds) -> the outputs as lists."""
    import numpy as np

    from tgweb.backends.reference import Context, evaluate
    from tgweb.lower import lower

    g = graph(2, H, T, D, causal, dropout)
    prog = lower(g, target=target)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(x.shape).astype(np.float32) for n, x in g.inputs.items()}
    got = run(prog, {n: v.ravel().tolist() for n, v in feeds.items()}, {s.name: SEED for s in prog.scalars})
    cx = Context()
    cx.scalars = {n: SEED for n in g.scalars}
    want = evaluate(g, list(g.outputs.values()), {g.inputs[n].id: v for n, v in feeds.items()}, cx)
    errs = {}
    for (n, x), w in zip(g.outputs.items(), want):
        w = np.asarray(w)
        errs[n] = float(np.abs(np.array(got[n]).reshape(x.shape) - w).max() / max(np.abs(w).max(), 1e-30))
    return errs


def on_matrices(prog) -> bool:
    return any("sdpa" in k.ops and "subgroupMatrix" in k.wgsl for k in prog.kernels)


def main(argv: list[str]) -> int:
    import bench

    from tgweb.lower import lower

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="64x6x256x64", help="BxHxTxD")
    ap.add_argument("--not-causal", action="store_true")
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--reps", type=int, default=10, help="dispatches per timed pass")
    a = ap.parse_args(argv)
    B, H, T, D = (int(x) for x in a.shape.split("x"))
    causal = not a.not_causal
    srv, url = bench.serve_bench_site()
    from playwright.sync_api import sync_playwright

    failed = 0
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=bench.CHROMIUM, args=bench.ARGS)
        ctx, page, logs = bench._new_page(browser, url)
        page.set_default_timeout(600_000)
        print(f"adapter: {page.evaluate('() => harness.adapterInfo()')}")
        target = bench.page_target(page)
        print(f"attention B {B} H {H} T {T} D {D}, causal {causal}, dropout {a.dropout}, mixed", flush=True)
        for label, t in variants(target):
            prog = lower(graph(B, H, T, D, causal, a.dropout), target=t)
            if on_matrices(prog) != (label == "subgroup matrices"):
                print(f"  {label}: SKIPPED, the matrix kernel does not take this shape (matrix_plan)")
                continue
            for kind in KINDS:
                opts = {"reps": a.reps, "only": kind}
                try:
                    r = page.evaluate("([p, o]) => harness.tgwebKernelTime(p, o)", [prog.to_json(), opts])
                except Exception as e:  # a WGSL form Tint refuses, say
                    print(f"  {label:>17} {kind:>13}: FAILED: {str(e)[:2000]}", flush=True)
                    failed += 1
                    continue
                print(
                    f"  {label:>17} {kind:>13}: {r['ms']:8.3f} ms ({r['kernel']}, dispatch {r['dispatch']})",
                    flush=True,
                )
            # the check: batch 2 of the same shape against the reference
            try:
                errs = check(
                    lambda prog, feeds, seeds: page.evaluate(_RUN, [prog.to_json(), feeds, seeds]),
                    H,
                    T,
                    D,
                    causal,
                    a.dropout,
                    t,
                )
            except Exception as e:
                print(f"  {label:>17} check: FAILED to run: {str(e)[:2000]}", flush=True)
                failed += 1
                continue
            bad = errs["o"] > 2e-3 or any(v > 1e-2 for v in errs.values())
            failed += bad
            print(
                f"  {label:>17} check at batch 2: "
                + ", ".join(f"{n} {v:.1e}" for n, v in errs.items())
                + (" WRONG" if bad else " ok")
                + " (largest error / largest value)",
                flush=True,
            )
        for line in logs[-20:]:
            print("  page:", line[:500])
        ctx.close()
        browser.close()
    srv.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
