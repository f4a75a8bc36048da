"""Prefix sums: cumsum.

Kind and attrs (what a kernel must implement):

- ``cumsum`` {axis, reverse}: the inclusive prefix sum along axis (f32 or i32, the
  input's dtype); with reverse, the suffix sum (element k sums k..n-1), which is the
  gradient of a prefix sum, and a prefix sum the gradient of a suffix sum.

One invocation per row up to the target's serial_max long (a plain loop: no barriers
on CPU implementations of WebGPU); longer rows get one workgroup each, which scans the
row in blocks of its size (a Hillis-Steele scan in workgroup memory per block, each
block adding the running total of the blocks before it).
"""

from __future__ import annotations

from ..codegen.common import add_idx, grid, group_size, invocations, linear_group, lit, mul_idx, udiv, umod
from ..ir import OpError, Tensor, make, prod, register, strides
from .base import as_tensor, norm_axis, op


def _infer_cumsum(ins, attrs):
    (x,) = ins
    if x.dtype == "bool":
        raise OpError(f"cannot sum a bool tensor of shape {x.shape}; cast it first")
    return x.shape, x.dtype


def _g_cumsum(t, g):
    return [make("cumsum", (g,), axis=t.attrs["axis"], reverse=not t.attrs["reverse"])]


def _ref_cumsum(ctx, args, t):
    np, x, a = ctx.np, args[0], t.attrs["axis"]
    if t.attrs["reverse"]:
        return np.flip(np.cumsum(np.flip(x, a), a, dtype=x.dtype), a)
    return np.cumsum(x, a, dtype=x.dtype)


def _torch_cumsum(tc, a, n):
    x, axis = a[0], n.attrs["axis"]
    if n.attrs["reverse"]:
        return x.flip(axis).cumsum(axis).flip(axis).to(x.dtype)
    return x.cumsum(axis).to(x.dtype)  # (torch sums int32 into int64)


def _emit_cumsum(kc, node):
    x = node.inputs[0]
    axis, reverse = node.attrs["axis"], node.attrs["reverse"]
    length, step = x.shape[axis], strides(x.shape)[axis]
    rows = prod(x.shape) // length
    zero = lit(0, x.dtype)
    # row o starts at its outer index times the row block, plus its inner index
    base = add_idx(mul_idx(udiv("o", step), length * step), umod("o", step) if step > 1 else "0u")

    def at(r: str) -> str:
        return add_idx("base", mul_idx(f"({length - 1}u - {r})" if reverse else r, step))

    if length <= kc.target.knob("serial_max"):
        wg = group_size(rows)
        body, disp = invocations("o", rows, wg)
        body += [f"let base = {base};", f"var acc = {zero};"]
        body.append(f"for (var r = 0u; r < {length}u; r = r + 1u) {{")
        body.append(f"  let p = {at('r')};")
        body += [f"  acc = acc + {kc.load(x, 'p')};", "  " + kc.store(node, "p", "acc"), "}"]
        return body, disp, wg
    wg = 256 if length >= 2048 else 64
    disp = grid(rows)
    kc.decls.append(f"var<workgroup> sh: array<{x.dtype}, {wg}>;")
    body = [f"let o = {linear_group(disp[0])};", f"if (o >= {rows}u) {{ return; }}"]  # uniform per workgroup
    body += [f"let base = {base};", f"var carry = {zero};"]
    body.append(f"for (var c = 0u; c < {length}u; c = c + {wg}u) {{")
    body += ["  let r = c + li;", "  let p = " + at("r") + ";", f"  var v = {zero};"]
    body += [f"  if (r < {length}u) {{ v = {kc.load(x, 'p')}; }}", "  sh[li] = v;", "  workgroupBarrier();"]
    body += [
        f"  for (var s = 1u; s < {wg}u; s = s * 2u) {{",
        f"    var add = {zero};",
        "    if (li >= s) { add = sh[li - s]; }",
        "    workgroupBarrier();",
        "    sh[li] = sh[li] + add;",
        "    workgroupBarrier();",
        "  }",
    ]
    body += [f"  if (r < {length}u) {{ {kc.store(node, 'p', 'carry + sh[li]')} }}"]
    body += [f"  carry = carry + sh[{wg - 1}u];", "  workgroupBarrier();", "}"]  # sh is written again next
    return body, disp, wg


register(
    "cumsum",
    family="scan",
    role="kernel",
    emit=_emit_cumsum,
    infer=_infer_cumsum,
    grad=_g_cumsum,
    ref=_ref_cumsum,
    torch=_torch_cumsum,
)


@op
def cumsum(x, dim: int) -> Tensor:
    """torch.cumsum: the inclusive prefix sum of x along dim (negative dims count from
    the end), in x's dtype (f32 or i32)."""
    x = as_tensor(x)
    if x.ndim == 0:
        raise OpError("needs a tensor of rank >= 1, got a scalar")
    return make("cumsum", (x,), axis=norm_axis(dim, x.ndim, x.shape), reverse=False)
