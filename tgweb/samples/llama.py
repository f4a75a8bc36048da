"""llama: a small Llama-style language model of first names.

The data, split, tokens, batches, evaluation and baseline are those of the names
sample (tgweb.samples.names): 27 tokens (0 the boundary, 1..26 a..z), 16 positions,
a mask over every letter and the end of each name, a fixed crc32 validation split.

The model follows Llama's recipe, scaled down: token embedding; LAYERS pre-norm
blocks of RMSNorm -> causal multi-head attention with rotary position embeddings
on queries and keys (no position table) -> residual, RMSNorm -> SwiGLU MLP
(w2(silu(w1 x) * w3 x)) -> residual; a final RMSNorm; the output head is the
embedding matrix (tied). No linear layer has a bias.

Sampling: `sample_probs(model, tokens, temperature)` is an inference graph whose
temperature is an input ((1, 1) f32), so a page attaches it once and samples at any
temperature without compiling again; `sample_names` draws names letter by letter
from it.

Success: validation loss (mean nats per predicted token over every letter and end of
every validation name) below the add-one smoothed bigram model's (names.bigram_loss(),
counted on the training names) by at least SUCCESS["margin"] = 0.2, within 1,500
steps (batch 32, AdamW). It is typically reached in 350-500 steps.
"""

from __future__ import annotations

import array
import math
import random

from .. import nn, ops
from ..nn import init
from . import names
from ._util import flatten, make_rng

VOCAB, CTX, BOUNDARY, MAX_LEN = names.VOCAB, names.CTX, names.BOUNDARY, names.MAX_LEN
DIM, HEADS, LAYERS, HIDDEN = 48, 4, 2, 128
BATCH = names.BATCH
EVAL_BATCH = names.EVAL_BATCH
SAMPLE_BATCH = 12  # names drawn at once by sample_names / the page's sampler
STEPS = 1500
INPUTS = dict(names.INPUTS)
EVAL_INPUTS = dict(names.EVAL_INPUTS)
SAMPLE_INPUTS = {"tokens": ((SAMPLE_BATCH, CTX), "i32"), "temperature": (1, 1)}
OPTIMIZER = {
    "name": "adamw",
    "lr": 5e-3,
    "betas": (0.9, 0.95),
    "eps": 1e-8,
    "schedule": {"kind": "linear", "start": 5e-3, "end": 5e-4, "steps": STEPS},
    "weight_decay": 0.01,
    "decay_exclude": "biases and norms",
    "clip": 1.0,
}
SUCCESS = {"metric": "val_loss", "below_baseline": "bigram_loss", "margin": 0.2, "within_steps": STEPS}

# the data and its baseline are the names sample's
batch = names.batch
bigram_loss = names.bigram_loss
val_loss = names.val_loss
threshold = names.threshold
encode, decode = names.encode, names.decode


def _w():
    return init.normal(0.02)


