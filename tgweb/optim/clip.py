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
from ..codegen.common import f32_lit, grid, linear_group
from ..codegen.reduce import tree
from ..ir import NO_GRAD, REGISTRY, OpError, Tensor, make, prod, register, replace, root

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
    body = _sums_declared()
    for buf, rs in ranges.items():
        name = kc.bind(buf, False)
        for a, b in _merged(rs):
            body += _squares(name, f"{a}u", f"{b}u", wg)
    return body + _total(kc, node, wg, "0u", const, node.attrs.get("root")), (1, 1, 1), wg


def _emit_blocks(kc, node):
    """sumsq_blocks: workgroup p sums the squares of elements [p C, p C + C) of the
    inputs' concatenation (C: attr block) and stores their root. Inputs that follow each
    other in one buffer (the grad arena without padding) are read as one range."""
    wg, C = kc.target.knob("sumsq_workgroup"), node.attrs["block"]
    segs: list[list] = []  # [buffer, offset, start in the concatenation, length]
    at = 0
    for x in node.inputs:
        (buf, off), n = kc.storage(x), prod(x.shape)
        last = segs[-1] if segs else None
        if last and last[0] == buf and last[1] + last[3] == off:
            last[3] += n
        else:
            segs.append([buf, off, at, n])
        at += n
    P, disp = node.shape[0], grid(node.shape[0])
    body = [f"let p = {linear_group(disp[0])};"]
    if disp[0] * disp[1] != P:  # the grid overshoots: whole workgroups leave
        body.append(f"if (p >= {P}u) {{ return; }}")
    body += [f"let blk = p * {C}u;"] + _sums_declared()
    for buf, off, start, n in segs:  # this block's part of the segment, if any
        name = kc.bind(buf, False)
        body += [
            "{",
            f"  let lo = max(blk, {start}u);",
            f"  let hi = max(min(blk + {C}u, {start + n}u), lo);",
            *(
                "  " + ln
                for ln in _squares(name, f"(lo - {start}u + {off}u)", f"(hi - {start}u + {off}u)", wg)
            ),
            "}",
        ]
    return body + _total(kc, node, wg, "p", 0.0, True), disp, wg


def _sums_declared() -> list[str]:
    return [f"var s{j} = 0.0;" for j in range(4)] + [f"var hs{j} = 0.0;" for j in range(4)]


def _squares(name: str, start: str, end: str, wg: int) -> list[str]:
    """The workgroup's loop adding the squares of name[start .. end) (WGSL expressions),
    four independent sums in flight per invocation; squares of |v| > BIG are scaled by
    SCALE**2 into the hs sums."""
    big, scale = f32_lit(BIG), f32_lit(SCALE)
    body = [f"for (var r = {start} + li; r < {end}; r = r + {4 * wg}u) {{"]
    for j in range(4):
        rj = f"r + {j * wg}u" if j else "r"
        body += [
            f"  if ({rj} < {end}) {{",
            f"    let v = bitcast<f32>({name}[{rj}]);",
            f"    let h = abs(v) > {big};",
            f"    let w = select(v, v * {scale}, h);",
            "    let q = w * w;",
            f"    s{j} = s{j} + select(q, 0.0, h);",
            f"    hs{j} = hs{j} + select(0.0, q, h);",
            "  }",
        ]
    return body + ["}"]


