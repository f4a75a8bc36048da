"""The digits and names samples' data, splits and baselines; sin trained to success and
addition's memory plan through tg.compile; and every sample trained to its SUCCESS
criterion through the command line (slow; run with -m slow).

The slow trainings run every sample on the reference backend (with one BLAS thread, the
fastest here: 35-80 steps/s on a busy 2-core machine), and sin and digits also on the
native one (lavapipe: ~10-100 steps/s; the transformers' native steps took ~2 s there).
TGWEB_SAMPLE_BACKEND=reference skips the native runs. Each prints its steps and times
to success.
"""

from __future__ import annotations

import array
import math
import os
import random
import zlib

import pytest
from conftest import train_to_success

import tgweb as tg
from tgweb import samples
from tgweb.samples import addition, digits, names, sin, succeeded, success_bound

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------- digits data


def test_digits_split_sizes_disjoint_and_by_index():
    train, test = list(digits.TRAIN_INDICES), list(digits.TEST_INDICES)
    assert len(train) == 1438 and len(test) == 359 and len(train) + len(test) == 1797
    assert not set(train) & set(test)
    assert sorted(train + test) == list(range(1797))
    assert test == sorted(sorted(range(1797), key=lambda i: zlib.crc32(i.to_bytes(4, "little")))[:359])
    assert test[:5] == [0, 5, 6, 25, 26]
    # every class is in both sets, roughly a fifth of each in test
    tr, te = digits.labels(train), digits.labels(test)
    for c in range(10):
        assert 25 <= te.count(c) <= 45 and tr.count(c) >= 130


def test_digits_data_values():
    x = digits.images(range(1797))
    assert isinstance(x, array.array) and x.typecode == "f" and len(x) == 1797 * 64
    assert min(x) == 0.0 and max(x) == 1.0
    assert all(v * 16 == round(v * 16) for v in x[:6400])  # k/16 exactly
    assert set(digits.labels(range(1797))) == set(range(10))
    assert digits.image(0) == list(x[:64]) and digits.label(0) == 0  # sklearn's first image is a 0
    assert len(digits.test_inputs()["x"]) == 359 * 64


def test_digits_batches_are_deterministic_and_from_training_images():
    a, b = digits.batch(7, 3), digits.batch(7, 3)
    assert a["x"] == b["x"] and a["y"] == b["y"]
    assert digits.batch(8, 3)["x"] != a["x"] and digits.batch(7, 4)["x"] != a["x"]
    assert len(a["x"]) == 64 * 64 and len(a["y"]) == 64 and a["y"].typecode == "i"
    train = {tuple(digits.image(i)): digits.label(i) for i in digits.TRAIN_INDICES}
    for k in range(64):
        img = tuple(a["x"][k * 64 : (k + 1) * 64])
        assert img in train and train[img] == a["y"][k]


