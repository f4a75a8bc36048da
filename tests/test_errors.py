"""Bad input raises tgweb.TraceError at trace time; the message names the call site
in THIS file (file and line, found by the `# E:` markers) and the shapes involved."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tgweb as tg
from tgweb import nn

HERE = os.path.abspath(__file__)
with open(HERE) as _f:
    _LINES = _f.read().splitlines()


def line_of(marker: str) -> int:
    hits = [i + 1 for i, s in enumerate(_LINES) if s.rstrip().endswith(f"# E:{marker}")]
    assert len(hits) == 1, f"marker {marker} found {len(hits)} times"
    return hits[0]


def expect(fn, inputs: dict, marker: str, *fragments: str, model=None):
    with pytest.raises(tg.TraceError) as e:
        tg.trace(fn, model, inputs)
    msg = str(e.value)
    site = f"{os.path.basename(HERE)}:{line_of(marker)}"
    assert site in msg, f"{site!r} not in {msg!r}"
    assert os.path.abspath(e.value.site.rsplit(":", 1)[0]) == HERE
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in {msg!r}"
    return msg


# ------------------------------------------------------------------ shapes


def test_shapes_that_do_not_broadcast():
    def f(a, b):
        return a + b  # E:bcast

    expect(f, {"a": (3, 4), "b": (5, 4)}, "bcast", "(3, 4)", "(5, 4)", "broadcast")


def test_where_shapes_that_do_not_broadcast():
    def f(a, b):
        return tg.where(a > 0.0, a, b)  # E:where

    expect(f, {"a": (3, 4), "b": (3, 7)}, "where", "(3, 4)", "(3, 7)")


def test_matmul_inner_dimensions():
    def f(a, b):
        return a @ b  # E:matmul

    expect(f, {"a": (3, 4), "b": (5, 2)}, "matmul", "(3, 4)", "(5, 2)", "inner")


def test_matmul_batch_dimensions():
    def f(a, b):
        return tg.matmul(a, b)  # E:matmul_batch

    expect(f, {"a": (2, 3, 4), "b": (3, 4, 2)}, "matmul_batch", "(2, 3, 4)", "(3, 4, 2)")


def test_linear_layer_with_wrong_input_size_points_at_the_call():
    model = nn.Linear(4, 2)

    def f(m, x):
        return m(x)  # E:linear

    expect(f, {"x": (3, 5)}, "linear", "(3, 5)", "(4, 2)", model=model)


def test_second_minus_one_in_reshape():
    def f(x):
        return x.reshape(-1, 2, -1)  # E:reshape

    expect(f, {"x": (3, 4)}, "reshape", "(-1, 2, -1)", "(3, 4)")


def test_reshape_to_wrong_size():
    def f(x):
        return tg.reshape(x, (5, 2))  # E:reshape_size

    expect(f, {"x": (3, 4)}, "reshape_size", "(3, 4)", "(5, 2)")


@pytest.mark.parametrize("which", ["sum", "softmax", "log_softmax", "argmax", "take"])
def test_axis_out_of_range(which):
    def f(x):
        if which == "sum":
            return tg.sum(x, axis=2)  # E:axis_sum
        if which == "softmax":
            return tg.softmax(x, axis=-3)  # E:axis_softmax
        if which == "log_softmax":
            return tg.log_softmax(x, 5)  # E:axis_log_softmax
        if which == "argmax":
            return tg.argmax(x, 2)  # E:axis_argmax
        return tg.take_along_axis(x, tg.zeros((3, 1), "i32"), 2)  # E:axis_take

    expect(f, {"x": (3, 4)}, f"axis_{which}", "(3, 4)", "out of range")


# ------------------------------------------------------------------ ranks


def test_conv2d_wrong_rank():
    def f(x, w):
        return tg.conv2d(x, w)  # E:conv_rank

    expect(f, {"x": (3, 8, 8), "w": (4, 3, 3, 3)}, "conv_rank", "(3, 8, 8)", "NCHW")


def test_conv2d_channel_mismatch():
    def f(x, w):
        return tg.conv2d(x, w, padding=1)  # E:conv_ch

    expect(f, {"x": (1, 2, 8, 8), "w": (4, 3, 3, 3)}, "conv_ch", "(4, 3, 3, 3)", "(1, 2, 8, 8)")


def test_conv2d_kernel_larger_than_input():
    def f(x, w):
        return tg.conv2d(x, w)  # E:conv_big

    expect(f, {"x": (1, 3, 2, 2), "w": (4, 3, 3, 3)}, "conv_big", "(1, 3, 2, 2)")


def test_max_pool_wrong_rank_and_bad_padding():
    def f(x):
        return tg.max_pool2d(x, 2)  # E:pool_rank

    expect(f, {"x": (8, 8)}, "pool_rank", "(8, 8)", "NCHW")

    def g(x):
        return tg.avg_pool2d(x, 2, padding=2)  # E:pool_pad

    expect(g, {"x": (1, 1, 8, 8)}, "pool_pad", "padding", "(2, 2)")


def test_causal_softmax_wrong_rank():
    def f(x):
        return tg.causal_softmax(x)  # E:causal

    expect(f, {"x": (7,)}, "causal", "(7,)", "rank")


def test_matmul_of_a_scalar():
    def f(a, b):
        return tg.matmul(a.sum(), b)  # E:matmul_rank

    expect(f, {"a": (3,), "b": (3, 2)}, "matmul_rank", "()", "(3, 2)")


def test_permute_wrong_number_of_axes():
    def f(x):
        return x.permute(1, 0)  # E:permute

    expect(f, {"x": (2, 3, 4)}, "permute", "(2, 3, 4)", "(1, 0)")


def test_cross_entropy_targets_of_wrong_shape():
    def f(x, t):
        return tg.cross_entropy(x, t)  # E:ce

    expect(f, {"x": (4, 10), "t": ((4, 10), "i32")}, "ce", "(4, 10)", "class axis last")


def test_take_along_axis_index_shape():
    def f(x, i):
        return tg.take_along_axis(x, i, 1)  # E:take

    expect(f, {"x": (3, 7), "i": ((2, 2), "i32")}, "take", "(3, 7)", "(2, 2)")


def test_mse_loss_shapes_differ():
    def f(a, b):
        return tg.mse_loss(a, b)  # E:mse

    expect(f, {"a": (8, 1), "b": (8,)}, "mse", "(8, 1)", "(8,)")


# ------------------------------------------------------------------ dtypes


@pytest.mark.parametrize("which", ["exp", "softmax", "matmul", "conv", "ce", "dropout"])
def test_integer_tensor_into_float_only_op(which):
    def f(i, x):
        if which == "exp":
            return tg.exp(i)  # E:int_exp
        if which == "softmax":
            return tg.softmax(i)  # E:int_softmax
        if which == "matmul":
            return tg.matmul(i, x)  # E:int_matmul
        if which == "conv":
            return tg.conv2d(tg.reshape(i, (1, 1, 3, 4)), tg.reshape(x, (1, 1, 4, 4)))  # E:int_conv
        if which == "ce":
            return tg.cross_entropy(i, tg.zeros((3,), "i32"))  # E:int_ce
        return tg.dropout(i, 0.5)  # E:int_dropout

    shape = "(1, 1, 3, 4)" if which == "conv" else "(3, 4)"
    expect(f, {"i": ((3, 4), "i32"), "x": (4, 4)}, f"int_{which}", "i32", shape)


def test_float_indices_into_embedding():
    def f(w, i):
        return tg.embedding(w, i)  # E:emb

    expect(f, {"w": (10, 4), "i": (3,)}, "emb", "f32", "(3,)")


def test_float_into_one_hot():
    def f(i):
        return tg.one_hot(i, 4)  # E:onehot

    expect(f, {"i": (3,)}, "onehot", "f32", "(3,)")


# ------------------------------------------------------------------ modules and losses


class MakesParamInForward(nn.Module):
    def __init__(self):
        self.w = self.param((3,))

    def forward(self, x):
        return x * self.param((3,))  # E:param


def test_parameter_created_inside_forward():
    expect(lambda m, x: m(x), {"x": (3,)}, "param", "inside forward", model=MakesParamInForward())


def test_loss_that_is_not_a_scalar():
    model = nn.Linear(3, 2)

    def loss(m, x):
        return m(x) * 2.0  # E:loss

    with pytest.raises(tg.TraceError) as e:
        tg.value_and_grad(loss, model, x=np.ones((4, 3), np.float32))
    msg = str(e.value)
    assert f"{os.path.basename(HERE)}:{line_of('loss')}" in msg, msg
    assert "scalar" in msg and "(4, 2)" in msg


def test_loss_that_is_not_a_scalar_in_append_grad():
    from tgweb.grad import append_grad

    def fn(x):
        return tg.exp(x)  # E:loss2

    g, out = tg.trace(fn, None, {"x": (5,)})
    with pytest.raises(tg.TraceError) as e:
        append_grad(g, out, [g.inputs["x"]])
    assert f"{os.path.basename(HERE)}:{line_of('loss2')}" in str(e.value)
    assert "(5,)" in str(e.value)
