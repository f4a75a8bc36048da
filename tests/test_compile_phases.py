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
