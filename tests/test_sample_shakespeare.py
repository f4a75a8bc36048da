"""The shakespeare sample: its data and split, nanoGPT's model at full size (parameter
count, names, schedule) and written out in NumPy, dropout in training only, drawing text,
and the scaled-down size trained to its bound through `tgweb train shakespeare --small`."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tgweb import optim, samples
from tgweb.samples import shakespeare as sh

ROOT = Path(__file__).resolve().parents[1]


def test_the_text_its_vocabulary_and_the_90_10_split():
    text = sh.text()
    assert len(text) == 1_115_394
    assert (
        hashlib.sha256(text).hexdigest() == "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
    )
    assert sh.vocab() == 65 and sh.chars().startswith("\n !$&',-.3:;?ABC") and sh.chars().endswith("xyz")
    train, val = sh.split()
    assert (len(train), len(val)) == (1_003_854, 111_540) and train + val == sh._tokens()
    assert sh.decode(val[:40]) == text[1_003_854 : 1_003_854 + 40].decode()
    assert sh.decode(sh.encode("To be, or not to be")) == "To be, or not to be"
    with pytest.raises(ValueError, match="'#' is not one of the text's 65 characters"):
        sh.encode("a#b")


def test_batches_are_windows_of_the_training_text_and_evaluation_of_the_validation_text():
    s = sh.sized("small")
    b = s.batch(5, 2)
    assert b == s.batch(5, 2) and b != s.batch(6, 2) and b != s.batch(5, 3)
    assert len(b["tokens"]) == len(b["targets"]) == s.BATCH * s.BLOCK and b["tokens"].typecode == "i"
    train, val = (sh.decode(part) for part in sh.split())
    block = s.BLOCK
    for row in range(s.BATCH):
        x = sh.decode(b["tokens"][row * block : (row + 1) * block])
        y = sh.decode(b["targets"][row * block : (row + 1) * block])
        assert x[1:] == y[:-1] and x + y[-1] in train
    batches = s.eval_batches()
    assert len(batches) == s.config.eval_batches and batches == s.eval_batches()
    for e in batches[:2]:
        assert sh.decode(e["tokens"][:block]) + sh.decode(e["targets"][block - 1 : block]) in val
    assert s.metric(lambda batch: [[2.0]]) == 2.0
    with pytest.raises(ValueError, match="one number a batch"):
        s.metric(lambda batch: [1.0, 2.0])


def test_the_full_size_is_nanogpts_character_model():
    c = sh.FULL
    assert (c.layers, c.heads, c.dim, c.block, c.batch, c.dropout) == (6, 6, 384, 256, 64, 0.2)
    model = sh.Model()
    assert model.num_params() == 10_745_088  # nanoGPT prints 10.65M: it leaves out the 98,304 of wpe
    shapes = {n: p.shape for n, p in model.named_parameters()}
    assert shapes["transformer.wte.weight"] == (65, 384) and shapes["transformer.wpe.weight"] == (256, 384)
    assert shapes["transformer.h.5.attn.c_attn.weight"] == (1152, 384)
    assert shapes["transformer.h.0.mlp.c_fc.weight"] == (1536, 384)
    assert shapes["transformer.h.0.ln_1.weight"] == (384,) and not [n for n in shapes if "bias" in n]
    assert sh.INPUTS == {"tokens": ((64, 256), "i32"), "targets": ((64, 256), "i32")}
    opt, clip = optim.from_spec(sh.OPTIMIZER)
    lr = optim.schedules.from_spec(sh.OPTIMIZER["schedule"])
    assert clip == 1.0 and opt.weight_decay == 0.1 and tuple(opt.betas) == (0.9, 0.99)
    assert math.isclose(lr(0), 1e-5) and math.isclose(lr(99), 1e-3) and math.isclose(lr(100), 1e-3)
    assert math.isclose(lr(2550), 5.5e-4) and math.isclose(lr(5000), 1e-4) and lr(100) > lr(101) > lr(4999)
    assert sh.SUCCESS == {"metric": "val_loss", "below": 1.5, "within_steps": 5000}


def _numpy_gpt(p, tokens, c):
    """nanoGPT's GPT.forward (eval mode) in NumPy, float64."""
    b, t = tokens.shape
    h, hd = c.heads, c.dim // c.heads

    def ln(v, w):
        return (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-5) * w

    x = p["transformer.wte.weight"][tokens] + p["transformer.wpe.weight"][:t]
    for i in range(c.layers):
        pre = f"transformer.h.{i}."
        q, k, v = np.split(ln(x, p[pre + "ln_1.weight"]) @ p[pre + "attn.c_attn.weight"].T, 3, axis=-1)
        q, k, v = (a.reshape(b, t, h, hd).transpose(0, 2, 1, 3) for a in (q, k, v))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + np.triu(np.full((t, t), -np.inf), 1)
        w = np.exp(s - s.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        x = x + (w @ v).transpose(0, 2, 1, 3).reshape(b, t, c.dim) @ p[pre + "attn.c_proj.weight"].T
        f = ln(x, p[pre + "ln_2.weight"]) @ p[pre + "mlp.c_fc.weight"].T
        gelu = 0.5 * f * (1 + np.vectorize(math.erf)(f / math.sqrt(2)))
        x = x + gelu @ p[pre + "mlp.c_proj.weight"].T
    return ln(x, p["transformer.ln_f.weight"]) @ p["transformer.wte.weight"].T


def test_forward_is_nanogpts_computation():
    s = sh.sized("small")
    tr = samples.compile(s, backend="reference", seed=3)
    for i in range(3):  # off the initial weights (the norm gains included)
        tr.step(**s.batch(i))
    p = {k: np.asarray(v, np.float64) for k, v in tr.params().items()}
    tokens = np.asarray(s.batch(9)["tokens"], np.int32).reshape(s.BATCH, s.BLOCK)[:4]
    logits = tr.attach(lambda m, tokens: m(tokens, training=False), inputs={"tokens": ((4, s.BLOCK), "i32")})
    np.testing.assert_allclose(logits.run(tokens=tokens).output, _numpy_gpt(p, tokens, s.config), atol=3e-5)


def test_dropout_only_in_training_steps():
    s = sh.Sample(sh.Config(**{**vars(sh.SMALL), "dropout": 0.5, "layers": 1}))
    tr = samples.compile(s, backend="reference", seed=0)
    b = s.batch(0)
    train_loss = tr.attach(s.loss_fn, inputs=s.INPUTS)
    evaluate = tr.attach(s.forward, inputs=s.EVAL_INPUTS)
    e1, e2 = float(evaluate.run(**b).output), float(evaluate.run(**b).output)
    t1, t2 = float(train_loss.run(**b).output), float(train_loss.run(**b).output)
    assert e1 == e2 and t1 != t2 and abs(t1 - e1) > 1e-4  # fresh dropout masks each run


def test_stream_reads_the_distribution_at_the_last_context_position():
    s = sh.sized("small")
    n, block = sh.vocab(), s.BLOCK
    seen = []

    def probs_fn(feeds):  # one-hot: the character after the context's last one
        tokens = list(feeds["tokens"])
        seen.append(tokens)
        out = []
        for tok in tokens:
            out += [1.0 if j == (tok + 1) % n else 0.0 for j in range(n)]
        return out

    got = s.generate(probs_fn, 70, prompt="a", temperature=0.7)
    want = "".join(sh.chars()[(sh.encode("a")[0] + i) % n] for i in range(1, 71))
    assert got == want
    assert seen[0][:2] == [sh.encode("a")[0], 0] and len(seen[0]) == block  # zero-padded after
    assert seen[-1][-1] != 0 and seen[-1] == sh.encode(("a" + got)[-block - 1 : -1])  # a sliding window
    with pytest.raises(ValueError, match="temperature must be > 0"):
        s.generate(probs_fn, 3, temperature=0)
    with pytest.raises(ValueError, match="returned 1 values, expected 2080"):
        s.generate(lambda feeds: [1.0], 3)


@pytest.mark.slow
def test_the_small_size_reaches_its_bound_through_the_cli(tmp_path):
    out = tmp_path / "summary.json"
    cmd = [sys.executable, "-m", "tgweb", "train", "shakespeare", "--small", "--backend", "reference"]
    cmd += ["--until-success", "--eval-every", "100", "--check", "--no-progress", "--json", str(out)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    s = json.loads(out.read_text())
    assert s["success"] and s["parameters"] == 104_832 and s["final_metric"] < sh.SMALL.bound, s
    assert "104,832 parameters" in p.stdout and "sampled text:" in p.stdout, p.stdout
    print(f"shakespeare --small: val_loss {s['final_metric']:.3f} at step {s['steps']}, {s['wall_s']:.1f} s")


def test_small_is_refused_for_a_sample_without_a_small_size():
    p = subprocess.run(
        [sys.executable, "-m", "tgweb", "train", "sin", "--small"], cwd=ROOT, capture_output=True, text=True
    )
    assert p.returncode == 2 and "--small: sample sin has no small size" in p.stderr
