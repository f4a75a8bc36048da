# shakespeare: nanoGPT's character-level GPT (6 layers, 6 heads, 384 wide, 10.7M
# parameters) learns the tiny-shakespeare text. show() streams text drawn from the model
# character by character; the validation loss is averaged over fixed held-out batches.
# A CPU-emulated GPU is far too slow for the full size: shakespeare.sized("small") trains
# a scaled-down model in seconds.
import random

import tgweb as tg
from tgweb import worker
from tgweb.samples import shakespeare

sample = shakespeare.sized("full")
trainer = tg.compile(sample.Model(), sample.loss_fn, inputs=sample.INPUTS,
                     optimizer=sample.OPTIMIZER, seed=0, max_memory=sample.MAX_MEMORY)
evaluate = trainer.attach(sample.forward, inputs=sample.EVAL_INPUTS)
sampler = trainer.attach(sample.sample_probs, inputs=sample.SAMPLE_INPUTS)
LENGTH = 240  # characters drawn per show()
EVAL_EVERY = 250


def val_loss():
    return sample.metric(lambda batch: evaluate.run(**batch).output)


def show(chunk=24):
    """Draw LENGTH characters, sending the text so far every `chunk` characters."""
    figures = {"validation loss": val_loss(), "goal": f"< {sample.config.bound:.2f}",
               "step": trainer.steps}
    chars = sample.stream(lambda b: sampler.run(**b).output, rng=random.Random(trainer.steps))
    text = ""
    while len(text) < LENGTH:
        text += "".join(next(chars) for _ in range(chunk))
        worker.emit("view", {"figures": figures, "shakespeare": {
            "text": text, "done": len(text) >= LENGTH, "step": trainer.steps}})


def train(steps):
    for _ in range(steps):
        r = trainer.step(**sample.batch(trainer.calls))
        worker.metric("loss", r)  # sent once read back: no GPU wait here
        if trainer.calls % EVAL_EVERY == 0:
            show()
        worker.check_stop()
