"""names: a character-level transformer language model of first names.

Data: the 5,163 first names of the `names` package (US census lists), lower-cased
and deduplicated, read from data/names.txt (see data/README.md). A name is in the
validation set when crc32 of its ASCII bytes is 0 mod 10 (about 10 %), else in the
training set: a fixed split that does not depend on the file's order.

Tokens: 0 is the boundary (start and end of a name), 1..26 are a..z. A name
"emma" is the sequence [0, e, m, m, a, 0]: the model sees the first CTX = 16
tokens (zero-padded) and predicts the next token at every position; a mask input
marks the positions that belong to the name (its letters and its end), and the
loss is the mean cross-entropy over those. The model is addition's transformer
(tgweb.samples.addition.Model) with vocabulary 27 and 16 positions.

Success: validation loss (mean nats per predicted token, over every letter and
end of every validation name) below the add-one smoothed bigram model's
(bigram_loss(), counted on the training names in the same run) by at least
SUCCESS["margin"], within 1,500 steps.
"""

from __future__ import annotations

import array
import functools
import math
import random
import zlib
from importlib import resources

from .. import ops
from . import addition
from ._util import flatten, make_rng

BOUNDARY = 0
VOCAB = 27
CTX = 16
MAX_LEN = CTX - 1  # the longest name that fits (the longest in the data has 11 letters)
BATCH = 32
EVAL_BATCH = 128
STEPS = 1500
INPUTS = {"tokens": ((BATCH, CTX), "i32"), "targets": ((BATCH, CTX), "i32"), "mask": (BATCH, CTX)}
EVAL_INPUTS = {"tokens": ((EVAL_BATCH, CTX), "i32")}
OPTIMIZER = dict(addition.OPTIMIZER)
SUCCESS = {"metric": "val_loss", "below_baseline": "bigram_loss", "margin": 0.2, "within_steps": STEPS}


def is_validation(name: str) -> bool:
    return zlib.crc32(name.encode("ascii")) % 10 == 0


@functools.lru_cache(maxsize=1)
def all_names() -> tuple[str, ...]:
    """Every name, as in data/names.txt (sorted, lower-case a-z)."""
    text = (resources.files(__package__) / "data" / "names.txt").read_text("ascii")
    out = tuple(w for w in text.split() if w)
    bad = [w for w in out if not (w.isascii() and w.isalpha() and w.islower()) or len(w) > MAX_LEN]
    if bad:
        raise RuntimeError(f"data/names.txt: unusable names {bad[:5]}")
    return out


@functools.lru_cache(maxsize=1)
def split() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(training names, validation names)."""
    names = all_names()
    return (tuple(n for n in names if not is_validation(n)), tuple(n for n in names if is_validation(n)))


def train_names() -> tuple[str, ...]:
    return split()[0]


def val_names() -> tuple[str, ...]:
    return split()[1]


def encode(name: str) -> list[int]:
    """[0, letters..., 0]."""
    return [BOUNDARY] + [ord(ch) - 96 for ch in name] + [BOUNDARY]


def decode(tokens) -> str:
    return "".join(chr(96 + t) for t in tokens if t != BOUNDARY)


def _rows(names) -> tuple[array.array, array.array, array.array]:
    """tokens, targets (i32) and mask (f32), flat [len(names) * CTX], zero-padded."""
    tokens, targets, mask = array.array("i"), array.array("i"), array.array("f")
    for n in names:
        seq = encode(n)
        k = len(seq) - 1  # predicted positions: every letter and the end
        tokens.extend(seq[:-1] + [BOUNDARY] * (CTX - k))
        targets.extend(seq[1:] + [BOUNDARY] * (CTX - k))
        mask.extend([1.0] * k + [0.0] * (CTX - k))
    return tokens, targets, mask


class Model(addition.Model):
    """addition's transformer with vocabulary 27 and 16 positions."""

    def __init__(self, vocab: int = VOCAB, positions: int = CTX) -> None:
        super().__init__(vocab=vocab, positions=positions)


def forward(model: Model, tokens):
    """Logits [b, 16, 27]."""
    return model(tokens)


def loss_fn(model: Model, tokens, targets, mask):
    """Mean cross-entropy over the masked-in positions."""
    nll = ops.cross_entropy(model(tokens), targets, reduction="none")
    return ops.sum(nll * mask) / ops.sum(mask)


