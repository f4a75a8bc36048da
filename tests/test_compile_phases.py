"""tools/compile_phases.py's table tells each pass once: the passes that fit_memory and the
initial values run count in their rows, not again in lowering's, so no remainder (a row
worked out as a whole less its parts) is negative."""

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("wgpu")

_spec = importlib.util.spec_from_file_location(
    "compile_phases", Path(__file__).resolve().parents[1] / "tools" / "compile_phases.py"
)
compile_phases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compile_phases)


def test_no_pass_is_counted_twice():
    from tgweb.samples import shakespeare

    sample = shakespeare.sized("small")
    row = compile_phases.phases(sample, "native")
    assert row["total"] > 0 and row["texts"] > 0
    for rest in ("lower (rest)", "engine (rest)", "other", "optimizer"):
        assert row[rest] >= -1e-4, (rest, row[rest])
    assert row["initial values"] > 0  # drawn by a Program of their own, lowered and run


def test_the_depth_table_says_what_a_layer_costs_and_what_the_target_allows():
    """Totals of 0.30 s (6 layers) and 0.42 s (12): 20 ms a layer over 180 ms fixed, and
    1.3x allows (1.3 - 1) x 180 / (12 - 1.3 x 6) = 12.9 ms a layer."""
    rows = (*compile_phases.ROWS, "texts")
    six = {r: 0.1 for r in rows} | {"total": 0.30}
    twelve = {r: 0.2 for r in rows} | {"total": 0.42}
    text = compile_phases.depth_table({"gpt 6L": six, "gpt 12L": twelve})
    assert "total 1.40x" in text
    last = text.splitlines()[-1]
    assert last == "a layer costs 20.0 ms over 180 ms fixed; the target allows 12.9 ms a layer"
