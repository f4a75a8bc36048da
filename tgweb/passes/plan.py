"""The buffer planner: which GPU buffer (and byte offset) holds each stored value.

Input: the values that need storage and the kernels (steps) in execution order,
each with the values it reads and writes. Output: a Plan, the 4-tuple
`buffers, buffer_of, offset_of, report = plan(values, steps)`: the buffer list,
value id -> buffer id, value id -> byte offset in that buffer, and the memory
report; the same as attributes, plus `lifetime` (value id -> (first, last step)).

Rules
- A value with `same_as` shares the memory of that value. With `inplace=False`
  it is a view (reshape, stop_gradient); with `inplace=True` it is the next value
  of a param/state written over the old one (an optimizer update). An in-place
  write is accepted only if no step after the writing step reads the old value
  (reads in the writing step itself are fine: updates are elementwise).
  Every value linked by same_as forms one class with one storage kind, the first
  of PRIORITY among its members.
- Kinds param, state, input, output and capture get a buffer each; they are
  never pooled. All "grad" values are packed into ONE arena buffer at
  consecutive 16-byte aligned offsets (the padding is never written, so it stays
  zero), so a global gradient norm is a single reduction over one range. All
  "scalars" are packed the same way at consecutive 4-byte words. Given max_binding
  (the device's largest binding), an arena that would pass it is split into as
  many buffers as needed; pooled buffers are never larger than their largest value.
- Intermediates are pooled by liveness: a class lives from the first step that
  touches it to the last (inclusive). Two greedy assignments are tried -- by start
  step with best fit, one tenant at a time per buffer (as many buffers as the most
  intermediates live at once), and largest value first at the lowest offset of the
  first buffer where its bytes meet no tenant live at the same time, so that values
  live together may share a buffer made for a larger one -- and the one with fewer
  bytes is kept. Either way no step touches two tenants of one pooled buffer, so a
  step's output never shares a buffer with any of its inputs (a kernel binds each
  buffer once, read-only where it only reads it).
- A self-check verifies that no two classes whose lifetimes overlap share bytes,
  that non-pooled classes never share bytes, that no step touches two classes of one
  pooled buffer, and that intermediates are written before they are read.

tgweb.lower builds the values and steps of a graph's kernels; every backend's
plan comes from there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..program import Buffer

PRIORITY = ("param", "state", "constant", "input", "scalars", "grad", "output", "capture", "intermediate")
POOLED = ("intermediate",)
PACKED = {"grad": 16, "scalars": 4}  # kinds packed into one arena buffer -> alignment
POOL_ALIGN = 16  # bytes: a pooled value's offset in its buffer (vec4 loads read from there)


class PlanError(AssertionError):
    """The values/steps handed to the planner are inconsistent (a lowering bug)."""


@dataclass
class Value:
    id: int
    nbytes: int
    kind: str
    label: str = ""
    same_as: int | None = None
    inplace: bool = False  # same_as is the old value this one overwrites (an update)


@dataclass
class Step:
    reads: list[int] = field(default_factory=list)
    writes: list[int] = field(default_factory=list)
    label: str = ""


class Plan(tuple):
    """(buffers, buffer_of, offset_of, report), also as attributes, plus lifetime."""

    buffers: list[Buffer]
    buffer_of: dict[int, int]
    offset_of: dict[int, int]
    lifetime: dict[int, tuple[int, int]]
    report: dict

    def __new__(cls, buffers, buffer_of, offset_of, lifetime, report):
        self = super().__new__(cls, (buffers, buffer_of, offset_of, report))
        self.buffers, self.buffer_of = buffers, buffer_of
        self.offset_of, self.lifetime, self.report = offset_of, lifetime, report
        return self


def _round(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def plan(values: list[Value], steps: list[Step], pool: bool = True, max_binding: int | None = None) -> Plan:
    """Assign buffers and offsets; pool=False gives every intermediate class its own buffer.
    max_binding: the most bytes one buffer may hold (arenas split to stay within it)."""
    by_id = _by_id(values)
    root_of = _classes(values, by_id)
    members: dict[int, list[Value]] = {}
    for v in values:
        members.setdefault(root_of[v.id], []).append(v)
    kind = {r: min((m.kind for m in ms), key=PRIORITY.index) for r, ms in members.items()}
    size = {r: max(max(m.nbytes for m in ms), 4) for r, ms in members.items()}
    order = list(members)  # first appearance order
    life, first_write, first_read = _lifetimes(steps, by_id, root_of, order)
    _check_inplace(values, steps, by_id, root_of)

    buffers: list[Buffer] = []
    place: dict[int, tuple[int, int]] = {}  # class -> (buffer id, byte offset)
    _pack_arenas(order, kind, size, buffers, place, max_binding)

    def own(r: int) -> None:
        place[r] = (len(buffers), 0)
        buffers.append(Buffer(len(buffers), _round(size[r], 4), kind[r], _label(members[r])))

    for r in order:
        if kind[r] not in POOLED and kind[r] not in PACKED:
            own(r)
    pooled = [r for r in order if kind[r] in POOLED]
    if pool:
        _pool(pooled, life, size, members, buffers, place, _touched_together(steps, root_of, pooled))
    else:
        for r in pooled:
            own(r)

    buf_of_class = {r: b for r, (b, _) in place.items()}
    off_of_class = {r: o for r, (_, o) in place.items()}
    _self_check(order, kind, size, life, buf_of_class, off_of_class, buffers, first_write, first_read)
    _check_steps(steps, root_of, kind, buf_of_class)
    return Plan(
        buffers,
        {v.id: buf_of_class[root_of[v.id]] for v in values},
        {v.id: off_of_class[root_of[v.id]] for v in values},
        {v.id: life[root_of[v.id]] for v in values},
        _report(order, kind, size, life, buffers, steps, pooled),
    )


def _by_id(values: list[Value]) -> dict[int, Value]:
    by_id: dict[int, Value] = {}
    for v in values:
        if v.id in by_id:
            raise PlanError(f"value {v.id} listed twice")
        if v.kind not in PRIORITY:
            raise PlanError(f"value {v.id}: unknown kind {v.kind!r}")
        if v.nbytes < 0:
            raise PlanError(f"value {v.id}: negative size")
        by_id[v.id] = v
    return by_id


def _classes(values: list[Value], by_id: dict[int, Value]) -> dict[int, int]:
    """value id -> the id of its class's root (values linked by same_as share memory)."""
    root_of: dict[int, int] = {}
    for v0 in values:
        v, seen = v0, []
        while v.same_as is not None and v.id not in root_of:
            seen.append(v.id)
            if v.same_as not in by_id:
                raise PlanError(f"value {v.id} is same_as unknown value {v.same_as}")
            v = by_id[v.same_as]
            if v.id in seen:
                raise PlanError(f"same_as cycle through value {v.id}")
        r = root_of.get(v.id, v.id)
        for i in seen + [v.id]:
            root_of[i] = r
    return root_of


