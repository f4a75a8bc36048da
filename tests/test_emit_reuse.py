"""Kernel texts reused across repeated layers (tgweb.codegen.reuse): a deeper model emits
no more kernels afresh, and every reused kernel is the one a fresh emission gives."""

import dataclasses

import pytest

from tgweb import samples
from tgweb.codegen.reuse import KernelMemo
from tgweb.codegen.target import Target
from tgweb.lower import lower
from tgweb.samples import shakespeare

TARGETS = {
    "float32": Target("gpu"),
    "mixed": Target("gpu", features=("shader-f16",)),
    "float32-subgroups": Target("cpu", features=("subgroups",), subgroup_sizes=(4, 128)),
}


def _graph(layers: int, precision: str = "float32"):
    """The small shakespeare GPT's training step, dropout on (each layer its own streams)."""
    cfg = dataclasses.replace(shakespeare.SMALL, layers=layers, dropout=0.1)
    tr = samples.compile(shakespeare.Sample(cfg), backend="reference", seed=0, precision=precision)
    return tr.graph


def test_a_deeper_model_emits_no_more_kernels_afresh():
    memos = {}
    for layers in (2, 4):
        memos[layers] = KernelMemo()
        prog = lower(_graph(layers), target=TARGETS["float32"], memo=memos[layers])
        assert memos[layers].fresh + memos[layers].reused + 1 == len(prog.kernels)  # + select_scalars
    assert memos[4].fresh == memos[2].fresh
    assert memos[4].reused > memos[2].reused > 0
    # the global norm's emitter writes its ranges into its text (KernelCtx.storage): kept apart
    assert None in memos[4].templates.values()


@pytest.mark.parametrize("which", sorted(TARGETS))
def test_reused_kernels_are_the_fresh_ones(which):
    g = _graph(3, which.split("-")[0])
    memo = KernelMemo()
    reused = lower(g, target=TARGETS[which], memo=memo)
    fresh = lower(g, target=TARGETS[which], memo=KernelMemo(reuse=False))
    assert memo.reused > 0
    assert reused.kernels == fresh.kernels  # texts, bindings, offsets, stream keys, names, sites
    assert reused.to_json() == fresh.to_json()
