"""The canvas sample: its rasterizer (strokes -> 8x8 images as optdigits made them), its
dropout (training only), and training to SUCCESS on the reference backend."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tgweb as tg
from tgweb import samples
from tgweb.samples import canvas, digits


def test_a_vertical_line_fills_the_height_in_the_middle_columns():
    img = np.array(canvas.rasterize([[[10, 5], [10, 300]]])).reshape(8, 8)
    assert (img[:, 3] > 0).all() and (img[:, 4] > 0).all()
    assert (img[:, :2] == 0).all() and (img[:, 6:] == 0).all()
    assert set(np.unique(img * 16)) <= set(range(17))  # ink counts of 4x4 blocks, over 16


def test_normalisation_ignores_position_and_size_and_keeps_aspect():
    ring = [[100 + 40 * math.sin(t / 12 * math.pi), 100 - 60 * math.cos(t / 12 * math.pi)] for t in range(25)]
    a = canvas.rasterize([ring])
    moved = canvas.rasterize([[[3 * x - 500, 3 * y + 70] for x, y in ring]])
    assert a == moved
    img = np.array(a).reshape(8, 8)
    assert (img.sum(1) > 0).all()  # full height, as the data set's digits
    assert img[:, 0].sum() == img[:, 7].sum() == 0  # narrower than tall: margins left and right
    assert img[3:5, 3:5].sum() == 0  # a hole in the middle
    wide = np.array(canvas.rasterize([[[0, 0], [200, 0]]])).reshape(8, 8)
    assert (wide.sum(0) > 0).all() and wide.sum(1).astype(bool).sum() <= 2  # wider than tall: full width


def test_like_the_data_set_and_read_by_a_trained_model():
    # ink totals like the data set's: a drawn "0" within the range of its 0s
    ring = [[40 * math.sin(t / 12 * math.pi), -60 * math.cos(t / 12 * math.pi)] for t in range(25)]
    zeros = [sum(digits.image(i)) for i in range(digits.N_IMAGES) if digits.label(i) == 0]
    assert min(zeros) <= sum(canvas.rasterize([ring])) <= max(zeros)
    tr = samples.compile("canvas", backend="reference", seed=0)
    for s in range(400):
        tr.step(**canvas.batch(s, 0))
    p = tr.attach(canvas.probabilities, inputs=canvas.DRAW_INPUTS)
    drawn = {
        0: [ring],
        1: [[[0, 0], [0, 100]]],
        4: [[[120, 20], [40, 150], [170, 150]], [[130, 80], [130, 220]]],
    }
    for want, strokes in drawn.items():
        out = p.run(x=[canvas.rasterize(strokes)]).output.ravel()
        assert abs(out.sum() - 1) < 1e-5 and int(out.argmax()) == want, (want, out)


def test_blank_dots_and_bad_strokes():
    assert canvas.rasterize([]) == [0.0] * 64 == canvas.rasterize([[], []])
    dot = np.array(canvas.rasterize([[[5, 5]]])).reshape(8, 8)
    assert dot[3:5, 3:5].sum() > 0 and dot.sum() == dot[3:5, 3:5].sum()
    with pytest.raises(ValueError, match="stroke 0, point 1: expected"):
        canvas.rasterize([[[0, 0], [1, 2, 3]]])
    with pytest.raises(ValueError, match="finite"):
        canvas.rasterize([[[0, 0], [float("nan"), 1]]])
    with pytest.raises(TypeError, match="strokes must be a list"):
        canvas.rasterize("1")
    with pytest.raises(ValueError, match="pen radius"):
        canvas.rasterize([[[0, 0]]], pen=0)
    assert canvas.softmax([0.0, math.log(3.0)]) == pytest.approx([0.25, 0.75])
    with pytest.raises(ValueError, match="empty"):
        canvas.softmax([])


def test_dropout_acts_in_training_steps_only():
    tr = samples.compile("canvas", backend="reference", seed=1)
    x = np.asarray(canvas.batch(0)["x"], np.float32).reshape(canvas.BATCH, 64)
    infer = tr.attach(canvas.forward, inputs={"x": x.shape})
    a, b = infer.run(x=x).output, infer.run(x=x).output
    assert np.array_equal(a, b)  # inference: no dropout, deterministic
    # training: units dropped (seed 0, as tg.value_and_grad runs) changes the loss
    y = np.asarray(canvas.batch(0)["y"], np.int32)
    with_dropout, _ = tg.value_and_grad(canvas.loss_fn, canvas.Model(), x=x, y=y)
    without, _ = tg.value_and_grad(
        lambda m, x, y: tg.cross_entropy(canvas.forward(m, x), y), canvas.Model(), x=x, y=y
    )
    assert abs(float(with_dropout) - float(without)) > 1e-4
    kinds = {t.kind for t in tr.graph.tensors}
    assert "rand" in kinds and "rand" not in {t.kind for t in infer.graph.tensors}
    assert tr.clip_grad_norm == 1.0 and tr.optimizer.name == "adamw" and tr.optimizer.weight_decay == 0.01


def test_data_and_rasterizer_without_numpy():
    from test_no_numpy import run_without_numpy

    out = run_without_numpy("""
        from tgweb.samples import canvas
        b = canvas.batch(3, 1)
        assert len(b["x"]) == 64 * 64 and len(b["y"]) == 64
        img = canvas.rasterize([[[0, 0], [0, 50]], [[-10, 20], [10, 20]]])
        assert len(img) == 64 and 0 < sum(img) < 64
        print(round(sum(canvas.softmax([1.0, 2.0, 3.0])), 6))
    """)
    assert out.strip() == "1.0"
