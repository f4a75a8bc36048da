#!/usr/bin/env python3
"""GPTs at real size (issue 30): tgweb natively (wgpu-py) and in Chromium against PyTorch
on the same GPU, in one run. Prints a Markdown table for benchmarks/RESULTS.md; not a test.

    python3 benchmarks/scale.py [--steps 30] [--only 10.7M] [--json PATH]
    python3 benchmarks/scale.py --only 124M --engine mixed --engine bf16   # GPT-2 small
    python3 benchmarks/scale.py --tiny      # a tiny GPT, to check the script on a CPU
    python3 benchmarks/scale.py --tiny-gpt2 # the same, GPT-2's code path (random tokens)

Models: the shakespeare sample's GPT (tgweb.samples.shakespeare) at three sizes, block
256, batch 64, dropout 0.2, AdamW with clipping: 0.8M (4 layers, 128 wide), 10.7M (the
sample: 6 layers, 384 wide) and 38M (12 layers, 512 wide). Batches are windows of
tiny-shakespeare, the same for every engine. And GPT-2 small's shape (issue 36:
shakespeare.GPT2, 124M parameters: 12 layers, 12 heads, 768 wide, block 1024, vocabulary
50,304, no dropout) on tokens drawn uniformly at random, batch 8 (8,192 tokens a step):
the f32 logits of batch 8 (1.65 GB) fit Chromium's 2 GiB storage binding on the H200,
nanoGPT's batch 12 would not (tests/test_gpt2_shape.py plans it for those limits).

Engines:
  tgweb native fp32 / mixed   samples.compile(..., backend="native", precision=...):
                  steps pipelined, every loss read one step late (as the page's loops
                  read them); mixed: f16 operands and activations, f32 accumulation
                  (needs shader-f16 on the adapter, else its row says why)
  tgweb chromium fp32 / mixed the same in tgweb's worker in headless Chromium, launched
                  as benchmarks/bench.py launches it; only when GPU_CHROMIUM is set (see
                  ../shared/tools/gpu-chromium/README.md; GPU_CHROMIUM_F16=1 for mixed),
                  else skipped with the reason
  torch ...       the same GPT written in PyTorch and trained as nanoGPT's train.py trains
                  it (issue 35's fair yardstick): attention by
                  F.scaled_dot_product_attention, fused AdamW where PyTorch has it (CUDA),
                  the loss read only every LOG_INTERVAL steps; in fp32 (TF32 off,
                  PyTorch's default), tf32 (TF32 matmuls), bf16 (bf16 autocast) and
                  bf16 + compile (the same under torch.compile, nanoGPT's default)
  (PyTorch runs on CUDA when there, else on the CPU.)

Figures: ms per iteration, tokens/s (batch * block / s), peak GPU memory (tgweb: the
planned buffers, total_bytes of trainer.memory_report(); PyTorch:
torch.cuda.max_memory_allocated), and compile time (tgweb: tg.compile's wall time,
parameter initialisation included; PyTorch: its first step, which sets up cuBLAS and the
kernels, and compiles under torch.compile). tgweb: the median of --steps iterations
after a warm-up of at least 1 s. PyTorch queues work ahead of the GPU, so a step's wall
time means nothing alone: its figure is the median over blocks of LOG_INTERVAL steps,
each block ended by the loss read nanoGPT makes there (which waits for the GPU), of the
block's time / LOG_INTERVAL, after the same warm-up.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from tgweb import samples  # noqa: E402
from tgweb.samples import shakespeare  # noqa: E402

# the other sizes are planned without the sample's memory budget; 10.7M is the sample
# as it ships, planned within its MAX_MEMORY (1.5 GB: products recomputed in the backward)
_GPT = dict(block=256, batch=64, dropout=0.2, max_memory=None)
MODELS = {
    "0.8M": dataclasses.replace(shakespeare.FULL, layers=4, heads=4, dim=128, **_GPT),
    "10.7M": shakespeare.FULL,
    "38M": dataclasses.replace(shakespeare.FULL, layers=12, heads=8, dim=512, **_GPT),
    "124M": shakespeare.GPT2,
}
TINY = dataclasses.replace(shakespeare.SMALL, layers=1, heads=2, dim=32, block=16, batch=4, dropout=0.2)
# GPT-2's path at a CPU's size: random tokens of a vocabulary over 256, no dropout
TINY_GPT2 = dataclasses.replace(TINY, vocab=503, dropout=0.0)
WARMUP_S = 1.0
LOG_INTERVAL = 10  # nanoGPT's log_interval: the loss is read (.item()) every this many steps


def _timed_steps(step, batches, steps: int) -> list[float]:
    """ms of each of `steps` calls of step(batch) after a warm-up of >= WARMUP_S and 3 steps."""
    t0, i = time.perf_counter(), 0
    while i < 3 or time.perf_counter() - t0 < WARMUP_S:
        step(batches[i % len(batches)])
        i += 1
    out = []
    for i in range(steps):
        t = time.perf_counter()
        step(batches[i % len(batches)])
        out.append(1000 * (time.perf_counter() - t))
    return out


# ---------------------------------------------------------------- tgweb


def tgweb_native(cfg, batches, steps: int, precision: str = "float32") -> dict:
    sample = shakespeare.Sample(cfg)
    t = time.perf_counter()
    tr = samples.compile(sample, backend="native", seed=0, precision=precision)
    compile_s = time.perf_counter() - t
    prev = [None]

    def step(b):
        r = tr.step(**b)
        if prev[0] is not None:
            _ = prev[0].loss  # the previous step's loss, read once it is back
        prev[0] = r

    ms = _timed_steps(step, batches, steps)
    _ = prev[0].loss
    out = {"ms": ms, "compile_s": compile_s, "peak_bytes": tr.memory_report()["total_bytes"]}
    tr.close()
    return out


# the same loop as tgweb_native, in the worker (CFG, as JSON: a None reaches Pyodide as
# jsnull, and the batches come as globals)
PAGE_SOURCE = """
import array
import json
import time
from tgweb import samples
from tgweb.samples import shakespeare
sample = shakespeare.Sample(shakespeare.Config(**json.loads(CFG)))
batches = [{k: array.array("i", v) for k, v in b.items()} for b in BATCHES]
t = time.perf_counter()
tr = samples.compile(sample, seed=0, precision=PRECISION)
compile_s = time.perf_counter() - t
ms, prev, t0, i = [], None, time.perf_counter(), 0
while len(ms) < STEPS:
    t = time.perf_counter()
    r = tr.step(**batches[i % len(batches)])
    if prev is not None:
        prev.loss
    prev, i = r, i + 1
    if i > 3 and time.perf_counter() - t0 > WARMUP_S:
        ms.append(1000 * (time.perf_counter() - t))
