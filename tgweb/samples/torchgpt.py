"""torchgpt: a character-level GPT of first names, written as PyTorch code.

The model, its loss and its optimizer are what a PyTorch user writes, with the imports
changed to tgweb.torch (`import tgweb.torch as torch`, `from tgweb.torch import nn`,
`import tgweb.torch.nn.functional as F`); tgweb.torch never imports torch, so this runs
in the browser too. The data, batches, evaluation and baseline are the names sample's
(tgweb.samples.names): 27 tokens, 16 positions, a mask over every letter and the end
of each name.

The model: token and position embeddings; LAYERS pre-norm blocks of LayerNorm ->
causal multi-head self-attention (F.scaled_dot_product_attention) -> residual,
LayerNorm -> MLP (4x, GELU) -> residual; a final LayerNorm and a linear head.
The optimizer (configure_optimizers): AdamW with weight decay on the matrices only,
as PyTorch GPT code usually splits its parameter groups.

Success: validation loss below the add-one smoothed bigram model's by at least
SUCCESS["margin"] = 0.2 within 1,500 steps, as for names.
"""

from __future__ import annotations

import tgweb.torch as torch
import tgweb.torch.nn.functional as F
from tgweb.torch import nn

from . import names

VOCAB, CTX = names.VOCAB, names.CTX
DIM, HEADS, LAYERS = 48, 4, 2
STEPS = 1500
INPUTS = dict(names.INPUTS)
EVAL_INPUTS = dict(names.EVAL_INPUTS)
LR, BETAS, WEIGHT_DECAY = 3e-3, (0.9, 0.95), 0.1
SUCCESS = {"metric": "val_loss", "below_baseline": "bigram_loss", "margin": 0.2, "within_steps": STEPS}

batch = names.batch
bigram_loss = names.bigram_loss
val_loss = names.val_loss
metric = names.metric
threshold = names.threshold
sample_names = names.sample_names


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, T, C = x.size()  # noqa: N806 - PyTorch code's names
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Model(nn.Module):
    def __init__(
        self, vocab: int = VOCAB, ctx: int = CTX, dim: int = DIM, heads: int = HEADS, layers: int = LAYERS
    ):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        T = idx.size(1)  # noqa: N806
        x = self.tok(idx) + self.pos(torch.arange(0, T, dtype=torch.long))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def forward(model: Model, tokens):
    """Logits [b, 16, 27]."""
    return model(tokens)


def loss_fn(model: Model, tokens, targets, mask):
    """Mean cross-entropy over the positions the mask keeps."""
    logits = model(tokens)
    nll = F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1), reduction="none")
    return (nll * mask.view(-1)).sum() / mask.sum()


def configure_optimizers(model: Model):
    """AdamW; weight decay on the matrices (2-D parameters), not on biases and norms."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS)
