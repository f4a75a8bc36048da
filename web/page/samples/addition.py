# addition: a 3-block transformer learns two-digit addition (a + c = s, the
# sum's digits reversed). Pairs whose c ends in 3 or 8 are never trained on;
# show() reports greedy exact-match accuracy on 250 of those held-out pairs and
# the first block's attention ("attn0", captured in the forward pass).
import tgweb as tg
from tgweb import worker
from tgweb.samples import addition as add

trainer = tg.compile(add.Model(), add.loss_fn, inputs=add.INPUTS,
                     optimizer=add.OPTIMIZER, seed=2)
predict = trainer.attach(add.forward, inputs=add.EVAL_INPUTS)
HELD_OUT = add.TEST_PAIRS[::8]   # 250 of the 2,000 held-out pairs
SYMBOLS = "0123456789+="
seen = {}


def logits(batch):
    out, captures = predict.run(**batch)
    seen["attn"] = captures["attn0"]   # [250, heads, 8, 8]
    seen["tokens"] = batch["tokens"]
    return out


def show():
    answers = add.greedy_answers(logits, HELD_OUT)
    right = [ans == add.sequence(a, c)[6:] for ans, (a, c) in zip(answers, HELD_OUT)]
    examples = []
    for (a, c), ans, ok in list(zip(HELD_OUT, answers, right))[:8]:
        s = ans[0] + 10 * ans[1] + 100 * ans[2]
        examples.append(f"{a:2d} + {c:2d} = {s:3d}  {'ok' if ok else 'wrong'}")
    first = seen["attn"].tolist()[0]          # the first pair's four heads
    tokens = list(seen["tokens"][:8])
    worker.emit("view", {
        "figures": {"held-out accuracy": sum(right) / len(right), "pairs": len(right),
                    "goal": ">= 0.95"},
        "heatmaps": {"title": "block 1 attention, {} + {} (rows: query, columns: key)".format(*HELD_OUT[0]),
                     "ticks": [SYMBOLS[t] for t in tokens],
                     "maps": first, "names": [f"head {h}" for h in range(len(first))]},
        "text": examples,
    })


def train(steps):
    for _ in range(steps):
        r = trainer.step(**add.batch(trainer.calls, rng=2))
        worker.metric("loss", r)  # sent once read back: no GPU wait here
        if trainer.calls % 100 == 0:
            show()
        worker.check_stop()
