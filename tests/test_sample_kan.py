"""The kan sample: its B-spline bases (against Cox-de Boor), its plain-Python edges
(against the graph), and training to SUCCESS on the reference backend."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tgweb import samples
from tgweb.samples import kan


def cox_de_boor(x: float, knots: list[float], k: int, order: int) -> float:
    """B_{k,order}(x) by the textbook recursion (half-open intervals)."""
    if order == 0:
        return 1.0 if knots[k] <= x < knots[k + 1] else 0.0
    left = (x - knots[k]) / (knots[k + order] - knots[k]) * cox_de_boor(x, knots, k, order - 1)
    right = (
        (knots[k + order + 1] - x)
        / (knots[k + order + 1] - knots[k + 1])
        * cox_de_boor(x, knots, k + 1, order - 1)
    )
    return left + right


@pytest.mark.parametrize("lo,hi,grid", [(-1.0, 1.0, 8), (-2.0, 2.0, 8), (0.5, 3.0, 5)])
def test_graph_bases_are_the_cubic_b_splines_of_the_grid(lo, hi, grid):
    h = (hi - lo) / grid
    knots = [lo + (j - 3) * h for j in range(grid + 7)]
    xs = np.linspace(lo - 0.7, hi + 0.7, 157, dtype=np.float32).reshape(157, 1)
    tr = samples.compile("kan", backend="reference")
    bases = tr.attach(lambda model, x: kan.bspline_bases(x, lo, hi, grid), inputs={"x": (157, 1)})
    out = np.asarray(bases.run(x=xs).output).reshape(157, grid + 3)
    for n, x in enumerate(xs.ravel()):
        xc = min(hi, max(lo, float(x)))
        xc = min(xc, hi - 1e-9)  # the recursion's intervals are half-open; the bases are continuous
        want = [cox_de_boor(xc, knots, k, 3) for k in range(grid + 3)]
        np.testing.assert_allclose(out[n], want, atol=2e-6, err_msg=f"x={x}")
        assert abs(sum(out[n]) - 1.0) < 1e-5  # a partition of unity on (and, clamped, off) the grid


def test_cardinal_cubic():
    assert kan.cardinal_cubic(2.0) == pytest.approx(2 / 3)
    assert kan.cardinal_cubic(1.0) == pytest.approx(1 / 6) == kan.cardinal_cubic(3.0)
    assert kan.cardinal_cubic(0.0) == 0.0 == kan.cardinal_cubic(4.0) == kan.cardinal_cubic(-3.0)
    assert sum(kan.cardinal_cubic(0.3 + j) for j in range(4)) == pytest.approx(1.0)


def test_plain_python_edges_equal_the_graph():
    tr = samples.compile("kan", backend="reference", seed=3)
    for s in range(30):
        tr.step(**kan.batch(s, 3))
    predict = tr.attach(kan.forward, inputs=kan.EVAL_INPUTS)
    want = predict.run(**kan.grid()).output.ravel()
    edges = kan.Edges(tr.params())
    got = [edges.forward(x) for x in kan.EVAL_GRID]
    np.testing.assert_allclose(got, want, atol=2e-5)
    # the network's output is the sum of its second-layer edges at the hidden values
    x = 0.37
    hid = edges.hidden(x)
    assert sum(edges.edge(1, i, 0, v) for i, v in enumerate(hid)) == pytest.approx(edges.forward(x))
    curves = edges.curves(points=11)
    assert len(curves) == 8 and [c["layer"] for c in curves] == [0] * 4 + [1] * 4
    assert all(len(c["x"]) == len(c["y"]) == 11 and all(map(math.isfinite, c["y"])) for c in curves)
    for c in curves[4:]:  # a second-layer edge is drawn over the range its input covers
        i = c["i"]
        vals = [edges.hidden(t)[i] for t in np.linspace(-1, 1, 11)]
        assert c["x"][0] <= min(vals) + 1e-9 and c["x"][-1] >= max(vals) - 1e-9


def test_bad_input_is_named():
    with pytest.raises(KeyError, match="layers.0.base"):
        kan.Edges({})
    params = samples.compile("kan", backend="reference").params()
    with pytest.raises(ValueError, match="layers.1.coef has 3 values"):
        kan.Edges({**params, "layers.1.coef": [1.0, 2.0, 3.0]})
    with pytest.raises(IndexError):
        kan.Edges(params).edge(1, 0, 2, 0.0)
    with pytest.raises(ValueError, match="grid must be a positive int"):
        kan.KANLayer(1, 2, grid=0)
    with pytest.raises(ValueError, match="lo < hi"):
        kan.KANLayer(1, 2, 1.0, -1.0)


def test_batches_are_deterministic_and_on_target():
    a, b = kan.batch(5, 2), kan.batch(5, 2)
    assert a == b and kan.batch(6, 2) != a
    assert len(a["x"]) == len(a["y"]) == kan.BATCH
    assert all(-1 <= x <= 1 and abs(y - math.sin(math.pi * x)) < 1e-6 for x, y in zip(a["x"], a["y"]))
    assert kan.metric(lambda g: [kan.target(x) for x in g["x"]]) < 1e-12
    assert kan.metric(lambda g: [0.0] * len(g["x"])) == pytest.approx(0.5, abs=0.01)
    with pytest.raises(ValueError, match="expected 201"):
        kan.metric(lambda g: [0.0])