def test_digits_metric_with_an_oracle():
    lab = digits.labels(digits.TEST_INDICES)
    lookup = {tuple(digits.image(i)): digits.label(i) for i in digits.TEST_INDICES}

    def oracle(b):
        x = b["x"]
        rows = [lookup[tuple(x[k * 64 : (k + 1) * 64])] for k in range(len(x) // 64)]
        return [[float(c == r) for c in range(10)] for r in rows]

    assert digits.metric(oracle) == 1.0
    assert digits.metric(lambda b: [[0.0] * 10] * 359) == lab.count(0) / 359  # ties -> class 0
    assert succeeded(digits, 0.95) and not succeeded(digits, 0.9499)


# ---------------------------------------------------------------- names data


def test_names_split_sizes_disjoint_deterministic():
    train, val = names.split()
    assert len(train) == 4642 and len(val) == 521 and len(names.all_names()) == 5163
    assert not set(train) & set(val)
    assert sorted(train + val) == sorted(names.all_names())
    assert len(set(names.all_names())) == 5163  # deduplicated
    # the split depends on the name only (crc32), not on the file's order
    shuffled = list(names.all_names())
    random.Random(5).shuffle(shuffled)
    assert {n for n in shuffled if zlib.crc32(n.encode()) % 10 == 0} == set(val)
    assert names.is_validation("emma") == (zlib.crc32(b"emma") % 10 == 0)
    assert all(n.isalpha() and n.islower() and len(n) <= names.MAX_LEN for n in names.all_names())
    assert {"mary", "james"} <= set(names.all_names())


def test_names_batches():
    b = names.batch(11, 2)
    assert b == names.batch(11, 2) and b != names.batch(12, 2)
    tok, tgt, mask = b["tokens"], b["targets"], b["mask"]
    assert len(tok) == len(tgt) == len(mask) == 32 * 16
    train = set(names.train_names())
    for r in range(32):
        t, g, m = tok[r * 16 : (r + 1) * 16], tgt[r * 16 : (r + 1) * 16], mask[r * 16 : (r + 1) * 16]
        k = int(sum(m))
        assert list(m) == [1.0] * k + [0.0] * (16 - k)
        word = names.decode(g[: k - 1])
        assert word in train and len(word) == k - 1
        assert t[0] == names.BOUNDARY and g[k - 1] == names.BOUNDARY  # starts and ends
        assert list(t[1:k]) == list(g[: k - 1])  # targets = next tokens
    assert names.encode("abz") == [0, 1, 2, 26, 0] and names.decode([0, 1, 2, 26, 0]) == "abz"


def _bigram_logits_fn():
    """A logits function that is exactly the add-one bigram model."""
    c = names.bigram_counts()
    logp = [[math.log((v + 1) / (sum(row) + 27)) for v in row] for row in c]

    def fn(b):
        return [logp[t] for t in b["tokens"]]  # [EVAL_BATCH * 16, 27], flattened by the sample

    return fn


def test_bigram_baseline():
    loss = names.bigram_loss()
    assert 2.0 < loss < math.log(27)  # better than uniform
    assert names.bigram_loss(names.train_names()) < loss  # fits its own data better
    # an independent count gives the same number
    counts: dict[tuple[str, str], int] = {}
    for n in names.train_names():
        s = "." + n + "."
        for a, b in zip(s, s[1:]):
            counts[a, b] = counts.get((a, b), 0) + 1
    letters = "." + "abcdefghijklmnopqrstuvwxyz"
    tot = {a: sum(counts.get((a, b), 0) for b in letters) for a in letters}
    nll = n_tok = 0
    for n in names.val_names():
        s = "." + n + "."
        for a, b in zip(s, s[1:]):
            nll -= math.log((counts.get((a, b), 0) + 1) / (tot[a] + 27))
            n_tok += 1
    assert abs(nll / n_tok - loss) < 1e-12
    # the model's metric, fed the bigram model's logits, gives the bigram loss
    assert abs(names.metric(_bigram_logits_fn()) - loss) < 1e-4
    kind, bound = success_bound(names)
    assert kind == "below" and abs(bound - (loss - names.SUCCESS["margin"])) < 1e-12
    assert names.threshold() == bound
    assert not succeeded(names, loss) and succeeded(names, loss - 0.25)


def test_sample_names_from_the_bigram_model():
    fn = _bigram_logits_fn()
    got = names.sample_names(fn, 40, rng=3)
    assert got == names.sample_names(fn, 40, rng=3) and got != names.sample_names(fn, 40, rng=4)
    assert len(got) == 40 and all(isinstance(n, str) and len(n) <= names.MAX_LEN for n in got)
    assert all(n.isalpha() and n.islower() for n in got if n)
    assert sum(len(n) for n in got) / 40 > 3  # names, not single letters


# ---------------------------------------------------------------- through tg.compile


def test_sin_trains_to_success():
    tr = samples.compile(sin, backend="reference")
    assert isinstance(tr.optimizer, tg.optim.Adam) and tr.lr == sin.OPTIMIZER["lr"]
    fwd = tr.attach(sin.forward, inputs=sin.EVAL_INPUTS)
    best = float("inf")
    for s in range(sin.STEPS):
        r = tr.step(**sin.batch(s))
        assert r.ok
        if (s + 1) % 100 == 0:
            best = sin.metric(lambda b: fwd.run(**b).output)
            if best < sin.SUCCESS["below"]:
                break
    assert best < sin.SUCCESS["below"], best


def test_addition_plan_pools_intermediates():
    tr = samples.compile(addition, backend="reference")
    assert tr.clip_grad_norm == 1.0 and isinstance(tr.optimizer, tg.optim.AdamW)
    rep = tr.memory_report()  # the GPU backends' plan: fused kernels, pooled intermediates
    assert rep["total_bytes"] * 2 < rep["unpooled_total_bytes"]
    assert rep["bytes_by_kind"]["state"] == 2 * rep["bytes_by_kind"]["param"]


# ---------------------------------------------------------------- training to success


# (sample, backend, seed, evaluate every N steps)
TRAININGS = [
    ("sin", "reference", 0, 25),
    ("digits", "reference", 0, 25),
    ("addition", "reference", 0, 100),
    ("names", "reference", 0, 50),
    ("kan", "reference", 0, 25),
    ("canvas", "reference", 0, 50),
    ("tictactoe", "reference", 0, 100),
    ("llama", "reference", 0, 50),
    ("torchgpt", "reference", 0, 50),
    ("sin", "native", 0, 25),
    ("digits", "native", 0, 25),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,backend,seed,eval_every", TRAININGS, ids=[f"{t[0]}-{t[1]}" for t in TRAININGS])
def test_sample_reaches_success_through_the_cli(name, backend, seed, eval_every, tmp_path, record_property):
    if backend == "native":
        from tgweb.backends import native

        assert native.available(), "no WebGPU adapter (python3 build.py setup installs lavapipe)"
    record_property("summary", train_to_success(name, eval_every, tmp_path, seed, backend)["line"])
