"""GPT-2 small's shape (issue 36): the shakespeare GPT with Config.vocab = 50,304 on random
tokens. At full size it is only planned here, for an NVIDIA H200's limits as Chromium
reports them (lavapipe cannot run it; benchmarks/scale.py --only 124M times it there); a
scaled-down GPT of the same code path (a vocabulary of more than 256 random tokens) trains
natively in mixed precision, step for step as the reference backend, with lavapipe's own
kernels and with the H200's (the GPU class's, subgroup matrices emulated)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tgweb import optim, samples
from tgweb.backends import native as native_backend
from tgweb.codegen.target import Target
from tgweb.compile import build_training_graph
from tgweb.ir import TraceError
from tgweb.lower import lower
from tgweb.program import unmet_limits
from tgweb.samples import shakespeare as sh

# Chromium 156 on an NVIDIA H200 (../shared/tools/gpu-chromium/README.md, printed there on
# 2026-12-04); maxStorageBuffersPerShaderStage left at WebGPU's default 8, the least it has
H200_LIMITS = {
    "maxBufferSize": 4294967292,
    "maxStorageBufferBindingSize": 2147483644,
    "maxComputeWorkgroupStorageSize": 49152,
    "maxComputeInvocationsPerWorkgroup": 1024,
}
# the H200 with GPU_CHROMIUM_F16=1: shader-f16 and f16 subgroup matrices
H200 = Target(
    "gpu",
    "nvidia",
    "NVIDIA H200",
    features=("subgroups", "shader-f16", "chromium-experimental-subgroup-matrix"),
    subgroup_sizes=(32, 32),
    matrix_configs=(("f16", "f32", 16, 16, 16), ("f16", "f16", 16, 16, 16)),
)
LOGITS_BYTES = 8 * 1024 * 50304 * 4  # f32 [batch, block, vocab]


def _plan(config: sh.Config, precision: str = "mixed"):
    s = sh.Sample(config)
    opt, clip = optim.from_spec(s.OPTIMIZER)
    graph = build_training_graph(s.Model(), s.loss_fn, s.INPUTS, opt, clip, None, precision)
    return lower(graph, limits=H200_LIMITS, target=H200)


def test_the_shape_is_gpt2_small():
    c = sh.GPT2
    assert (c.layers, c.heads, c.dim, c.block, c.vocab, c.dropout) == (12, 12, 768, 1024, 50304, 0.0)
    model = sh.Model(c)
    # nanoGPT's count (get_num_params) leaves out wpe's 786,432: 123.59M for this shape
    assert model.num_params() == 124_373_760
    shapes = {n: p.shape for n, p in model.named_parameters()}
    assert shapes["transformer.wte.weight"] == (50304, 768)
    assert shapes["transformer.wpe.weight"] == (1024, 768)


@pytest.mark.parametrize("precision", ["mixed", "float32"])
def test_gpt2_small_plans_within_the_h200s_limits(precision):
    prog = _plan(sh.GPT2, precision)
    assert unmet_limits(prog, H200_LIMITS) == []
    sizes = sorted(b.size for b in prog.buffers)
    assert sizes[-1] <= H200_LIMITS["maxStorageBufferBindingSize"]
    assert sizes[-1] == LOGITS_BYTES  # the largest: the f32 logits (and what shares their buffer)
    mem = prog.meta["memory"]
    # parameters, gradients and AdamW's two moments: 16 bytes a parameter
    fixed = sum(mem["bytes_by_kind"][k] for k in ("param", "grad", "state"))
    assert fixed >= 16 * 124_373_760
    # pooled by liveness: well under half of every value in a buffer of its own
    assert mem["total_bytes"] < 9e9 and mem["total_bytes"] < 0.45 * mem["unpooled_total_bytes"]
    if precision == "mixed":
        assert "shader-f16" in prog.meta["features"]
        assert any("subgroup_matrix" in k.wgsl for k in prog.kernels)


def test_a_batch_whose_logits_pass_the_binding_is_refused_naming_them():
    with pytest.raises(TraceError) as e:
        _plan(dataclasses.replace(sh.GPT2, batch=12))
    msg = str(e.value)
    assert "f32[12, 1024, 50304]" in msg and "maxStorageBufferBindingSize = 2147483644" in msg


def test_random_tokens_fill_the_vocabulary_and_targets_follow_tokens():
    c = dataclasses.replace(sh.SMALL, vocab=1000, batch=6, block=20)
    s = sh.Sample(c)
    b = s.batch(3)
    assert b == s.batch(3) and b != s.batch(4)
    tokens, targets = np.asarray(b["tokens"]), np.asarray(b["targets"])
    assert tokens.shape == (6 * 20,) and b["tokens"].typecode == "i"
    assert tokens.min() >= 0 and max(tokens.max(), targets.max()) < 1000 and tokens.max() >= 256
    rows_x, rows_y = tokens.reshape(6, 20), targets.reshape(6, 20)
    assert (rows_x[:, 1:] == rows_y[:, :-1]).all()
    assert len(s.eval_batches()) == c.eval_batches and s.eval_batches()[0] != b
    assert sh.vocab(c) == 1000 and sh.vocab(sh.SMALL) == sh.vocab() == 65
    with pytest.raises(ValueError, match="vocab=1000 .random tokens, no text"):
        next(s.stream(lambda feeds: None))


TINY = dataclasses.replace(
    sh.SMALL, layers=2, heads=2, dim=64, block=32, batch=4, dropout=0.0, vocab=300, lr=1e-2, warmup=1
)
# the H200's kernels in Chromium (the GPU class, f16 products on subgroup matrices) with the
# matrix builtins emulated, so that lavapipe runs the rest of their text
H200_EMULATED = Target(
    "gpu",
    "test",
    "the H200's kernels, matrices emulated on lavapipe",
    features=("shader-f16", "chromium-experimental-subgroup-matrix"),
    matrix_configs=H200.matrix_configs,
    emulate_matrices=True,
)


@pytest.mark.native
@pytest.mark.parametrize("target", [None, H200_EMULATED], ids=["lavapipe", "h200-kernels"])
def test_a_scaled_down_gpt_on_random_tokens_trains_natively_as_the_reference(target, monkeypatch):
    if target is not None:  # lowered for that target, run on lavapipe
        monkeypatch.setattr(native_backend, "device_target", lambda: target)
    s = sh.Sample(TINY)
    native = samples.compile(s, backend="native", seed=1, precision="mixed")
    if target is not None:
        # the matrix kernels stage C in workgroup memory (as test_subgroup_matrix finds them)
        assert sum("var<workgroup> Cs: array<f32" in k.wgsl for k in native.program.kernels) >= 4
    ref = samples.compile(s, backend="reference", seed=1, precision="mixed")
    b = s.batch(0)
    got = [float(native.step(**b).loss) for _ in range(3)]
    want = [float(ref.step(**b).loss) for _ in range(3)]
    assert got[0] == pytest.approx(math.log(300), abs=0.05)  # nothing learnt yet: a uniform guess
    np.testing.assert_allclose(got, want, rtol=1e-3)
    for _ in range(12):  # the one batch, learnt by heart
        last = native.step(**b)
    assert float(last.loss) < 0.6 * got[0] and last.ok, float(last.loss)
    native.close()
