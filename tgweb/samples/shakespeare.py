"""shakespeare: nanoGPT's character-level GPT trained on the tiny-shakespeare text.

Data: data/tinyshakespeare.txt (1,115,394 ASCII bytes, public domain; see
data/README.md). The vocabulary is the 65 distinct characters, sorted; the first 90 %
of the characters train, the last 10 % validate, as nanoGPT splits them. A training
batch is BATCH windows of BLOCK + 1 characters at uniformly drawn offsets of the
training text: tokens are the first BLOCK, targets the next character of each.

Model (nanoGPT's GPT with bias=False): token and learned position embeddings,
dropout, LAYERS pre-norm blocks of LayerNorm -> causal self-attention (one [d, 3d]
projection to queries, keys and values, HEADS heads, attention dropout) -> residual
dropout, LayerNorm -> MLP (d -> 4d, GELU, 4d -> d, dropout); a final LayerNorm and a
head tied to the token embedding. Weights are N(0, 0.02), the residual projections
N(0, 0.02 / sqrt(2 * LAYERS)). LayerNorms have a gain and no bias.

Optimizer: AdamW (betas 0.9, 0.99; weight decay 0.1 on matrices and embeddings),
gradients clipped to norm 1, the learning rate warmed up linearly for 100 steps then
decayed along a cosine from 1e-3 to 1e-4 by step 5,000.

The full size (FULL: 6 layers, 6 heads, 384 wide, block 256, batch 64, dropout 0.2)
has 10,745,088 parameters. Its step is planned within MAX_MEMORY = 1.5 GB (tg.compile's
max_memory): four MLP products are recomputed in the backward pass, about 7 % more
arithmetic a step, instead of keeping 1.87 GB. `sized("small")` is the same sample scaled down (SMALL),
which trains in seconds on a CPU emulating a GPU: the tests and `tgweb train
shakespeare --small` use it. Both have the surface of every sample (Model, loss_fn,
INPUTS, batch, forward, EVAL_INPUTS, metric, OPTIMIZER, STEPS, SUCCESS); the module's
own names are the full size's.

Evaluation: `forward` is the mean cross-entropy without dropout of one batch of
tokens and targets; `metric` averages it over EVAL_BATCHES fixed batches of the
validation text (offsets drawn once from a fixed seed). Success: validation loss below
1.50 within STEPS steps (nanoGPT reports 1.47 after 5,000).

Text: `next_token` draws one character on the device, its keys and values kept in the
program's own cache between runs (one token's work a character); `stream_cached` chains
its runs on the device and reads back only the ids (what the page shows). `sample_probs`
is the whole-window forward (every position's next-character distribution), and `stream`
draws from it one full forward a character: the oracle the cached sampler is tested by.
`metric_later` sends the evaluation batches without waiting.

Other shapes: `Config.vocab` > 0 makes a model of that many tokens trained on tokens
drawn uniformly at random (no text, no sampling): GPT-2 small's shape is
`Config(layers=12, heads=12, dim=768, block=1024, vocab=50304, ...)`, for
benchmarks/scale.py. The sizes that ship keep vocab=0, the text's characters.

Precision: `choose_precision(backend)` is "mixed" where the adapter is a GPU offering
shader-f16 on which it pays (not NVIDIA's: `_util.fastest_precision`) and "float32"
elsewhere (as nanoGPT trains in bf16 where it pays); samples.compile and the page train in it.
"""

from __future__ import annotations

import array
import functools
import math
import random
from dataclasses import dataclass

from .. import inference, nn, ops
from ..nn import init
from . import _decode
from ._util import data_bytes, flatten, make_rng, precision_for

SAMPLE_BATCH = 1  # one text is drawn at a time


@dataclass(frozen=True)
class Config:
    """One size of the sample: the model, the batches, the schedule and the bound."""

    layers: int
    heads: int
    dim: int
    block: int
    batch: int
    dropout: float
    steps: int
    warmup: int
    lr: float
    min_lr: float
    eval_batches: int
    bound: float  # success: validation loss below this
    max_memory: float | None = None  # bytes the step's buffers may hold (tg.compile)
    # 0: the text's characters. More: a model of that many tokens trained on tokens drawn
    # uniformly at random (no text: a benchmark of the shape, e.g. GPT-2's 50,304)
    vocab: int = 0


