"""digits: a small CNN classifies the 1,797 8x8 handwritten digits of scikit-learn
(the UCI optdigits test set), read from data/digits.bin (see data/README.md).

Pixels 0..16 are scaled to [0, 1]. The 80/20 split is fixed by index: the 359
images whose index has the smallest crc32 (of the index as 4 little-endian bytes)
test, the other 1,438 train. A contiguous split would test on writers never seen
in training (the images come in blocks by writer; even an SVM stays near 93 %
there), and index % 5 would pick almost only 4s and 9s (the labels cycle 0..9).

Model: Conv 1->16 3x3 pad 1, ReLU, max-pool 2; Conv 16->32 3x3 pad 1, ReLU,
max-pool 2; Linear 128->64, ReLU; Linear 64->10.
Success: >= 95 % test accuracy within 1,500 AdamW steps of batch 64.
"""

from __future__ import annotations

import array
import functools
import zlib
from importlib import resources

from .. import nn, ops
from ._util import flatten, make_rng

N_IMAGES = 1797
SIDE = 8
PIXELS = SIDE * SIDE
CLASSES = 10
N_TEST = N_IMAGES // 5  # 359
N_TRAIN = N_IMAGES - N_TEST  # 1,438
TEST_INDICES = sorted(sorted(range(N_IMAGES), key=lambda i: zlib.crc32(i.to_bytes(4, "little")))[:N_TEST])
_TEST = frozenset(TEST_INDICES)
TRAIN_INDICES = [i for i in range(N_IMAGES) if i not in _TEST]
BATCH = 64
EVAL_BATCH = N_TEST  # the whole test set in one run (359)
STEPS = 1500
INPUTS = {"x": (BATCH, 1, SIDE, SIDE), "y": ((BATCH,), "i32")}
EVAL_INPUTS = {"x": (EVAL_BATCH, 1, SIDE, SIDE)}
OPTIMIZER = {
    "name": "adamw",
    "lr": 1e-3,
    "betas": (0.9, 0.999),
    "eps": 1e-8,
    "schedule": None,
    "weight_decay": 0.01,
    "decay_exclude": "biases and norms",
    "clip": None,
}
SUCCESS = {"metric": "accuracy", "at_least": 0.95, "within_steps": STEPS}


@functools.lru_cache(maxsize=1)
def _raw() -> tuple[bytes, bytes]:
    data = (resources.files(__package__) / "data" / "digits.bin").read_bytes()
    if len(data) != N_IMAGES * (PIXELS + 1):
        raise RuntimeError(f"data/digits.bin has {len(data)} bytes, expected {N_IMAGES * (PIXELS + 1)}")
    return data[: N_IMAGES * PIXELS], data[N_IMAGES * PIXELS :]


def image(i: int) -> list[float]:
    """Image i (0..1796) as 64 floats in [0, 1], row-major."""
    px = _raw()[0]
    return [v / 16.0 for v in px[i * PIXELS : (i + 1) * PIXELS]]


def label(i: int) -> int:
    return _raw()[1][i]


def labels(indices) -> list[int]:
    lab = _raw()[1]
    return [lab[i] for i in indices]


def images(indices) -> array.array:
    """The images at indices, flat f32 [len(indices) * 64] scaled to [0, 1]."""
    px = _raw()[0]
    scale = [v / 16.0 for v in range(17)]
    out = array.array("f")
    for i in indices:
        out.extend(scale[v] for v in px[i * PIXELS : (i + 1) * PIXELS])
    return out


class Model(nn.Module):
    def __init__(self) -> None:
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 2 * 2, 64)
        self.fc2 = nn.Linear(64, CLASSES)

    def forward(self, x):
        """Logits [n, 10] for images x [n, 1, 8, 8]."""
        x = ops.max_pool2d(ops.relu(self.conv1(x)), 2)  # [n, 16, 4, 4]
        x = ops.max_pool2d(ops.relu(self.conv2(x)), 2)  # [n, 32, 2, 2]
        x = ops.reshape(x, (x.shape[0], 32 * 2 * 2))  # channel-major, as torch.flatten
        return self.fc2(ops.relu(self.fc1(x)))


def forward(model: Model, x):
    """Logits [n, 10]."""
    return model(x)


def loss_fn(model: Model, x, y):
    return ops.cross_entropy(model(x), y)


def batch(step: int, rng=0) -> dict[str, array.array]:
    """BATCH training images drawn uniformly (with replacement): x flat f32 [64*64],
    y flat i32 [64]."""
    r = make_rng(step, rng)
    idx = [TRAIN_INDICES[r.randrange(N_TRAIN)] for _ in range(BATCH)]
    return {"x": images(idx), "y": array.array("i", labels(idx))}


def test_inputs() -> dict[str, array.array]:
    """The evaluation inputs (EVAL_INPUTS): the 359 test images."""
    return {"x": images(TEST_INDICES)}


def predictions(logits_fn, indices=TEST_INDICES) -> list[int]:
    """The predicted class of each image at indices. logits_fn({"x": flat f32 array of
    EVAL_BATCH images}) returns logits [EVAL_BATCH, 10] (any nesting or flat); a last
    short chunk is padded with copies of its first image."""
    indices = list(indices)
    out: list[int] = []
    for lo in range(0, len(indices), EVAL_BATCH):
        chunk = indices[lo : lo + EVAL_BATCH]
        n = len(chunk)
        chunk += [chunk[0]] * (EVAL_BATCH - n)
        logits = flatten(logits_fn({"x": images(chunk)}))
        if len(logits) != EVAL_BATCH * CLASSES:
            raise ValueError(f"logits_fn returned {len(logits)} values, expected {EVAL_BATCH * CLASSES}")
        for i in range(n):
            row = logits[i * CLASSES : (i + 1) * CLASSES]
            out.append(max(range(CLASSES), key=row.__getitem__))
    return out


def metric(logits_fn, indices=TEST_INDICES) -> float:
    """Accuracy on the test images (or on indices)."""
    indices = list(indices)
    pred = predictions(logits_fn, indices)
    return sum(p == t for p, t in zip(pred, labels(indices))) / len(indices)
