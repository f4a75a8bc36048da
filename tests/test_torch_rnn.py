"""tgweb.torch.nn's recurrent layers (RNN, LSTM, GRU and their cells) against torch's:
forward and the gradients of inputs and parameters in float64 on the reference backend
and as kernels on lavapipe; state dicts both ways; dropout between layers in training;
the kernels a time step lowers to; bad input."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_layer_check import by_tgweb, check  # noqa: E402

import tgweb as tg  # noqa: E402
import tgweb.torch as tgt  # noqa: E402

T, B, I, H = 5, 3, 4, 6
R = np.random.default_rng(0)
X = R.standard_normal((T, B, I)).astype(np.float32)


def _pair(name, *args, **kwargs):
    torch.manual_seed(0)
    return getattr(torch.nn, name)(*args, **kwargs), getattr(tgt.nn, name)(*args, **kwargs)


def _call_layer(m, x, h0=None, c0=None):
    if c0 is not None:
        return m(x, (h0, c0))
    return m(x) if h0 is None else m(x, h0)


def _states(name, layers, dirs, batch=B, hidden=H, proj=0):
    shape = (layers * dirs, batch, proj or hidden) if batch else (layers * dirs, proj or hidden)
    out = {"h0": R.standard_normal(shape).astype(np.float32)}
    if name == "LSTM":
        out["c0"] = R.standard_normal(shape[:-1] + (hidden,)).astype(np.float32)
    return out


LAYERS = {
    "rnn-tanh": ("RNN", {}),
    "rnn-relu-2layers": ("RNN", {"num_layers": 2, "nonlinearity": "relu"}),
    "lstm": ("LSTM", {}),
    "lstm-2layers-bidirectional": ("LSTM", {"num_layers": 2, "bidirectional": True}),
    "lstm-proj": ("LSTM", {"proj_size": 4, "num_layers": 2}),
    "lstm-batch-first-nobias": ("LSTM", {"batch_first": True, "bias": False}),
    "gru": ("GRU", {}),
    "gru-3layers-bidirectional-batch-first": (
        "GRU",
        {"num_layers": 3, "bidirectional": True, "batch_first": True},
    ),
    "gru-nobias": ("GRU", {"bias": False}),
}


@pytest.mark.parametrize("state", [False, True], ids=["zero-state", "given-state"])
@pytest.mark.parametrize("case", sorted(LAYERS))
def test_layer_matches_torch(case, state):
    name, kw = LAYERS[case]
    ref, m = _pair(name, I, H, **kw)
    x = np.ascontiguousarray(X.swapaxes(0, 1)) if kw.get("batch_first") else X
    feeds = {"x": x}
    if state:
        feeds.update(
            _states(
                name, kw.get("num_layers", 1), 1 + kw.get("bidirectional", False), proj=kw.get("proj_size", 0)
            )
        )
    check(ref, m, _call_layer, feeds)


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("state", [False, True], ids=["zero-state", "given-state"])
def test_unbatched_input(name, state):
    """A [T, I] sequence (no batch axis) gives [T, H] and states without the batch axis."""
    ref, m = _pair(name, I, H, num_layers=2, bidirectional=True)
    feeds = {"x": X[:, 0]}
    if state:
        feeds.update(_states(name, 2, 2, batch=None))
    check(ref, m, _call_layer, feeds)


CELLS = {
    "rnn-cell": ("RNNCell", {}),
    "rnn-cell-relu": ("RNNCell", {"nonlinearity": "relu"}),
    "lstm-cell": ("LSTMCell", {}),
    "gru-cell": ("GRUCell", {}),
    "gru-cell-nobias": ("GRUCell", {"bias": False}),
}


def _call_cell(m, x, h=None, c=None):
    """Three steps of the cell, as a user's loop over time writes them."""
    state = None if h is None else (h, c) if c is not None else h
    outs = []
    for t in range(3):
        state = m(x[t], state)
        outs.append(state)
    return outs


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "unbatched"])
@pytest.mark.parametrize("state", [False, True], ids=["zero-state", "given-state"])
@pytest.mark.parametrize("case", sorted(CELLS))
def test_cell_matches_torch(case, state, batched):
    name, kw = CELLS[case]
    ref, m = _pair(name, I, H, **kw)
    feeds = {"x": X if batched else X[:, 0]}
    if state:
        s = _states("LSTM" if name == "LSTMCell" else name, 1, 1, batch=B if batched else None)
        feeds.update({"h": s["h0"][0], **({"c": s["c0"][0]} if "c0" in s else {})})
    check(ref, m, _call_cell, feeds)


