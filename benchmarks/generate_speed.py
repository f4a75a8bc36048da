#!/usr/bin/env python3
"""Generation speed (issue 36, item 3): characters per second of the shakespeare page's
sampler beside nanoGPT's `generate` in PyTorch on the same GPU, in one run. Prints
figures; not a test.

    python3 benchmarks/generate_speed.py [--size full|small] [--length 500] [--rounds 3]
        [--top-k 200] [--temperature 0.8] [--precision float32|mixed] [--json PATH]
    python3 benchmarks/generate_speed.py --tiny     # the small size, 60 characters: checks the script

The page's sampler: the sample's `next_token` attached to its trainer (keys and values
cached on the GPU between runs, the next character drawn there with temperature and
top-k) read through `stream_cached`, with the runs sent AHEAD (240, the page's LENGTH) in
front of the one read, as the page sends them. It runs natively (wgpu-py, CPython) and,
when GPU_CHROMIUM is set (../shared/tools/gpu-chromium/README.md; GPU_CHROMIUM_F16=1 for
mixed precision) or --chromium is given, in tgweb's worker in Chromium as
benchmarks/bench.py launches it. The model is the sample at its size (full: block 256,
6 layers, 384 wide) with its initial weights: a character's work does not depend on them.

nanoGPT's generate, written here in its style (our own code): each new character crops
the context to the block, runs the whole forward over it, takes the last position's
logits / temperature, keeps the top-k (k cut to the vocabulary), softmax, one
torch.multinomial draw, appends it; in fp32 and in bf16 autocast, on CUDA when there
(else the CPU), timed to the last character on the device (torch.cuda.synchronize).

Each sampler draws --length characters after "\\n" (nanoGPT's sample.py draws 500 with
top-k 200 and temperature 0.8: the defaults), --rounds times after a warm-up; the figure
is the median round. Past BLOCK characters nanoGPT's forward covers a full window every
character, and tgweb refills its cache from the last BLOCK // 2 every BLOCK // 2
characters: both costs are inside the figures. The issue's target: the page's sampler at
least as fast as nanoGPT's generate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

AHEAD = 240  # runs sent ahead of the one read: the page's LENGTH, all of a show() sent at once

# the page's sampler, timed; natively in CPython, in Chromium through tg.run (globals SIZE,
# PRECISION ("auto": the sample's choice), LENGTH, ROUNDS, WARM, TOP_K, TEMPERATURE, AHEAD)
SOURCE = """
import itertools
import time
from tgweb import samples
from tgweb.samples import shakespeare

sample = shakespeare.sized(SIZE)
t = time.perf_counter()
tr = samples.compile(sample, seed=0, **({} if PRECISION == "auto" else {"precision": PRECISION}))
sampler = tr.attach(sample.next_token, inputs=sample.TOKEN_INPUTS)
compile_s = time.perf_counter() - t


def rate(n):
    t = time.perf_counter()
    draws = sample.stream_cached(sampler, temperature=TEMPERATURE, top_k=TOP_K, ahead=AHEAD)
    got = "".join(itertools.islice(draws, n))
    return len(got) / (time.perf_counter() - t)


