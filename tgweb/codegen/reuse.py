"""Kernel texts reused across a model's repeated layers (lower.emit).

A kernel's WGSL is a function of what its fused group computes (each member's kind,
dtype, shape and attrs, what it reads: other members, constants, inlined size-1 chains,
tensors in memory through views) and of where its stored tensors live only through:
which of them share a buffer (bindings are numbered per kernel), which share a
(buffer, offset) (one uniform word each: KernelCtx.offset) and each offset's alignment
modulo ALIGN (vec4 loads: KernelCtx.aligned). A random stream's key is a uniform word
too (KernelCtx.word), so only which members share a stream matters. A group's
signature is all of that, its tensors numbered by first appearance; groups with equal
signatures (the same kernel of every layer) have one text. The first is emitted; each
later one takes its text, dispatch and ops, with its own bindings, offsets, stream keys
and site. An emitter that reads storage itself (KernelCtx.storage: literal ranges) never
lends its text. One memo serves one lower() (one target, one plan).
"""

from __future__ import annotations

from typing import NamedTuple

from ..ir import REGISTRY
from ..program import Binding, Kernel
from .kernel import ALIGN
from .random import stream_hash


class Signature(NamedTuple):
    key: tuple  # hashable: equal keys, equal texts
    places: list  # (buffer, element offset) of each stored tensor, in order of first appearance
    buffers: list  # buffer ids, in order of first appearance
    streams: list  # random streams, in order of first appearance


class _Walk:
    """Builds a group's signature: members, then what they read, numbered canonically."""

    def __init__(self, inlined: set, where) -> None:
        self.inlined, self.where = inlined, where
        self.member: dict[int, int] = {}
        self.ext: dict[int, int] = {}  # id of a tensor read from outside -> its number
        self.ext_keys: list = []
        self.bufs: dict[int, int] = {}
        self.places: dict[tuple, int] = {}
        self.streams: dict[int, int] = {}

    def attrs(self, n) -> tuple:
        """repr tells -0.0 from 0.0 and True from 1, which equality does not; the stream
        (a uniform word) only by its number in this group. Attrs whose repr may
        abbreviate (an array's) key the node alone: never reused."""
        a = n.attrs
        if not _plain(a):
            return ("node", n.id)
        if "stream" not in a:
            return (repr(a), None)
        s = self.streams.setdefault(a["stream"], len(self.streams))
        return (repr({k: v for k, v in a.items() if k != "stream"}), s)

    def place(self, n) -> tuple | None:
        try:
            buf, off = self.where(n)
        except AssertionError:  # no storage: the emitter cannot read it either
            return None
        b = self.bufs.setdefault(buf, len(self.bufs))
        return (b, off % ALIGN, self.places.setdefault((buf, off), len(self.places)))

    def node(self, n) -> tuple:
        return (n.kind, n.dtype, tuple(n.shape), self.attrs(n), tuple(self.ref(x) for x in n.inputs))

    def ref(self, x) -> tuple:
        """How a node reads input x: through which views, from what."""
        views = []
        while REGISTRY[x.kind].role == "view" and x.id not in self.member:
            views.append((x.kind, x.dtype, tuple(x.shape), self.attrs(x)))
            x = x.inputs[0]
        if x.id in self.member:
            return (tuple(views), "m", self.member[x.id])
        if x.id not in self.ext:
            self.ext[x.id] = len(self.ext)
            self.ext_keys.append(None)  # numbered before its own inputs
            if REGISTRY[x.kind].role == "const":
                k = ("c", x.kind, x.dtype, tuple(x.shape), self.attrs(x))
            elif x.id in self.inlined:  # recomputed here from what it reads
                k = ("i", self.node(x))
            else:  # memory: its attrs (a leaf's name) are not read
                k = ("s", x.kind, x.dtype, tuple(x.shape), self.place(x))
            self.ext_keys[self.ext[x.id]] = k
        return (tuple(views), "x", self.ext[x.id])