ALL = [(n, kw) for n, kw in LAYERS.values()] + [(n, kw) for n, kw in CELLS.values()]


@pytest.mark.parametrize("name,kw", ALL, ids=sorted(LAYERS) + sorted(CELLS))
def test_state_dict_round_trips_with_torch(name, kw):
    """The same names, in the same order, of the same shapes: each side loads the
    other's state dict strictly and gives it back unchanged; tgweb's initial values are
    PyTorch's distribution, uniform in +-1/sqrt(hidden_size)."""
    ref, m = _pair(name, I, H, **kw)
    ours = m.state_dict()
    theirs = ref.state_dict()
    assert list(ours) == list(theirs)
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert all(tuple(ours[k].shape) == tuple(v.shape) for k, v in theirs.items())
    bound = 1 / np.sqrt(H)
    values = np.concatenate([v.ravel() for v in ours.values()])
    assert np.abs(values).max() <= bound and np.abs(values).max() > 0.9 * bound
    assert abs(values.std() - bound / np.sqrt(3)) < 0.15 * bound
    ref.load_state_dict({k: torch.from_numpy(v) for k, v in ours.items()}, strict=True)
    for k, v in ref.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), ours[k])
    torch.manual_seed(1)
    other = getattr(torch.nn, name)(I, H, **kw).state_dict()
    m.load_state_dict({k: v.numpy() for k, v in other.items()})
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, other[k].numpy())


def test_dropout_between_layers():
    """Eval mode matches torch with dropout set; in training the layer is its layers
    one by one with F.dropout between them (the same random stream: the first draw of
    the graph), which differs from eval, and not after the last layer."""
    ref, m = _pair("LSTM", I, H, num_layers=2, dropout=0.5)
    ref.eval(), m.eval()
    check(ref, m, _call_layer, {"x": X})
    m.train()
    sd = m.state_dict()
    layers = [tgt.nn.LSTM(I, H), tgt.nn.LSTM(H, H)]
    for k, layer in enumerate(layers):
        layer.load_state_dict({n[:-1] + "0": v for n, v in sd.items() if n.endswith(f"_l{k}")})

    def chained(_m, x):
        y, (h0, c0) = layers[0](x)
        y, (h1, c1) = layers[1](tgt.nn.functional.dropout(y, 0.5, True))
        return y, h0, h1, c0, c1

    def whole(m, x):
        y, (h, c) = m(x)
        return y, h[0], h[1], c[0], c[1]

    holder = tgt.nn.ModuleList(layers)
    rng = np.random.default_rng(0)
    cots = [rng.standard_normal(s).astype(np.float32) for s in [(T, B, H)] + [(B, H)] * 4]
    got = by_tgweb(m, whole, {"x": X}, cots)
    want = by_tgweb(holder, chained, {"x": X}, cots)
    m.eval()
    evaluated = by_tgweb(m, whole, {"x": X}, cots)
    np.testing.assert_array_equal(got["y0"], want["y0"])
    np.testing.assert_array_equal(got["g_weight_ih_l1"], want["g_1.weight_ih_l0"])
    assert np.abs(got["y0"] - evaluated["y0"]).max() > 0.01
    np.testing.assert_array_equal(got["y1"], evaluated["y1"])  # layer 0's state: before any dropout


NATIVE = ["rnn-tanh", "lstm-2layers-bidirectional", "lstm-proj", "gru-3layers-bidirectional-batch-first"]


@pytest.mark.native
@pytest.mark.parametrize("case", NATIVE)
def test_layer_kernels_match_torch(case):
    name, kw = LAYERS[case]
    ref, m = _pair(name, I, H, **kw)
    x = np.ascontiguousarray(X.swapaxes(0, 1)) if kw.get("batch_first") else X
    feeds = {
        "x": x,
        **_states(
            name, kw.get("num_layers", 1), 1 + kw.get("bidirectional", False), proj=kw.get("proj_size", 0)
        ),
    }
    check(ref, m, _call_layer, feeds, backend="native")


