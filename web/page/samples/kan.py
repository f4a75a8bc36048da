# kan: a Kolmogorov-Arnold network (1 -> 4 -> 1) learns y = sin(pi x) on [-1, 1].
# Each of its 8 edges carries a learned function: a SiLU term plus a cubic B-spline on
# a grid of 8 intervals. show() sends the fit and every edge function to the view
# (page/views/kan.mjs), which plots them.
import tgweb as tg
from tgweb import worker
from tgweb.samples import kan

trainer = tg.compile(kan.Model(), kan.loss_fn, inputs=kan.INPUTS,
                     optimizer=kan.OPTIMIZER, seed=0)
predict = trainer.attach(kan.forward, inputs=kan.EVAL_INPUTS)


def show():
    """The fit on the 201-point grid against sin(pi x), and the 8 edge functions."""
    fit = [row[0] for row in predict.run(**kan.grid()).output.tolist()]
    target = [kan.target(x) for x in kan.EVAL_GRID]
    mse = sum((f - t) ** 2 for f, t in zip(fit, target)) / len(fit)
    edges = kan.Edges(trainer.params())
    worker.emit("view", {
        "figures": {"grid MSE": mse, "goal": "< 1e-5", "step": trainer.steps},
        "kan": {"x": kan.EVAL_GRID, "target": target, "model": fit,
                "ranges": [list(r) for r in kan.RANGES], "edges": edges.curves(points=41)},
    })


def train(steps):
    for _ in range(steps):
        r = trainer.step(**kan.batch(trainer.calls))
        worker.metric("loss", r)  # sent once read back: no GPU wait here
        if trainer.calls % 50 == 0:
            show()
        worker.check_stop()
