"""The core (tracing, every op, autodiff, the samples' data) works with NumPy unimportable,
as in a browser without Pyodide's NumPy."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# blocks NumPy in a fresh interpreter, then runs the test's body there
BLOCK_NUMPY = textwrap.dedent("""
    import sys

    class NoNumpy:
        def find_spec(self, name, path=None, target=None):
            if name == "numpy" or name.startswith("numpy."):
                raise ImportError("numpy is blocked in this test")
            return None

    sys.meta_path.insert(0, NoNumpy())
    for m in [m for m in sys.modules if m == "numpy" or m.startswith("numpy.")]:
        del sys.modules[m]
    try:
        import numpy  # noqa: F401
        raise SystemExit("numpy was importable")
    except ImportError:
        pass
""")


def run_without_numpy(body: str) -> str:
    """Runs `body` (indented code is fine) with NumPy unimportable; returns its stdout
    after checking that it exited cleanly and never imported NumPy."""
    check = '\nassert not any(m == "numpy" or m.startswith("numpy.") for m in sys.modules)\n'
    script = BLOCK_NUMPY + textwrap.dedent(body) + check
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


TRACE_AND_DIFFERENTIATE = """
    import tgweb as tg
    from tgweb.grad import append_grad
    from tgweb.samples import addition, sin
    from tgweb.trace import scalar_loss, trace

    for sample in (addition, sin):
        model = sample.Model()
        model.init_params(0)
        graph, out = trace(sample.loss_fn, model, sample.INPUTS)
        loss = scalar_loss(out)
        grads = append_grad(graph, loss, list(graph.params.values()))
        assert len(grads) == len(graph.params) == len(model.parameters())
        for name, p in graph.params.items():
            assert grads[p.id].shape == p.shape, name
        data = sample.batch(3, 1)
        assert set(data) == set(sample.INPUTS)
        g2, logits = trace(sample.forward, model, sample.EVAL_INPUTS)
        print(sample.__name__, len(graph.tensors), "nodes")
    # the metrics run on plain lists too
    import math
    assert sin.metric(lambda b: [math.sin(x) for x in b["x"]]) < 1e-12

    def oracle(b):
        t = list(b["tokens"])
        out = []
        for r in range(len(t) // 8):
            s = addition.sequence(t[r * 8] * 10 + t[r * 8 + 1], t[r * 8 + 3] * 10 + t[r * 8 + 4])
            out.append([[float(k == s[p + 1]) for k in range(12)] for p in range(8)])
        return out
    assert addition.metric(oracle, addition.TEST_PAIRS[:20], batch_size=8) == 1.0
    assert "attn0" in trace(addition.forward, addition.Model(), addition.EVAL_INPUTS)[0].captures

    # the other op families trace and differentiate too
    def other(x, i):
        y = tg.conv2d(x, tg.ones((4, 3, 3, 3)), padding=1)
        y = tg.max_pool2d(tg.relu(y), 2) + tg.avg_pool2d(y, 2)
        y = tg.upsample_nearest2d(tg.dropout(y, 0.1), 2)
        s = tg.categorical(y.reshape(2, -1))
        return (tg.nll_loss(tg.log_softmax(y.reshape(2, -1)), s)
                + tg.take_along_axis(y.reshape(2, -1), i, 1).sum()
                + tg.embedding(y.reshape(-1, 8), i.reshape(-1)).sum()
                + tg.mse_loss(tg.rand((2, 2)) + tg.randn((2, 2)), tg.one_hot(i[:, 0], 2)))
    g, out = trace(other, None, {"x": (2, 3, 8, 8), "i": ((2, 2), "i32")})
    append_grad(g, out, [g.inputs["x"]])
    assert g.rng_ops == 4 and "seed" in g.scalars
    print("ok")
"""


def test_trace_and_differentiate_without_numpy():
    assert run_without_numpy(TRACE_AND_DIFFERENTIATE).strip().endswith("ok")


def test_training_graph_and_plan_without_numpy():
    """compile's graph building, the optimizers and the planner (all the browser runs)."""
    out = run_without_numpy("""
        import tgweb as tg
        from tgweb.program import Program
        from tgweb.compile import build_training_graph
        from tgweb.lower import lower
        from tgweb.samples import addition as A

        opt, clip = tg.optim.from_spec(A.OPTIMIZER)
        g = build_training_graph(A.Model(), A.loss_fn, A.INPUTS, opt, clip)
        prog = lower(g)
        assert Program.from_json(prog.to_json()) == prog
        print(prog.meta["memory"]["total_bytes"])
    """)
    assert int(out.split()[-1]) > 0


def test_data_samples_without_numpy():
    """The samples' data, splits, batches, baseline and metrics."""
    from tgweb.samples import names

    out = run_without_numpy("""
        import math
        from tgweb.samples import digits, names
        from tgweb.trace import trace
        for s in (digits, names):
            assert set(s.batch(0, 1)) == set(s.INPUTS)
            trace(s.loss_fn, s.Model(), s.INPUTS)
        assert len(digits.test_inputs()["x"]) == 359 * 64
        zeros = [0.0] * (names.EVAL_BATCH * names.CTX * names.VOCAB)
        assert abs(names.metric(lambda b: zeros) - math.log(27)) < 1e-9
        print(round(names.bigram_loss(), 4))
    """)
    assert out.split() == [f"{names.bigram_loss():.4f}".rstrip("0")]
