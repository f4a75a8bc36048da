# canvas: an MLP with dropout (64 -> 128 -> 64 -> 10, AdamW, clipping) learns the 8x8
# digits. Draw a digit on the view's canvas: predict(strokes) turns the pen strokes into
# an 8x8 image as the data set's were made (canvas.rasterize) and runs the attached
# inference graph (no dropout) for the ten probabilities the view shows as bars.
import tgweb as tg
from tgweb import worker
from tgweb.samples import canvas

trainer = tg.compile(canvas.Model(), canvas.loss_fn, inputs=canvas.INPUTS,
                     optimizer=canvas.OPTIMIZER, seed=0)
logits = trainer.attach(canvas.forward, inputs=canvas.EVAL_INPUTS)
probs = trainer.attach(canvas.probabilities, inputs=canvas.DRAW_INPUTS)
TEST = canvas.test_inputs()
TRUTH = canvas.digits.labels(canvas.TEST_INDICES)


def show():
    rows = logits.run(**TEST).output.tolist()
    pred = [max(range(10), key=row.__getitem__) for row in rows]
    accuracy = sum(p == t for p, t in zip(pred, TRUTH)) / len(TRUTH)
    worker.emit("view", {
        "figures": {"test accuracy": accuracy, "goal": ">= 0.97", "step": trainer.steps},
        "canvas": {"side": 8},
    })


def predict(strokes):
    """The drawing's 8x8 image and the model's ten probabilities for it."""
    pixels = canvas.rasterize(strokes)
    p = probs.run(x=[pixels]).output.tolist()[0]
    return {"pixels": pixels, "probs": p, "digit": max(range(10), key=p.__getitem__),
            "step": trainer.steps, "blank": not any(pixels)}


def train(steps):
    for _ in range(steps):
        r = trainer.step(**canvas.batch(trainer.calls))
        worker.metric("loss", r)  # sent once read back: no GPU wait here
        if trainer.calls % 100 == 0:
            show()
        worker.check_stop()
