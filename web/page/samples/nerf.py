# nerf: an MLP on Fourier features of pixel coordinates learns a 64x64 picture.
# Each step trains on 1,024 random pixels of the target. The target is a training
# input, so set_image() (called by the view when you drop an image on it) switches
# to your picture without recompiling; training goes on from where it is.
import tgweb as tg
from tgweb import worker
from tgweb.samples import nerf

trainer = tg.compile(nerf.Model(), nerf.loss_fn, inputs=nerf.INPUTS,
                     optimizer=nerf.OPTIMIZER, seed=0)
predict = trainer.attach(nerf.forward, inputs=nerf.EVAL_INPUTS)
COORDS = nerf.coords()
image = nerf.builtin_image()  # the target: 64 * 64 * 3 floats in [0, 1]
source = "built-in"


def _bytes(values):
    return [min(255, max(0, int(v * 255 + 0.5))) for v in values]


def show():
    """The reconstruction beside the target, and its PSNR."""
    recon = [v for row in predict.run(**COORDS).output.tolist() for v in row]
    psnr = nerf.psnr(recon, image)
    worker.emit("view", {
        "figures": {"PSNR (dB)": round(psnr, 2), "goal": "≥ 35 dB",
                    "target": source, "step": trainer.steps},
        "nerf": {"side": nerf.SIDE, "target": _bytes(image), "recon": _bytes(recon), "source": source},
    })


def set_image(pixels, name="your image"):
    """Train on another picture from now on: pixels are 64 * 64 * 3 ints 0..255
    (row-major RGB). The parameters are kept: the fit moves to the new picture."""
    global image, source
    values = list(pixels)
    if len(values) != nerf.PIXELS * 3:
        raise ValueError(f"set_image needs {nerf.PIXELS * 3} values (64x64 RGB), got {len(values)}")
    if not all(isinstance(v, int) and 0 <= v <= 255 for v in values):
        raise ValueError("set_image needs ints from 0 to 255")
    image = nerf.check_image([v / 255 for v in values])
    source = str(name)[:60]
    show()
    return {"source": source, "steps": trainer.steps}


def use_builtin():
    """Go back to the built-in picture."""
    global image, source
    image, source = nerf.builtin_image(), "built-in"
    show()
    return {"source": source, "steps": trainer.steps}


def train(steps):
    for _ in range(steps):
        r = trainer.step(**nerf.pixel_batch(image, trainer.calls))
        worker.metric("loss", r)  # sent once read back: no GPU wait here
        if trainer.calls % 100 == 0:
            show()
        worker.check_stop()
