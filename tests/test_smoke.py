import numpy as np

import tgweb as tg
from tgweb import nn


class MLP(nn.Module):
    def __init__(self):
        self.l1 = nn.Linear(1, 8)
        self.l2 = nn.Linear(8, 1)

    def forward(self, x):
        return self.l2(tg.relu(self.l1(x)))


def test_value_and_grad_runs_and_names_params():
    x = np.linspace(-2, 2, 16, dtype=np.float32).reshape(16, 1)
    loss, grads = tg.value_and_grad(lambda m, x, y: ((m(x) - y) ** 2).mean(), MLP(), x=x, y=np.sin(x))
    assert np.isfinite(loss) and loss > 0
    assert set(grads) == {"l1.weight", "l1.bias", "l2.weight", "l2.bias"}
    assert grads["l1.weight"].shape == (8, 1)
    assert np.abs(grads["l2.weight"]).max() > 0
