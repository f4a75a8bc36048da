"""Fused attention on subgroup matrices (codegen/attention_matrices.py, forward and
backward): where the target has an f16 -> f32 configuration and the graph is
mixed, sdpa's forward runs Q K^T and P V on matrices, and its backward S, dP, dQ, dK and
dV (head dims up to 64). Here the emulated kernels (Target.emulate_matrices) run on
lavapipe against the f16-rounded reference, and the real kernels' WGSL is checked; the real builtins run only
where an adapter offers them: tests/browser/test_subgroup_matrix.py."""

from __future__ import annotations

import array
import difflib
import re

import numpy as np
import pytest
from test_kernels import SEED, build, f, run_case
from test_subgroup_matrix import EMU, MATRIX, PLAIN16, REAL, gpu

import tgweb as tg
from tgweb.backends import native
from tgweb.codegen import attention_matrices
from tgweb.lower import lower

pytestmark = pytest.mark.native  # tests/conftest.py: skipped without an adapter, fails in CI


def attn_kernels(prog, matrices=True):
    """The attention forward kernels on matrices (or, matrices=False, the plain ones)."""
    ks = [k for k in prog.kernels if "sdpa" in k.ops]
    return [k for k in ks if ("var<workgroup> Ps: array<f16" in k.wgsl) == matrices]


def grad_kernels(prog, matrices=True):
    """The backward kernels (sdpa_grad_q, sdpa_grad_kv) on matrices (or the plain ones)."""
    ks = [k for k in prog.kernels if any(o.startswith("sdpa_grad") for o in k.ops)]
    return [k for k in ks if ("var<workgroup> Ds: array<f16" in k.wgsl) == matrices]


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
    """The forward against the reference rounding the same operands to binary16: the
    probabilities enter P V rounded to f16 too (2^-11 of each weight), rtol 2e-3 and atol
    5e-4 of the largest value. Then forward and backward (on matrices too, dS and P
    entering their products as f16): the f16 weights of the forward also reach dQ and dK
    through delta = rowsum(dO O), where p (dp - delta) cancels, measured at 1.8e-3 of the
    largest gradient for the fused case (the plain mixed kernels: 3e-4), so atol 3e-3."""
    fn, specs = CASES[name]
    prog = run_case(fn, specs, grad=False, target=EMU, precision="mixed", rtol=2e-3, atol=5e-4)
    assert len(attn_kernels(prog)) == 1 and not attn_kernels(prog, matrices=False)
    assert not any("subgroupMatrix" in k.wgsl for k in prog.kernels)
    prog = run_case(fn, specs, target=EMU, precision="mixed", rtol=2e-3, atol=3e-3)
    assert len(attn_kernels(prog)) == 1
    # the backward on matrices too, but past head dims of 64 (no block fits 16 KiB)
    assert len(grad_kernels(prog)) == (0 if name == "d128" else 2)
    assert len(grad_kernels(prog, matrices=False)) == (2 if name == "d128" else 0)


@pytest.mark.parametrize("cfg", [("f16", "f32", 16, 8, 16), ("f16", "f32", 16, 8, 8)], ids=str)
def test_emulated_other_configurations_match_reference(cfg):
    """M16 N8 K16 and M16 N8 K8: results of 16 x 8, head dims padded to 16 (8 for K8)."""
    t = gpu(emulate=True, features=("shader-f16", MATRIX), configs=(cfg,))
    fn, specs = CASES["odd-dims"]
    prog = run_case(fn, specs, target=t, precision="mixed", rtol=2e-3, atol=3e-3)
    assert len(attn_kernels(prog)) == 1 and len(grad_kernels(prog)) == 2
    assert all("array<f32, 4>;" in k.wgsl for k in attn_kernels(prog) + grad_kernels(prog))


def test_dropout_draws_the_plain_kernels_stream():
    """Dropout on matrices keeps exactly the weights the plain mixed kernel keeps: with
    p = 0.5 a different stream would move O far past f16's rounding."""
    fn = _sdpa(dropout_p=0.5)
    specs = {"q": f(2, 40, 16), "k": f(2, 40, 16), "v": f(2, 40, 16)}
    outs = {}
    for name, target in (("matrices", EMU), ("plain", PLAIN16)):
        g = build(fn, specs, grad=False, precision="mixed")
        prog = lower(g, target=target)
        assert len(attn_kernels(prog, matrices=name == "matrices")) == 1
        outs[name] = _run(g, prog)
    scale = np.abs(outs["plain"]).max()
    np.testing.assert_allclose(outs["matrices"], outs["plain"], rtol=2e-3, atol=5e-4 * scale)


def _run(g, prog):
    rng = np.random.default_rng(0)
    feeds = {n: rng.normal(size=t.shape).astype(np.float32) for n, t in g.inputs.items()}
    rt = native.Runtime(prog)
    try:
        host = {n: array.array("f", v.ravel().tolist()) for n, v in feeds.items()}
        scal = {s.name: SEED for s in prog.scalars}
        (got,) = rt.run(host, scal, [("outputs", n) for n in g.outputs]).values()
    finally:
        rt.close()
    return np.array(got)


# ---- which kernel, and the real WGSL ----------------------------------------------------


def _lowered(fn, specs, target, grad=False):
    return lower(build(fn, specs, grad=grad, precision="mixed"), target=target)