rate(WARM)  # the pipelines made, the GPU clocked up
rates = [rate(LENGTH) for _ in range(ROUNDS)]
out = {"compile_s": compile_s, "precision": tr.precision, "chars_per_s": rates}
tr.close()
out
"""


def run_native(source: str, globals_: dict):
    """Runs source (its last line an expression) in CPython with globals_; its value."""
    ns = dict(globals_)
    *body, last = source.strip().splitlines()
    exec(compile("\n".join(body), "bench source", "exec"), ns)
    return ns[last.strip()]


def run_chromium(page, source: str, globals_: dict):
    """The same in tgweb's worker (bench.tgweb_page's page); an error as {"error": ...}."""
    return page.evaluate(
        "([src, g]) => window.tg.run(src, { globals: g })"
        ".catch((e) => ({ error: String(e.message).split('\\n').slice(-2).join(' ') }))",
        [source, globals_],
    )


def nanogpt_generate(
    cfg, length: int, mode: str, top_k: int | None = None, temperature: float = 1.0, rounds: int = 3
) -> dict:
    """nanoGPT's generate of scale.py's PyTorch GPT (its initial weights), `length`
    characters after "\\n": characters/s of each round to the last one on the device.
    mode: "fp32" or "bf16" (autocast); top_k None: every character."""
    import torch
    from scale import torch_gpt
    from torch.nn import functional as F

    from tgweb.samples import shakespeare

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    m = torch_gpt(cfg).to(dev).eval()

    def logits(idx):
        x = m.wte(idx) + m.wpe.weight[: idx.shape[1]]
        for blk in m.h:
            x = blk(x)
        return m.ln_f(x) @ m.wte.weight.T

    @torch.no_grad()
    def generate(n):
        idx = torch.tensor([shakespeare.encode("\n")], device=dev)
        for _ in range(n):
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=mode == "bf16"):
                last = logits(idx[:, -cfg.block :])[:, -1, :].float() / temperature
            if top_k is not None:
                v, _ = torch.topk(last, min(top_k, last.size(-1)))
                last[last < v[:, [-1]]] = -float("inf")
            nxt = torch.multinomial(F.softmax(last, dim=-1), 1)
            idx = torch.cat((idx, nxt), dim=1)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return idx

    generate(8)  # kernels loaded
    rates = []
    for _ in range(rounds):
        t = time.perf_counter()
        generate(length)
        rates.append(length / (time.perf_counter() - t))
    where = torch.cuda.get_device_name() if dev.type == "cuda" else "CPU"
    return {"chars_per_s": rates, "where": f"torch {torch.__version__} {mode}, {where}"}


def _line(where: str, r: dict) -> str:
    if "error" in r or "skipped" in r:
        return f"| {where} | {r.get('error') or r['skipped']} | |"
    rates = r["chars_per_s"]
    extra = f"{r['precision']}, compile {r['compile_s']:.1f} s" if "precision" in r else ""
    return f"| {where} | {statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f}) | {extra} |"


def _versus(results: dict) -> str:
    """Each tgweb sampler's median over the faster nanoGPT mode's: the issue's target is >= 1."""
    med = {k: statistics.median(r["chars_per_s"]) for k, r in results.items() if "chars_per_s" in r}
    torch = max((v for k, v in med.items() if k.startswith("nanoGPT")), default=None)
    if torch is None:
        return "no nanoGPT figure to compare with"
    return (
        "; ".join(
            f"{k} / nanoGPT's faster mode: {v / torch:.2f}x" for k, v in med.items() if k.startswith("tgweb")
        )
        + " (target >= 1)"
    )


def _tgweb_runs(a, g: dict) -> dict:
    out = {"tgweb native": run_native(SOURCE, g)}
    if os.environ.get("GPU_CHROMIUM") or a.chromium:
        import bench  # its Chromium, flags and site server

        with bench.tgweb_page() as (page, adapter):
            page.set_default_timeout(0)
            out[f"tgweb chromium ({adapter.get('description') or adapter.get('vendor')})"] = run_chromium(
                page, SOURCE, g
            )
    else:
        why = "skipped: GPU_CHROMIUM is not set (../shared/tools/gpu-chromium/README.md)"
        out["tgweb chromium"] = {"skipped": why}
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=("full", "small"), default="full")
    ap.add_argument("--length", type=int, default=500, help="characters a round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--top-k", type=int, default=200, help="0: every character (nanoGPT's None)")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--precision", choices=("float32", "mixed"), help="instead of the sample's choice")
    ap.add_argument("--tiny", action="store_true", help="the small size, 60 characters: checks the script")
    ap.add_argument("--chromium", action="store_true", help="Chromium without GPU_CHROMIUM too (SwiftShader)")
    ap.add_argument("--json", metavar="PATH", help="also write every measurement as JSON")
    a = ap.parse_args(argv)
    if a.tiny:
        a.size, a.length, a.rounds = "small", 60, 2
    from tgweb.samples import shakespeare

    cfg = shakespeare.SIZES[a.size]
    g = {"SIZE": a.size, "PRECISION": a.precision or "auto", "LENGTH": a.length, "ROUNDS": a.rounds}
    g.update(WARM=min(a.length, 32), TOP_K=a.top_k, TEMPERATURE=a.temperature, AHEAD=AHEAD)
    results = _tgweb_runs(a, g)
    try:
        import torch  # noqa: F401
    except ImportError:
        results["nanoGPT generate"] = {"skipped": "skipped: PyTorch is not installed"}
    else:
        for mode in ("fp32", "bf16"):
            r = nanogpt_generate(cfg, a.length, mode, a.top_k or None, a.temperature, a.rounds)
            results[f"nanoGPT generate ({r['where']})"] = r
    print(
        f"shakespeare {a.size} ({cfg.layers} layers, {cfg.dim} wide, block {cfg.block}): {a.length} "
        f"characters after a newline, top-k {a.top_k or 'off'}, temperature {a.temperature}, "
        f"median of {a.rounds} rounds"
    )
    print("| sampler | characters/s (range) | |\n|---|---|---|")
    print("\n".join(_line(k, r) for k, r in results.items()))
    print(_versus(results))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
