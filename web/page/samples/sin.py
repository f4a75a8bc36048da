# sin: an MLP (1 -> 64 -> 64 -> 1, ReLU) learns y = sin x on [-pi, pi].
# The page runs this file when you press Start (again after each edit), then
# calls train(steps). show() sends the sample's view to the page.
import math

import tgweb as tg
from tgweb import worker
from tgweb.samples import sin

trainer = tg.compile(sin.Model(), sin.loss_fn, inputs=sin.INPUTS,
                     optimizer=sin.OPTIMIZER, seed=0)
predict = trainer.attach(sin.forward, inputs=sin.EVAL_INPUTS)


def show():
    """The fit on the 200-point grid against sin x."""
    fit = [row[0] for row in predict.run(**sin.grid()).output.tolist()]
    target = [math.sin(x) for x in sin.GRID]
    mse = sum((f - t) ** 2 for f, t in zip(fit, target)) / len(fit)
    worker.emit("view", {
        "figures": {"grid MSE": mse, "goal": "< 1e-3"},
        "curve": {"x": sin.GRID, "series": {"sin x": target, "model": fit}},
    })


def train(steps):
    for _ in range(steps):
        r = trainer.step(**sin.batch(trainer.calls))
        worker.metric("loss", r)  # sent once read back: no GPU wait here
        if trainer.calls % 100 == 0:
            show()
        worker.check_stop()
