"""A small GPT, PyTorch-style: causal self-attention either through
F.scaled_dot_product_attention or a registered mask buffer with masked_fill."""

import math

import torch
import torch.nn as nn
from torch.nn import functional as F

VOCAB, BLOCK, EMBD, HEADS, LAYERS, BATCH = 11, 8, 16, 2, 2, 3
INPUTS = {"idx": ((BATCH, BLOCK), torch.long), "targets": ((BATCH, BLOCK), torch.long)}


class CausalSelfAttention(nn.Module):
    def __init__(self, flash):
        super().__init__()
        self.c_attn = nn.Linear(EMBD, 3 * EMBD)
        self.c_proj = nn.Linear(EMBD, EMBD)
        self.flash = flash
        if not flash:
            self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(EMBD, dim=2)
        k = k.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        q = q.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        v = v.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, flash):
        super().__init__()
        self.ln_1 = nn.LayerNorm(EMBD)
        self.attn = CausalSelfAttention(flash)
        self.ln_2 = nn.LayerNorm(EMBD)
        self.mlp = nn.Sequential(nn.Linear(EMBD, 4 * EMBD), nn.GELU(), nn.Linear(4 * EMBD, EMBD))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, flash=True):
        super().__init__()
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(VOCAB, EMBD),
                wpe=nn.Embedding(BLOCK, EMBD),
                h=nn.ModuleList([Block(flash) for _ in range(LAYERS)]),
                ln_f=nn.LayerNorm(EMBD),
            )
        )
        self.lm_head = nn.Linear(EMBD, VOCAB, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * LAYERS))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        params = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
        decay = [p for n, p in params.items() if p.dim() >= 2]
        nodecay = [p for n, p in params.items() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": nodecay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)


def model(flash=True):
    return GPT(flash)


def optimizer(m):
    return m.configure_optimizers(0.1, 3e-3, (0.9, 0.95)), None


def loss(m, idx, targets):
    return m(idx, targets)[1]


def batch(rng):
    x = rng.integers(0, VOCAB, (BATCH, BLOCK + 1))
    return {"idx": x[:, :-1], "targets": x[:, 1:]}
