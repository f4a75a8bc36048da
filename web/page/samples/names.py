# names: a character-level transformer learns first names (US census lists).
# show() samples new names letter by letter and compares the validation loss
# with a bigram model's (counted on the training names).
import random

import tgweb as tg
from tgweb import worker
from tgweb.samples import names

trainer = tg.compile(names.Model(), names.loss_fn, inputs=names.INPUTS,
                     optimizer=names.OPTIMIZER, seed=0)
predict = trainer.attach(names.forward, inputs=names.EVAL_INPUTS)
BIGRAM = names.bigram_loss()


def logits(batch):
    return predict.run(**batch).output


def show():
    fresh = names.sample_names(logits, 12, rng=random.Random(trainer.steps))
    worker.emit("view", {
        "figures": {"validation loss": names.val_loss(logits), "bigram loss": BIGRAM,
                    "goal": f"< {BIGRAM - names.SUCCESS['margin']:.3f}"},
        "text": [n.capitalize() or "(empty)" for n in fresh],
    })


def train(steps):
    for _ in range(steps):
        r = trainer.step(**names.batch(trainer.calls))
        worker.metric("loss", r)  # sent once read back: no GPU wait here
        if trainer.calls % 200 == 0:
            show()
        worker.check_stop()
