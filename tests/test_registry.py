"""Every registered op kind ties its shape rule, grad rule (or NO_GRAD) and reference
implementation; every public op is exported."""

from __future__ import annotations

import inspect

import tgweb as tg
from tgweb import ops
from tgweb.ir import NO_GRAD, REGISTRY


def test_every_kind_has_infer_grad_and_ref():
    bad = []
    for kind, d in REGISTRY.items():
        if d.kind != kind or not d.family:
            bad.append(f"{kind}: name/family")
        if not callable(d.infer):
            bad.append(f"{kind}: no shape rule")
        if not (d.grad is NO_GRAD or callable(d.grad)):
            bad.append(f"{kind}: neither a grad rule nor NO_GRAD")
        if not callable(d.ref):
            bad.append(f"{kind}: no reference implementation")
    assert not bad, bad


def test_issue_op_kinds_are_registered():
    want = {
        "softmax",
        "log_softmax",
        "causal_softmax",
        "one_hot",
        "embedding",
        "embedding_grad",
        "take_along_axis",
        "take_along_axis_grad",
        "conv2d",
        "conv2d_grad_input",
        "conv2d_grad_weight",
        "max_pool2d",
        "max_pool2d_grad",
        "max_pool2d_select",
        "avg_pool2d",
        "avg_pool2d_grad",
        "rand",
        "randn",
        "matmul",
        "sum",
        "max",
        "min",
        "argmax",
        "argmin",
        "reshape",
        "permute",
        "broadcast_to",
        "slice",
        "pad",
        "concat",
        "stop_gradient",
        "full",
        "arange",
        "where",
        "cast",
    }
    assert want <= set(REGISTRY), sorted(want - set(REGISTRY))


def test_public_ops_are_exported():
    assert ops.__all__ == sorted(set(ops.__all__)), "__all__ must be sorted and unique"
    for name in ops.__all__:
        assert callable(getattr(tg, name)), name
    for mod in (ops.nn, ops.conv, ops.random):
        public = [
            n
            for n, f in vars(mod).items()
            if inspect.isfunction(f)
            and f.__module__ == mod.__name__
            and not n.startswith("_")
            and hasattr(f, "__wrapped__")
        ]
        missing = [n for n in public if n not in ops.__all__]
        assert not missing, f"{mod.__name__}: not exported: {missing}"
    for name in (
        "softmax",
        "log_softmax",
        "causal_softmax",
        "one_hot",
        "embedding",
        "take_along_axis",
        "cross_entropy",
        "nll_loss",
        "mse_loss",
        "conv2d",
        "max_pool2d",
        "avg_pool2d",
        "upsample_nearest2d",
        "rand",
        "randn",
        "dropout",
        "categorical",
        "capture",
    ):
        assert name in ops.__all__, name
    assert tg.nn.Dropout
