"""Word-level language models in the manner of PyTorch's examples: an embedding, a
recurrent stack (LSTM, GRU, or Elman RNN with tanh or relu) or an nn.Transformer's
encoder under a causal mask, and a linear decoder to log-probabilities; sequences
first ([T, B]), targets flattened, NLL loss. Written for these tests."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

NTOKEN, BPTT, BATCH = 23, 7, 4
INPUTS = {"data": ((BPTT, BATCH), torch.long), "targets": ((BPTT * BATCH,), torch.long)}


class RNNModel(nn.Module):
    """Encoder, recurrent module, decoder; the decoder may share the encoder's weights."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ["LSTM", "GRU"]:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}[rnn_type]
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            if nhid != ninp:
                raise ValueError("tied weights need nhid == ninp")
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.rnn_type, self.nhid, self.nlayers = rnn_type, nhid, nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        if self.rnn_type == "LSTM":
            return (torch.zeros(self.nlayers, bsz, self.nhid), torch.zeros(self.nlayers, bsz, self.nhid))
        return torch.zeros(self.nlayers, bsz, self.nhid)


class PositionalEncoding(nn.Module):
    """Sines and cosines of the position at geometric frequencies, added to the input."""

    def __init__(self, d_model, dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.d_model = d_model

    def forward(self, x):
        position = torch.arange(0, x.size(0), dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, self.d_model, 2).float() * (-math.log(10000.0) / self.d_model))
        angles = position * div_term
        pe = torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).view(x.size(0), 1, self.d_model)
        return self.dropout(x + pe)


class TransformerModel(nn.Transformer):
    """nn.Transformer's encoder over embedded tokens, under a causal mask."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super().__init__(
            d_model=ninp, nhead=nhead, dim_feedforward=nhid, num_encoder_layers=nlayers, dropout=dropout
        )
        self.model_type = "Transformer"
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        self.init_weights()

    def _generate_square_subsequent_mask(self, sz):
        return torch.log(torch.tril(torch.ones(sz, sz)))

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.input_emb.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, src, has_mask=True):
        mask = self._generate_square_subsequent_mask(src.size(0)) if has_mask else None
        src = self.input_emb(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.encoder(src, mask=mask)
        output = self.decoder(output)
        return F.log_softmax(output, dim=-1)


def model(kind):
    if kind == "Transformer":
        return TransformerModel(NTOKEN, 16, 2, 24, 2, dropout=0.0)
    if kind == "LSTM-tied":
        return RNNModel("LSTM", NTOKEN, 12, 12, 2, dropout=0.0, tie_weights=True)
    return RNNModel(kind, NTOKEN, 10, 12, 2, dropout=0.0)


def optimizer(m):
    return torch.optim.Adam(m.parameters(), lr=1e-2), None


def loss(m, data, targets):
    if isinstance(m, TransformerModel):
        output = m(data).view(-1, NTOKEN)
    else:
        output, _ = m(data, m.init_hidden(BATCH))
    return F.nll_loss(output, targets)


def batch(rng):
    """Each next word is the word before it plus 3: something to learn. (NumPy only
    here: the browser test runs the model in a Pyodide without it.)"""
    import numpy as np

    source = (rng.integers(0, NTOKEN, (1, BATCH)) + 3 * np.arange(BPTT + 1)[:, None]) % NTOKEN
    return {"data": source[:-1], "targets": source[1:].reshape(-1)}
