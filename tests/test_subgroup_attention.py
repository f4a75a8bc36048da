"""Fused attention on subgroup matrices (ops/attention.py, _emit_forward_matrices):
where the target has an f16 -> f32 configuration and the graph is mixed, sdpa's forward
runs Q K^T and P V on matrices. Here the emulated kernel (Target.emulate_matrices) runs
on lavapipe against the f16-rounded reference, forward and backward (the backward keeps
the plain kernels), and the real kernel's WGSL is checked; the real builtins run only
where an adapter offers them: tests/browser/test_subgroup_matrix.py."""

from __future__ import annotations

import pytest
from test_kernels import f, run_case
from test_subgroup_matrix import EMU

import tgweb as tg

pytestmark = pytest.mark.native  # tests/conftest.py: skipped without an adapter, fails in CI


def attn_kernels(prog, matrices=True):
    """The attention forward kernels on matrices (or, matrices=False, the plain ones)."""
    ks = [k for k in prog.kernels if "sdpa" in k.ops]
    return [k for k in ks if ("var<workgroup> Ps: array<f16" in k.wgsl) == matrices]


def _sdpa(**kw):
    return lambda q, k, v: tg.scaled_dot_product_attention(q, k, v, **kw)


def _masked(q, k, v, m):
    return tg.scaled_dot_product_attention(q, k, v, m)


def _fused(x):  # q, k, v folded slices of one product's [.., 3 C] (the GPT's layout)
    B, T, C, H = 2, 37, 64, 2
    qkv = x.reshape(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)
    return tg.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)


def _fused_in(x, w):
    return _fused(x @ w)


# causal and not, T not a multiple of the tiles, D of 16, 64 and 128 (and odd), an
# additive and a boolean mask (broadcast), dropout, batch and head dims, folded slices
CASES = {
    "plain-d16": (_sdpa(), {"q": f(2, 3, 19, 16), "k": f(2, 3, 23, 16), "v": f(2, 3, 23, 16)}),
    "causal-d64": (_sdpa(is_causal=True), {"q": f(2, 70, 64), "k": f(2, 70, 64), "v": f(2, 70, 64)}),
    "d128": (_sdpa(), {"q": f(1, 2, 33, 128), "k": f(1, 2, 40, 128), "v": f(1, 2, 40, 128)}),
    "odd-dims": (_sdpa(), {"q": f(2, 21, 5), "k": f(2, 37, 5), "v": f(2, 37, 6)}),
    "add-mask": (_masked, {"q": f(3, 17, 16), "k": f(1, 45, 16), "v": f(3, 45, 16), "m": f(17, 45)}),
    "bool-mask": (
        _masked,
        {"q": f(2, 2, 30, 32), "k": f(2, 2, 30, 32), "v": f(2, 2, 30, 32), "m": ((2, 1, 30, 30), "bool")},
    ),
    "causal-dropout": (
        _sdpa(is_causal=True, dropout_p=0.2),
        {"q": f(2, 37, 16), "k": f(2, 37, 16), "v": f(2, 37, 16)},
    ),
    "fused-qkv": (_fused_in, {"x": f(2, 37, 64), "w": f(64, 192)}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_emulated_matrix_attention_matches_reference(name):
    """Forward (matrices) and backward (plain kernels) against the reference rounding the
    same operands to binary16; the probabilities enter P V rounded to f16 too (2^-11 of
    each weight): rtol 2e-3, atol 2e-4 of the largest value."""
    fn, specs = CASES[name]
    prog = run_case(fn, specs, target=EMU, precision="mixed", rtol=2e-3, atol=2e-4)
    assert len(attn_kernels(prog)) == 1 and not attn_kernels(prog, matrices=False)
    assert not any("subgroupMatrix" in k.wgsl for k in prog.kernels)
