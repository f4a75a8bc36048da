# digits: a small CNN classifies 8x8 handwritten digits (scikit-learn's set).
# show() predicts all 359 test images and draws the first 40 with their labels.
import tgweb as tg
from tgweb import worker
from tgweb.samples import digits

trainer = tg.compile(digits.Model(), digits.loss_fn, inputs=digits.INPUTS,
                     optimizer=digits.OPTIMIZER, seed=0)
predict = trainer.attach(digits.forward, inputs=digits.EVAL_INPUTS)
TEST = digits.test_inputs()
SHOWN = digits.TEST_INDICES[:40]


def show():
    logits = predict.run(**TEST).output.tolist()
    pred = [max(range(10), key=row.__getitem__) for row in logits]
    truth = digits.labels(digits.TEST_INDICES)
    accuracy = sum(p == t for p, t in zip(pred, truth)) / len(truth)
    worker.emit("view", {
        "figures": {"test accuracy": accuracy, "test images": len(truth), "goal": ">= 0.95"},
        "images": {"side": 8, "pixels": [digits.image(i) for i in SHOWN],
                   "labels": [str(p) for p in pred[:len(SHOWN)]],
                   "ok": [p == t for p, t in zip(pred, truth[:len(SHOWN)])]},
    })


def train(steps):
    for _ in range(steps):
        r = trainer.step(**digits.batch(trainer.calls))
        worker.metric("loss", r)  # sent once read back: no GPU wait here
        if trainer.calls % 100 == 0:
            show()
        worker.check_stop()