FULL = Config(
    layers=6, heads=6, dim=384, block=256, batch=64, dropout=0.2,
    steps=5000, warmup=100, lr=1e-3, min_lr=1e-4, eval_batches=40, bound=1.50,
    max_memory=1.5e9,
)  # fmt: skip
# trains in about half a minute on a CPU, well past the bigram model's 2.48 nats
SMALL = Config(
    layers=2, heads=4, dim=64, block=32, batch=16, dropout=0.0,
    steps=300, warmup=30, lr=4e-3, min_lr=4e-4, eval_batches=8, bound=2.40,
)  # fmt: skip
SIZES = {"full": FULL, "small": SMALL}
# GPT-2 small's shape (124M parameters) on random tokens, nanoGPT's GPT-2 recipe (no
# dropout, lr 6e-4 -> 6e-5, 2,000 warm-up steps) at batch 8: benchmarks/scale.py. Batch 8
# keeps the f32 logits (8 x 1024 x 50,304: 1.65 GB) within Chromium's 2 GiB storage
# binding on NVIDIA (tgweb binds every tensor whole); nanoGPT's batch 12 would need 2.47 GB.
GPT2 = Config(
    layers=12, heads=12, dim=768, block=1024, batch=8, dropout=0.0,
    steps=600_000, warmup=2000, lr=6e-4, min_lr=6e-5, eval_batches=1, bound=10.9,
    vocab=50304,
)  # fmt: skip


# ---------------------------------------------------------------- data


@functools.lru_cache(maxsize=1)
def text() -> bytes:
    """The whole text, read when first needed (never at import: the page imports every sample)."""
    return data_bytes("tinyshakespeare.txt")


@functools.lru_cache(maxsize=1)
def chars() -> str:
    """The vocabulary: every distinct character of the text, sorted (65 of them)."""
    return "".join(sorted(set(text().decode("ascii"))))


def vocab(config: Config | None = None) -> int:
    """The tokens a model of `config` knows: config.vocab when set, else the text's characters."""
    return config.vocab if config is not None and config.vocab else len(chars())


@functools.lru_cache(maxsize=1)
def _tokens() -> bytes:
    """The text as token ids, one byte each (the vocabulary has fewer than 256 characters)."""
    table = bytearray(256)
    for i, ch in enumerate(chars()):
        table[ord(ch)] = i
    return text().translate(bytes(table))


def split() -> tuple[bytes, bytes]:
    """(training tokens, validation tokens): the first 90 % and the last 10 %."""
    data = _tokens()
    n = int(0.9 * len(data))
    return data[:n], data[n:]


def encode(s: str) -> list[int]:
    index = {ch: i for i, ch in enumerate(chars())}
    try:
        return [index[ch] for ch in s]
    except KeyError as e:
        raise ValueError(f"{e.args[0]!r} is not one of the text's {vocab()} characters") from None


def decode(tokens) -> str:
    c = chars()
    return "".join(c[t] for t in tokens)


def _windows(data: bytes, offsets, block: int) -> dict[str, array.array]:
    tokens, targets = array.array("i"), array.array("i")
    for i in offsets:
        tokens.extend(data[i : i + block])
        targets.extend(data[i + 1 : i + block + 1])
    return {"tokens": tokens, "targets": targets}


# ---------------------------------------------------------------- the model


def _w(std: float = 0.02):
    return init.normal(std)


