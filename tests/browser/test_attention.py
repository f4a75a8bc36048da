"""The attention kernels as Chrome's WGSL compiler (Tint) takes them: both adapter
classes' variants lowered in CPython and run on SwiftShader through web/gpu.mjs,
forward and backward, against the reference backend (which tests/test_attention.py
checks against PyTorch; lavapipe runs the same kernels there)."""

from __future__ import annotations

import pytest
from test_kernels import GPU, b, build, f

import tgweb as tg
from tgweb.codegen.target import Target
from tgweb.lower import lower

from .conftest import run_against_reference

CASES = [  # T not a multiple of the tile (16) nor of the workgroups (16, 64); Tq != Tk
    (
        lambda q, k, v: tg.scaled_dot_product_attention(q, k, v, is_causal=True),
        f(2, 2, 37, 64),
        f(2, 2, 37, 64),
    ),
    (lambda q, k, v: tg.scaled_dot_product_attention(q, k, v), f(1, 3, 19, 16), f(1, 3, 23, 16)),
    (
        lambda q, k, v: tg.scaled_dot_product_attention(q, k, v, is_causal=True),
        f(1, 1, 21, 128),
        f(1, 1, 21, 128),
    ),
]


@pytest.mark.parametrize("cls", ["cpu", "gpu"])
def test_attention_runs_in_chromium(page, cls):
    target = GPU if cls == "gpu" else Target()
    for fn, qs, ks in CASES[: None if cls == "gpu" else 2]:  # D = 128: one class is enough
        g = build(fn, {"q": qs, "k": ks, "v": ks})
        prog = lower(g, target=target)
        assert {"sdpa", "sdpa_grad_q", "sdpa_grad_kv"} <= {o for k in prog.kernels for o in k.ops}
        run_against_reference(page, g, prog)


def test_masks_run_in_chromium(page):
    g = build(
        lambda q, k, v, m, a: (
            tg.scaled_dot_product_attention(q, k, v, m) + tg.scaled_dot_product_attention(q, k, v, a)
        ),
        {"q": f(2, 17, 8), "k": f(2, 21, 8), "v": f(2, 21, 8), "m": b(17, 21), "a": f(2, 17, 21)},
    )
    for target in (Target(), GPU):
        run_against_reference(page, g, lower(g, target=target))
