"""Every registered op kind ties its shape rule, grad rule (or NO_GRAD) and reference
implementation; every public op is exported."""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import pkgutil

import pytest

import tgweb as tg
from tgweb import ir, ops
from tgweb.ir import NO_GRAD, REGISTRY, Graph, TensorOps, tracing
from tgweb.ops.base import METHODS, TORCH_NAMES


def test_every_kind_has_infer_grad_and_ref():
    bad = []
    for kind, d in REGISTRY.items():
        if d.kind != kind or not d.family:
            bad.append(f"{kind}: name/family")
        if not callable(d.infer):
            bad.append(f"{kind}: no shape rule")
        if not (d.grad is NO_GRAD or callable(d.grad)):
            bad.append(f"{kind}: neither a grad rule nor NO_GRAD")
        if not callable(d.ref):
            bad.append(f"{kind}: no reference implementation")
    assert not bad, bad


def test_issue_op_kinds_are_registered():
    want = {
        "softmax",
        "log_softmax",
        "causal_softmax",
        "one_hot",
        "embedding",
        "embedding_grad",
        "take_along_axis",
        "take_along_axis_grad",
        "conv2d",
        "conv2d_grad_input",
        "conv2d_grad_weight",
        "max_pool2d",
        "max_pool2d_grad",
        "max_pool2d_select",
        "avg_pool2d",
        "avg_pool2d_grad",
        "rand",
        "randn",
        "matmul",
        "sum",
        "max",
        "min",
        "argmax",
        "argmin",
        "reshape",
        "permute",
        "broadcast_to",
        "slice",
        "pad",
        "concat",
        "stop_gradient",
        "full",
        "arange",
        "where",
        "cast",
        "cumsum",
    }
    assert want <= set(REGISTRY), sorted(want - set(REGISTRY))


def test_public_ops_are_exported():
    assert ops.__all__ == sorted(set(ops.__all__)), "__all__ must be sorted and unique"
    for name in ops.__all__:
        assert callable(getattr(tg, name)), name
    # by import, not getattr: tgweb.ops.softmax (rope, capture) is the op, not its module
    for mod in (importlib.import_module(f"tgweb.ops.{m.name}") for m in pkgutil.iter_modules(ops.__path__)):
        public = [
            n
            for n, f in vars(mod).items()
            if inspect.isfunction(f)
            and f.__module__ == mod.__name__
            and not n.startswith("_")
            and hasattr(f, "__wrapped__")
        ]
        missing = [n for n in public if n not in ops.__all__]
        assert not missing, f"{mod.__name__}: not exported: {missing}"
    for name in (
        "softmax",
        "log_softmax",
        "causal_softmax",
        "one_hot",
        "embedding",
        "take_along_axis",
        "cross_entropy",
        "nll_loss",
        "mse_loss",
        "conv2d",
        "max_pool2d",
        "avg_pool2d",
        "upsample_nearest2d",
        "rand",
        "randn",
        "dropout",
        "categorical",
        "capture",
        "cumsum",
    ):
        assert name in ops.__all__, name
    assert tg.nn.Dropout


# kinds that tg.to_torch never meets in a forward graph: gradients of gradients, the
# global norm of gradient clipping
NO_TORCH_FORM = {
    "avg_pool2d_grad",
    "conv2d_grad_weight",
    "embedding_grad",
    "global_sumsq",
    "init_draw",  # initial values (tgweb/initial.py): never in a graph run in PyTorch
    "max_pool2d_grad",
    "max_pool2d_select",
    "sumsq_blocks",
}


# Where the public ops are exposed besides tgweb.ops, as it was when separate lists said it
# (ir.TENSOR_METHODS, tgweb.torch._SAME) before each op's @op did (issue 34)
TENSOR_METHODS = {
    "sum", "mean", "max", "min", "amax", "amin", "argmax", "argmin", "transpose", "swapaxes",
    "squeeze", "unsqueeze", "broadcast_to", "split", "chunk", "narrow", "exp", "log", "sqrt",
    "rsqrt", "tanh", "sigmoid", "relu", "square", "abs", "sign", "sin", "cos", "clamp", "pow",
    "softmax", "log_softmax", "maximum", "minimum", "matmul",
}  # fmt: skip
TORCH_SAME = TENSOR_METHODS | {
    "stack", "permute", "reshape", "roll", "where", "erf", "embedding", "index_add",
    "scatter_add", "take_along_axis", "neg", "add", "sub", "mul", "div", "logical_and",
    "logical_or",
}  # fmt: skip
# every public attribute of a tensor: those methods and the ones written out (ir, ops/methods.py)
TENSOR_ATTRS = TENSOR_METHODS | {
    "T", "mT", "astype", "backward", "bool", "contiguous", "device", "dim", "expand", "float",
    "int", "item", "long", "masked_fill", "ndim", "numel", "permute", "reshape", "size", "to",
    "view",
}  # fmt: skip


