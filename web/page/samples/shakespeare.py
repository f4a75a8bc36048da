# shakespeare: nanoGPT's character-level GPT (6 layers, 6 heads, 384 wide, 10.7M
# parameters) learns the tiny-shakespeare text. show() streams text drawn from the model
# character by character; the validation loss is averaged over fixed held-out batches.
# A CPU-emulated GPU is far too slow for the full size: shakespeare.sized("small") trains
# a scaled-down model in seconds.
import time

import tgweb as tg
from tgweb import pipeline, worker
from tgweb.samples import shakespeare

sample = shakespeare.sized("full")
# The fastest precision this adapter has, as nanoGPT trains in bf16 wherever the GPU has
# it: "mixed" (products on f16 operands, f32 weights and updates, loss scaling) on a GPU
# that offers shader-f16 and gains from it (NVIDIA's measured slower), "float32"
# elsewhere. To choose yourself, write PRECISION = "float32" (or "mixed", which needs
# shader-f16).
PRECISION = sample.choose_precision()
trainer = tg.compile(sample.Model(), sample.loss_fn, inputs=sample.INPUTS, optimizer=sample.OPTIMIZER,
                     seed=0, max_memory=sample.MAX_MEMORY, precision=PRECISION)
evaluate = trainer.attach(sample.forward, inputs=sample.EVAL_INPUTS)
# one character a run: keys and values cached on the GPU, the draw made there
sampler = trainer.attach(sample.next_token, inputs=sample.TOKEN_INPUTS)
LENGTH = 240  # characters drawn per show()
TOP_K = 0  # draw among the k most likely characters (0: all of them)
EVAL_EVERY = 250
pending = None  # what train() sent at its last evaluation step, not yet shown


def report():
    """Send the evaluation batches and LENGTH characters' runs now, without waiting: they
    run on the GPU after the steps sent so far, before the ones sent next."""
    return {"step": trainer.calls, "loss": sample.metric_later(evaluate.submit),
            "text": sample.stream_cached(sampler, temperature=1.0, top_k=TOP_K, ahead=LENGTH)}


def show(sent=None):
    """The validation loss and LENGTH characters from the model: those `sent` by train(),
    else sent now; the text goes to the view as its characters come back."""
    global pending
    if sent is None:
        sent = pending if pending is not None and pending["step"] == trainer.calls else report()
        pending = None
    figures = {"validation loss": sent["loss"](), "goal": f"< {sample.config.bound:.2f}",
               "step": sent["step"], "precision": trainer.precision}
    text, last = "", 0.0
    for ch in sent["text"]:
        text += ch
        now = time.perf_counter()
        if len(text) == LENGTH or now - last > 0.03:  # a view update at most every 30 ms
            last = now
            worker.emit("view", {"figures": figures, "shakespeare": {
                "text": text, "done": len(text) == LENGTH, "step": sent["step"],
                "precision": trainer.precision}})
        if len(text) == LENGTH:
            break


def train(steps):
    global pending
    for _ in range(steps):
        r = trainer.step(**sample.batch(trainer.calls))
        worker.metric("loss", r)  # sent once read back: no GPU wait here
        # a step read back was sent after the report: the report is computed, reading it waits for nothing
        if pending is not None and trainer.calls > pending["step"] + pipeline.DEPTH:
            show(pending)
            pending = None
        if trainer.calls % EVAL_EVERY == 0:
            if pending is not None:  # evaluating more often than DEPTH steps: this one waits
                show(pending)
            pending = report()
        worker.check_stop()