_PLAIN = (str, int, float, type(None))  # bool is an int


def _plain(v) -> bool:
    """Whether repr writes v whole (what attrs hold today: numbers, strings, tuples)."""
    if isinstance(v, (tuple, list)):
        return all(_plain(x) for x in v)
    if isinstance(v, dict):
        return all(_plain(k) and _plain(x) for k, x in v.items())
    return isinstance(v, _PLAIN)


def signature(g, inlined: set, stored: set, where) -> Signature:
    """The signature of a scheduled group (tgweb.passes.fusion.Group) whose kernel reads
    sched.inlined values and stores what sched.stored and its parts say."""
    w = _Walk(inlined, where)
    parts = [g.prologue, g, g.epilogue] if g.kind == "op" else [g]
    for p in parts:
        for m in p.members if p is not None else ():
            w.member[m.id] = len(w.member)
    key: list = [g.kind]
    for p in parts:
        if p is None:
            key.append(None)
            continue
        key.append(("part", tuple(p.shape), len(p.members)))
        for m in p.members:
            flags = (m.id in inlined, m.id in stored, m.id in p.stored)
            key.append((w.node(m), flags, w.place(m) if m.id in stored else None))
    key.append(tuple(w.ext_keys))
    return Signature(tuple(key), list(w.places), list(w.bufs), list(w.streams))


class Template(NamedTuple):
    """A kernel with its storage in a signature's numbering."""

    wgsl: str
    bindings: list  # (buffer number, access)
    dispatch: tuple
    ops: list
    offsets: list  # ("p", place number) | ("s", stream number)


def template(k: Kernel, kc, sig: Signature) -> Template | None:
    """k (emitted through kc) in sig's numbering; None when it depends on more than sig says."""
    if kc.raw_storage:
        return None
    buf = {b: i for i, b in enumerate(sig.buffers)}
    place = {p: i for i, p in enumerate(sig.places)}
    word = {stream_hash(s): i for i, s in enumerate(sig.streams)}
    offsets = []
    for key in kc.uniform_keys:
        if key[0] == "word":
            if key[1] not in word:
                return None
            offsets.append(("s", word[key[1]]))
        elif key in place:
            offsets.append(("p", place[key]))
        else:
            return None
    if any(b.buffer not in buf for b in k.bindings):
        return None
    return Template(k.wgsl, [(buf[b.buffer], b.access) for b in k.bindings], k.dispatch, list(k.ops), offsets)


def instantiate(t: Template, sig: Signature, name: str, site: str) -> Kernel:
    offsets = [sig.places[i][1] if w == "p" else stream_hash(sig.streams[i]) for w, i in t.offsets]
    bindings = [Binding(sig.buffers[i], a) for i, a in t.bindings]
    return Kernel(name, t.wgsl, bindings, t.dispatch, list(t.ops), site, offsets)


def kernel_name(k: int, kinds: list[str]) -> str:
    """The k-th kernel's name, from the kinds it computes."""
    return f"k{k}_" + "_".join(kinds)[:40]


class KernelMemo:
    """Templates by signature for one lower(); counts fresh emissions and reuses."""

    def __init__(self, reuse: bool = True) -> None:
        self.reuse = reuse
        self.templates: dict[tuple, Template | None] = {}
        self.fresh = 0
        self.reused = 0

    def kernel(self, g, k: int, sched, where, emit_fresh) -> Kernel:
        """The kernel of group g (the k-th): a template's, or emit_fresh() -> (Kernel, KernelCtx)."""
        if not self.reuse:
            self.fresh += 1
            return emit_fresh()[0]
        sig = signature(g, sched.inlined, sched.stored, where)
        t = self.templates.get(sig.key, False)
        if t:
            self.reused += 1
            return instantiate(t, sig, kernel_name(k, t.ops), g.head.site)
        k, kc = emit_fresh()
        self.fresh += 1
        if t is False:
            self.templates[sig.key] = template(k, kc, sig)
        return k