prev.loss
out = {"ms": ms, "compile_s": compile_s, "peak_bytes": tr.memory_report()["total_bytes"]}
tr.close()
out
"""


def tgweb_chromium(page, cfg, batches, steps: int, precision: str = "float32") -> dict:
    feeds = [{k: list(v) for k, v in b.items()} for b in batches]
    return page.evaluate(
        "([src, g]) => window.tg.run(src, { globals: g })"
        ".catch((e) => ({ error: String(e.message).split('\\n').slice(-2).join(' ') }))",
        [
            PAGE_SOURCE,
            {
                "CFG": json.dumps(dataclasses.asdict(cfg)),
                "BATCHES": feeds,
                "STEPS": steps,
                "WARMUP_S": WARMUP_S,
                "PRECISION": precision,
            },
        ],
    )


# ---------------------------------------------------------------- PyTorch


def torch_gpt(cfg):
    """The shakespeare GPT in PyTorch as nanoGPT writes it (no biases, tied head, attention
    by scaled_dot_product_attention, its flash path where PyTorch has one)."""
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d = cfg.dim
            self.ln_1, self.ln_2 = nn.LayerNorm(d, bias=False), nn.LayerNorm(d, bias=False)
            self.c_attn, self.c_proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
            self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)
            self.drop = nn.Dropout(cfg.dropout)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = (
                a.view(b, t, cfg.heads, d // cfg.heads).transpose(1, 2)
                for a in self.c_attn(self.ln_1(x)).split(d, -1)
            )
            p = cfg.dropout if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
            x = x + self.drop(self.c_proj(y.transpose(1, 2).reshape(b, t, d)))
            return x + self.drop(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(shakespeare.vocab(cfg), cfg.dim)
            self.wpe = nn.Embedding(cfg.block, cfg.dim)
            self.h = nn.ModuleList([Block() for _ in range(cfg.layers)])
            self.ln_f = nn.LayerNorm(cfg.dim, bias=False)
            self.drop = nn.Dropout(cfg.dropout)
            for p in self.parameters():
                if p.dim() > 1:
                    nn.init.normal_(p, 0.0, 0.02)

        def forward(self, tokens, targets):
            x = self.drop(self.wte(tokens) + self.wpe.weight[: tokens.shape[1]])
            for blk in self.h:
                x = blk(x)
            logits = self.ln_f(x) @ self.wte.weight.T
            return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    return GPT()


TORCH_MODES = ("fp32", "tf32", "bf16", "bf16 + compile")


def pytorch(cfg, batches, steps: int, mode: str) -> dict:
    """nanoGPT's train loop: autocast where bf16, clipping, fused AdamW on CUDA, the loss
    read every LOG_INTERVAL steps; ms per step from blocks of LOG_INTERVAL steps."""
    import torch

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = mode == "tf32"
    torch.manual_seed(0)
    model = torch_gpt(cfg).to(dev)
    decay = [p for p in model.parameters() if p.dim() > 1]
    rest = [p for p in model.parameters() if p.dim() <= 1]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.99),
        **({"fused": True} if dev.type == "cuda" else {}),
    )
    run = torch.compile(model) if mode.endswith("compile") else model
    tb = [
        {
            k: torch.tensor(list(v), dtype=torch.long, device=dev).view(cfg.batch, cfg.block)
            for k, v in b.items()
        }
        for b in batches
    ]
    count = [0]

    def step(b):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=mode.startswith("bf16")):
            loss = run(**b)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        count[0] += 1
        if count[0] % LOG_INTERVAL == 0:
            loss.item()  # nanoGPT's log line: waits for the GPU

    def block(b):  # LOG_INTERVAL steps, ending at a loss read
        count[0] = 0
        for i in range(LOG_INTERVAL):
            step(tb[(b + i) % len(tb)])

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    block(0)
    first_s = time.perf_counter() - t
    ms = [m / LOG_INTERVAL for m in _timed_steps(block, range(len(tb)), max(1, steps // LOG_INTERVAL))]
    peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else None
    where = torch.cuda.get_device_name() if dev.type == "cuda" else "CPU"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    return {
        "ms": ms,
        "compile_s": first_s,
        "peak_bytes": peak,
        "where": f"torch {torch.__version__}, {where}",
    }


# ---------------------------------------------------------------- the run


def _row(model, engine, cfg, r) -> str:
    if "error" in r or "skipped" in r:
        return f"| {model} | {engine} | {r.get('error') or r['skipped']} | | | |"
    ms = statistics.median(r["ms"])
    tok = cfg.batch * cfg.block / (ms / 1000)
    peak = f"{r['peak_bytes'] / 1e6:,.1f} MB" if r.get("peak_bytes") else "n/a"
    return f"| {model} | {engine} | {ms:.1f} | {tok:,.0f} | {peak} | {r['compile_s']:.1f} |"


def _engines(chromium_page):
    out = {}
    for label, precision in (("fp32", "float32"), ("mixed", "mixed")):
        out[f"tgweb native {label}"] = lambda cfg, b, n, p=precision: tgweb_native(cfg, b, n, p)
        if chromium_page is None:
            reason = "skipped: GPU_CHROMIUM is not set (../shared/tools/gpu-chromium/README.md)"
            out[f"tgweb chromium {label}"] = lambda cfg, b, n: {"skipped": reason}
        else:
            out[f"tgweb chromium {label}"] = lambda cfg, b, n, p=precision: tgweb_chromium(
                chromium_page, cfg, b, n, p
            )
    for mode in TORCH_MODES:
        out[f"torch {mode}"] = lambda cfg, b, n, mode=mode: pytorch(cfg, b, n, mode)
    return out


def _native_adapter() -> str:
    try:
        from tgweb.backends import native

        return str(native.adapter_info())
    except Exception as e:  # no wgpu-py or no adapter: the native rows say so too
        return f"none ({type(e).__name__}: {str(e)[:120]})"


def _torch_device() -> str:
    try:
        import torch
    except ImportError:
        return "torch: not installed"
    where = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    return f"torch {torch.__version__} on {where}"


def run(models: dict, steps: int, chromium_page, adapter: str, only=()) -> tuple[list[str], dict]:
    rows, results = [], {}
    print(f"tgweb native on {_native_adapter()}\nchromium: {adapter}\n{_torch_device()}", flush=True)
    print("| model | engine | ms/iteration | tokens/s | peak GPU memory | compile, s |")
    print("|---|---|---|---|---|---|")
    for name, cfg in models.items():
        sample = shakespeare.Sample(cfg)
        batches = [sample.batch(i) for i in range(8)]
        for engine, fn in _engines(chromium_page).items():
            if only and not any(w in engine for w in only):
                continue
            try:
                r = fn(cfg, batches, steps)
            except Exception as e:  # reported in the table, never a made-up number
                r = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}
            results[f"{name}/{engine}"] = r
            rows.append(_row(f"{name} ({shakespeare.Model(cfg).num_params():,})", engine, cfg, r))
            print(rows[-1], flush=True)
    return rows, results


def attention_peaks(ts=(256, 2048), batch=4, heads=4, head_dim=64) -> dict[int, int]:
    """Planned bytes of a training step of a one-layer GPT with batch 4, 4 heads of 64
    at each block length T, planned for the GPU class (lowering only: no GPU)."""
    from tgweb.codegen.target import Target
    from tgweb.lower import lower

    out = {}
    for t in ts:
        cfg = dataclasses.replace(
            shakespeare.FULL,
            layers=1,
            heads=heads,
            dim=heads * head_dim,
            block=t,
            batch=batch,
            max_memory=None,
        )
        tr = samples.compile(shakespeare.Sample(cfg), backend="reference", seed=0)
        out[t] = lower(tr.graph, target=Target("gpu")).meta["memory"]["total_bytes"]
    return out


def print_attention_peaks() -> None:
    """Issue 30's target: attention memory linear in T (the peak at T = 2048 at most 12x
    that at T = 256; the T x T weights of every head would make it about 40x)."""
    p = attention_peaks()
    (t0, a), (t1, b) = sorted(p.items())
    print("\nattention memory, 1-layer GPT, B = 4, H = 4, D = 64, planned for the GPU class:")
    print(f"  T = {t0}: {a / 1e6:,.1f} MB; T = {t1}: {b / 1e6:,.1f} MB; {b / a:.2f}x (target <= 12x)")


def precision_plans(cfg=shakespeare.FULL) -> dict[str, int]:
    """Planned bytes of shakespeare's training step in float32 and in mixed precision,
    both unbudgeted, planned for the GPU class with shader-f16 (lowering only: no GPU)."""
    from tgweb.codegen.target import Target
    from tgweb.lower import lower

    out = {}
    for precision in ("float32", "mixed"):
        sample = shakespeare.Sample(cfg)
        tr = samples.compile(sample, backend="reference", precision=precision, max_memory=None)
        prog = lower(tr.graph, target=Target("gpu", features=("shader-f16",)))
        out[precision] = prog.meta["memory"]["total_bytes"]
    return out


def print_precision_plans() -> None:
    """Issue 26's target: the mixed-precision step plans at most 60 % of float32's bytes."""
    p = precision_plans()
    print("\nshakespeare's step, planned for the GPU class with shader-f16, no max_memory:")
    print(
        f"  float32 {p['float32'] / 1e6:,.1f} MB; mixed {p['mixed'] / 1e6:,.1f} MB; "
        f"{p['mixed'] / p['float32']:.3f} of float32 (target <= 0.60)"
    )


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--only", action="append", choices=list(MODELS))
    ap.add_argument("--tiny", action="store_true", help="one tiny GPT and 3 steps: checks the script runs")
    ap.add_argument("--tiny-gpt2", action="store_true", help="the same on random tokens, as 124M trains")
    ap.add_argument("--json", metavar="PATH", help="also write every measurement as JSON")
    ap.add_argument(
        "--engine",
        action="append",
        default=[],
        help="only the engines whose name holds this word (repeatable)",
    )
    a = ap.parse_args(argv)
    if a.tiny or a.tiny_gpt2:
        models, steps = {"tiny": TINY if a.tiny else TINY_GPT2}, 3
    else:
        models, steps = {k: MODELS[k] for k in a.only or MODELS}, a.steps
    if os.environ.get("GPU_CHROMIUM"):
        import bench  # its Chromium, flags and site server

        with bench.tgweb_page() as (page, adapter):
            page.set_default_timeout(0)
            rows, results = run(models, steps, page, str(adapter), a.engine)
    else:
        rows, results = run(models, steps, None, "not run", a.engine)
    print_attention_peaks()
    print_precision_plans()
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
