"""The command line, run as users run it: `python -m tgweb ...` in a subprocess."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

from tgweb import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tgweb", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_info_lists_backends_adapters_and_samples(capsys):
    p = _run("info")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert out.startswith("tgweb ")
    assert "backends:" in out
    for backend in ("reference", "native", "browser"):
        assert f"  {backend} " in out
    assert "default backend: " in out
    assert "adapters (wgpu-py)" in out
    from tgweb.samples import SAMPLES

    assert "samples: " + ", ".join(SAMPLES) in out and {"sin", "addition", "digits", "names"} <= set(SAMPLES)
    assert cli.main(["info", "--json"]) == 0  # the same data as JSON, in-process
    found = json.loads(capsys.readouterr().out)
    assert found["backends"]["reference"]["available"] is True
    assert found["backends"]["browser"]["available"] is False
    if found["backends"]["native"]["available"]:  # then wgpu-py saw at least one adapter
        assert found["adapters"] and all(a["summary"] for a in found["adapters"])
    assert found["default"] in ("native", "reference")


def test_train_sin_five_steps():
    p = _run("train", "sin", "--steps", "5")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert out.startswith("sin: backend ")
    assert "4,353 parameters" in out
    assert "step 5: loss " in out and ", mse " in out  # the final evaluation
    assert "final mse: " in out and "after 5 steps" in out
    assert "SUCCESS NOT met: mse < 0.001 within 1000 steps" in out
    assert "steps: 5, wall time " in out
    assert "loss=" in p.stderr and "5/5" in p.stderr  # the tqdm bar and its postfix


def test_train_check_json_and_errors(tmp_path):
    path = tmp_path / "summary.json"
    p = _run(
        "train",
        "sin",
        "--steps",
        "3",
        "--backend",
        "reference",
        "--seed",
        "2",
        "--check",
        "--no-progress",
        "--json",
        str(path),
    )
    assert p.returncode == 1, p.stderr  # --check: SUCCESS not met
    assert "loss=" not in p.stderr
    s = json.loads(path.read_text())
    assert s["sample"] == "sin" and s["backend"] == "reference" and s["seed"] == 2
    assert s["steps"] == 3 and s["success"] is False and s["bound"] == 1e-3
    assert s["history"][-1][0] == 3 and s["final_metric"] == s["history"][-1][1] > 1e-3
    p = _run("train", "nosuchsample")
    assert p.returncode == 2 and "invalid choice: 'nosuchsample'" in p.stderr
    p = _run("train", "sin", "--steps", "0")
    assert p.returncode == 2 and "--steps must be >= 1" in p.stderr


def test_train_in_process_digits_and_names():
    # the two data-backed samples end to end on the reference backend, a few steps each
    for name, metric in (("digits", "accuracy"), ("names", "val_loss")):
        out = io.StringIO()
        s = cli.train(name, backend="reference", steps=2, seed=1, progress=False, out=out)
        text = out.getvalue()
        assert s["steps"] == 2 and s["metric"] == metric and s["skipped_steps"] == 0
        assert f"final {metric}: " in text
        assert s["final_loss"] == s["final_loss"]  # finite, not NaN
    assert "sampled names: " in text
