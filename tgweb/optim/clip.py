"""The global gradient norm, clipping, per-parameter normalisation and the
non-finite check, as graph nodes.

`global_sumsq(*grads)` is one op kind: the sum of squares of every element of
every input, an f32 scalar (attr root: its square root, the global norm; huge
elements are scaled before squaring, so finite gradients give a finite norm).
The buffer planner packs all gradients into one "grad" arena buffer
(consecutive, 16-byte aligned offsets, zero padding), so a GPU backend reduces
that one byte range in a constant number of kernels instead of a chain of
per-parameter additions. The same reduction serves clipping, the reported
gradient norm and the in-graph decision whether a step is applied; a second
one over the new parameters and optimizer state checks the update itself.
"""

from __future__ import annotations

import fnmatch
from typing import Any, Callable

from .. import ops
from ..codegen.common import f32_lit
from ..codegen.reduce import tree
from ..ir import NO_GRAD, REGISTRY, OpError, Tensor, make, prod, register, root

# the largest finite f32; x <= F32_MAX is false for NaN and +inf, a WGSL-safe isfinite
F32_MAX = 3.4028234663852886e38


# Squares of elements beyond BIG are accumulated scaled by SCALE**2 (both powers of two,
# so scaling is exact): no finite gradient overflows the sum, and no ordinary one
# underflows in it.
BIG = 2.0**50
SCALE = 2.0**-80


def _infer_sumsq(ins, attrs):
    if not ins:
        raise OpError("global_sumsq needs at least one tensor")
    for t in ins:
        if t.dtype != "f32":
            raise OpError(f"global_sumsq needs f32 tensors, got {t.dtype} of shape {t.shape}")
    return (), "f32"


def _ref_sumsq(ctx, args, t):
    # in float64 (exact for every f32 square): the value the scaled f32 sums approximate
    np = ctx.np
    total = np.float64(0)
    for a in args:
        a = np.asarray(a, np.float64)
        total = total + np.sum(a * a)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(np.sqrt(total) if t.attrs.get("root") else total, ctx.f)


def _emit_sumsq(kc, node):
    """Sum of squares of every element of every input, in one workgroup. Inputs packed
    in one arena buffer (the planner's grad arena) are merged into contiguous ranges
    (alignment padding is zero), so the loop count does not grow with the parameter count.
    Two sums: squares of |v| <= BIG as they are, of larger ones scaled by SCALE**2."""
    wg = kc.target.knob("sumsq_workgroup")
    ranges: dict[int, list[list[int]]] = {}
    const = 0.0
    for x in node.inputs:
        r, n = root(x), prod(x.shape)
        if REGISTRY[r.kind].role == "const":
            const += float(r.attrs["value"]) ** 2 * n
            continue
        buf, off = kc.storage(x)
        ranges.setdefault(buf, []).append([off, off + n])
    body = [f"var s{j} = 0.0;" for j in range(4)] + [f"var hs{j} = 0.0;" for j in range(4)]
    big, scale = f32_lit(BIG), f32_lit(SCALE)
    for buf, rs in ranges.items():
        name = kc.bind(buf, False)
        for a, b in _merged(rs):  # four independent sums in flight per invocation
            body.append(f"for (var r = {a}u + li; r < {b}u; r = r + {4 * wg}u) {{")
            for j in range(4):
                rj = f"r + {j * wg}u" if j else "r"
                body += [
                    f"  if ({rj} < {b}u) {{",
                    f"    let v = bitcast<f32>({name}[{rj}]);",
                    f"    let h = abs(v) > {big};",
                    f"    let w = select(v, v * {scale}, h);",
                    "    let q = w * w;",
                    f"    s{j} = s{j} + select(q, 0.0, h);",
                    f"    hs{j} = hs{j} + select(0.0, q, h);",
                    "  }",
                ]
            body.append("}")
    kc.decls.append(f"var<workgroup> sh: array<f32, {wg}>;")
    kc.decls.append(f"var<workgroup> shb: array<f32, {wg}>;")
    body += ["sh[li] = (s0 + s1) + (s2 + s3);", "shb[li] = (hs0 + hs1) + (hs2 + hs3);", "workgroupBarrier();"]
    body += tree(wg, "sh[li] = sh[li] + sh[li + {s}u]; shb[li] = shb[li] + shb[li + {s}u];")
    small, bigsum = "sh[0]", "shb[0]"
    if const:  # a constant operand's squares join the sum they belong to
        if const <= BIG * BIG:
            small = f"(sh[0] + {f32_lit(const)})"
        else:
            bigsum = f"(shb[0] + {f32_lit(const * SCALE * SCALE)})"
    body += [f"let sm = {small};", f"let bg = {bigsum};"]
    if node.attrs.get("root"):  # the norm: finite for every finite input short of F32_MAX
        inv = f32_lit(1.0 / SCALE)
        res = f"select(sqrt(sm), sqrt(bg + (sm * {scale}) * {scale}) * {inv}, bg != 0.0)"
    else:
        res = f"select(sm, sm + (bg / {scale}) / {scale}, bg != 0.0)"
    body += ["if (li == 0u) {"] + ["  " + ln for ln in kc.result(node, "0u", res)] + ["}"]
    return body, (1, 1, 1), wg


def _merged(ranges: list[list[int]]) -> list[list[int]]:
    """Sorted [start, end) ranges, merged where at most 3 elements of padding apart."""
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if out and out[-1][1] <= a <= out[-1][1] + 3:  # padding is zero
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


register(
    "global_sumsq",
    family="reduce",
    role="kernel",
    emit=_emit_sumsq,
    epilogue=True,
    infer=_infer_sumsq,
    grad=NO_GRAD,
    ref=_ref_sumsq,
)


def global_sumsq(grads: list[Tensor], root: bool = False) -> Tensor:
    """Sum of squares over all elements of all tensors: one node, one reduction. With
    root=True its square root, the global L2 norm, which is finite for any finite
    tensors whose norm fits f32 (huge elements are scaled before squaring)."""
    return make("global_sumsq", tuple(grads), **({"root": True} if root else {}))


def finite_flag(*scalars: Tensor) -> Tensor:
    """bool scalar: every one of the scalars is finite (a norm from global_sumsq is
    NaN or inf exactly when an element it covers is, short of an f32 overflow)."""
    flag = None
    for s in scalars:
        f = ops.less_equal(ops.abs(s), F32_MAX)
        flag = f if flag is None else ops.logical_and(flag, f)
    return flag


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
