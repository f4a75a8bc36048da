"""The kernels of fused attention (the kinds sdpa, sdpa_grad_q and sdpa_grad_kv of
tgweb.ops.attention, which says what each computes): forward, grad_q and grad_kv, the
registry entries' emitters.

The kernels give each invocation one row (a query, or a key for dK/dV) and loop over
the other side; on the GPU class the workgroup's rows share tiles of that side staged
in workgroup memory, on the CPU class (emulators: barriers are expensive) every
invocation reads straight from memory (codegen/target.py's "attention" knobs). The
forward walks the keys with an online softmax (one running max and sum per row) and
never stores a Tq x Tk tensor; the backward recomputes the probabilities from each
row's saved log-sum-exp. In a mixed graph, where matrix_plan finds a layout, each
kernel runs its products on subgroup matrices instead (codegen/attention_matrices.py).
What they share: codegen/attention_rows.py."""

from __future__ import annotations

from . import attention_matrices as matrices
from .attention_rows import (
    FORWARD_OPERANDS,
    GRAD_OPERANDS,
    NEG_INF,
    POS_INF,
    Rows,
    Walk,
    accumulators,
    dot,
    logical_shapes,
    registers,
    row_stores,
)
from .common import f32_lit


def forward(kc, node):
    """sdpa's kernel: a query row an invocation, an online softmax over the keys; O and
    the row's log-sum-exp stored."""
    a = node.attrs
    plan = matrices.matrix_plan(kc, node, "forward")
    if plan:
        return matrices.forward(kc, node, *plan)
    R = Rows(kc, node, logical_shapes(node)[0][-2], FORWARD_OPERANDS)
    q, k, v = R.sides[:3]
    walk = Walk(kc, R.tile, R.wg, [k, v], [])
    body, qs = registers(q, "q", "r", a["scale"])
    acc_lines, accs = accumulators("acc", v.cols)
    body += acc_lines + [f"var m = {NEG_INF};", "var l = 0.0;"]
    kb = [walk.vec(0, c) for c in range(len(qs))]
    step = R.score(qs, kb, "r", "j")
    step += ["if (s > m) {", "  let c = exp(m - s);", "  l = l * c;"]
    step += [f"  {x} = {x} * c;" for x in accs] + ["  m = s;", "}", "let p = exp(s - m);", "l = l + p;"]
    pk = "p"
    if R.seed is not None:
        step.append(f"let pk = p * {R.keep('r', 'j')};")
        pk = "pk"
    step += [f"{x} = {x} + {pk} * {walk.vec(1, c)};" for c, x in enumerate(accs)]
    hi = f"{R.tk}u"
    if a["causal"]:  # keys past the workgroup's (or the row's) last query are hidden
        last = f"min(r0 + {R.wg - 1}u, {R.rows - 1}u)" if R.tile else "r"
        hi = f"min({last} + 1u, {R.tk}u)"
    body += walk.lines("0u", hi, step)
    body += ["let inv = select(0.0, 1.0 / l, l > 0.0);"]
    body += R.live(
        row_stores(R.out, "r", accs, v.cols, mul=" * inv")
        + [R.out.kc.store(node, R.out.index("r", v.cols), f"select({POS_INF}, m + log(l), l > 0.0)")]
    )
    return R.kernel(body)


def grad_q(kc, node):
    """sdpa_grad_q's kernel: dQ of a query row an invocation, its probabilities recomputed
    from the saved log-sum-exp."""
    a = node.attrs
    plan = matrices.matrix_plan(kc, node, "dq")
    if plan:
        return matrices.backward(kc, node, "dq", *plan)
    R = Rows(kc, node, logical_shapes(node)[0][-2], GRAD_OPERANDS)
    q, k, v, saved, do, delta = R.sides[:6]
    walk = Walk(kc, R.tile, R.wg, [k, v], [])
    body, qs = registers(q, "q", "r", a["scale"])
    lines, dos = registers(do, "o", "r")
    acc_lines, accs = accumulators("dq", q.cols)
    body += lines + acc_lines
    body += [f"let lse = {saved.at('r', saved.cols - 1)};", f"let delta = {delta.at('r', 0)};"]
    step = R.score(qs, [walk.vec(0, c) for c in range(len(qs))], "r", "j")
    step += ["let p = exp(s - lse);", f"var dp = {dot(dos, [walk.vec(1, c) for c in range(len(dos))])};"]
    if R.seed is not None:
        step.append(f"dp = dp * {R.keep('r', 'j')};")
    step.append("let ds = p * (dp - delta);")
    step += [f"{x} = {x} + ds * {walk.vec(0, c)};" for c, x in enumerate(accs)]
    hi = f"{R.tk}u"
    if a["causal"]:
        last = f"min(r0 + {R.wg - 1}u, {R.rows - 1}u)" if R.tile else "r"
        hi = f"min({last} + 1u, {R.tk}u)"
    body += walk.lines("0u", hi, step)
    body += R.live(row_stores(R.out, "r", accs, q.cols, mul=f" * {f32_lit(a['scale'])}"))
    return R.kernel(body)


def grad_kv(kc, node):
    """sdpa_grad_kv's kernel: dK and dV of a key row an invocation, walking the queries
    that see it."""
    a = node.attrs
    plan = matrices.matrix_plan(kc, node, "dkv")
    if plan:
        return matrices.backward(kc, node, "dkv", *plan)
    R = Rows(kc, node, logical_shapes(node)[1][-2], GRAD_OPERANDS)
    q, k, v, saved, do, delta = R.sides[:6]
    walk = Walk(kc, R.tile, R.wg, [q, do], [(saved, saved.cols - 1), (delta, 0)])
    body, ks = registers(k, "k", "r", a["scale"])
    lines, vs = registers(v, "v", "r")
    dk_lines, dks = accumulators("dk", k.cols)
    dv_lines, dvs = accumulators("dv", v.cols)
    body += lines + dk_lines + dv_lines
    step = R.score(ks, [walk.vec(0, c) for c in range(len(ks))], "j", "r")
    step += [f"let p = exp(s - {walk.scalar(0)});"]
    step += [f"var dp = {dot(vs, [walk.vec(1, c) for c in range(len(vs))])};"]
    pk = "p"
    if R.seed is not None:
        step += [f"let f = {R.keep('j', 'r')};", "let pk = p * f;", "dp = dp * f;"]
        pk = "pk"
    step += [f"{x} = {x} + {pk} * {walk.vec(1, c)};" for c, x in enumerate(dvs)]
    step.append(f"let ds = p * (dp - {walk.scalar(1)});")
    step += [f"{x} = {x} + ds * {walk.vec(0, c)};" for c, x in enumerate(dks)]
    lo = ("r0" if R.tile else "r") if a["causal"] else "0u"  # queries before the key do not see it
    body += walk.lines(lo, f"{R.tq}u", step)
    stores = row_stores(R.out, "r", dks, k.cols, mul=f" * {f32_lit(a['scale'])}")
    body += R.live(stores + row_stores(R.out, "r", dvs, v.cols, first=k.cols))
    return R.kernel(body)
