"""The GPU class's matmul tiles as Chrome's WGSL compiler (Tint) takes them: every tile
of the table and of the benchmark sweeps, lowered in CPython and run on SwiftShader
through web/gpu.mjs, forward and backward, against the reference backend (lavapipe runs
the same tiles through Naga in tests/test_kernels.py); and the GPU class's global norm
in blocks."""

from __future__ import annotations

import pytest
from test_kernels import GPU, TILES, build, f

import tgweb as tg
from tgweb.codegen.target import Target
from tgweb.lower import lower
from tgweb.optim import clip

from .conftest import run_against_reference

CASES = [
    (lambda a, b: a @ b, {"a": f(72, 20), "b": f(20, 68)}, True),  # edges, k not a multiple of BK
    (lambda a, b: a @ b, {"a": f(37, 13), "b": f(13, 30)}, True),  # scalar loads
    (lambda a, b: tg.relu(a @ b.mT), {"a": f(3, 40, 36), "b": f(44, 36)}, False),  # batch as rows
    (lambda a, b: a.mT @ b, {"a": f(2, 36, 40), "b": f(2, 36, 44)}, False),  # batch on z
    # operands read through folded slices: an offset of 4 (vec4 loads), one of 3 (scalar)
    (lambda a, b: tg.narrow(a, 1, 4, 20) @ tg.narrow(b, 0, 3, 68).T, {"a": f(72, 26), "b": f(72, 20)}, True),
]


@pytest.mark.parametrize("tile", TILES, ids=["x".join(map(str, t)) for t in TILES])
def test_tile_runs_in_chromium(page, tile):
    target = Target("gpu", tuning=dict(GPU.tuning, tiles=(tile + (0,),), split_k_chunk=0))
    for fn, specs, grad in CASES:
        g = build(fn, specs, grad=grad)
        prog = lower(g, target=target)
        assert any("var<workgroup> As" in k.wgsl for k in prog.kernels)
        run_against_reference(page, g, prog)


def test_global_norm_in_blocks_runs_in_chromium(page):
    # blocks of 96 elements across two inputs, a short last block, a constant's squares
    target = Target("gpu", tuning=dict(GPU.tuning, sumsq_block=96))
    g = build(
        lambda x, y: clip.global_sumsq([x, y * 2.0, tg.full((5,), 3.0)], root=True),
        {"x": f(7, 33), "y": f(300)},
        grad=False,
    )
    prog = lower(g, target=target)
    assert any("sumsq_blocks" in k.ops and k.dispatch[0] == 6 for k in prog.kernels)
    run_against_reference(page, g, prog)
