# flow: flow matching. A small conv net with a time embedding learns the velocity that
# carries Gaussian noise (t = 0) to 8x8 digits (t = 1) along straight paths. show()
# integrates the learned velocity with Euler steps from the same fixed noise each time,
# so the grid shows the same 64 samples sharpening as training goes; sample(steps, seed)
# draws new ones, with the path of the first 8 through time, for the view's buttons.
import tgweb as tg
from tgweb import worker
from tgweb.samples import flow

trainer = tg.compile(flow.Model(), flow.loss_fn, inputs=flow.INPUTS,
                     optimizer=flow.OPTIMIZER, seed=0)
velocity = trainer.attach(flow.forward, inputs=flow.SAMPLE_INPUTS)  # 64 images at a time
heldout = trainer.attach(flow.forward, inputs=flow.EVAL_INPUTS)  # the 359 held-out ones
BASELINE = flow.gaussian_loss()
EULER_STEPS = flow.EULER_STEPS  # the last number of Euler steps asked for
FIXED_SEED = 1234  # flow.eval_noise()'s: the noise show() starts from unless asked otherwise
SEED = FIXED_SEED  # the last noise seed asked for
PATHS = 8  # samples whose path through time the view shows
FRAMES = 5  # points in time shown for each (t = 0 and four more up to 1)


def v(feeds):
    return velocity.run(**feeds).output


def sample(steps=None, seed=None):
    """64 samples integrated with `steps` Euler steps from the noise drawn with `seed`
    (each defaults to the last asked for; show() uses them too); the digit of each one's
    nearest training image, the nearest-image distance ratio, and the first 8 samples at
    FRAMES times from noise to the end."""
    global EULER_STEPS, SEED
    steps = EULER_STEPS if steps is None else int(steps)
    seed = SEED if seed is None else int(seed)
    if not 1 <= steps <= 64:
        raise ValueError(f"Euler steps must be from 1 to 64, got {steps}")
    EULER_STEPS, SEED = steps, seed
    noise = flow.eval_noise(seed=seed)
    marks = {round(steps * k / (FRAMES - 1)) for k in range(1, FRAMES)}
    frames = [flow.images_of(list(noise[: PATHS * 64]))]
    x = noise
    for k, x in enumerate(flow.euler(v, noise, steps), 1):
        if k in marks:
            frames.append(flow.images_of(x[: PATHS * 64]))
    images = flow.images_of(x)
    near = flow.nearest(images)
    labels = flow.digits.labels([flow.TRAIN_INDICES[j] for _, j in near])
    return {"pixels": images, "labels": labels, "steps": steps, "seed": seed, "fixed": seed == FIXED_SEED,
            "step": trainer.steps,
            "ratio": sum(d for d, _ in near) / len(near) / flow.reference_distance(),
            "frames": frames, "times": [0.0] + [m / steps for m in sorted(marks)]}


def show():
    loss = flow.heldout_loss(lambda feeds: heldout.run(**feeds).output)
    s = sample()
    worker.emit("view", {
        "figures": {"held-out loss": loss, "baseline": BASELINE,
                    "goal": f"< {BASELINE - flow.SUCCESS['margin']:.3f}",
                    "nearest-digit ratio": s["ratio"], "step": trainer.steps},
        "flow": s,
    })


def train(steps):
    for _ in range(steps):
        r = trainer.step(**flow.batch(trainer.calls))
        worker.metric("loss", r)  # sent once read back: no GPU wait here
        if trainer.calls % 200 == 0:
            show()
        worker.check_stop()