def test_exposure_is_said_by_op_and_unchanged(monkeypatch):
    """@op(method=True) makes an op a Tensor method and @op(torch=True) a tgweb.torch name,
    and the sets are what they were."""
    import tgweb.torch as tt

    assert METHODS == TENSOR_METHODS, sorted(METHODS ^ TENSOR_METHODS)
    assert TORCH_NAMES == TORCH_SAME, sorted(TORCH_NAMES ^ TORCH_SAME)
    # and the PyTorch-only ones tgweb.torch adds when imported (torch/_methods.py: new_zeros,
    # is_cuda, ...), each said there once
    from tgweb.torch import _methods

    extras = set(_methods.METHODS) | {"is_cuda"}
    assert {n for n in dir(TensorOps) if not n.startswith("_")} == TENSOR_ATTRS | extras
    same = {n for n in dir(tt) if not n.startswith("_") and getattr(tt, n) is getattr(ops, n, None)}
    assert same == TORCH_SAME, sorted(same ^ TORCH_SAME)
    # each method is its op with the tensor first, the op looked up when called
    g = Graph()
    with tracing(g):
        x = g.input("x", (2, 3))
        for name in sorted(TENSOR_METHODS):
            monkeypatch.setattr(ops, name, lambda *a, _n=name, **k: (_n, a, k))
            assert getattr(x, name)(1, keepdims=True) == (name, (x, 1), {"keepdims": True})


def test_the_torch_form_is_given_to_register():
    assert not hasattr(ir, "set_torch"), "the torch form is a part of register(), not a table of its own"
    missing = {k for k, d in REGISTRY.items() if d.role != "leaf" and d.torch is None}
    assert missing == NO_TORCH_FORM, sorted(missing ^ NO_TORCH_FORM)


def _kind_literals(node) -> list[str]:
    """String constants in node: a literal or a tuple, list or set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [v for e in node.elts for v in _kind_literals(e)]
    return []


def test_no_code_outside_an_entry_names_an_op_kind():
    """Outside tgweb/ops/ (the entries) nothing compares a node's kind with an op kind's
    name: passes, codegen, lowering and backends ask the registry for a role or a field.
    The leaf kinds (input, param, state, scalar) belong to ir itself."""
    root = pathlib.Path(tg.__file__).parent
    kinds = {k for k, d in REGISTRY.items() if d.role != "leaf"}
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.parent.name == "ops" or path.parent.name == "samples":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            if not any(isinstance(s, ast.Attribute) and s.attr == "kind" for s in sides):
                continue
            named = {v for s in sides for v in _kind_literals(s)} & kinds
            if named:
                found.append(f"{path.relative_to(root)}:{node.lineno} {sorted(named)}")
    assert not found, found


def test_codegen_never_imports_ops():
    """Kernel families live in codegen/ and their kinds in ops/, which imports them: never
    the other way (an emitter's needs of a kind are defined in codegen)."""
    root = pathlib.Path(tg.__file__).parent / "codegen"
    found = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom):
                if node.level == 0:
                    names = [node.module or ""]
                elif node.level == 2:  # from ..x import y, or from .. import y
                    base = node.module or ""
                    names = ["tgweb." + (base or a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(n == "tgweb.ops" or n.startswith("tgweb.ops.") for n in names):
                found.append(f"{path.name}:{node.lineno}")
    assert not found, found


def test_register_refuses_fields_its_role_cannot_have():
    before = dict(REGISTRY)
    common = dict(family="test", infer=lambda ins, a: ((), "f32"), grad=NO_GRAD, ref=lambda c, a, t: 0)
    with pytest.raises(RuntimeError, match="only kernel kinds are marked recompute"):
        ir.register("test_recompute", role="elementwise", recompute=True, **common)
    with pytest.raises(RuntimeError, match="a perm or window view must be an index kind"):
        ir.register("test_perm", role="kernel", perm=lambda t: (0,), **common)
    with pytest.raises(RuntimeError, match="a perm or window view must be an index kind"):
        ir.register("test_window", role="elementwise", window=lambda t: (0, 0, 1), **common)
    assert REGISTRY == before


def test_the_passes_read_the_registrys_fields():
    """remat recomputes the kinds marked recompute and views fold the kinds with a perm,
    whatever their names."""
    from tgweb.passes import remat, views

    assert [k for k, d in REGISTRY.items() if d.recompute] == ["normalize"]
    assert [k for k, d in REGISTRY.items() if d.perm is not None] == ["permute"]
    assert [k for k, d in REGISTRY.items() if d.window is not None] == ["slice"]
    g = ir.Graph()
    with ir.tracing(g):
        x = g.input("x", (3, 4))
        y = tg.layer_norm(x)
        p = tg.permute(x, (1, 0))
        s = tg.narrow(tg.reshape(p, (2, 2, 3)), 1, 1, 1)
    assert y.kind == "normalize" and remat.clonable(y)
    assert views.view_of(p) == (x, ((4, 3), (1, 4), 0))
    assert views.view_of(s) == (x, ((2, 1, 3), (2, 1, 4), 1))  # x^T's rows 1 and 3
