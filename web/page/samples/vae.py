# vae: a variational autoencoder with a 2-D latent learns the 8x8 digits. A training
# step samples z = mu + sigma * eps with eps from tg.randn in the graph. show() sends the
# view (page/views/vae.mjs): ten test digits beside their reconstructions, an 8x8 grid
# of digits decoded across the latent plane, and where the test digits' means lie on it;
# decode_at(z1, z2) decodes the point of the plane the pointer is on.
import tgweb as tg
from tgweb import worker
from tgweb.samples import success_bound, vae

trainer = tg.compile(vae.Model(), vae.loss_fn, inputs=vae.INPUTS,
                     optimizer=vae.OPTIMIZER, seed=0)
GRID = 8  # the latent sweep: GRID x GRID points
nelbo = trainer.attach(vae.forward, inputs=vae.EVAL_INPUTS)
encode = trainer.attach(vae.encode, inputs={"x": vae.EVAL_INPUTS["x"]})
decode = trainer.attach(vae.decode, inputs={"z": (GRID * GRID, vae.LATENT)})
decode_one = trainer.attach(vae.decode, inputs={"z": (1, vae.LATENT)})
TEST = vae.test_inputs()
LABELS = vae.digits.labels(vae.TEST_INDICES)
SHOWN = [next(i for i, t in zip(vae.TEST_INDICES, LABELS) if t == d) for d in range(10)]
recon = trainer.attach(vae.reconstruct, inputs={"x": (len(SHOWN), vae.PIXELS)})
Z = vae.latent_grid(GRID)
BASELINE = vae.mean_image_nelbo()
GOAL = success_bound(vae)[1]


def show():
    value = vae.metric(lambda g: nelbo.run(**g).output)
    means = encode.run(x=TEST["x"]).output.tolist()
    worker.emit("view", {
        "figures": {"test -ELBO (nats)": value, "goal": f"< {GOAL:.2f}",
                    "baseline (mean image)": BASELINE, "step": trainer.steps},
        "vae": {
            "side": 8,
            "originals": [vae.digits.image(i) for i in SHOWN],
            "reconstructions": recon.run(x=vae.digits.images(SHOWN)).output.tolist(),
            "grid": {"n": GRID, "z": Z, "images": decode.run(z=Z).output.tolist()},
            "latent": {"means": means, "labels": LABELS},
        },
    })


def decode_at(z1, z2):
    """The digit decoded from the latent point (z1, z2): 64 pixels in [0, 1]."""
    z = [float(z1), float(z2)]
    return {"z": z, "pixels": decode_one.run(z=[z]).output.tolist()[0], "step": trainer.steps}


def train(steps):
    for _ in range(steps):
        r = trainer.step(**vae.batch(trainer.calls))
        worker.metric("loss", r)  # sent once read back: no GPU wait here
        if trainer.calls % 100 == 0:
            show()
        worker.check_stop()
