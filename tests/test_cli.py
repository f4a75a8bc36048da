"""The command line, run as users run it: `python -m tgweb ...` in a subprocess."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time

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


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tgweb", "train", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _saved_step(path) -> int:
    from tgweb.io import safetensors

    with open(path, "rb") as f:
        return int(safetensors.load(f.read())[1]["calls"])


def _wait_for(path, proc: subprocess.Popen, timeout: float = 60) -> None:
    t0 = time.monotonic()
    while not os.path.exists(path):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - t0 < timeout, f"no checkpoint at {path} after {timeout} s"
        time.sleep(0.02)


def test_sigkill_mid_run_then_resume_is_bitwise_an_uninterrupted_run(tmp_path):
    """Issue 29: --checkpoint-every saves as the run goes (atomically: a kill at any
    moment leaves a whole file); --resume continues it, and the run ends bitwise where
    an uninterrupted one ends (reference backend): parameters, optimizer state, counts."""
    ck, resumed, whole = tmp_path / "run.ckpt", tmp_path / "resumed.ckpt", tmp_path / "whole.ckpt"
    common = ["sin", "--backend", "reference", "--no-progress", "--eval-every", "100000"]
    p = _start(*common, "--steps", "100000", "--checkpoint", str(ck), "--checkpoint-every", "30")
    try:
        _wait_for(ck, p)
        time.sleep(0.3)  # a few more saves, then the kill lands anywhere in the loop
    finally:
        p.send_signal(signal.SIGKILL)
        p.communicate()
    assert p.returncode == -signal.SIGKILL
    saved = _saved_step(ck)  # whole: the loader checks every byte of the layout
    assert saved > 0 and saved % 30 == 0, saved
    total = saved + 45
    r = _run(
        "train",
        *common,
        "--steps",
        str(total),
        "--resume",
        str(ck),
        "--checkpoint",
        str(resumed),
        "--json",
        "-",
    )
    assert r.returncode == 0, r.stderr
    assert f"resumed at step {saved} (seed 0)" in r.stdout
    w = _run("train", *common, "--steps", str(total), "--checkpoint", str(whole), "--json", "-")
    assert w.returncode == 0, w.stderr
    a, b = (json.loads(x.stdout.splitlines()[-1]) for x in (r, w))
    assert a["steps"] == b["steps"] == total and a["final_loss"] == b["final_loss"]
    assert resumed.read_bytes() == whole.read_bytes()


def test_ctrl_c_saves_before_exiting_and_the_bar_shows_the_last_save(tmp_path):
    ck, summary = tmp_path / "run.ckpt", tmp_path / "s.json"
    p = _start(
        "sin", "--backend", "reference", "--steps", "100000", "--eval-every", "100000",
        "--checkpoint", str(ck), "--checkpoint-every", "50", "--json", str(summary),
    )  # fmt: skip
    try:
        _wait_for(ck, p)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 0, err
    s = json.loads(summary.read_text())
    assert s["interrupted"] is True and 50 <= s["steps"] < 100000
    assert _saved_step(ck) == s["steps"]  # saved after the last step, not at the last 50
    assert f"checkpoint: {ck} (step {s['steps']})" in out and "— interrupted" in out
    assert "Ctrl-C: stopping after this step and saving" in out
    assert "saved=step 50, " in err and " s ago" in err  # the progress bar's postfix


def test_checkpoint_arguments_are_checked(tmp_path):
    p = _run("train", "sin", "--checkpoint-every", "10")
    assert p.returncode == 2 and "--checkpoint-every N needs N >= 1 and --checkpoint PATH" in p.stderr
    p = _run("train", "sin", "--resume", str(tmp_path / "nope.ckpt"), "--backend", "reference")
    assert p.returncode == 2 and "nope.ckpt" in p.stderr and "Traceback" not in p.stderr
    ck = tmp_path / "kan.ckpt"
    assert cli.main(["train", "kan", "--backend", "reference", "--steps", "1", "--no-progress",
                     "--checkpoint", str(ck)]) == 0  # fmt: skip
    p = _run("train", "sin", "--backend", "reference", "--resume", str(ck))
    assert p.returncode == 2 and "is a checkpoint of the sample 'kan', not 'sin'" in p.stderr
