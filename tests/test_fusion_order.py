"""The topological order fusion keeps of its kernels (passes/fusion.py's _Dag): every
cycle check it answers agrees with a search of the whole graph, and after every join and
merge its order still puts each kernel after every kernel it reads."""

from __future__ import annotations

import random

import pytest

from tgweb.passes.fusion import _Dag


def _reaches(succ, a, b, skip_direct=False) -> bool:
    """Whether a path leads from a to b (with skip_direct: not just the edge a -> b)."""
    stack = [x for x in succ[a] if not (skip_direct and x is b)]
    seen = set(stack)
    while stack:
        v = stack.pop()
        if v is b:
            return True
        for x in succ[v] - seen:
            seen.add(x)
            stack.append(x)
    return False


def _edges(dag):
    return {(u, v) for u, vs in dag.succ.items() for v in vs}


def _check_order(dag) -> None:
    assert all(dag.pos[u] < dag.pos[v] for u, v in _edges(dag))
    assert {v: {u for u in dag.pred if v in dag.succ[u]} for v in dag.pred} == dag.pred
    assert len(set(dag.pos.values())) == len(dag.pos)


@pytest.mark.parametrize("seed", range(4))
def test_cycle_checks_agree_with_a_full_search(seed):
    rng = random.Random(seed)
    dag = _Dag()
    nodes = []
    # made consumers first, as fusion makes its groups: each new one before the others
    for _ in range(60):
        g = object()
        dag.add(g, rng.sample(nodes, min(len(nodes), rng.randrange(3))))
        nodes.append(g)
    _check_order(dag)
    seen = set()  # (operation, whether it would close a cycle)
    for _ in range(400):
        if rng.random() < 0.5:
            g, *readers = rng.sample(nodes, rng.randrange(2, 5))
            cycle = any(_reaches(dag.succ, h, g) for h in readers)
            seen.add(("link", cycle))
            before = _edges(dag)
            assert dag.link(g, readers) is not cycle
            if cycle:
                assert _edges(dag) == before
            else:
                assert all(h in dag.succ[g] for h in readers)
        else:
            keep, gone = rng.sample(nodes, 2)
            cycle = _reaches(dag.succ, keep, gone, True) or _reaches(dag.succ, gone, keep, True)
            seen.add(("merge", cycle))
            before = _edges(dag)
            want = {(keep if u is gone else u, keep if v is gone else v) for u, v in before}
            want -= {(keep, keep)}
            assert dag.merge(keep, gone) is not cycle
            if cycle:
                assert _edges(dag) == before
            else:
                nodes.remove(gone)
                assert _edges(dag) == want
        _check_order(dag)
        if len(nodes) < 8:
            break
    assert seen == {(op, c) for op in ("link", "merge") for c in (True, False)}
