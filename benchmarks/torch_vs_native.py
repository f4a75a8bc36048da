"""Step time of the same model under PyTorch (via tg.to_torch, on CUDA when there) and
under tgweb natively (wgpu-py), on one machine: the `addition` sample and a version
about ten times larger. Prints figures; never fails on a time.

    python benchmarks/torch_vs_native.py [--steps 50]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tgweb as tg  # noqa: E402
from tgweb.samples import addition  # noqa: E402
from tgweb.trace import input_spec  # noqa: E402

CONFIGS = {  # name -> Model arguments
    "addition": {},
    "addition x10": {"dim": addition.DIM * 3, "hidden": addition.HIDDEN * 3},
}


def _batches(n):
    out = []
    for i in range(n):
        b = addition.batch(i)
        out.append(
            {k: np.asarray(b[k], np.int32).reshape(input_spec(k, s)[0]) for k, s in addition.INPUTS.items()}
        )
    return out


def tgweb_native(kw, batches, steps):
    tr = tg.compile(
        addition.Model(**kw),
        addition.loss_fn,
        inputs=addition.INPUTS,
        optimizer=addition.OPTIMIZER,
        backend="native",
    )
    for b in batches[:3]:
        tr.step(**b)
    t = time.perf_counter()
    for i in range(steps):
        _ = tr.step(**batches[i % len(batches)]).loss  # the loss is read back every step
    n_params = sum(v.size for v in tr.params().values())
    return (time.perf_counter() - t) / steps * 1e3, n_params, tr


def pytorch(kw, batches, steps, trainer):
    import torch

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    module = tg.to_torch(addition.Model(**kw), addition.loss_fn, inputs=addition.INPUTS)
    module.load_params(trainer.params())
    module.to(dev)
    opt, sched = tg.to_torch_optimizer(trainer, module)
    tb = [{k: torch.from_numpy(v).to(dev) for k, v in b.items()} for b in batches]

    def step(b):
        loss = module(**b)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), trainer.clip_grad_norm or 1e30)
        opt.step()
        sched.step()
        opt.zero_grad()
        return loss

    for b in tb[:3]:
        step(b).item()
    out = {}
    for read in (True, False):  # the loss read back every step, or only at the end
        t = time.perf_counter()
        for i in range(steps):
            loss = step(tb[i % len(tb)])
            if read:
                loss.item()
        loss.item()
        out[read] = (time.perf_counter() - t) / steps * 1e3
    return (
        out,
        f"torch {torch.__version__} on {torch.cuda.get_device_name() if dev.type == 'cuda' else 'CPU'}",
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    from tgweb.backends import native

    print(f"adapter: {native.adapter_info().get('device', '?')}")
    batches = _batches(16)
    for name, kw in CONFIGS.items():
        ms, n_params, tr = tgweb_native(kw, batches, args.steps)
        tms, what = pytorch(kw, batches, args.steps, tr)
        print(
            f"{name} ({n_params:,} parameters): tgweb native {ms:.2f} ms/step (loss read every step); "
            f"{what}: {tms[True]:.2f} ms/step (loss read every step), {tms[False]:.2f} (read at the end)",
            flush=True,
        )


if __name__ == "__main__":
    main()