def _lifetimes(steps, by_id, root_of, order):
    """Each class's (first, last) step, and the first step that writes and reads it."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    first_write: dict[int, int] = {}
    first_read: dict[int, int] = {}
    for i, s in enumerate(steps):
        for vid, is_write in [(x, False) for x in s.reads] + [(x, True) for x in s.writes]:
            if vid not in by_id:
                raise PlanError(f"step {i} ({s.label}) touches unknown value {vid}")
            r = root_of[vid]
            first.setdefault(r, i)
            last[r] = max(last.get(r, i), i)
            (first_write if is_write else first_read).setdefault(r, i)
    life = {r: (first.get(r, -1), last.get(r, -1)) for r in order}
    return life, first_write, first_read


def _pack_arenas(order, kind, size, buffers, place, most: int | None = None) -> None:
    """Each PACKED kind's classes at consecutive aligned offsets of one buffer, or of
    several where one would pass `most` bytes (a binding's limit): a class that would
    end past it starts the next buffer."""
    for k, align in PACKED.items():
        arenas: list[list[tuple[int, int]]] = []  # per buffer: (class, offset)
        off = 0
        for r in (r for r in order if kind[r] == k):
            start = _round(off, align)
            if not arenas or (most is not None and start and start + _round(size[r], 4) > most):
                arenas.append([])
                start = 0
            arenas[-1].append((r, start))
            off = start + _round(size[r], 4)
        for n, members in enumerate(arenas):
            bid = len(buffers)
            for r, o in members:
                place[r] = (bid, o)
            r, o = members[-1]
            label = f"{k} arena" + (f" {n + 1} of {len(arenas)}" if len(arenas) > 1 else "")
            buffers.append(Buffer(bid, max(4, _round(o + _round(size[r], 4), 4)), k, label))


def _touched_together(steps, root_of, pooled) -> dict[int, set[int]]:
    """Each pooled class -> the pooled classes some step touches together with it."""
    inter = set(pooled)
    out: dict[int, set[int]] = {r: set() for r in pooled}
    for s in steps:
        rs = {root_of[v] for v in (*s.reads, *s.writes)} & inter
        for r in rs:
            out[r] |= rs - {r}
    return out


def _pool(pooled, life, size, members, buffers, place, together) -> None:
    """Intermediates into shared buffers by liveness: the smaller of two greedy plans."""
    r4 = {r: _round(size[r], 4) for r in pooled}
    a, b = _pool_by_start(pooled, life, r4), _pool_by_size(pooled, life, r4, together)
    for sz, rs in min(a, b, key=lambda bs: (sum(sz for sz, _ in bs), len(bs))):
        more = f" (+{len(rs) - 3})" if len(rs) > 3 else ""
        label = "pool: " + ", ".join(_label(members[r]) for r, _ in rs[:3]) + more
        for r, off in rs:
            place[r] = (len(buffers), off)
        buffers.append(Buffer(len(buffers), sz, "intermediate", label))


def _pool_by_start(pooled, life, size) -> list[tuple[int, list[tuple[int, int]]]]:
    """Greedy by start step, best fit among free buffers (growing the largest when none
    fits), each tenant at offset 0: as many buffers as the most classes live at once."""
    bins: list[list] = []  # [size, tenants (class, 0), last step of the current tenant]
    for r in sorted(pooled, key=lambda r: life[r][0]):  # stable: ties keep graph order
        start, end = life[r]
        free = [b for b in bins if b[2] < start]
        fits = [b for b in free if b[0] >= size[r]]
        if fits:
            b = min(fits, key=lambda b: b[0])
        elif free:
            b = max(free, key=lambda b: b[0])
            b[0] = size[r]
        else:
            b = [size[r], [], end]
            bins.append(b)
        b[1].append((r, 0))
        b[2] = end
    return [(b[0], b[1]) for b in bins]


def _pool_by_size(pooled, life, size, together) -> list[tuple[int, list[tuple[int, int]]]]:
    """Largest first, each at the lowest free offset of the first buffer it fits: free
    where no tenant live at the same time holds those bytes, and no tenant is touched by
    a step that touches it. Big values share with big values, and smaller ones live
    side by side in a buffer made for a bigger one."""
    # per buffer: size, tenants (class, offset), held bytes (start, end rounded up to POOL_ALIGN,
    # first step, last step), classes
    bins: list[tuple[int, list[tuple[int, int]], list[tuple[int, int, int, int]], set[int]]] = []
    for r in sorted(pooled, key=lambda r: -size[r]):  # stable: ties keep graph order
        s, e = life[r]
        for sz, rs, held, tenants in bins:
            if not together[r].isdisjoint(tenants):
                continue
            off = _lowest_gap(sorted([(a, b) for a, b, ts, te in held if ts <= e and s <= te]), size[r])
            if off + size[r] <= sz:
                rs.append((r, off))
                held.append((off, _round(off + size[r], POOL_ALIGN), s, e))
                tenants.add(r)
                break
        else:
            bins.append((size[r], [(r, 0)], [(0, _round(size[r], POOL_ALIGN), s, e)], {r}))
    return [(sz, rs) for sz, rs, _, _ in bins]


def _lowest_gap(spans: list[tuple[int, int]], n: int) -> int:
    """The lowest POOL_ALIGN-aligned offset where n bytes meet none of the byte spans
    (sorted by start; each end already rounded up to POOL_ALIGN)."""
    at = 0
    for a, b in spans:
        if a - at >= n:
            break
        if b > at:
            at = b
    return at


def _label(ms: list[Value]) -> str:
    return next((m.label for m in ms if m.label), f"%{ms[0].id}")


def _check_inplace(values, steps, by_id, root_of) -> None:
    """An in-place value overwrites its class's old value: nothing may read the old
    value (the root and its views) after the step that writes the new one."""

    def is_new(v: Value) -> bool:
        while v.same_as is not None:
            if v.inplace:
                return True
            v = by_id[v.same_as]
        return False

    writes_at: dict[int, int] = {}
    for i, s in enumerate(steps):
        for vid in s.writes:
            writes_at.setdefault(vid, i)
    overwritten = {root_of[v.id] for v in values if v.inplace and v.same_as is not None}
    old_reads: dict[int, list[tuple[int, int]]] = {}  # class -> (step, value) reading its old value
    for i, s in enumerate(steps):
        for vid in s.reads:
            if root_of[vid] in overwritten and not is_new(by_id[vid]):
                old_reads.setdefault(root_of[vid], []).append((i, vid))
    seen_roots: dict[int, int] = {}
    for v in values:
        if not v.inplace:
            continue
        if v.same_as is None:
            raise PlanError(f"value {v.id} is inplace but names no same_as")
        r = root_of[v.id]
        if r in seen_roots:
            raise PlanError(f"values {seen_roots[r]} and {v.id} both overwrite value {r} in place")
        seen_roots[r] = v.id
        w = writes_at.get(v.id)
        if w is None:
            continue
        for i, vid in old_reads.get(r, ()):
            if i > w:
                raise PlanError(
                    f"step {i} ({steps[i].label}) reads value {vid} after step {w} "
                    f"overwrote it in place with value {v.id}"
                )


def _self_check(order, kind, size, life, buf_of, off_of, buffers, first_write, first_read) -> None:
    by_buf: dict[int, list[int]] = {}
    for r in order:
        by_buf.setdefault(buf_of[r], []).append(r)
        b = buffers[buf_of[r]]
        if off_of[r] + size[r] > b.size or off_of[r] % 4:
            raise PlanError(f"value {r} at offset {off_of[r]} does not fit buffer {b.id} ({b.size} bytes)")
        if kind[r] in POOLED and r in first_read and first_read[r] < first_write.get(r, first_read[r] + 1):
            raise PlanError(f"intermediate value {r} is read at step {first_read[r]} before it is written")
    for b, rs in by_buf.items():
        if len(rs) < 2:
            continue
        for i, a in enumerate(rs):
            for c in rs[i + 1 :]:
                if off_of[a] >= off_of[c] + size[c] or off_of[c] >= off_of[a] + size[a]:
                    continue  # disjoint bytes
                if kind[a] not in POOLED or kind[c] not in POOLED:
                    raise PlanError(f"values {a} ({kind[a]}) and {c} ({kind[c]}) share bytes of buffer {b}")
                (s1, e1), (s2, e2) = life[a], life[c]
                if not (e1 < s2 or e2 < s1):
                    raise PlanError(
                        f"values {a} (steps {s1}..{e1}) and {c} (steps {s2}..{e2}) are "
                        f"live at once in buffer {b}"
                    )


def _check_steps(steps, root_of, kind, buf_of) -> None:
    for i, s in enumerate(steps):
        held: dict[int, int] = {}
        for vid in (*s.reads, *s.writes):
            r = root_of[vid]
            if kind[r] in POOLED and held.setdefault(buf_of[r], r) != r:
                raise PlanError(
                    f"step {i} ({s.label}) touches values {held[buf_of[r]]} and {r} "
                    f"of one pooled buffer {buf_of[r]}"
                )


def _report(order, kind, size, life, buffers, steps, pooled) -> dict:
    by_kind: dict[str, int] = {}
    for b in buffers:
        by_kind[b.kind] = by_kind.get(b.kind, 0) + b.size
    total = sum(b.size for b in buffers)
    pooled_bytes = sum(b.size for b in buffers if b.kind in POOLED)
    unpooled_intermediate = sum(_round(size[r], 4) for r in pooled)
    fixed = total - pooled_bytes
    # live intermediate bytes per step (sweep over class lifetimes)
    delta = [0] * (len(steps) + 1)
    for r in pooled:
        s, e = life[r]
        if s < 0:
            continue
        delta[s] += _round(size[r], 4)
        delta[e + 1] -= _round(size[r], 4)
    peak_live, cur, at = 0, 0, -1
    for k, d in enumerate(delta):
        cur += d
        if cur > peak_live:
            peak_live, at = cur, k
    live = sorted(
        ((_round(size[r], 4), r) for r in pooled if life[r][0] <= at <= life[r][1]), key=lambda x: -x[0]
    )
    return {
        "bytes_by_kind": by_kind,
        "total_bytes": total,
        "unpooled_total_bytes": fixed + unpooled_intermediate,
        "peak_live_bytes": fixed + peak_live,
        "buffers": len(buffers),
        "intermediate_values": len(pooled),
        "intermediate_buffers": sum(1 for b in buffers if b.kind in POOLED),
        "steps": len(steps),
        # the intermediates live at the step where most of their bytes are, largest first
        "peak": {
            "step": at,
            "kernel": steps[at].label if 0 <= at < len(steps) else "",
            "intermediate_bytes": peak_live,
            "live": [{"value": r, "bytes": n, "steps": list(life[r])} for n, r in live],
        },
    }