class Attention(nn.Module):
    """Causal multi-head self-attention; rotary embeddings on queries and keys."""

    def __init__(self, dim: int = DIM, heads: int = HEADS) -> None:
        if dim % heads or (dim // heads) % 2:
            raise ValueError(f"dim {dim} must split into {heads} heads of an even size")
        self.heads = heads
        self.wq = nn.Linear(dim, dim, bias=False, weight_init=_w())
        self.wk = nn.Linear(dim, dim, bias=False, weight_init=_w())
        self.wv = nn.Linear(dim, dim, bias=False, weight_init=_w())
        self.wo = nn.Linear(dim, dim, bias=False, weight_init=_w())
        self.rotary = nn.RotaryEmbedding(dim // heads)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        hd = d // h

        def split(y):  # [b, t, d] -> [b, h, t, hd]
            return ops.permute(ops.reshape(y, (b, t, h, hd)), (0, 2, 1, 3))

        q = self.rotary(split(self.wq(x)))
        k = self.rotary(split(self.wk(x)))
        v = split(self.wv(x))
        y = ops.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(ops.reshape(ops.permute(y, (0, 2, 1, 3)), (b, t, d)))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, dim: int = DIM, hidden: int = HIDDEN) -> None:
        self.w1 = nn.Linear(dim, hidden, bias=False, weight_init=_w())
        self.w3 = nn.Linear(dim, hidden, bias=False, weight_init=_w())
        self.w2 = nn.Linear(hidden, dim, bias=False, weight_init=_w())

    def forward(self, x):
        return self.w2(ops.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim: int = DIM, heads: int = HEADS, hidden: int = HIDDEN) -> None:
        self.attention_norm = nn.RMSNorm(dim)
        self.attention = Attention(dim, heads)
        self.ffn_norm = nn.RMSNorm(dim)
        self.feed_forward = FeedForward(dim, hidden)

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Model(nn.Module):
    """Token embedding, pre-norm Llama blocks, final RMSNorm, head tied to the embedding."""

    def __init__(
        self,
        vocab: int = VOCAB,
        dim: int = DIM,
        heads: int = HEADS,
        layers: int = LAYERS,
        hidden: int = HIDDEN,
    ) -> None:
        self.tok_embeddings = nn.Embedding(vocab, dim, weight_init=_w())
        self.layers = nn.ModuleList([Block(dim, heads, hidden) for _ in range(layers)])
        self.norm = nn.RMSNorm(dim)

    def forward(self, tokens):
        """Logits [b, t, vocab] for tokens [b, t] (i32)."""
        x = self.tok_embeddings(tokens)
        for blk in self.layers:
            x = blk(x)
        return ops.matmul(self.norm(x), ops.transpose(self.tok_embeddings.weight))


def forward(model: Model, tokens):
    """Logits [b, 16, 27]."""
    return model(tokens)


def loss_fn(model: Model, tokens, targets, mask):
    """Mean cross-entropy over the masked-in positions (every letter and the end)."""
    nll = ops.cross_entropy(model(tokens), targets, reduction="none")
    return ops.sum(nll * mask) / ops.sum(mask)


def sample_probs(model: Model, tokens, temperature):
    """softmax(logits / temperature) [b, 16, 27]: the next-token distribution at every
    position, for tokens [b, 16] (i32) and temperature [1, 1] (f32, > 0)."""
    return ops.softmax(model(tokens) / temperature, axis=-1)


def metric(logits_fn, names_=None) -> float:
    """The validation loss (names.val_loss); lower is better."""
    return names.val_loss(logits_fn, names_)


def check_temperature(temperature) -> float:
    """temperature as a float in [0.05, 5]; anything else is a ValueError."""
    try:
        t = float(temperature)
    except (TypeError, ValueError):
        raise ValueError(f"temperature must be a number, got {temperature!r}") from None
    if not (0.05 <= t <= 5.0):
        raise ValueError(f"temperature must be between 0.05 and 5, got {temperature!r}")
    return t


def sample_names(probs_fn, n: int, temperature: float = 1.0, rng=0) -> tuple[list[str], float]:
    """n names drawn letter by letter, and the mean entropy (nats) of the distributions
    they were drawn from. probs_fn({"tokens": flat i32 array of SAMPLE_BATCH * 16,
    "temperature": [t]}) returns sample_probs's output [SAMPLE_BATCH, 16, 27] (any nesting
    or flat). A name ends at the boundary token or after MAX_LEN letters; rng is an int
    seed or a random.Random."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    t = array.array("f", [check_temperature(temperature)])
    r = rng if isinstance(rng, random.Random) else make_rng(0, rng)
    out: list[str] = []
    entropy, count = 0.0, 0
    while len(out) < n:
        rows = [[BOUNDARY] for _ in range(SAMPLE_BATCH)]
        done = [False] * SAMPLE_BATCH
        for pos in range(MAX_LEN + 1):
            if all(done):
                break
            tokens = array.array("i", [v for row in rows for v in row + [BOUNDARY] * (CTX - len(row))])
            probs = flatten(probs_fn({"tokens": tokens, "temperature": t}))
            if len(probs) != SAMPLE_BATCH * CTX * VOCAB:
                raise ValueError(
                    f"probs_fn returned {len(probs)} values, expected {SAMPLE_BATCH * CTX * VOCAB}"
                )
            for i, row in enumerate(rows):
                if done[i]:
                    continue
                base = (i * CTX + pos) * VOCAB
                p = [float(v) for v in probs[base : base + VOCAB]]
                if not all(v >= 0.0 for v in p) or not sum(p) > 0.0:  # NaN fails both
                    raise ValueError(f"the model's probabilities at position {pos} are not usable: {p}")
                entropy -= sum(v * math.log(v) for v in p if v > 0)
                count += 1
                tok = BOUNDARY if pos == MAX_LEN else r.choices(range(VOCAB), weights=p)[0]
                if tok == BOUNDARY:
                    done[i] = True
                else:
                    row.append(tok)
        out.extend(decode(row) for row in rows[: n - len(out)])
    return out, entropy / max(1, count)
