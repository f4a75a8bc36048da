# torchgpt: a character-level GPT of first names, written as PyTorch code. The model
# (tgweb/samples/torchgpt.py) imports tgweb.torch as torch; here the optimizer and the
# lr scheduler are torch.optim's, stepped as in a PyTorch loop. show() samples names.
import random

import tgweb as tg
import tgweb.torch as torch
from tgweb import worker
from tgweb.samples import names, torchgpt

model = torchgpt.Model()
optimizer = torchgpt.configure_optimizers(model)  # AdamW, decay on the matrices
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=1500, eta_min=3e-4)
trainer = tg.compile(model, torchgpt.loss_fn, inputs=torchgpt.INPUTS, optimizer=optimizer, seed=0)
predict = trainer.attach(torchgpt.forward, inputs=torchgpt.EVAL_INPUTS)
BIGRAM = names.bigram_loss()


def logits(batch):
    return predict.run(**batch).output


def show():
    fresh = names.sample_names(logits, 12, rng=random.Random(trainer.steps))
    worker.emit("view", {
        "figures": {"validation loss": names.val_loss(logits), "bigram loss": BIGRAM,
                    "goal": f"< {BIGRAM - torchgpt.SUCCESS['margin']:.3f}",
                    "lr": scheduler.get_last_lr()[0]},
        "text": [n.capitalize() or "(empty)" for n in fresh],
    })


def train(steps):
    for _ in range(steps):
        r = trainer.step(**names.batch(trainer.calls))
        scheduler.step()  # the lr follows these calls, as in PyTorch
        worker.metric("loss", r)  # sent once read back: no GPU wait here
        if trainer.calls % 200 == 0:
            show()
        worker.check_stop()