def batch(step: int, rng=0) -> dict[str, array.array]:
    """BATCH training names drawn uniformly (with replacement), as tokens, targets
    and mask, flat arrays of BATCH * 16."""
    r = make_rng(step, rng)
    names = train_names()
    tokens, targets, mask = _rows([names[r.randrange(len(names))] for _ in range(BATCH)])
    return {"tokens": tokens, "targets": targets, "mask": mask}


# ---------------------------------------------------------------- baseline


@functools.lru_cache(maxsize=4)
def bigram_counts(names: tuple[str, ...] | None = None) -> tuple[tuple[int, ...], ...]:
    """counts[a][b]: how often token b follows token a in the (training) names."""
    c = [[0] * VOCAB for _ in range(VOCAB)]
    for n in train_names() if names is None else names:
        seq = encode(n)
        for a, b in zip(seq, seq[1:]):
            c[a][b] += 1
    return tuple(tuple(row) for row in c)


def bigram_loss(names=None, smoothing: float = 1.0) -> float:
    """Mean nats per predicted token of the bigram model counted on the training names
    with add-`smoothing` (Laplace) smoothing, on the validation names (or names)."""
    c = bigram_counts()
    logp = []
    for row in c:
        total = sum(row) + smoothing * VOCAB
        logp.append([math.log((v + smoothing) / total) for v in row])
    nll, count = 0.0, 0
    for n in val_names() if names is None else names:
        seq = encode(n)
        for a, b in zip(seq, seq[1:]):
            nll -= logp[a][b]
            count += 1
    return nll / count


# ---------------------------------------------------------------- evaluation


def _log_softmax(row) -> list[float]:
    m = max(row)
    lse = m + math.log(sum(math.exp(v - m) for v in row))
    return [v - lse for v in row]


def _chunks(names, size):
    names = list(names)
    for lo in range(0, len(names), size):
        chunk = names[lo : lo + size]
        yield chunk, chunk + [chunk[0]] * (size - len(chunk))


def _call(logits_fn, tokens) -> list[float]:
    logits = flatten(logits_fn({"tokens": tokens}))
    if len(logits) != EVAL_BATCH * CTX * VOCAB:
        raise ValueError(f"logits_fn returned {len(logits)} values, expected {EVAL_BATCH * CTX * VOCAB}")
    return logits


def val_loss(logits_fn, names=None) -> float:
    """Mean nats per predicted token on the validation names (or names). logits_fn({"tokens":
    flat i32 array of EVAL_BATCH * 16}) returns the logits [EVAL_BATCH, 16, 27] (any
    nesting or flat); a last short chunk is padded with copies of its first name."""
    nll, count = 0.0, 0
    for chunk, padded in _chunks(val_names() if names is None else names, EVAL_BATCH):
        tokens, targets, _ = _rows(padded)
        logits = _call(logits_fn, tokens)
        for i, name in enumerate(chunk):
            for pos in range(len(name) + 1):
                base = (i * CTX + pos) * VOCAB
                nll -= _log_softmax(logits[base : base + VOCAB])[targets[i * CTX + pos]]
                count += 1
    return nll / count


def metric(logits_fn, names=None) -> float:
    """The validation loss (see val_loss); lower is better."""
    return val_loss(logits_fn, names)


def threshold() -> float:
    """The validation loss to stay below: bigram_loss() - SUCCESS["margin"]."""
    return bigram_loss() - SUCCESS["margin"]


def sample_names(logits_fn, n: int, rng=0, temperature: float = 1.0) -> list[str]:
    """n names sampled letter by letter from the model. logits_fn as in val_loss; rng is
    an int seed or a random.Random. A name ends at the boundary token or after MAX_LEN
    letters."""
    r = rng if isinstance(rng, random.Random) else make_rng(0, rng)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    out: list[str] = []
    while len(out) < n:
        rows = [[BOUNDARY] for _ in range(EVAL_BATCH)]
        done = [False] * EVAL_BATCH
        for pos in range(MAX_LEN + 1):
            if all(done):
                break
            tokens = array.array("i", [t for row in rows for t in row + [BOUNDARY] * (CTX - len(row))])
            logits = _call(logits_fn, tokens)
            for i, row in enumerate(rows):
                if done[i]:
                    continue
                base = (i * CTX + pos) * VOCAB
                lp = _log_softmax([v / temperature for v in logits[base : base + VOCAB]])
                if pos == MAX_LEN:
                    tok = BOUNDARY
                else:
                    tok = r.choices(range(VOCAB), weights=[math.exp(v) for v in lp])[0]
                if tok == BOUNDARY:
                    done[i] = True
                else:
                    row.append(tok)
        out.extend(decode(row) for row in rows[: n - len(out)])
    return out
