"""A step's data, checked once: what a training step or an inference run accepts
(every input present and nothing extra, each of its declared shape and dtype:
arrays.from_user; integer inputs that index something, an embedding's rows or a loss's
classes, within range), and the words its scalars take. check_inputs runs before
anything reaches the GPU, so a bad batch raises tgweb.InputError naming the input and
changes nothing; the runtimes and gpu.mjs trust the StepData it returns."""

from __future__ import annotations

import array
import struct
from collections.abc import Mapping

from .arrays import InputError, from_user
from .ir import REGISTRY, Graph, prod

_SAME = {"f32": "f", "i32": "i"}  # array.array typecodes taken as they are (bool is checked for 0/1)


class StepData(dict):
    """A checked step: input name -> flat array.array of its declared dtype and length, in
    declaration order. `given` holds the values as the caller passed them, read by the
    reference engine alone (a float64 run keeps a float64 batch exact); the GPU runtimes
    send the checked arrays as they are."""

    __slots__ = ("given",)


def index_bounds(graph: Graph) -> dict[str, tuple[int, str, frozenset]]:
    """Which inputs index something, and the smallest size they index: input name ->
    (exclusive bound, "kind at site", values also allowed). Asks the registry (OpDef.index_bounds) for the
    index positions of each node and follows them back to graph inputs through the
    ops that only move values (family "shape": reshape, slice, concat, ...), so an
    input is checked whole even when only a slice of it reaches the index op.

    Indices computed inside the graph (arithmetic, casts, argmax) are not checked on
    the host; out of range they follow the kinds' documented rule: a zero row from
    embedding and one_hot, 0 from take_along_axis (so a cross_entropy/nll target out
    of range contributes -0 to the loss), and no gradient."""
    out: dict[str, tuple[int, str, frozenset]] = {}
    for t in graph.tensors:
        rule = REGISTRY[t.kind].index_bounds
        if rule is None:
            continue
        for pos, bound, *extra in rule(t):
            allowed = frozenset(extra)  # values the kind handles itself (a loss's ignore_index)
            stack, seen = [t.inputs[pos]], set()
            while stack:
                s = stack.pop()
                if s.id in seen:
                    continue
                seen.add(s.id)
                if s.kind == "input":
                    name = s.attrs["name"]
                    if name not in out:
                        out[name] = (bound, f"{t.kind} at {t.site}", allowed)
                    else:  # a value must suit every index op the input reaches
                        b, where, a = out[name]
                        where = f"{t.kind} at {t.site}" if bound < b else where
                        out[name] = (min(b, bound), where, a & allowed)
                elif REGISTRY[s.kind].family == "shape":
                    stack.extend(i for i in s.inputs if i.dtype == s.dtype)
    return out


def check_inputs(
    inputs: Mapping, batch: dict, what: str, bounds: dict[str, tuple[int, str, frozenset]] | None = None
) -> StepData:
    """Every input present, nothing extra, each of the right shape and dtype, integer
    inputs that index something within [0, size); raises InputError naming the input
    before anything changes. `inputs`: name -> its declaration (anything with .shape
    and .dtype: a Graph's input tensors, a Program's input slots)."""
    missing = [n for n in inputs if n not in batch]
    extra = sorted(n for n in batch if n not in inputs)
    if missing or extra:
        raise InputError(
            f"{what}: "
            + "; ".join(
                ([f"missing input(s) {missing}"] if missing else [])
                + ([f"unexpected input(s) {extra} (expected {list(inputs)})"] if extra else [])
            )
        )
    data = StepData()
    data.given = batch
    for n, t in inputs.items():
        x = batch[n]
        # the common case, an array.array already of the input's type and length: the copy
        # from_user makes of it, without its chain of checks (a training step's host time)
        if type(x) is array.array and x.typecode == _SAME.get(t.dtype) and len(x) == prod(t.shape):
            data[n] = array.array(x.typecode, x)
        else:
            data[n] = from_user(x, t.shape, t.dtype, f"input {n!r}")
    for n, (bound, where, allowed) in (bounds or {}).items():
        vals = data[n]
        if vals and (min(vals) < 0 or max(vals) >= bound):
            bad = [(i, v) for i, v in enumerate(vals) if not 0 <= v < bound and v not in allowed]
            if bad:
                i, v = bad[0]
                also = f" (or {sorted(allowed)})" if allowed else ""
                raise InputError(
                    f"{what}: input {n!r} holds {v} at flat index {i}, outside [0, {bound}){also}: "
                    f"it indexes {where}"
                )
    return data


class ScalarWords:
    """A Program's per-step scalars as the words of its scalars buffer, little-endian:
    an f32 as a float, a u32 as an integer modulo 2**32; the values are read by name
    (others are ignored)."""

    def __init__(self, scalars: list) -> None:
        self._struct = struct.Struct("<" + "".join("f" if s.type == "f32" else "I" for s in scalars))
        self._kinds = [(s.name, s.type == "f32") for s in scalars]
        self.size = self._struct.size

    def pack_into(self, buf, at: int, values: Mapping) -> None:
        try:
            words = [float(values[n]) if f32 else int(values[n]) & 0xFFFFFFFF for n, f32 in self._kinds]
        except KeyError:
            missing = [n for n, _ in self._kinds if n not in values]
            raise ValueError(f"scalars missing: {missing}") from None
        self._struct.pack_into(buf, at, *words)
