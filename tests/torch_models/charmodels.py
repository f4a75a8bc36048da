"""Character-level language models: RNN and GRU cells unrolled over time, a
bag-of-words model with a masked average, an MLP over the previous characters, and a
bigram table; all with -1 as the ignored target."""

import torch
import torch.nn as nn
from torch.nn import functional as F

VOCAB, BLOCK, EMBD, HIDDEN, BATCH = 9, 6, 8, 12, 3
INPUTS = {"idx": ((BATCH, BLOCK), torch.long), "targets": ((BATCH, BLOCK), torch.long)}


class RNNCell(nn.Module):
    def __init__(self):
        super().__init__()
        self.xh_to_h = nn.Linear(EMBD + HIDDEN, HIDDEN)

    def forward(self, xt, hprev):
        return F.tanh(self.xh_to_h(torch.cat([xt, hprev], dim=1)))


class GRUCell(nn.Module):
    def __init__(self):
        super().__init__()
        self.xh_to_z = nn.Linear(EMBD + HIDDEN, HIDDEN)
        self.xh_to_r = nn.Linear(EMBD + HIDDEN, HIDDEN)
        self.xh_to_hbar = nn.Linear(EMBD + HIDDEN, HIDDEN)

    def forward(self, xt, hprev):
        xh = torch.cat([xt, hprev], dim=1)
        r = F.sigmoid(self.xh_to_r(xh))
        hbar = F.tanh(self.xh_to_hbar(torch.cat([xt, r * hprev], dim=1)))
        z = F.sigmoid(self.xh_to_z(xh))
        return (1 - z) * hprev + z * hbar


class RNN(nn.Module):
    def __init__(self, cell_type):
        super().__init__()
        self.start = nn.Parameter(torch.zeros(1, HIDDEN))
        self.wte = nn.Embedding(VOCAB, EMBD)
        self.cell = RNNCell() if cell_type == "rnn" else GRUCell()
        self.lm_head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        emb = self.wte(idx)
        hprev = self.start.expand((b, -1))
        hiddens = []
        for i in range(t):
            hprev = self.cell(emb[:, i, :], hprev)
            hiddens.append(hprev)
        logits = self.lm_head(torch.stack(hiddens, 1))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


class BoW(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, EMBD)
        self.wpe = nn.Embedding(BLOCK, EMBD)
        self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, BLOCK, BLOCK))
        self.c_fc = nn.Linear(EMBD, 4 * EMBD)
        self.c_proj = nn.Linear(4 * EMBD, EMBD)
        self.lm_head = nn.Linear(EMBD, VOCAB)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long).unsqueeze(0)
        x = self.wte(idx) + self.wpe(pos)
        att = torch.zeros((b, t, t))
        att = att.masked_fill(self.bias[:, :t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        x = x + att @ x
        x = x + self.c_proj(F.tanh(self.c_fc(x)))
        logits = self.lm_head(x)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB + 1, EMBD)  # one more: the <BLANK> token
        self.mlp = nn.Sequential(nn.Linear(BLOCK * EMBD, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, VOCAB))

    def forward(self, idx, targets=None):
        embs = []
        for _ in range(BLOCK):
            embs.append(self.wte(idx))
            idx = torch.roll(idx, 1, 1)
            idx[:, 0] = VOCAB
        x = torch.cat(embs, -1)
        logits = self.mlp(x)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


class Bigram(nn.Module):
    def __init__(self):
        super().__init__()
        self.logits = nn.Parameter(torch.zeros((VOCAB, VOCAB)))

    def forward(self, idx, targets=None):
        logits = self.logits[idx]
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


MODELS = {"rnn": lambda: RNN("rnn"), "gru": lambda: RNN("gru"), "bow": BoW, "mlp": MLP, "bigram": Bigram}


def model(kind):
    return MODELS[kind]()


def optimizer(m):
    return torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01, betas=(0.9, 0.99), eps=1e-8), None


def loss(m, idx, targets):
    return m(idx, targets)[1]


def batch(rng):
    x = rng.integers(0, VOCAB, (BATCH, BLOCK + 1))
    y = x[:, 1:].copy()
    y[0, -1] = -1  # an ignored position
    return {"idx": x[:, :-1], "targets": y}
