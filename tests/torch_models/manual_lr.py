"""nanoGPT's learning-rate loop: linear warm-up then cosine decay, written into every
parameter group before each step. The groups' lrs also change apart: the head learns at
a tenth of the lr (a group key of the user's own) and the embedding stays frozen (lr 0)
for the first steps."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, EMBD, BATCH, BLOCK = 11, 16, 4, 6
INPUTS = {"idx": ((BATCH, BLOCK), torch.long), "targets": ((BATCH, BLOCK), torch.long)}
LEARNING_RATE, MIN_LR, WARMUP_ITERS, LR_DECAY_ITERS, FROZEN_ITERS = 3e-2, 3e-3, 4, 16, 3


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, EMBD)
        self.ln = nn.LayerNorm(EMBD)
        self.fc = nn.Linear(EMBD, EMBD)
        self.head = nn.Linear(EMBD, VOCAB)

    def forward(self, idx):
        x = self.wte(idx)
        x = x + F.gelu(self.fc(self.ln(x)))
        return self.head(x)


def model():
    return Net()


def optimizer(m):
    body = [m.fc.weight]
    nodecay = [m.fc.bias, m.ln.weight, m.ln.bias]
    groups = [
        {"params": body, "weight_decay": 0.1},
        {"params": nodecay, "weight_decay": 0.0},
        {"params": list(m.head.parameters()), "weight_decay": 0.1, "lr_scale": 0.1},
        {"params": [m.wte.weight], "weight_decay": 0.0, "frozen": True},
    ]
    return torch.optim.AdamW(groups, lr=LEARNING_RATE, betas=(0.9, 0.95)), None


def get_lr(it):
    if it < WARMUP_ITERS:
        return LEARNING_RATE * (it + 1) / (WARMUP_ITERS + 1)
    if it > LR_DECAY_ITERS:
        return MIN_LR
    decay_ratio = (it - WARMUP_ITERS) / (LR_DECAY_ITERS - WARMUP_ITERS)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return MIN_LR + coeff * (LEARNING_RATE - MIN_LR)


def set_lr(opt, it):
    """What nanoGPT's loop does before every optimizer step."""
    lr = get_lr(it)
    for g in opt.param_groups:
        g["lr"] = 0.0 if g.get("frozen") and it < FROZEN_ITERS else lr * g.get("lr_scale", 1.0)


def loss(m, idx, targets):
    logits = m(idx)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def batch(rng):
    x = rng.integers(0, VOCAB, (BATCH, BLOCK + 1))
    return {"idx": x[:, :-1], "targets": x[:, 1:]}
