"""A sample's training step as lowering makes it, without a GPU: the number of kernels
and an estimate of the bytes they read and write, in all and grouped by the op kinds
each kernel computes.

    .venv/bin/python tools/step_kernels.py [--sample shakespeare] [--size full|small]
        [--target gpu|cpu] [--precision float32|mixed] [--top 30] [--kernels]

The bytes are each kernel's compulsory traffic: every stored tensor it reads, once
(the part it reads: a slice's elements, not the whole tensor; a broadcast operand's
own size), and every tensor it writes. Rereads of a product's operands by its tiles
are not counted (caches serve most of them), nor the uniform offsets. Kernel bindings
are whole buffers (arenas), so their sizes would say little. The schedule is the one
tgweb.lower emits (max_memory's recomputations included).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tgweb import lower as lowering  # noqa: E402
from tgweb import samples  # noqa: E402
from tgweb.codegen.target import Target  # noqa: E402
from tgweb.ir import ITEMSIZE, REGISTRY, prod, root  # noqa: E402


def nbytes(t, n: int | None = None) -> int:
    return (prod(t.shape) if n is None else n) * ITEMSIZE[t.dtype]


def kernel_traffic(g, sched) -> tuple[int, int]:
    """(bytes read, bytes written) of one scheduled kernel (a fusion Group)."""
    parts = g.parts()
    inside = {m.id for p in parts for m in p.members}
    read: dict[int, dict] = defaultdict(dict)  # stored tensor id -> {how it is read: elements}
    seen = {}

    def add(x, n, how):
        r = root(x)
        if r.id in sched.inlined:
            for y in r.inputs:
                add(y, 1, None)
            return
        if r.id not in inside and REGISTRY[r.kind].role != "const":
            read[r.id][how] = max(read[r.id].get(how, 0), n)
            seen[r.id] = r

    for p in parts:
        for m in p.members:
            views = m.attrs.get("views", {})
            for j, x in enumerate(m.inputs):
                if j in views:  # a strided operand: the elements its view spans
                    add(x, prod(views[j][0]), repr(views[j]))
                elif REGISTRY[m.kind].role == "index" and prod(m.shape) < prod(x.shape):
                    add(x, prod(m.shape), None)  # a slice or gather reads at most its own size
                else:
                    add(x, prod(x.shape), None)
    total = sum(min(nbytes(seen[i]), nbytes(seen[i], sum(hows.values()))) for i, hows in read.items())
    written = {m.id: m for p in parts for m in p.members if m.id in sched.stored}
    return total, sum(nbytes(m) for m in written.values())


def step(sample: str, size: str | None, cls: str, precision: str = "float32"):
    """(Program, [(kernel name, op kinds, bytes read, bytes written)]) of a sample's step
    (precision="mixed": planned for the class with shader-f16)."""
    mod = samples.get(sample)
    if size is not None:
        mod = mod.sized(size)
    tr = samples.compile(mod, backend="reference", seed=0, max_memory=None, precision=precision)
    caught = []
    emit = lowering.emit

    def keep(sched, ups, store, target):
        caught.append((sched, ups))
        return emit(sched, ups, store, target)

    lowering.emit = keep
    try:
        features = ("shader-f16",) if precision == "mixed" else ()
        target = Target(cls, features=features)
        prog = lowering.lower(tr.graph, target=target, max_memory=getattr(mod, "MAX_MEMORY", None))
    finally:
        lowering.emit = emit
    sched, ups = caught[-1]
    rows = []
    kernels = {k.name: k for k in prog.kernels}
    for i, g in enumerate(sched.groups):
        name = next(n for n in kernels if n.startswith(f"k{i}_"))
        r, w = kernel_traffic(g, sched)
        rows.append((name, tuple(kernels[name].ops), r, w))
    for leaf, u in ups.copies:
        rows.append(("copy", ("copy",), nbytes(u), nbytes(leaf)))
    if prog.kernels[0].name == "k_select_scalars":  # a few words of the scalars
        rows.insert(0, ("k_select_scalars", ("select_scalars",), 0, 0))
    assert len(rows) == len(prog.kernels), (len(rows), len(prog.kernels))
    return prog, rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", default="shakespeare")
    ap.add_argument("--size", default="full", help="a sample with sizes (shakespeare): its size; 'none' else")
    ap.add_argument("--target", default="gpu", choices=("gpu", "cpu"))
    ap.add_argument("--top", type=int, default=30, help="op-kind groups to list")
    ap.add_argument("--precision", default="float32", choices=("float32", "mixed"))
    ap.add_argument("--kernels", action="store_true", help="list every kernel too")
    a = ap.parse_args(argv)
    prog, rows = step(a.sample, None if a.size == "none" else a.size, a.target, a.precision)
    total_r, total_w = sum(r[2] for r in rows), sum(r[3] for r in rows)
    mb = lambda n: f"{n / 1e6:,.1f} MB"  # noqa: E731
    print(
        f"{a.sample} {a.size}, {a.target} class, {a.precision}: {len(rows)} kernels, "
        f"{prog.pipelines()} pipelines; "
        f"read {mb(total_r)} + written {mb(total_w)} = {mb(total_r + total_w)}"
    )
    by: dict[str, list] = defaultdict(lambda: [0, 0, 0])
    for _, ops, r, w in rows:
        e = by[",".join(sorted(set(ops)))]
        e[0] += 1
        e[1] += r
        e[2] += w
    print(f"{'kernels':>7} {'read MB':>9} {'write MB':>9}  op kinds")
    for key, (n, r, w) in sorted(by.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))[: a.top]:
        print(f"{n:7d} {r / 1e6:9.2f} {w / 1e6:9.2f}  {key[:100]}")
    if a.kernels:
        for name, _, r, w in rows:
            print(f"{r / 1e6:9.3f} {w / 1e6:9.3f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