SHAKESPEARE = {"q": f(2, 6, 256, 64), "k": f(2, 6, 256, 64), "v": f(2, 6, 256, 64)}


def test_real_wgsl_uses_the_builtins_and_uniform_offsets():
    prog = _lowered(_sdpa(is_causal=True), SHAKESPEARE, REAL, grad=True)
    (k,) = attn_kernels(prog)
    assert MATRIX in prog.meta["features"]
    text = k.wgsl
    assert text.startswith("enable chromium_experimental_subgroup_matrix;\nenable f16;\nenable subgroups;\n")
    assert "let sg = tg_subgroup_id;" in text and "@workgroup_size(64, 1, 1)" in text  # 2 subgroups
    assert "var<workgroup> Qs: array<f16, 2048>;" in text and "var<workgroup> Ps: array<f16, 1024>;" in text
    assert "subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(&KVs, " in text
    assert "subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&Ps, sg * 512u" in text
    assert "oacc3 = subgroupMatrixMultiplyAccumulate(pl1, vr1, oacc3);" in text
    # the builtins' offsets: the subgroup id, loop counters and constants, never li/lid
    calls = [ln for ln in text.splitlines() if "subgroupMatrix" in ln]
    assert len(calls) > 20
    for line in calls:
        assert not re.search(r"\b(li|lid|lr|lh|i|r)\b", line), line
    # the backward's: the same builtins, offsets and directives
    grads = grad_kernels(prog)
    assert len(grads) == 2
    for g in grads:
        assert g.wgsl.startswith(
            "enable chromium_experimental_subgroup_matrix;\nenable f16;\nenable subgroups;\n"
        )
        assert "@workgroup_size(64, 1, 1)" in g.wgsl and "var<workgroup> Ss: array<f32, 512>;" in g.wgsl
        assert (
            "dk3 = subgroupMatrixMultiplyAccumulate(" in g.wgsl
            or "dq3 = subgroupMatrixMultiplyAccumulate(" in g.wgsl
        )
        for line in (ln for ln in g.wgsl.splitlines() if "subgroupMatrix" in ln):
            assert not re.search(r"\b(li|lid|lr|lh|i|j|e|rw)\b", line), line
    # 16 KiB of workgroup memory at most
    assert attention_matrices.matrix_bytes(2, 32, 64, 64, 16) == 14336
    assert attention_matrices.grad_matrix_bytes("dq", 2, 16, 64, 64, 16) == 15360
    assert attention_matrices.grad_matrix_bytes("dkv", 2, 16, 64, 64, 16) == 16384


def test_emulated_text_is_the_real_text_but_the_builtins():
    real = attn_kernels(_lowered(_sdpa(is_causal=True), SHAKESPEARE, REAL))[0].wgsl.splitlines()
    emu = attn_kernels(_lowered(_sdpa(is_causal=True), SHAKESPEARE, EMU))[0].wgsl.splitlines()
    only_real = [ln[2:].strip() for ln in difflib.ndiff(real, emu) if ln.startswith("- ")]
    assert only_real and all(re.search(r"subgroup|^[{}]$", ln) for ln in only_real), only_real


@pytest.mark.parametrize(
    "target,fn,specs,why",
    [
        (REAL, _sdpa(), {"q": f(2, 20, 256), "k": f(2, 20, 256), "v": f(2, 20, 256)}, "D 256: no block fits"),
        (gpu(features=("shader-f16", "subgroups")), _sdpa(), SHAKESPEARE, "no feature"),
        (gpu(sizes=(16, 32)), _sdpa(), SHAKESPEARE, "subgroup size not fixed"),
        (PLAIN16, _sdpa(), SHAKESPEARE, "f16 tiles only"),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_otherwise_the_plain_kernel_runs(target, fn, specs, why):
    prog = _lowered(fn, specs, target, grad=True)
    assert not attn_kernels(prog) and len(attn_kernels(prog, matrices=False)) == 1, why
    assert not grad_kernels(prog) and len(grad_kernels(prog, matrices=False)) == 2, why


def test_float32_attention_keeps_the_plain_kernel():
    g = build(_sdpa(), SHAKESPEARE, grad=False)
    assert not attn_kernels(lower(g, target=REAL))


def test_tiny_gpt_mixed_on_emulated_matrices_follows_the_plain_kernels(monkeypatch):
    """The shakespeare GPT scaled down, mixed, trained a few steps: the losses with the
    matrix forward (emulated) follow the plain mixed kernels'."""
    import dataclasses

    from tgweb.samples import shakespeare as sh

    s = sh.Sample(dataclasses.replace(sh.SMALL, layers=1, heads=2, dim=32, block=20, batch=3, dropout=0.1))
    losses = {}
    for name, target in (("matrices", EMU), ("plain", PLAIN16)):
        monkeypatch.setattr(native, "device_target", lambda t=target: t)
        t = tg.compile(s.Model(), sh.loss_fn, s.INPUTS, s.OPTIMIZER, backend="native", precision="mixed")
        assert len(attn_kernels(t.program, matrices=name == "matrices")) == 1
        assert len(grad_kernels(t.program, matrices=name == "matrices")) == 2
        losses[name] = [float(t.step(**s.batch(i)).loss) for i in range(5)]
        t.close()
    assert losses["matrices"][-1] < losses["matrices"][0]
    np.testing.assert_allclose(losses["matrices"], losses["plain"], rtol=2e-3)
