# llama: a small Llama-style model (RMSNorm, rotary embeddings, SwiGLU, tied head) learns
# first names (the names sample's data). The view samples names at a temperature set with
# a slider: sample(temperature) runs an inference graph attached once, whose temperature
# is an input, so a new temperature never compiles anything (TRACES counts compilations).
import array
import random

import tgweb as tg
from tgweb import worker
from tgweb.samples import llama, names

trainer = tg.compile(llama.Model(), llama.loss_fn, inputs=llama.INPUTS,
                     optimizer=llama.OPTIMIZER, seed=0)
predict = trainer.attach(llama.forward, inputs=llama.EVAL_INPUTS)
BIGRAM = names.bigram_loss()
TRACES = 0  # how many times the sampler's graph was traced (compiled)
TEMPERATURE = 1.0  # the last temperature asked for; show() samples at it
DRAWS = 0  # samples drawn so far: each draw gets fresh random numbers


def sampler_graph(model, tokens, temperature):
    global TRACES
    TRACES += 1  # tracing runs this once per compilation, never per run
    return llama.sample_probs(model, tokens, temperature)


sampler = trainer.attach(sampler_graph, inputs=llama.SAMPLE_INPUTS)


def logits(batch):
    return predict.run(**batch).output


def probs(batch):
    return sampler.run(**batch).output


def sample(temperature=None, n=12):
    """n names at temperature (default: the last one used), the first letter's
    distribution at that temperature, and how often the sampler was compiled."""
    global TEMPERATURE, DRAWS
    t = llama.check_temperature(TEMPERATURE if temperature is None else temperature)
    TEMPERATURE = t
    DRAWS += 1
    fresh, entropy = llama.sample_names(probs, int(n), temperature=t, rng=random.Random(DRAWS))
    start = array.array("i", [llama.BOUNDARY] * (llama.CTX * llama.SAMPLE_BATCH))
    first = probs({"tokens": start, "temperature": array.array("f", [t])}).tolist()[0][0]
    return {"names": fresh, "temperature": t, "entropy": entropy, "first": first,
            "traces": TRACES, "step": trainer.steps}


def show():
    s = sample()
    worker.emit("view", {
        "figures": {"validation loss": names.val_loss(logits), "bigram loss": BIGRAM,
                    "goal": f"< {BIGRAM - llama.SUCCESS['margin']:.3f}", "step": trainer.steps},
        "llama": s,
    })


def train(steps):
    for _ in range(steps):
        r = trainer.step(**llama.batch(trainer.calls))
        worker.metric("loss", r)  # sent once read back: no GPU wait here
        if trainer.calls % 200 == 0:
            show()
        worker.check_stop()
