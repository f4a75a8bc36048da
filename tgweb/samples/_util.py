"""Helpers shared by the sample modules (pure Python)."""

from __future__ import annotations


def flatten(x) -> list:
    """A flat list from a nested list, an array.array, a tgweb.Array or a NumPy array."""
    if hasattr(x, "tolist"):
        x = x.tolist()
    if not isinstance(x, (list, tuple)):
        return [x]
    out: list = []
    stack = [iter(x)]
    while stack:
        for v in stack[-1]:
            if isinstance(v, (list, tuple)):
                stack.append(iter(v))
                break
            out.append(v)
        else:
            stack.pop()
    return out


def make_rng(step: int, rng):
    """A random.Random for one step: rng itself, or seeded from (int rng, step)."""
    import random
    if isinstance(rng, random.Random):
        return rng
    if not isinstance(rng, int) or isinstance(rng, bool):
        raise TypeError(f"rng must be an int seed or a random.Random, got {type(rng).__name__}")
    return random.Random(((rng & 0xFFFFFFFF) << 32) | (step & 0xFFFFFFFF))