class LayerNorm(nn.Module):
    """LayerNorm with a gain and no bias (nanoGPT's bias=False)."""

    def __init__(self, dim: int) -> None:
        self.weight = self.param((dim,), init.ones())

    def forward(self, x):
        return ops.layer_norm(x, self.weight, None, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, c: Config) -> None:
        if c.dim % c.heads:
            raise ValueError(f"dim {c.dim} does not split into {c.heads} heads")
        self.heads, self.dropout = c.heads, c.dropout
        self.c_attn = nn.Linear(c.dim, 3 * c.dim, bias=False, weight_init=_w())
        self.c_proj = nn.Linear(c.dim, c.dim, bias=False, weight_init=_w(0.02 / math.sqrt(2 * c.layers)))

    def attend(self, q, k, v, training: bool):
        """softmax(q k^T / sqrt(d) + causal mask) v with dropout on the probabilities,
        fused (no T x T tensor); q, k, v: [b, heads, t, head dim]."""
        p = self.dropout if training else 0.0
        return ops.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)

    def forward(self, x, training: bool):
        b, t, d = x.shape
        h = self.heads
        qkv = ops.permute(ops.reshape(self.c_attn(x), (b, t, 3, h, d // h)), (2, 0, 3, 1, 4))
        y = self.attend(qkv[0], qkv[1], qkv[2], training)  # [b, h, t, hd]
        y = self.c_proj(ops.reshape(ops.permute(y, (0, 2, 1, 3)), (b, t, d)))
        return ops.dropout(y, self.dropout, training)


class MLP(nn.Module):
    def __init__(self, c: Config) -> None:
        self.dropout = c.dropout
        self.c_fc = nn.Linear(c.dim, 4 * c.dim, bias=False, weight_init=_w())
        self.c_proj = nn.Linear(4 * c.dim, c.dim, bias=False, weight_init=_w(0.02 / math.sqrt(2 * c.layers)))

    def forward(self, x, training: bool):
        return ops.dropout(self.c_proj(ops.gelu(self.c_fc(x))), self.dropout, training)


class Block(nn.Module):
    def __init__(self, c: Config) -> None:
        self.ln_1 = LayerNorm(c.dim)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = LayerNorm(c.dim)
        self.mlp = MLP(c)

    def forward(self, x, training: bool):
        x = x + self.attn(self.ln_1(x), training)
        return x + self.mlp(self.ln_2(x), training)


class Transformer(nn.Module):
    def __init__(self, c: Config) -> None:
        self.wte = nn.Embedding(vocab(c), c.dim, weight_init=_w())
        self.wpe = nn.Embedding(c.block, c.dim, weight_init=_w())
        self.h = nn.ModuleList([Block(c) for _ in range(c.layers)])
        self.ln_f = LayerNorm(c.dim)


class Model(nn.Module):
    """nanoGPT's GPT (parameter names as nanoGPT's, less the tied lm_head)."""

    def __init__(self, config: Config = FULL) -> None:
        self.config = config
        self.dropout = config.dropout
        self.transformer = Transformer(config)

    def forward(self, tokens, training: bool = True):
        """Logits [b, t, vocab] for tokens [b, t] (i32, t <= block)."""
        tr = self.transformer
        t = tokens.shape[1]
        x = ops.embedding(tr.wte.weight, tokens) + tr.wpe.weight[:t]
        x = ops.dropout(x, self.dropout, training)
        for blk in tr.h:
            x = blk(x, training)
        return ops.matmul(tr.ln_f(x), ops.transpose(tr.wte.weight))


def loss_fn(model: Model, tokens, targets):
    """Mean cross-entropy of the next character, dropout on."""
    return ops.cross_entropy(model(tokens, training=True), targets)


def forward(model: Model, tokens, targets):
    """Mean cross-entropy of the next character without dropout: one evaluation batch."""
    return ops.cross_entropy(model(tokens, training=False), targets)


def sample_probs(model: Model, tokens, temperature):
    """softmax(logits / temperature) [b, t, vocab] without dropout: the next character's
    distribution at every position, for tokens [b, t] (i32) and temperature [1, 1]."""
    return ops.softmax(model(tokens, training=False) / temperature, axis=-1)


def next_token(model: Model, token, temperature, top_k):
    """One character drawn on the device after the ones run before (stream_cached): the
    token run is `token` (i32 [1, 1]) when >= 0, else the one the previous run drew (kept on
    the device, so runs chain without the host); its keys and values go into the program's
    cache (inference.state) at the next position, and attention reads the earlier ones
    there: one token's work. temperature: f32 [1, 1]; top_k: i32 [1, 1] (1: greedy; 0:
    every character). Returns the drawn id, i32 [1, 1]. reset_state() empties the cache."""
    tr, c = model.transformer, model.config
    h, hd = c.heads, c.dim // c.heads
    drawn = inference.state("drawn", (1, 1))  # the previous run's draw, as f32
    at = inference.state("position", (1,))  # where this run's token goes
    pos = ops.cast(at, "i32")
    token = ops.where(token >= 0, token, ops.cast(drawn, "i32"))
    here, seen = _decode.positions(pos, c.block)
    x = ops.embedding(tr.wte.weight, token) + ops.embedding(tr.wpe.weight, ops.reshape(pos, (1, 1)))
    for i, blk in enumerate(tr.h):
        a = blk.attn
        qkv = ops.permute(ops.reshape(a.c_attn(blk.ln_1(x)), (1, 1, 3, h, hd)), (2, 0, 3, 1, 4))
        y = _decode.cached_attention(f"h{i}", qkv[0], qkv[1], qkv[2], here, seen)  # [1, h, 1, hd]
        x = x + a.c_proj(ops.reshape(ops.permute(y, (0, 2, 1, 3)), (1, 1, c.dim)))
        x = x + blk.mlp(blk.ln_2(x), False)
    logits = ops.matmul(tr.ln_f(x), ops.transpose(tr.wte.weight))  # [1, 1, vocab]
    out = _decode.draw(logits, temperature, top_k)
    inference.assign(drawn, ops.cast(out, "f32"))
    inference.assign(at, at + 1.0)
    return out


# ---------------------------------------------------------------- one size


class Sample:
    """The sample at one size (a Config), with the surface of tgweb.samples' modules."""

    loss_fn = staticmethod(loss_fn)
    forward = staticmethod(forward)
    sample_probs = staticmethod(sample_probs)
    next_token = staticmethod(next_token)
    # "mixed" where the adapter is a GPU offering shader-f16, else "float32" (_util)
    choose_precision = staticmethod(precision_for)
    TOKEN_INPUTS = {"token": ((1, 1), "i32"), "temperature": (1, 1), "top_k": ((1, 1), "i32")}
    AHEAD = 64  # runs stream_cached keeps sent and unread

    def __init__(self, config: Config) -> None:
        c = self.config = config
        self.Model = functools.partial(Model, c)
        self.BATCH, self.BLOCK, self.STEPS = c.batch, c.block, c.steps
        self.MAX_MEMORY = c.max_memory
        self.INPUTS = {"tokens": ((c.batch, c.block), "i32"), "targets": ((c.batch, c.block), "i32")}
        self.EVAL_INPUTS = dict(self.INPUTS)
        self.SAMPLE_INPUTS = {"tokens": ((SAMPLE_BATCH, c.block), "i32"), "temperature": (1, 1)}
        self.OPTIMIZER = {
            "name": "adamw",
            "betas": (0.9, 0.99),
            "eps": 1e-8,
            "schedule": {
                "kind": "warmup",
                "steps": c.warmup,
                "then": {"kind": "cosine", "start": c.lr, "end": c.min_lr, "steps": c.steps - c.warmup},
            },
            "weight_decay": 0.1,
            "decay_exclude": "biases and norms",
            "clip": 1.0,
        }
        self.SUCCESS = {"metric": "val_loss", "below": c.bound, "within_steps": c.steps}
        self._eval = None  # eval_batches(), once made

    def batch(self, step: int, rng=0) -> dict[str, array.array]:
        """BATCH windows of the training text at uniformly drawn offsets: tokens and
        targets, flat i32 arrays of BATCH * BLOCK (with Config.vocab set: tokens drawn
        uniformly at random, each window's targets its tokens shifted by one)."""
        return self._windows(make_rng(step, rng), 0)

    def _windows(self, r: random.Random, part: int) -> dict[str, array.array]:
        """One batch drawn with r from split()[part], or at random (Config.vocab)."""
        c = self.config
        if c.vocab:
            n = c.block + 1
            data = array.array("i", [r.randrange(c.vocab) for _ in range(c.batch * n)])
            return _windows(data, range(0, c.batch * n, n), c.block)
        data = split()[part]
        return _windows(data, [r.randrange(len(data) - c.block) for _ in range(c.batch)], c.block)

    def eval_batches(self) -> list[dict[str, array.array]]:
        """The EVAL_BATCHES fixed batches of the validation text that metric averages over
        (made once: the same every time)."""
        if self._eval is None:
            r = random.Random(1337)
            self._eval = [self._windows(r, 1) for _ in range(self.config.eval_batches)]
        return self._eval

    def metric(self, loss_fn_) -> float:
        """Validation loss: the mean of loss_fn_(batch) (forward's mean cross-entropy, a
        scalar, any nesting) over eval_batches(); lower is better."""
        return self._mean([loss_fn_(b) for b in self.eval_batches()])

    def metric_later(self, submit):
        """metric without waiting: submit(**batch) sends one evaluation batch and returns a
        function that waits for forward's output (an attached forward's Inference.submit,
        whose RunResult's output is read); every batch is sent
        now, and the function returned waits for them all and gives the validation loss.
        Training steps sent meanwhile queue behind the evaluation, which sees the parameters
        of the steps sent before it, so a page keeps its step pipeline full."""
        waits = [submit(**b) for b in self.eval_batches()]
        return lambda: self._mean([w() for w in waits])

    def _text_only(self, what: str) -> None:
        if self.config.vocab:
            raise ValueError(
                f"{what} draws the text's characters, and this size has vocab={self.config.vocab} "
                "(random tokens, no text); use a Config with vocab=0"
            )

    @staticmethod
    def _mean(outputs) -> float:
        losses = [flatten(getattr(v, "output", v)) for v in outputs]
        if any(len(v) != 1 for v in losses):
            raise ValueError(f"the evaluation function must return one number a batch, got {losses[0][:4]}")
        return sum(float(v[0]) for v in losses) / len(losses)

    def stream(self, probs_fn, prompt: str = "\n", temperature: float = 1.0, rng=0):
        """Characters drawn one at a time after prompt, endlessly (take what you need).
        probs_fn({"tokens": flat i32 [SAMPLE_BATCH * BLOCK], "temperature": [t]}) returns
        sample_probs's output; the context is the last BLOCK characters, zero-padded after."""
        self._text_only("stream")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        r = rng if isinstance(rng, random.Random) else make_rng(0, rng)
        block, n = self.config.block, vocab()
        context = encode(prompt) or [0]
        t = array.array("f", [float(temperature)])
        while True:
            context = context[-block:]
            tokens = array.array("i", context + [0] * (block - len(context)))
            probs = flatten(probs_fn({"tokens": tokens, "temperature": t}))
            if len(probs) != SAMPLE_BATCH * block * n:
                raise ValueError(
                    f"probs_fn returned {len(probs)} values, expected {SAMPLE_BATCH * block * n}"
                )
            base = (len(context) - 1) * n
            tok = r.choices(range(n), weights=probs[base : base + n])[0]
            context.append(tok)
            yield chars()[tok]

    def stream_cached(
        self, sampler, prompt: str = "\n", temperature: float = 1.0, top_k: int = 0, ahead=None
    ):
        """Characters drawn after prompt, endlessly, by `sampler` (trainer.attach(next_token,
        inputs=TOKEN_INPUTS)): one run a character, drawn on the device and fed to the next
        run there, so only each character's id comes back (_decode.Draws). The runs are
        sent now, before the first character is asked for, up to `ahead` (default AHEAD)
        sent and unread. The context is every character since the key/value cache was
        last filled: when it holds BLOCK, it restarts from the last BLOCK // 2 (their keys
        and values computed again: one refill every BLOCK // 2 characters). top_k: draw
        among the k most likely characters (1: greedy; 0: all). Runs sent and never read
        (the caller stops taking characters) are wasted, nothing else."""
        self._text_only("stream_cached")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
            raise ValueError(f"top_k must be an int >= 0 (0: every character), got {top_k!r}")
        feeds = {"temperature": array.array("f", [float(temperature)]), "top_k": array.array("i", [top_k])}
        table = chars()
        draws = _decode.Draws(
            sampler, encode(prompt) or [0], self.config.block, feeds, self.AHEAD if ahead is None else ahead
        )
        return (table[t] for t in draws)

    def generate(self, probs_fn, length: int, prompt: str = "\n", temperature: float = 1.0, rng=0) -> str:
        """length characters drawn after prompt (see stream)."""
        it = self.stream(probs_fn, prompt, temperature, rng)
        return "".join(next(it) for _ in range(length))


def sized(name: str) -> Sample:
    """The sample at one of SIZES ("full" or "small")."""
    try:
        return Sample(SIZES[name])
    except KeyError:
        raise ValueError(f"no size {name!r}; known: {sorted(SIZES)}") from None


_FULL = Sample(FULL)
BATCH, BLOCK, STEPS, MAX_MEMORY = _FULL.BATCH, _FULL.BLOCK, _FULL.STEPS, _FULL.MAX_MEMORY
INPUTS, EVAL_INPUTS, SAMPLE_INPUTS = _FULL.INPUTS, _FULL.EVAL_INPUTS, _FULL.SAMPLE_INPUTS
TOKEN_INPUTS, choose_precision = _FULL.TOKEN_INPUTS, _FULL.choose_precision
OPTIMIZER, SUCCESS = _FULL.OPTIMIZER, _FULL.SUCCESS
batch, eval_batches, metric, metric_later = _FULL.batch, _FULL.eval_batches, _FULL.metric, _FULL.metric_later
stream, generate, stream_cached = _FULL.stream, _FULL.generate, _FULL.stream_cached
