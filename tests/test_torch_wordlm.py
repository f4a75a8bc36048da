"""Word-level language models written as PyTorch's examples write them
(tests/torch_models/wordlm.py: LSTM, GRU, Elman RNN, tied weights, nn.Transformer's
encoder) train under tgweb.torch, with only `torch` swapped, step for step like PyTorch
from the same initial weights."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from test_torch_models import _run  # noqa: E402

KINDS = ["LSTM", "GRU", "RNN_TANH", "RNN_RELU", "LSTM-tied", "Transformer"]


@pytest.mark.parametrize("kind", KINDS)
def test_reference_trains_like_torch(kind):
    want, got = _run("wordlm", (kind,), "reference", steps=12)
    assert np.abs(want - got).max() < 1e-4, (want, got)
    assert np.ptp(want) > 1e-3  # the steps change the model


@pytest.mark.native
@pytest.mark.parametrize("kind", ["LSTM", "Transformer"])
def test_native_trains_like_torch(kind):
    want, got = _run("wordlm", (kind,), "native", steps=4)
    assert np.abs(want - got).max() < 2e-3, (want, got)
