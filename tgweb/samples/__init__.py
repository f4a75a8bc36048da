"""The canonical workloads of SAMPLES.md, one module each, plain Python (no NumPy).

Every sample module exposes the same surface, so that the trainer page, the
tests, the CLI and the benchmarks treat them alike:

- ``Model``: an ``nn.Module`` subclass; ``Model()`` builds the sample's model.
- ``loss_fn(model, **inputs)``: a scalar tensor, the training loss.
- ``INPUTS``: input name -> shape (f32) or ``(shape, dtype)``, for training steps.
- ``forward(model, **inputs)`` and ``EVAL_INPUTS``: the inference graph used by
  ``metric`` (predictions or logits).
- ``batch(step, rng=0)``: the training batch of one step as ``{name: array.array}``
  (flat, row-major, shaped as in INPUTS); the same (step, rng) always gives the
  same batch. ``rng`` is an int seed or a ``random.Random``.
- ``BATCH_NEEDS_POLICY`` (optional, default False): True for a sample whose batches
  are played by the model being trained (reinforcement learning: cartpole,
  tictactoe). Its batch is ``batch(step, rng=0, policy=None)``, where ``policy`` is
  a function like ``metric``'s: it runs ``forward`` on feeds shaped as EVAL_INPUTS and
  returns the output (``lambda feeds: inference.run(**feeds).output`` for an
  inference program from ``trainer.attach(forward, inputs=EVAL_INPUTS)``). Without a
  policy the sample plays a fixed one (uniformly random moves), so ``batch(step)``
  still works everywhere; with the same policy, (step, rng) gives the same batch.
- ``metric(fn, ...)``: the success measure of SAMPLES.md given a function that
  runs ``forward`` on a batch shaped as EVAL_INPUTS (see each module).
- ``OPTIMIZER``: optimizer settings as plain data (the trainer builds the objects);
  a sample written as PyTorch code (torchgpt) has ``configure_optimizers(model)``
  instead, which returns its tgweb.torch.optim optimizer.
- ``MAX_MEMORY`` (optional, default None): the bytes a training step's buffers may
  hold, tg.compile's ``max_memory``.
- ``choose_precision(backend)`` (optional): the precision ``compile`` trains in on that
  backend's adapter (shakespeare: "mixed" where a GPU offers shader-f16, else "float32";
  ``_util.fastest_precision``). Without it, tg.compile's default (float32).
- ``STEPS`` and ``SUCCESS``: the step budget and the success criterion: a metric
  name, "within_steps" and a bound, "below" or "at_least" a number, or
  "below_baseline" (a function of the module, e.g. names.bigram_loss) less
  "margin"; ``success_bound`` / ``succeeded`` read it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping

from ._util import fastest_precision, flatten, make_rng, precision_for, succeeded, success_bound  # noqa: F401


class _Samples(Mapping):
    """Name -> sample module, every module of this package not starting with "_"; each is
    imported when first asked for (a page's first step needs one sample, not all)."""

    def __init__(self) -> None:
        self._names = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))

    def __getitem__(self, name: str):
        if name not in self._names:
            raise KeyError(name)
        return importlib.import_module(f"{__name__}.{name}")

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


SAMPLES = _Samples()


def get(name: str):
    """The sample module called name (one of SAMPLES: 'sin', 'addition', ...)."""
    try:
        return SAMPLES[name]
    except KeyError:
        raise KeyError(f"no sample {name!r}; known: {sorted(SAMPLES)}") from None


def compile(sample, **options):
    """A trainer for a sample (its name or its module), as the sample sets it up: its
    Model, loss, INPUTS, OPTIMIZER, MAX_MEMORY and choose_precision. `options` go to
    `tg.compile` (backend, seed, ...)."""
    from ..compile import compile as tg_compile

    mod = get(sample) if isinstance(sample, str) else sample
    model = mod.Model()
    # a sample written as PyTorch code builds its optimizer from the model's parameters
    make = getattr(mod, "configure_optimizers", None)
    optimizer = make(model) if make is not None else mod.OPTIMIZER
    options.setdefault("max_memory", getattr(mod, "MAX_MEMORY", None))
    choose = getattr(mod, "choose_precision", None)
    if choose is not None and "precision" not in options:
        options["precision"] = choose(options.get("backend"))
    return tg_compile(model, mod.loss_fn, inputs=mod.INPUTS, optimizer=optimizer, **options)
