"""The global gradient norm, clipping, per-parameter normalisation and the
non-finite check, as graph nodes.

`global_sumsq(*grads)` is one op kind: the sum of squares of every element of
every input, an f32 scalar. The buffer planner packs all gradients into one
"grad" arena buffer (consecutive, 16-byte aligned offsets, zero padding), so a
GPU backend reduces that one byte range in a constant number of kernels instead
of a chain of per-parameter additions. The same reduction serves clipping, the
reported gradient norm and the in-graph decision whether a step is applied.
"""

from __future__ import annotations

import fnmatch
from typing import Any, Callable

from .. import ops
from ..ir import NO_GRAD, OpError, Tensor, make, register

# the largest finite f32; x <= F32_MAX is false for NaN and +inf, a WGSL-safe isfinite
F32_MAX = 3.4028234663852886e38


def _infer_sumsq(ins, attrs):
    if not ins:
        raise OpError("global_sumsq needs at least one tensor")
    for t in ins:
        if t.dtype != "f32":
            raise OpError(f"global_sumsq needs f32 tensors, got {t.dtype} of shape {t.shape}")
    return (), "f32"


def _ref_sumsq(ctx, args, t):
    np = ctx.np
    total = ctx.f.type(0)
    for a in args:
        a = np.asarray(a, ctx.f)
        total = total + np.sum(a * a, dtype=ctx.f)
    return np.asarray(total, ctx.f)


register("global_sumsq", family="reduce", infer=_infer_sumsq, grad=NO_GRAD, ref=_ref_sumsq)


def global_sumsq(grads: list[Tensor]) -> Tensor:
    """Sum of squares over all elements of all tensors: one node, one reduction."""
    return make("global_sumsq", tuple(grads))


def finite_flag(sumsq: Tensor, loss: Tensor) -> Tensor:
    """bool scalar: the loss and every gradient element are finite.
    A NaN or inf anywhere makes the sum of squares NaN or inf."""
    return ops.logical_and(ops.less_equal(sumsq, F32_MAX), ops.less_equal(ops.abs(loss), F32_MAX))


def clip_by_global_norm(grads: dict[str, Tensor], norm: Tensor, max_norm: float) -> dict[str, Tensor]:
    """g * min(max_norm / (norm + 1e-6), 1), as torch.nn.utils.clip_grad_norm_."""
    coef = ops.minimum(max_norm / (norm + 1e-6), 1.0)
    return {n: g * coef for n, g in grads.items()}


def name_filter(spec: Any) -> Callable[[str], bool]:
    """True/None, a glob pattern, a list of patterns, or a callable name -> bool."""
    if spec is True:
        return lambda name: True
    if isinstance(spec, str):
        return lambda name: fnmatch.fnmatchcase(name, spec)
    if isinstance(spec, (list, tuple, set)) and all(isinstance(s, str) for s in spec):
        pats = list(spec)
        return lambda name: any(fnmatch.fnmatchcase(name, p) for p in pats)
    if callable(spec):
        return lambda name: bool(spec(name))
    raise ValueError(
        f"normalize_grads must be True, a glob pattern, a list of patterns or a "
        f"callable name -> bool, got {spec!r}"
    )


def normalize(grads: dict[str, Tensor], which: Callable[[str], bool], eps: float = 1e-8) -> dict[str, Tensor]:
    """g / (||g|| + eps) for each selected parameter's gradient."""
    out = {}
    for n, g in grads.items():
        out[n] = g / (ops.sqrt(ops.sum(g * g)) + eps) if which(n) else g
    return out