@pytest.mark.native
@pytest.mark.parametrize("case", ["rnn-cell-relu", "lstm-cell", "gru-cell"])
def test_cell_kernels_match_torch(case):
    name, kw = CELLS[case]
    ref, m = _pair(name, I, H, **kw)
    check(ref, m, _call_cell, {"x": X}, backend="native")


def _kernels(name: str, steps: int, train: bool, cls: str) -> int:
    """Kernels of the lowered forward (and, with train, the gradients) of a layer over
    `steps` time steps, for the adapter class cls."""
    from tgweb.codegen.target import Target
    from tgweb.grad import append_grad
    from tgweb.ir import tracing
    from tgweb.lower import lower
    from tgweb.trace import trace

    m = getattr(tgt.nn, name)(16, 32)
    g, y = trace(lambda m, x: m(x)[0], m, {"x": (steps, 4, 16)})
    g.outputs["y"] = y
    if train:
        with tracing(g):
            grads = append_grad(g, (y * y).sum(), list(g.params.values()))
        g.outputs.update({"g_" + n: grads[t.id] for n, t in g.params.items()})
    return len(lower(g, target=Target(cls)).kernels)


# kernels a time step adds: the forward (what docs/TORCH.md states), and the training
# step's (forward and backward), which may only go down
# a training step's bound: LSTM's grew from 8 to 10 when fusion counted the bindings of
# members other kernels read (before, a fused kernel could need more than the limit)
PER_STEP = {"RNN": (1, 3), "LSTM": (2, 10), "GRU": (2, 12)}


@pytest.mark.parametrize("cls", ["cpu", "gpu"])
@pytest.mark.parametrize("name", sorted(PER_STEP))
def test_kernels_per_time_step(name, cls):
    """An Elman step is one kernel (the product with the projection, bias and tanh in its
    epilogue); an LSTM or GRU step the recurrent product (the step's projection added in
    its epilogue) and one fused elementwise kernel for the gates and the new state."""
    fwd, train = PER_STEP[name]
    assert _kernels(name, 9, False, cls) - _kernels(name, 8, False, cls) == fwd
    assert _kernels(name, 9, True, cls) - _kernels(name, 8, True, cls) <= train


@pytest.mark.parametrize(
    "make,call,match",
    [
        (lambda: tgt.nn.LSTM(4, 6), lambda m, x: m(x[..., :3]), r"input must be float of shape \[T, 4\]"),
        (lambda: tgt.nn.GRU(4, 6, batch_first=True), lambda m, x: m(x[0, 0]), r"\[B, T, 4\]"),
        (
            lambda: tgt.nn.RNN(4, 6, 2),
            lambda m, x: m(x, x[:1, :, :1].expand(1, 3, 6)),
            r"h_0 must have shape \(2, 3, 6\)",
        ),
        (
            lambda: tgt.nn.LSTM(4, 6),
            lambda m, x: m(x, x[:1, :, :1].expand(1, 3, 6)),
            r"hx must be a tuple \(h_0, c_0\)",
        ),
        (
            lambda: tgt.nn.LSTMCell(4, 6),
            lambda m, x: m(x[0], x[0, :, :1].expand(3, 6)),
            r"hx must be a tuple \(h, c\)",
        ),
        (
            lambda: tgt.nn.GRUCell(4, 6),
            lambda m, x: m(x[0], x[0, :2, :1].expand(2, 6)),
            r"state must have shape \(3, 6\)",
        ),
    ],
)
def test_bad_input_is_refused(make, call, match):
    with pytest.raises(tg.TraceError, match=match):
        tg.value_and_grad(lambda m, x: call(m, x)[0].sum(), make(), x=X)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="nonlinearity must be 'tanh' or 'relu'"):
        tgt.nn.RNN(4, 6, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="proj_size must be in 0 < proj_size < hidden_size"):
        tgt.nn.LSTM(4, 6, proj_size=6)
    with pytest.raises(ValueError, match="hidden_size must be a positive int"):
        tgt.nn.GRU(4, 0)
    with pytest.raises(ValueError, match=r"dropout must be a number in \[0, 1\]"):
        tgt.nn.LSTM(4, 6, dropout=1.5)