def _total(kc, node, wg: int, idx: str, const: float, as_root) -> list[str]:
    """The workgroup's sums folded into one, a constant's squares added to the sum they
    belong to, and the total (or its root, finite for every finite input short of
    F32_MAX) stored at idx by invocation 0."""
    scale = f32_lit(SCALE)
    kc.decls.append(f"var<workgroup> sh: array<f32, {wg}>;")
    kc.decls.append(f"var<workgroup> shb: array<f32, {wg}>;")
    body = ["sh[li] = (s0 + s1) + (s2 + s3);", "shb[li] = (hs0 + hs1) + (hs2 + hs3);", "workgroupBarrier();"]
    body += tree(wg, "sh[li] = sh[li] + sh[li + {s}u]; shb[li] = shb[li] + shb[li + {s}u];")
    small, bigsum = "sh[0]", "shb[0]"
    if const:
        if const <= BIG * BIG:
            small = f"(sh[0] + {f32_lit(const)})"
        else:
            bigsum = f"(shb[0] + {f32_lit(const * SCALE * SCALE)})"
    body += [f"let sm = {small};", f"let bg = {bigsum};"]
    if as_root:
        inv = f32_lit(1.0 / SCALE)
        res = f"select(sqrt(sm), sqrt(bg + (sm * {scale}) * {scale}) * {inv}, bg != 0.0)"
    else:
        res = f"select(sm, sm + (bg / {scale}) / {scale}, bg != 0.0)"
    return body + ["if (li == 0u) {"] + ["  " + ln for ln in kc.result(node, idx, res)] + ["}"]


def _merged(ranges: list[list[int]]) -> list[list[int]]:
    """Sorted [start, end) ranges, merged where at most 3 elements of padding apart."""
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if out and out[-1][1] <= a <= out[-1][1] + 3:  # padding is zero
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _split_sumsq(node: Tensor, target, new_id):
    """On a GPU, one workgroup reading every gradient (10M of them) is the step's slowest
    kernel. Split: the roots of sums over blocks of the target's "sumsq_block" elements,
    a workgroup each (sumsq_blocks), then global_sumsq of those roots and of the
    constant inputs. None where one block holds everything."""
    C = target.knob("sumsq_block")
    stored = [x for x in node.inputs if REGISTRY[root(x).kind].role != "const"]
    n = sum(prod(x.shape) for x in stored)
    if not C or n <= C:
        return None
    consts = [x for x in node.inputs if REGISTRY[root(x).kind].role == "const"]
    # in the order they are computed, as the planner packs the grad arena: ranges merge
    stored.sort(key=lambda x: root(x).id)
    attrs = {"block": C}
    blocks = replace(
        node, id=new_id(), kind="sumsq_blocks", inputs=tuple(stored), attrs=attrs, shape=(-(-n // C),)
    )
    return [blocks, replace(node, inputs=(blocks, *consts))]


register(
    "global_sumsq",
    family="reduce",
    role="kernel",
    emit=_emit_sumsq,
    epilogue=True,
    rewrite=_split_sumsq,
    infer=_infer_sumsq,
    grad=NO_GRAD,
    ref=_ref_sumsq,
)


def _infer_blocks(ins, attrs):
    _infer_sumsq(ins, attrs)
    C = attrs.get("block")
    if isinstance(C, bool) or not isinstance(C, int) or C < 1:
        raise OpError(f"sumsq_blocks needs an int block >= 1, got {C!r}")
    return (-(-sum(prod(t.shape) for t in ins) // C),), "f32"


def _ref_blocks(ctx, args, t):
    np, C = ctx.np, t.attrs["block"]
    flat = np.concatenate([np.asarray(a, np.float64).ravel() for a in args])
    flat = np.concatenate([flat, np.zeros(t.shape[0] * C - flat.size)])
    with np.errstate(over="ignore", invalid="ignore"):
        return np.sqrt(np.sum(flat.reshape(-1, C) ** 2, axis=1)).astype(ctx.f)


register(
    "sumsq_blocks",
    family="reduce",
    role="kernel",
    emit=_emit_blocks,
    epilogue=True,
    infer=_infer_blocks,
    grad=NO_GRAD,
    ref=_ref_blocks,
)


def sumsq_blocks(tensors: list[Tensor], block: int) -> Tensor:
    """The L2 norms of the blocks of `block` elements of the tensors' concatenation (each
    flattened; the last block may be short): what global_sumsq sums on a GPU."""
    return make("sumsq_blocks", tuple(tensors), block=block)


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
